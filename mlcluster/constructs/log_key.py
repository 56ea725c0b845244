"""The environment's customer-managed KMS key for logs, and the aspect that puts every log group on it.

Reviewers under NIST 800-53 SC-12/SC-28, HIPAA or PCI DSS do not accept the
CloudWatch Logs service key for log data. ``EnvironmentKey`` makes one key per
environment (in the network stack, which outlives clusters) whose policy lets
CloudWatch Logs use it for this account's log groups in this region only.
``EncryptLogGroups`` is added once at the stage level: it sets ``KmsKeyId``
on every ``AWS::Logs::LogGroup`` of the environment, and gives the Lambda
functions aws-cdk-lib makes without a log group (the shared custom-resource
providers, such as the one behind ``auto_delete_objects``) an explicit,
encrypted one, so no function logs to an implicit, service-key group.
"""

from __future__ import annotations

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

#: What CloudWatch Logs needs on a key that encrypts log groups (the CloudWatch Logs user guide's statement).
LOGS_KEY_ACTIONS = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
#: The id of the log group ``EncryptLogGroups`` adds beside a function that has none.
IMPLICIT_LOGS_ID = "Logs"


def key_removal_policy(policy: cdk.RemovalPolicy) -> cdk.RemovalPolicy:
    """``policy`` for a KMS key: plain ``RETAIN`` where data is kept, never ``RetainExceptOnCreate``.

    A key deleted with a rolled-back create (it is only scheduled for deletion, and no mlcluster
    command sees it again) takes with it everything already encrypted under it that outlives the
    rollback: retained log groups, objects, backups. A key that stays costs a monthly fee.
    """
    return cdk.RemovalPolicy.RETAIN if policy == cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE else policy


class EnvironmentKey(Construct):
    """A customer-managed KMS key, rotated yearly, for the environment's logs.

    The key policy keeps CDK's account-root statement (IAM policies in this
    account decide who administers and uses the key) and adds one statement
    for CloudWatch Logs: the regional service principal may encrypt and
    decrypt only when the encryption context names a log group of this
    account in this region. Removal follows the environment's retention:
    a retained environment keeps the key, because retained log groups and
    backups stay readable only while it exists.

    Attribute: ``key`` (id ``Resource``).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, environment_name: str, removal_policy: cdk.RemovalPolicy
    ) -> None:
        """Create the key and its CloudWatch Logs statement."""
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self,
            "Resource",
            description=f"mlcluster {environment_name}: encrypts the environment's CloudWatch log groups",
            enable_key_rotation=True,
            removal_policy=key_removal_policy(removal_policy),
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsForThisAccountsLogGroups",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.{stack.url_suffix}")],
                actions=LOGS_KEY_ACTIONS,
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                        )
                    }
                },
            )
        )

    @property
    def key_arn(self) -> str:
        """The key's ARN (what ``AWS::Logs::LogGroup.KmsKeyId`` wants)."""
        return self.key.key_arn


@jsii.implements(cdk.IAspect)
class EncryptLogGroups:
    """Encrypts every log group under the scope it is added to with ``key``.

    Sets ``KmsKeyId`` on each ``AWS::Logs::LogGroup`` that has none, and for
    each Lambda function aws-cdk-lib writes as a raw ``CfnResource`` (its
    custom-resource providers, which take no log group) adds an encrypted
    log group with ``retention`` and ``removal_policy`` and points the
    function's ``LoggingConfig`` at it.
    """

    def __init__(self, key: kms.IKey, *, retention: logs.RetentionDays, removal_policy: cdk.RemovalPolicy) -> None:
        """Use ``key`` for every log group; ``retention`` and ``removal_policy`` for the groups added here."""
        self._key = key
        self._retention = retention
        self._removal_policy = removal_policy

    def visit(self, node: IConstruct) -> None:
        """Encrypt ``node`` if it is a log group; give it an encrypted log group if it is a provider function."""
        if isinstance(node, logs.CfnLogGroup):
            if node.kms_key_id is None:
                node.kms_key_id = self._key.key_arn
        elif (
            isinstance(node, cdk.CfnResource)
            and not isinstance(node, lambda_.CfnFunction)
            and node.cfn_resource_type == "AWS::Lambda::Function"
        ):
            self._give_log_group(node)

    def _give_log_group(self, function: cdk.CfnResource) -> None:
        parent = function.node.scope
        if not isinstance(parent, Construct) or parent.node.try_find_child(IMPLICIT_LOGS_ID) is not None:
            return
        group = logs.LogGroup(
            parent,
            IMPLICIT_LOGS_ID,
            encryption_key=self._key,
            retention=self._retention,
            removal_policy=self._removal_policy,
        )
        function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
