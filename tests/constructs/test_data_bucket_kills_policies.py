"""DataBucket as a compliance reviewer reads it: every resource whole, every acknowledged finding.

``test_data_bucket.py`` checks one property at a time against one module-scoped synthesis; a mutation
run (issue 27) showed mutants there passing every test: the FSx key statement without its
conditions or with no role named, the checkov reason of that statement changed, the log bucket's
acknowledgement under an id no check reports (so checkov's CKV_AWS_18 on the log bucket, which the
acknowledgement of AwsSolutions-S1 also skips with its reason, fails), log delivery by ACL in an app whose
feature flag is off, and the cfn-lint checks someone else ignored on CDK's auto-delete handler
dropped. Each test here builds its own app (concrete account and region), so the expected
documents are written out in full.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.data_bucket import AUTO_DELETE_PROVIDER, SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, DataBucket
from tests.constructs.test_hyperpod_role_kills_policies import readable
from tools.compliance_report import acknowledgements

ENV = cdk.Environment(account="111111111111", region="us-east-1")
FS_ID = "fs-0123456789abcdef0"
BUCKET = "my-training-data"
LOGS = "DataAccessLogsC0C25EE4"
DATA = "Data2D4B752F"
KEY = "DataKey5F086070"
SECURE = {"Bool": {"aws:SecureTransport": "false"}}
TLS_12 = {"NumericLessThan": {"s3:TlsVersion": 1.2}}
PRIVATE = {
    "BlockPublicAcls": True,
    "BlockPublicPolicy": True,
    "IgnorePublicAcls": True,
    "RestrictPublicBuckets": True,
}
OWNER_ENFORCED = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
RETAIN = {"UpdateReplacePolicy": "Retain", "DeletionPolicy": "Retain"}
LOG_BUCKET_REASON = (
    "This bucket is the server access log destination of the data bucket; logging its own access would write a "
    "log record for every log record S3 delivers."
)
LOG_BUCKET_SSE_S3_REASON = (
    "S3 server access logging only delivers to destination buckets encrypted with SSE-S3, so this log bucket "
    "cannot use a KMS key; the data bucket it logs can."
)
FSX_KEY_REASON = (
    "The only statement with a wildcard principal is the one FSx for Lustre documents for SSE-KMS buckets: "
    "aws:PrincipalArn limits it to the FSx service-linked role of one file system (KMS refuses a key policy naming "
    "a role that does not exist yet), kms:ViaService to S3 in this region, kms:CallerAccount to this account, and "
    "the encryption context to the data bucket's objects."
)


def tls_only(bucket: str, *extra: dict[str, Any]) -> dict[str, Any]:
    """A bucket policy denying requests without TLS, or with TLS below 1.2, on ``bucket`` and its objects."""
    objects = [f"<{bucket}.Arn>", f"<{bucket}.Arn>/*"]
    deny = [
        {"Action": "s3:*", "Condition": c, "Effect": "Deny", "Principal": {"AWS": "*"}, "Resource": objects}
        for c in (SECURE, TLS_12)
    ]
    return {
        "Type": "AWS::S3::BucketPolicy",
        "Properties": {
            "Bucket": f"<{bucket}>",
            "PolicyDocument": {"Statement": [*deny, *extra], "Version": "2012-10-17"},
        },
    }


#: S3's log delivery may write the data bucket's logs, and only those, into the log bucket's prefix.
LOG_DELIVERY = {
    "Action": "s3:PutObject",
    "Condition": {
        "ArnLike": {"aws:SourceArn": f"<{DATA}.Arn>"},
        "StringEquals": {"aws:SourceAccount": "111111111111"},
    },
    "Effect": "Allow",
    "Principal": {"Service": "logging.s3.amazonaws.com"},
    "Resource": f"<{LOGS}.Arn>/data-bucket/*",
}

EXPECTED_RESOURCES: dict[str, dict[str, Any]] = {
    LOGS: {
        "Type": "AWS::S3::Bucket",
        "Properties": {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
            "LifecycleConfiguration": {
                "Rules": [
                    {
                        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                        "ExpirationInDays": 365,
                        "Id": "ExpireAccessLogs",
                        "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
                        "Status": "Enabled",
                    }
                ]
            },
            "OwnershipControls": OWNER_ENFORCED,
            "PublicAccessBlockConfiguration": PRIVATE,
            "VersioningConfiguration": {"Status": "Enabled"},
        },
        **RETAIN,
        "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_18", "comment": LOG_BUCKET_REASON}]}},
    },
    "DataAccessLogsPolicy459727B3": tls_only(LOGS, LOG_DELIVERY),
    KEY: {
        "Type": "AWS::KMS::Key",
        "Properties": {
            "Description": "Encrypts the mlcluster data bucket Storage/Data",
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Statement": [
                    {
                        "Action": "kms:*",
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
                        "Resource": "*",
                    },
                    {
                        "Action": [
                            "kms:Decrypt",
                            "kms:DescribeKey",
                            "kms:Encrypt",
                            "kms:GenerateDataKey*",
                            "kms:ReEncrypt*",
                        ],
                        "Condition": {
                            "StringEquals": {
                                "kms:CallerAccount": "<AWS::AccountId>",
                                "kms:ViaService": "s3.<AWS::Region>.<AWS::URLSuffix>",
                            },
                            "ArnLike": {
                                "aws:PrincipalArn": "arn:<AWS::Partition>:iam::<AWS::AccountId>:role/aws-service-role/"
                                f"s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{FS_ID}"
                            },
                            "StringLike": {
                                "kms:EncryptionContext:aws:s3:arn": [
                                    f"arn:<AWS::Partition>:s3:::{BUCKET}",
                                    f"arn:<AWS::Partition>:s3:::{BUCKET}/*",
                                ]
                            },
                        },
                        "Effect": "Allow",
                        "Principal": {"AWS": "*"},
                        "Resource": "*",
                    },
                ],
                "Version": "2012-10-17",
            },
        },
        **RETAIN,
        "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_33", "comment": FSX_KEY_REASON}]}},
    },
    DATA: {
        "Type": "AWS::S3::Bucket",
        "Properties": {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {"KMSMasterKeyID": f"<{KEY}.Arn>", "SSEAlgorithm": "aws:kms"},
                    }
                ]
            },
            "BucketName": BUCKET,
            "LifecycleConfiguration": {
                "Rules": [
                    {
                        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                        "Id": "AbortIncompleteMultipartUploads",
                        "Status": "Enabled",
                    }
                ]
            },
            "LoggingConfiguration": {"DestinationBucketName": f"<{LOGS}>", "LogFilePrefix": "data-bucket/"},
            "OwnershipControls": OWNER_ENFORCED,
            "PublicAccessBlockConfiguration": PRIVATE,
            "VersioningConfiguration": {"Status": "Enabled"},
        },
        **RETAIN,
    },
    "DataPolicy25EEED98": tls_only(DATA),
}

#: The log bucket's acknowledged findings; the compliance report shows them on its policy too (a child).
LOG_BUCKET_ACKNOWLEDGEMENTS = {
    "AwsSolutions-S1": LOG_BUCKET_REASON,
    **{
        f"{pack}-S3DefaultEncryptionKMS": LOG_BUCKET_SSE_S3_REASON
        for pack in ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")
    },
}
EXPECTED_ACKNOWLEDGEMENTS = {
    LOGS: LOG_BUCKET_ACKNOWLEDGEMENTS,
    "DataAccessLogsPolicy459727B3": LOG_BUCKET_ACKNOWLEDGEMENTS,
    KEY: {},
    DATA: {},
    "DataPolicy25EEED98": {},
}


def test_the_kms_data_bucket_linked_to_lustre_is_the_reviewed_one(tmp_path: Path) -> None:
    """Both buckets, their TLS-only policies, the key and its FSx statement (one file system's role, S3 in this
    region, this account, this bucket's objects), the checkov reasons and the cdk-nag acknowledgements."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Storage", env=ENV)
    data = DataBucket(stack, "Data", encryption="kms", bucket_name=BUCKET)
    assert data.grant_fsx_data_repository_access(FS_ID) is True
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any cdk-nag finding no acknowledgement names exactly

    rendered = {key: readable(value) for key, value in Template.from_stack(stack).to_json()["Resources"].items()}
    ours = {key: value for key, value in rendered.items() if key.startswith("Data")}
    assert ours == EXPECTED_RESOURCES

    acknowledged = {key: found for (_, key), found in acknowledgements(tmp_path).items() if key in ours}
    assert acknowledged == EXPECTED_ACKNOWLEDGEMENTS


def test_access_logs_are_delivered_by_bucket_policy_in_an_app_whose_flag_is_off() -> None:
    """A library user's app without cdk.json's feature flag still gets log delivery by bucket policy: the legacy
    LogDeliveryWrite ACL cannot be granted on a bucket whose ACLs are disabled (BucketOwnerEnforced)."""
    app = cdk.App(post_cli_context={SERVER_ACCESS_LOGS_USE_BUCKET_POLICY: False})
    assert app.node.try_get_context(SERVER_ACCESS_LOGS_USE_BUCKET_POLICY) is False
    stack = cdk.Stack(app, "Storage", env=ENV)
    DataBucket(stack, "Data")

    resources = Template.from_stack(stack).to_json()["Resources"]
    assert "AccessControl" not in resources[LOGS]["Properties"]
    assert resources[LOGS]["Properties"]["OwnershipControls"] == OWNER_ENFORCED
    assert readable(resources["DataAccessLogsPolicy459727B3"]) == tls_only(LOGS, LOG_DELIVERY)


def test_auto_delete_handler_keeps_the_cfn_lint_checks_others_ignored() -> None:
    """DataBucket adds W3005 to the cfn-lint checks ignored on CDK's shared auto-delete handler, keeping the ones
    another construct of the stack put there (the handler is one per stack, shared by every such bucket)."""
    stack = cdk.Stack(cdk.App(), "Storage", env=ENV)
    s3.Bucket(stack, "Scratch", auto_delete_objects=True, removal_policy=cdk.RemovalPolicy.DESTROY)
    handler = stack.node.find_child(AUTO_DELETE_PROVIDER).node.find_child("Handler")
    assert isinstance(handler, cdk.CfnResource)
    handler.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3011"]}})

    DataBucket(stack, "Data", removal_policy=cdk.RemovalPolicy.DESTROY)

    rendered = Template.from_stack(stack).to_json()["Resources"]
    (metadata,) = [
        value["Metadata"]["cfn-lint"]
        for key, value in rendered.items()
        if key.startswith("CustomS3AutoDeleteObjectsCustomResourceProviderHandler")
    ]
    assert metadata == {"config": {"ignore_checks": ["W3005", "W3011"]}}
