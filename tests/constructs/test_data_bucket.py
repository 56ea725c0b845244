"""DataBucket on rendered CloudFormation: secure defaults, every option, every validation error.

One app holds a stack per variant and is synthesized once, with cdk-nag's
AwsSolutions pack on (synth fails on any unacknowledged finding); the
templates are then checked one property at a time and linted by cfn-lint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.data_bucket import DataBucket, grant_fsx_data_repository_access
from tests.support import cfn_lint

ENV = cdk.Environment(account="111111111111", region="us-east-1")
FS_ID = "fs-0123456789abcdef0"
IMPORTED_KEY = "arn:aws:kms:us-east-1:111111111111:key/11111111-2222-3333-4444-555555555555"
FSX_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_"


class Built:
    """The synthesized variants: templates by stack name, grant results, the output dir."""

    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.templates: dict[str, Template] = {}
        self.granted: dict[str, bool] = {}
        self.buckets: dict[str, DataBucket] = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    result = Built(out)
    app = cdk.App(outdir=str(out))
    variants: dict[str, dict[str, Any]] = {
        "Default": {},
        "KmsCreated": {"encryption": "kms"},
        "KmsGiven": {"encryption": "kms", "encryption_key": "own"},
        "KmsImported": {"encryption": "kms", "encryption_key": "imported"},
        "Named": {"bucket_name": "my-training-data", "encryption": "kms"},
        "Lifecycle": {
            "abort_incomplete_multipart_upload_days": 3,
            "noncurrent_version_expiration_days": 30,
            "access_log_retention_days": 90,
        },
        "Destroy": {"removal_policy": cdk.RemovalPolicy.DESTROY},
        "TokenName": {"bucket_name": "parameter"},
    }
    stacks = {}
    for name, props in variants.items():
        stack = cdk.Stack(app, name, env=ENV)
        key = props.pop("encryption_key", None)
        if key == "own":
            props["encryption_key"] = kms.Key(stack, "OwnKey", enable_key_rotation=True)
        elif key == "imported":
            props["encryption_key"] = kms.Key.from_key_arn(stack, "ImportedKey", IMPORTED_KEY)
        if props.get("bucket_name") == "parameter":
            props["bucket_name"] = cdk.CfnParameter(stack, "Name").value_as_string
        bucket = DataBucket(stack, "Data", **props)
        result.buckets[name] = bucket
        result.granted[name] = bucket.grant_fsx_data_repository_access(FS_ID)
        stacks[name] = stack
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged cdk-nag finding
    result.templates = {name: Template.from_stack(stack) for name, stack in stacks.items()}
    return result


def buckets(t: Template) -> dict[str, Any]:
    """Bucket resources by role: ``data`` (logs to another bucket) and ``logs``."""
    found = t.find_resources("AWS::S3::Bucket")
    out = {}
    for logical_id, resource in found.items():
        out["data" if "LoggingConfiguration" in resource["Properties"] else "logs"] = {"id": logical_id, **resource}
    assert set(out) == {"data", "logs"}
    return out


def bucket_policy(t: Template, logical_id: str) -> list[dict[str, Any]]:
    for policy in t.find_resources("AWS::S3::BucketPolicy").values():
        if policy["Properties"]["Bucket"] == {"Ref": logical_id}:
            return policy["Properties"]["PolicyDocument"]["Statement"]  # type: ignore[no-any-return]
    raise AssertionError(f"no bucket policy for {logical_id}")


def key_statements(t: Template) -> list[dict[str, Any]]:
    keys = t.find_resources("AWS::KMS::Key")
    assert len(keys) == 1
    return next(iter(keys.values()))["Properties"]["KeyPolicy"]["Statement"]  # type: ignore[no-any-return]


def fsx_statement(t: Template) -> dict[str, Any]:
    matching = [s for s in key_statements(t) if "aws:PrincipalArn" in s.get("Condition", {}).get("ArnLike", {})]
    assert len(matching) == 1
    return matching[0]


# -- secure defaults ----------------------------------------------------------


@pytest.mark.parametrize("role", ["data", "logs"])
def test_public_access_blocked_and_acls_off(built: Built, role: str) -> None:
    props = buckets(built.templates["Default"])[role]["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert "AccessControl" not in props


@pytest.mark.parametrize("role", ["data", "logs"])
def test_tls_only_policy(built: Built, role: str) -> None:
    t = built.templates["Default"]
    statements = bucket_policy(t, buckets(t)[role]["id"])
    denies = [s for s in statements if s["Effect"] == "Deny"]
    assert {json.dumps(s["Condition"], sort_keys=True) for s in denies} == {
        json.dumps({"Bool": {"aws:SecureTransport": "false"}}),
        json.dumps({"NumericLessThan": {"s3:TlsVersion": 1.2}}),
    }
    for statement in denies:
        assert statement["Action"] == "s3:*"
        assert statement["Principal"] == {"AWS": "*"}


@pytest.mark.parametrize("role", ["data", "logs"])
def test_versioned(built: Built, role: str) -> None:
    props = buckets(built.templates["Default"])[role]["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}


def test_sse_s3_by_default_and_no_key(built: Built) -> None:
    t = built.templates["Default"]
    for role in ("data", "logs"):
        encryption = buckets(t)[role]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert encryption == [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    t.resource_count_is("AWS::KMS::Key", 0)
    assert built.buckets["Default"].encryption_key is None


def test_access_logs_go_to_the_log_bucket(built: Built) -> None:
    t = built.templates["Default"]
    found = buckets(t)
    assert found["data"]["Properties"]["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": found["logs"]["id"]},
        "LogFilePrefix": "data-bucket/",
    }
    assert "LoggingConfiguration" not in found["logs"]["Properties"]
    delivery = [s for s in bucket_policy(t, found["logs"]["id"]) if s["Effect"] == "Allow"]
    assert len(delivery) == 1
    assert delivery[0]["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert delivery[0]["Action"] == "s3:PutObject"
    assert delivery[0]["Condition"]["ArnLike"] == {"aws:SourceArn": {"Fn::GetAtt": [found["data"]["id"], "Arn"]}}


def test_default_lifecycle(built: Built) -> None:
    found = buckets(built.templates["Default"])
    assert found["data"]["Properties"]["LifecycleConfiguration"]["Rules"] == [
        {
            "Id": "AbortIncompleteMultipartUploads",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
            "Status": "Enabled",
        }
    ]
    assert found["logs"]["Properties"]["LifecycleConfiguration"]["Rules"] == [
        {
            "Id": "ExpireAccessLogs",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
            "ExpirationInDays": 365,
            "NoncurrentVersionExpiration": {"NoncurrentDays": 30},
            "Status": "Enabled",
        }
    ]


def test_lifecycle_options(built: Built) -> None:
    found = buckets(built.templates["Lifecycle"])
    rules = {r["Id"]: r for r in found["data"]["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["AbortIncompleteMultipartUploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}
    assert rules["ExpireNoncurrentVersions"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    (log_rule,) = found["logs"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert log_rule["ExpirationInDays"] == 90


def test_generated_name_unless_given(built: Built) -> None:
    assert "BucketName" not in buckets(built.templates["Default"])["data"]["Properties"]
    assert buckets(built.templates["Named"])["data"]["Properties"]["BucketName"] == "my-training-data"


# -- encryption ---------------------------------------------------------------


def test_kms_creates_a_rotating_key_with_bucket_keys(built: Built) -> None:
    t = built.templates["KmsCreated"]
    (key_id,) = t.find_resources("AWS::KMS::Key", {"Properties": {"EnableKeyRotation": True}})
    (sse,) = buckets(t)["data"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse == {
        "BucketKeyEnabled": True,
        "ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]}},
    }
    log_sse = buckets(t)["logs"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert log_sse == [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]


def test_kms_uses_the_given_key(built: Built) -> None:
    t = built.templates["KmsGiven"]
    (key_id,) = t.find_resources("AWS::KMS::Key")
    assert "OwnKey" in key_id
    (sse,) = buckets(t)["data"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == {"Fn::GetAtt": [key_id, "Arn"]}


def test_kms_with_an_imported_key(built: Built) -> None:
    t = built.templates["KmsImported"]
    t.resource_count_is("AWS::KMS::Key", 0)
    (sse,) = buckets(t)["data"]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == IMPORTED_KEY


# -- what FSx needs -----------------------------------------------------------


def test_fsx_key_statement_follows_the_documented_requirement(built: Built) -> None:
    statement = fsx_statement(built.templates["KmsCreated"])
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"AWS": "*"}
    assert statement["Resource"] == "*"
    assert sorted(statement["Action"]) == sorted(
        ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
    )
    condition = statement["Condition"]
    assert condition["StringEquals"]["kms:CallerAccount"] == {"Ref": "AWS::AccountId"}
    assert condition["StringEquals"]["kms:ViaService"] == {
        "Fn::Join": ["", ["s3.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}]]
    }
    role = json.dumps(condition["ArnLike"]["aws:PrincipalArn"])
    assert FSX_ROLE + FS_ID in role


def test_fsx_statement_names_a_known_bucket_and_any_bucket_otherwise(built: Built) -> None:
    named = fsx_statement(built.templates["Named"])["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
    assert [json.dumps(v) for v in named] == [
        json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-training-data"]]}),
        json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-training-data/*"]]}),
    ]
    generated = fsx_statement(built.templates["KmsCreated"])["Condition"]["StringLike"]
    # Naming a generated bucket in its own key's policy would be a dependency cycle.
    assert "Data" not in json.dumps(generated)
    assert [json.dumps(v) for v in generated["kms:EncryptionContext:aws:s3:arn"]] == [
        json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::*"]]}),
        json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::*/*"]]}),
    ]


def test_grant_results(built: Built) -> None:
    assert built.granted == {
        "Default": True,
        "KmsCreated": True,
        "KmsGiven": True,
        "KmsImported": False,
        "Named": True,
        "Lifecycle": True,
        "Destroy": True,
        "TokenName": True,
    }


def test_grant_on_the_given_key_lands_in_its_policy(built: Built) -> None:
    assert fsx_statement(built.templates["KmsGiven"])["Principal"] == {"AWS": "*"}


def test_grant_on_any_bucket_without_a_key_is_a_no_op() -> None:
    stack = cdk.Stack(cdk.App(), "Plain")
    assert grant_fsx_data_repository_access(s3.Bucket.from_bucket_name(stack, "B", "some-bucket"), FS_ID)


# -- retention ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["AWS::S3::Bucket", "AWS::KMS::Key"])
def test_retained_by_default(built: Built, kind: str) -> None:
    found = built.templates["KmsCreated"].find_resources(kind)
    assert found
    for resource in found.values():
        assert resource["DeletionPolicy"] == "Retain"
        assert resource["UpdateReplacePolicy"] == "Retain"


def test_no_auto_delete_unless_destroy(built: Built) -> None:
    built.templates["Default"].resource_count_is("Custom::S3AutoDeleteObjects", 0)


def test_destroy_deletes_and_empties_both_buckets(built: Built) -> None:
    t = built.templates["Destroy"]
    for resource in t.find_resources("AWS::S3::Bucket").values():
        assert resource["DeletionPolicy"] == "Delete"
        assert resource["UpdateReplacePolicy"] == "Delete"
    t.resource_count_is("Custom::S3AutoDeleteObjects", 2)


def test_cfn_lint_is_told_about_cdks_auto_delete_handler(built: Built) -> None:
    handlers = built.templates["Destroy"].find_resources(
        "AWS::Lambda::Function", {"Metadata": {"cfn-lint": {"config": {"ignore_checks": ["W3005"]}}}}
    )
    assert len(handlers) == 1


# -- attributes ---------------------------------------------------------------


def test_attributes(built: Built) -> None:
    bucket = built.buckets["KmsCreated"]
    assert bucket.bucket_name == bucket.bucket.bucket_name
    assert bucket.bucket_arn == bucket.bucket.bucket_arn
    assert isinstance(bucket.encryption_key, kms.Key)
    assert bucket.s3_uri("datasets/") == f"s3://{bucket.bucket.bucket_name}/datasets/"
    assert bucket.log_bucket.node.id == "AccessLogs"
    assert bucket.bucket.node.id == "Resource"


# -- nag and lint -------------------------------------------------------------


def test_acknowledgements_are_specific_to_the_log_bucket(built: Built) -> None:
    acknowledged: dict[str, dict[str, str]] = {}
    for metadata in built.outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    acknowledged.setdefault(path, {}).update(entry["data"])
    assert acknowledged
    for path, findings in acknowledged.items():
        assert all(len(reason) > 40 for reason in findings.values())
        if path.endswith("/Custom::S3AutoDeleteObjectsCustomResourceProvider"):
            # aws-cdk-lib's auto-delete-objects function, judged as a template resource by checkov and the report.
            ids = [f.removeprefix("Annotation::") for f in findings]
            assert {f.split("-", 1)[1] for f in ids if not f.startswith("AwsSolutions")} == {
                "LambdaConcurrency",
                "LambdaDLQ",
                "LambdaInsideVPC",
            }
            continue
        assert path.endswith("/Data/AccessLogs"), path
        assert any("AwsSolutions-S1" in f for f in findings)


def test_cfn_lint_clean(built: Built) -> None:
    files = sorted(str(p) for p in built.outdir.glob("*.template.json"))
    assert len(files) == len(built.templates)
    assert cfn_lint(files) == {f: [] for f in files}


# -- validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"bucket_name": "Data"}, r"bucket_name: 'Data' is not a valid S3 bucket name; allowed: 3-63 characters"),
        ({"bucket_name": "ab"}, r"bucket_name: 'ab' .*lowercase letters, digits"),
        ({"bucket_name": "192.168.1.10"}, r"bucket_name: '192.168.1.10' .*not formatted as an IP address"),
        ({"bucket_name": "my..bucket"}, r"bucket_name: 'my..bucket' .*no '\.\.'"),
        ({"bucket_name": "xn--bucket"}, r"bucket_name: 'xn--bucket' .*reserved prefix"),
        ({"bucket_name": "data-s3alias"}, r"bucket_name: 'data-s3alias' .*reserved prefix or suffix"),
        ({"encryption": "aes"}, r"encryption: 'aes' is not allowed; use 's3' \(SSE-S3\) or 'kms' \(SSE-KMS\)"),
        ({"encryption_key": "imported"}, r"encryption_key: only used with encryption='kms'"),
        ({"abort_incomplete_multipart_upload_days": 0}, r"abort_incomplete_multipart_upload_days: 0 .* 1 to 365"),
        ({"noncurrent_version_expiration_days": 0}, r"noncurrent_version_expiration_days: 0 .* 1 to 36500"),
        ({"access_log_retention_days": 40000}, r"access_log_retention_days: 40000 .* 1 to 36500"),
        (
            {"removal_policy": cdk.RemovalPolicy.SNAPSHOT},
            r"removal_policy: .* use RemovalPolicy.RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY",
        ),
    ],
)
def test_rejects_bad_props(props: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    if props.get("encryption_key") == "imported":
        props = {**props, "encryption_key": kms.Key.from_key_arn(stack, "K", IMPORTED_KEY)}
    with pytest.raises(ValueError, match=r"^DataBucket: .*" + message):
        DataBucket(stack, "Data", **props)


def test_reports_every_problem_at_once() -> None:
    with pytest.raises(ValueError) as raised:
        DataBucket(cdk.Stack(cdk.App(), "Bad"), "Data", bucket_name="BAD", access_log_retention_days=0)
    assert "bucket_name: 'BAD'" in str(raised.value)
    assert "access_log_retention_days: 0" in str(raised.value)


def test_token_bucket_name_is_not_checked(built: Built) -> None:
    props = buckets(built.templates["TokenName"])["data"]["Properties"]
    assert props["BucketName"] == {"Ref": "Name"}
