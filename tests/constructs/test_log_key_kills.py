"""EnvironmentKey and EncryptLogGroups on rendered CloudFormation, in a test folder mutation testing selects.

A mutation run of constructs-security (issue 27) found the log key's policy with its condition key
changed passing every selected test, and no selected test reaching the log group EncryptLogGroups
adds beside CDK's provider functions (its retention could be dropped unseen). One stack with a
concrete account and region: the environment key, a bucket whose auto-delete provider CDK writes as
a raw function, and a log group of its own, with the aspect added at the app.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from mlcluster.constructs.log_key import EncryptLogGroups, EnvironmentKey
from tests.constructs.test_hyperpod_role_kills_policies import readable

ENV = cdk.Environment(account="111111111111", region="us-east-1")
KEY = "LogKey3EBDB3E8"
PROVIDER = "CustomS3AutoDeleteObjectsCustomResourceProvider"


def rendered() -> dict[str, dict[str, Any]]:
    """The stack's resources, intrinsic functions flattened."""
    app = cdk.App()
    stack = cdk.Stack(app, "Network", env=ENV)
    key = EnvironmentKey(stack, "LogKey", environment_name="dev", removal_policy=cdk.RemovalPolicy.RETAIN)
    s3.Bucket(stack, "Scratch", auto_delete_objects=True, removal_policy=cdk.RemovalPolicy.DESTROY)
    logs.LogGroup(stack, "Flow", retention=logs.RetentionDays.ONE_WEEK)
    cdk.Aspects.of(app).add(
        EncryptLogGroups(key.key, retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY)
    )
    resources = Template.from_stack(stack).to_json()["Resources"]
    return {name: readable(resource) for name, resource in resources.items()}


def test_the_log_key_lets_cloudwatch_logs_use_it_for_this_accounts_log_groups_only() -> None:
    """The account root (IAM decides) and the regional CloudWatch Logs principal, held by the encryption context
    to a log group of this account in this region; retained with the environment."""
    assert rendered()[KEY] == {
        "Type": "AWS::KMS::Key",
        "Properties": {
            "Description": "mlcluster dev: encrypts the environment's CloudWatch log groups",
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
                            "kms:Decrypt*",
                            "kms:Describe*",
                            "kms:Encrypt*",
                            "kms:GenerateDataKey*",
                            "kms:ReEncrypt*",
                        ],
                        "Condition": {
                            "ArnLike": {
                                "kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:us-east-1:111111111111:log-group:*"
                            }
                        },
                        "Effect": "Allow",
                        "Principal": {"Service": "logs.us-east-1.<AWS::URLSuffix>"},
                        "Resource": "*",
                        "Sid": "CloudWatchLogsForThisAccountsLogGroups",
                    },
                ],
                "Version": "2012-10-17",
            },
        },
        "UpdateReplacePolicy": "Retain",
        "DeletionPolicy": "Retain",
    }


def test_a_provider_function_logs_to_an_encrypted_group_kept_as_long_as_the_environment_says() -> None:
    """CDK's raw provider function gets a log group of its own: the environment key, the environment's
    retention (30 days here, not CDK's two-year default) and removal, and the function's LoggingConfig points
    at it. A log group made elsewhere keeps its own retention and removal and gets the key."""
    resources = rendered()
    groups = {name: value for name, value in resources.items() if value["Type"] == "AWS::Logs::LogGroup"}
    assert groups == {
        f"{PROVIDER}LogsB8B1B8F2": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"KmsKeyId": f"<{KEY}.Arn>", "RetentionInDays": 30},
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
        },
        "FlowA74D6E88": {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {"KmsKeyId": f"<{KEY}.Arn>", "RetentionInDays": 7},
            "UpdateReplacePolicy": "Retain",
            "DeletionPolicy": "Retain",
        },
    }
    handler = resources[f"{PROVIDER}Handler9D90184F"]["Properties"]
    assert handler["LoggingConfig"] == {"LogGroup": f"<{PROVIDER}LogsB8B1B8F2>"}
