"""ScriptBucket: behaviour `make mutation MODULE=constructs-security` showed no test asserted.

- The deny on object changes covers every object of the bucket (``arn/*``), with its whole statement
  written out (``_deny_object_changes`` mutant 41).
- What a reviewer reads in the compliance report for aws_s3_deployment's upload function: every acknowledged
  finding with its reason, which names the scripts (``__init__`` mutant 86, ``_acknowledge_upload_handler``
  mutants 58, 80, 89).
- The read grant on the CDK assets bucket, and no other bucket's, is acknowledged wherever it sits in the function's policy: a
  stack whose first script bucket uploads from another bucket puts it after that bucket's read/write grant,
  and still synthesizes under cdk-nag (``_AssetsBucketAcknowledgement.validate`` mutant 47).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from mlcluster.constructs.nag import acknowledge
from mlcluster.constructs.script_bucket import OBJECT_CHANGE_ACTIONS, ScriptBucket, _AssetsBucketAcknowledgement

PACKS = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")
ASSETS = "arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-<AWS::Region>/*"
OTHER_OBJECTS = "Resource::arn:<AWS::Partition>:s3:::other-bucket/*"


def scripts(stack: cdk.Stack, construct_id: str = "Scripts", **props: Any) -> ScriptBucket:
    return ScriptBucket(
        stack,
        construct_id,
        prefix=props.pop("prefix", "pcluster/"),
        sources=props.pop("sources", [s3deploy.Source.data("a.sh", "true")]),
        purpose="test scripts",
        **props,
    )


def acknowledged(outdir: Path, stack: str) -> dict[str, dict[str, str]]:
    """The assembly's acknowledgements, as the compliance report shows them: path -> finding -> reason."""
    found: dict[str, dict[str, str]] = {}
    for path, entries in json.loads((outdir / f"{stack}.metadata.json").read_text()).items():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                found.setdefault(path, {}).update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    return found


def test_only_the_upload_changes_any_object_of_the_bucket() -> None:
    stack = cdk.Stack(cdk.App(), "pc-Cluster")
    bucket = scripts(stack)
    t = Template.from_stack(stack)
    bucket_id = stack.resolve(bucket.bucket.bucket_arn)["Fn::GetAtt"][0]
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in t.find_resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    (deny,) = [s for s in policy["Statement"] if s.get("Sid") == "OnlyTheDeployChangesObjects"]
    role = stack.resolve(bucket.deployment.handler_role.role_arn)
    assert deny == {
        "Sid": "OnlyTheDeployChangesObjects",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": sorted(OBJECT_CHANGE_ACTIONS),
        "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/*"]]},
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [role]}},
    }


def test_the_upload_functions_findings_are_acknowledged_with_reasons_about_it(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Scripts")
    bucket = scripts(stack)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    handler = bucket.deployment.handler_role.node.scope
    assert handler is not None
    bucket_id = stack.resolve(bucket.bucket.bucket_arn)["Fn::GetAtt"][0]

    def upload(reason: str) -> str:
        return f"The aws_s3_deployment upload function: {reason}."

    actions = ("s3:GetObject*", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*", "s3:Abort*")
    assert acknowledged(tmp_path, "Scripts")[f"/{handler.node.path}"] == {
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]": (
            "aws_s3_deployment creates the upload function's role with the basic execution policy, which only lets "
            "it write its own CloudWatch logs; the role is internal to that construct and not exposed to replace."
        ),
        "AwsSolutions-L1": (
            "The upload function's runtime is fixed by aws_s3_deployment in aws-cdk-lib, which moves it to newer "
            "Python versions with its releases; the function only copies files between buckets at deploy time."
        ),
        **{
            f"AwsSolutions-IAM5[Action::{action}]": (
                f"aws_s3_deployment grants its upload function {action} from the read/write grants of the asset and "
                "script buckets: it reads the asset zip, lists and prunes the script prefix, and aborts failed "
                "multipart uploads; the grants are limited to those buckets."
            )
            for action in actions
        },
        **dict.fromkeys(
            (f"{pack}-LambdaConcurrency" for pack in PACKS),
            upload("it runs once per deployment that changes the files"),
        ),
        **dict.fromkeys(
            (f"{pack}-LambdaDLQ" for pack in PACKS),
            upload(
                "CloudFormation invokes it asynchronously as a custom resource, and it reports every failure to the "
                "custom resource's response URL itself, which fails the deployment; a dead-letter queue would only "
                "keep events CloudFormation has already failed, which nobody replays"
            ),
        ),
        **dict.fromkeys(
            (f"{pack}-LambdaInsideVPC" for pack in PACKS),
            upload("it only copies objects between two S3 buckets through the S3 API"),
        ),
        **dict.fromkeys(
            (f"{pack}-IAMNoInlinePolicy" for pack in PACKS),
            upload("aws_s3_deployment writes its bucket grants as the role's default policy"),
        ),
        f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]": (
            "The upload function writes and prunes test scripts in this bucket; aws_s3_deployment grants it the "
            "bucket's objects, and it only touches keys under the upload prefix."
        ),
        f"AwsSolutions-IAM5[Resource::{ASSETS}]": (
            "The upload function reads the zipped scripts that `cdk deploy` publishes to the CDK bootstrap assets "
            "bucket; asset keys are content hashes, so the read grant covers the bucket's objects."
        ),
    }


def test_the_assets_read_grant_is_acknowledged_after_another_buckets_grants(tmp_path: Path) -> None:
    """Two script buckets in one stack share the upload function; the first uploads from another bucket. In an app
    without the feature flag ``@aws-cdk/aws-iam:minimizePolicies`` (mlcluster's cdk.json sets it; a library
    user's app may not) the function's policy then reads: that bucket, the first script bucket (read/write),
    the assets bucket, the second script bucket."""
    app = cdk.App(outdir=str(tmp_path), post_cli_context={"@aws-cdk/aws-iam:minimizePolicies": False})
    stack = cdk.Stack(app, "Scripts")
    other = s3.Bucket.from_bucket_name(stack, "Other", "other-bucket")
    first = scripts(stack, "First", sources=[s3deploy.Source.bucket(other, "scripts.zip")])
    scripts(stack, "Second")
    handler = first.deployment.handler_role.node.scope
    assert handler is not None
    # The read of the user's own bucket is the user's to acknowledge, with their reason (see the test below).
    reason = "The upload reads the release archives our build pipeline writes to other-bucket, by content hash."
    acknowledge(handler, f"AwsSolutions-IAM5[{OTHER_OBJECTS}]", reason)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged finding
    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    read = ["s3:GetObject*", "s3:GetBucket*", "s3:List*"]
    reads = [i for i, s in enumerate(policy["Properties"]["PolicyDocument"]["Statement"]) if s["Action"] == read]
    assert reads == [0, 2]  # the assets bucket's read grant follows a read/write grant
    assert f"AwsSolutions-IAM5[Resource::{ASSETS}]" in acknowledged(tmp_path, "Scripts")[f"/{handler.node.path}"]


def test_a_read_grant_on_the_users_own_bucket_is_not_given_the_assets_buckets_reason(tmp_path: Path) -> None:
    """A library user's ``Source.bucket`` grant is theirs to acknowledge: cdk-nag names it, the assets one is not."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Scripts")
    other = s3.Bucket.from_bucket_name(stack, "Other", "other-bucket")
    scripts(stack, "First", sources=[s3deploy.Source.bucket(other, "scripts.zip")])
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match="AwsSolutions-IAM5") as caught:
        app.synth()
    assert f"[{OTHER_OBJECTS}]" in str(caught.value)
    assert "cdk-hnb659fds-assets" not in str(caught.value)


def test_a_hyphenated_bootstrap_qualifier_is_still_the_assets_bucket(tmp_path: Path) -> None:
    """The bootstrap template allows hyphens in a qualifier (``[A-Za-z0-9_-]{1,10}``): cdk-ml-prod-assets-..."""
    app = cdk.App(outdir=str(tmp_path), context={"@aws-cdk/core:bootstrapQualifier": "ml-prod"})
    stack = cdk.Stack(app, "Scripts", env=cdk.Environment(account="123456789012", region="us-east-1"))
    first = scripts(stack, "First")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged finding
    handler = first.deployment.handler_role.node.scope
    assert handler is not None
    finding = "AwsSolutions-IAM5[Resource::arn:aws:s3:::cdk-ml-prod-assets-123456789012-us-east-1/*]"
    assert finding in acknowledged(tmp_path, "Scripts")[f"/{handler.node.path}"]


def test_another_accounts_assets_bucket_is_the_users_to_acknowledge(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Scripts", env=cdk.Environment(account="123456789012", region="us-east-1"))
    theirs = s3.Bucket.from_bucket_name(stack, "Theirs", "cdk-hnb659fds-assets-999999999999-us-east-1")
    scripts(stack, "First", sources=[s3deploy.Source.bucket(theirs, "scripts.zip")])
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match="AwsSolutions-IAM5") as caught:
        app.synth()
    assert "cdk-hnb659fds-assets-999999999999-us-east-1/*]" in str(caught.value)
    assert "cdk-hnb659fds-assets-123456789012-us-east-1/*]" not in str(caught.value)


ACCOUNT_ENV = cdk.Environment(account="111111111111", region="us-east-1")


def test_the_script_buckets_policy_is_exactly_these_statements() -> None:
    """The bucket policy whole: TLS only, TLS 1.2 and up, object changes by the upload alone, policy and ACL
    changes by the deploy alone, each deny under its ``Sid`` (what the bucket-access gate and a reviewer find
    it by) (``_deny_bucket_policy_changes`` mutant 10 of the second sample)."""
    stack = cdk.Stack(cdk.App(), "Scripts", env=ACCOUNT_ENV)
    scripts(stack)
    policies = Template.from_stack(stack).find_resources("AWS::S3::BucketPolicy")
    bucket = {"Fn::GetAtt": ["ScriptsF50F301B", "Arn"]}
    objects = {"Fn::Join": ["", [bucket, "/*"]]}
    assert policies["ScriptsPolicyE504D00B"]["Properties"] == {
        "Bucket": {"Ref": "ScriptsF50F301B"},
        "PolicyDocument": {
            "Statement": [
                {
                    "Action": "s3:*",
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Resource": [bucket, objects],
                },
                {
                    "Action": "s3:*",
                    "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}},
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Resource": [bucket, objects],
                },
                {
                    # Sorted as the tests' CDK context renders actions (and OBJECT_CHANGE_ACTIONS, whole).
                    "Action": sorted(OBJECT_CHANGE_ACTIONS),
                    "Condition": {
                        "ArnNotEquals": {
                            "aws:PrincipalArn": [
                                {
                                    "Fn::GetAtt": [
                                        "CustomCDKBucketDeployment8693BB64968944B69AAFB0CC9EB8756CServiceRole89A01265",
                                        "Arn",
                                    ]
                                }
                            ]
                        }
                    },
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Resource": objects,
                    "Sid": "OnlyTheDeployChangesObjects",
                },
                {
                    "Action": [
                        "s3:DeleteBucketPolicy",
                        "s3:PutBucketAcl",
                        "s3:PutBucketOwnershipControls",
                        "s3:PutBucketPolicy",
                        "s3:PutBucketPublicAccessBlock",
                    ],
                    "Condition": {
                        "ArnNotEquals": {
                            "aws:PrincipalArn": [
                                {
                                    "Fn::Sub": "arn:${AWS::Partition}:iam::111111111111:role/"
                                    "cdk-hnb659fds-cfn-exec-role-111111111111-us-east-1"
                                }
                            ]
                        }
                    },
                    "Effect": "Deny",
                    "Principal": {"AWS": "*"},
                    "Resource": bucket,
                    "Sid": "OnlyTheDeployChangesThePolicy",
                },
            ],
            "Version": "2012-10-17",
        },
    }


@jsii.implements(cdk.IStableStringProducer)
class _NameChosenLater:
    """A bucket name a library user's code produces at synth, behind a token whose hint names SageMaker."""

    def produce(self) -> str:
        return "mlc-scripts-chosen-later"


def test_a_name_whose_only_unknown_part_is_deploy_time_is_accepted() -> None:
    """The edge: the literal text is clean and the rest (the account id) is only known at deploy time and
    cannot hold the word; nor is a name refused for the text of the token that stands for it (a lazy name
    hinted ``SageMakerJobScripts``, resolved at synth) (``ScriptBucket.__init__`` mutant 24 of the second
    sample). A parameter's value is refused (test_script_bucket_names.py): it could hold anything."""
    stack = cdk.Stack(cdk.App(), "dev-Cluster")
    scripts(stack, bucket_name=f"mlc-scripts-{cdk.Aws.ACCOUNT_ID}")
    scripts(stack, "Lazy", bucket_name=cdk.Lazy.string(_NameChosenLater(), display_hint="SageMakerJobScripts"))
    names = [
        b["Properties"]["BucketName"]
        for b in Template.from_stack(stack).find_resources("AWS::S3::Bucket").values()
        if "BucketName" in b["Properties"]
    ]
    assert {"Fn::Join": ["", ["mlc-scripts-", {"Ref": "AWS::AccountId"}]]} in names
    assert "mlc-scripts-chosen-later" in names


def test_an_upload_function_without_its_role_policy_fails_validation_naming_it() -> None:
    """Should aws_s3_deployment stop making ``ServiceRole/DefaultPolicy``, synthesis reports which function,
    rather than failing inside the check (``_AssetsBucketAcknowledgement.validate`` mutant 8 of the second
    sample)."""
    stack = cdk.Stack(cdk.App(), "Scripts")
    handler = Construct(stack, "CustomCDKBucketDeploymentWithoutRole")
    assert _AssetsBucketAcknowledgement(handler).validate() == [
        "Scripts/CustomCDKBucketDeploymentWithoutRole: aws_s3_deployment's function has no ServiceRole/DefaultPolicy"
    ]
