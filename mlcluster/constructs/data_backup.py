"""A protected copy of the data bucket: an AWS Backup plan for S3 with its own vault and role."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_backup as backup
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.constructs.deployment_name import SUFFIX_LENGTH, deployment_suffix
from mlcluster.constructs.nag import acknowledge

#: AWS Backup vault names: 2 to 50 letters, digits, hyphens and underscores (BackupVaultName).
VAULT_NAME_LENGTH = 50
#: The AWS managed policies AWS Backup documents for a role that backs up and restores S3 buckets.
S3_BACKUP_POLICIES = ("AWSBackupServiceRolePolicyForS3Backup", "AWSBackupServiceRolePolicyForS3Restore")


class DataBucketBackup(Construct):
    """Backs ``bucket`` up with AWS Backup on ``schedule``, keeping each recovery point ``retention_days``.

    Creates a backup vault encrypted with ``vault_key`` (the environment's
    customer-managed key), a role AWS Backup assumes with the two AWS managed
    policies for S3 backup and restore, and a plan with one rule and one
    selection (the bucket). The bucket must be versioned (the data bucket
    always is). The vault follows ``removal_policy``; AWS Backup refuses to
    delete a vault that still holds recovery points, so data is never lost
    by deleting the stack.

    Attributes: ``vault``, ``plan``, ``role``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        plan_name: str,
        vault_key: kms.IKey,
        schedule: str,
        retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        """Create the vault, role, plan (named ``plan_name``, unique per account and region) and selection."""
        super().__init__(scope, construct_id)
        # A retained vault keeps its name: one unique to this deployment of the stack lets a redeploy after a
        # teardown create its own (deployment_name.py); CDK's default name is fixed by the construct path.
        stack_name = cdk.Stack.of(self).stack_name
        vault_name = f"{stack_name[: VAULT_NAME_LENGTH - SUFFIX_LENGTH - 1]}-{deployment_suffix()}"
        self.vault = backup.BackupVault(
            self, "Vault", backup_vault_name=vault_name, encryption_key=vault_key, removal_policy=removal_policy
        )
        self.role = iam.Role(
            self,
            "Role",
            description="Lets AWS Backup back up and restore the mlcluster data bucket",
            assumed_by=iam.ServicePrincipal("backup.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in S3_BACKUP_POLICIES],
        )
        for name in S3_BACKUP_POLICIES:
            acknowledge(
                self.role,
                f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]",
                f"AWS Backup documents {name} as the policy of a role that backs up and restores S3 buckets; it "
                "tracks the S3 and EventBridge actions the service needs as they change, and only AWS Backup can "
                "assume this role.",
            )
        self.plan = backup.BackupPlan(self, "Plan", backup_plan_name=plan_name, backup_vault=self.vault)
        self.plan.add_rule(
            backup.BackupPlanRule(
                rule_name="DataBucket",
                schedule_expression=events.Schedule.expression(schedule),
                delete_after=cdk.Duration.days(retention_days),
            )
        )
        self.plan.add_selection(
            "DataBucket",
            resources=[backup.BackupResource.from_arn(bucket.bucket_arn)],
            role=self.role,
            disable_default_backup_policy=True,
        )
