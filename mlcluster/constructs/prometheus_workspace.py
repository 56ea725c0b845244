"""An Amazon Managed Service for Prometheus workspace for one environment."""

from __future__ import annotations

import dataclasses

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct


@dataclasses.dataclass(frozen=True)
class PrometheusEndpoints:
    """What a cluster needs of the workspace: its ARN, where to remote-write and where to query.

    Handed from the Observability stack to the Cluster stack, which grants
    its collector ``aps:RemoteWrite`` on this ARN only.
    """

    workspace_arn: str
    remote_write_url: str
    query_url: str

    def grant_remote_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` write samples to this workspace and nothing else."""
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=["aps:RemoteWrite"], resource_arns=[self.workspace_arn]
        )


class PrometheusWorkspace(Construct):
    """An AMP workspace encrypted with ``key``, keeping samples ``retention_days``.

    The workspace's alias is ``mlcluster-<environment>``; aliases need not be
    unique, so tools find the workspace by the stack's outputs, not by alias.
    ``key`` must let the account's principals use it through the service
    (the default key policy of a CDK ``kms.Key`` does: it delegates to IAM).
    The primary child, ``Resource``, is the ``AWS::APS::Workspace``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        key: kms.IKey,
        retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        """Create the workspace of ``environment_name``."""
        super().__init__(scope, construct_id)
        self.workspace = aps.CfnWorkspace(
            self,
            "Resource",
            alias=f"mlcluster-{environment_name}",
            kms_key_arn=key.key_arn,
            workspace_configuration=aps.CfnWorkspace.WorkspaceConfigurationProperty(
                retention_period_in_days=retention_days
            ),
        )
        self.workspace.apply_removal_policy(removal_policy)
        endpoint = self.workspace.attr_prometheus_endpoint  # ends with "/"
        self.endpoints = PrometheusEndpoints(
            workspace_arn=self.workspace.attr_arn,
            remote_write_url=f"{endpoint}api/v1/remote_write",
            query_url=endpoint,
        )

    def add_alerting(self, *, rules_yaml: str, alertmanager_yaml: str) -> aps.CfnRuleGroupsNamespace:
        """Evaluate ``rules_yaml`` in the workspace and route what fires by ``alertmanager_yaml``.

        The rules are an ``AWS::APS::RuleGroupsNamespace`` (child ``Rules``) on
        the workspace; the alert manager definition is the workspace's own
        ``AlertManagerDefinition`` property.
        """
        self.workspace.alert_manager_definition = alertmanager_yaml
        return aps.CfnRuleGroupsNamespace(
            self, "Rules", workspace=self.workspace.attr_arn, name="mlcluster", data=rules_yaml
        )
