"""An Amazon Managed Grafana workspace over the environment's Prometheus workspace, provisioned as code."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

import mlcluster.handlers
from mlcluster.config.observability import GrafanaConfig
from mlcluster.constructs.nag import (
    acknowledge,
    acknowledge_custom_resource_lambdas,
    quiet_redundant_role_dependency,
)
from mlcluster.constructs.prometheus_workspace import PrometheusEndpoints
from mlcluster.constructs.provider import acknowledged_provider
from mlcluster.grafana_dashboards import dashboards_json, data_sources_json

#: The Grafana version of the workspace, pinned so an upgrade is a reviewed change (ListVersions names the others).
GRAFANA_VERSION = "10.4"
#: The folder shipped as the Lambda asset: ``grafana_provisioner`` sits at its root.
HANDLERS_DIR = Path(mlcluster.handlers.__file__).parent
#: Left out of the asset: caches, and the HyperPod checks' package (each function ships only its own code).
ASSET_EXCLUDES = ("__pycache__", "*.pyc", "hyperpod_cluster", "accounting_user")
#: The newest Python runtime aws-cdk-lib knows, which is what cdk-nag's AwsSolutions-L1 asks for.
RUNTIME = lambda_.Runtime.PYTHON_3_14
#: As long as the provisioning token lives (grafana_provisioner.app.TOKEN_SECONDS).
PROVISIONER_TIMEOUT = cdk.Duration.seconds(180)
#: The service account the provisioning uses inside the workspace (Grafana role Admin).
SERVICE_ACCOUNT = "mlcluster-provisioner"
#: CloudWatch read actions of Grafana's CloudWatch data source for metrics; none has resource-level permissions.
CLOUDWATCH_READ = ("cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics")
#: Prometheus query actions, granted on this environment's AMP workspace only.
PROMETHEUS_QUERY = ("aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata")
#: What the provisioning function may do, on this workspace only.
PROVISIONING_ACTIONS = (
    "grafana:ListWorkspaceServiceAccounts",
    "grafana:CreateWorkspaceServiceAccount",
    "grafana:DeleteWorkspaceServiceAccount",
    "grafana:CreateWorkspaceServiceAccountToken",
    "grafana:DeleteWorkspaceServiceAccountToken",
    "grafana:UpdatePermissions",
)
#: The IAM Identity Center reads UpdatePermissions makes on its caller's behalf when it names Identity Center
#: users and groups (Amazon Managed Grafana user guide, "Manage user and group access to Amazon Managed Grafana":
#: the caller needs AWSSSOMemberAccountAdministrator and AWSSSODirectoryReadOnly; the AWS managed policy
#: AWSGrafanaWorkspacePermissionManagementV2 narrows them to these). None of them has a resource type in the
#: Service Authorization Reference, so they are granted on ``*``, and only to an AWS_SSO workspace's provisioner.
IDENTITY_CENTER_ACTIONS = (
    "sso:DescribeRegisteredRegions",
    "sso:GetSharedSsoConfiguration",
    "sso:ListDirectoryAssociations",
    "sso:GetManagedApplicationInstance",
    "sso:ListProfiles",
    "sso:GetProfile",
    "sso:ListProfileAssociations",
    "sso-directory:DescribeUser",
    "sso-directory:DescribeGroup",
)


#: For the compliance acknowledgements of the custom resource's functions (what a run must change, why no VPC).
_RUN_CHANGES = "the dashboards"
_OUTSIDE_VPC = (
    "calls the Amazon Managed Grafana API and the workspace's public HTTPS endpoint; running it in the "
    "VPC would add interfaces and a dependency on its NAT without reaching anything there."
)


class GrafanaWorkspace(Construct):
    """An ``AWS::Grafana::Workspace`` with a role of ours and its data sources and dashboards provisioned.

    The workspace (child ``Resource``) serves the current account, signs
    users in with IAM Identity Center or SAML, and reads AWS with
    ``Role``: a customer-managed role Grafana assumes, which may query only
    this environment's Prometheus workspace and read CloudWatch metrics.
    ``Provisioning`` (``Custom::GrafanaProvisioning``) writes the
    Prometheus and CloudWatch data sources and every dashboard of
    ``mlcluster.grafana_dashboards`` through Grafana's HTTP API with a
    short-lived token, and makes the configured Identity Center users and
    groups Grafana Admins.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str,
        settings: GrafanaConfig,
        prometheus: PrometheusEndpoints,
        removal_policy: cdk.RemovalPolicy,
        log_retention: logs.RetentionDays,
    ) -> None:
        """Create the workspace of ``environment_name`` reading ``prometheus``."""
        super().__init__(scope, construct_id)
        if settings.authentication is None:  # the config refuses this; a direct caller gets the same rule
            raise ValueError("GrafanaWorkspace needs settings.authentication (AWS_SSO or SAML)")
        stack = cdk.Stack.of(self)
        self.role = self._role(environment_name, prometheus)
        saml = settings.saml
        self.workspace = grafana.CfnWorkspace(
            self,
            "Resource",
            name=f"mlcluster-{environment_name}",
            description=f"mlcluster {environment_name}: cluster metrics from Amazon Managed Service for Prometheus",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=[settings.authentication],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.role.role_arn,
            grafana_version=GRAFANA_VERSION,
            plugin_admin_enabled=False,
            saml_configuration=None
            if saml is None
            else grafana.CfnWorkspace.SamlConfigurationProperty(
                idp_metadata=grafana.CfnWorkspace.IdpMetadataProperty(
                    url=saml.idp_metadata_url, xml=saml.idp_metadata_xml
                ),
                assertion_attributes=grafana.CfnWorkspace.AssertionAttributesProperty(role=saml.role_attribute),
                role_values=grafana.CfnWorkspace.RoleValuesProperty(
                    admin=list(saml.admin_role_values), editor=list(saml.editor_role_values) or None
                ),
            ),
        )
        self.workspace.apply_removal_policy(removal_policy)
        self.url = cdk.Fn.join("", ["https://", self.workspace.attr_endpoint])
        self.workspace_arn = cdk.Fn.join(
            "",
            [
                "arn:",
                cdk.Aws.PARTITION,
                ":grafana:",
                cdk.Aws.REGION,
                ":",
                cdk.Aws.ACCOUNT_ID,
                ":/workspaces/",
                self.workspace.attr_id,
            ],
        )

        function = self._function(log_retention, removal_policy, identity_center=settings.authentication == "AWS_SSO")
        provider = self._provider(function, log_retention, removal_policy)
        self.provisioning = cdk.CustomResource(
            self,
            "Provisioning",
            service_token=provider.service_token,
            resource_type="Custom::GrafanaProvisioning",
            properties={
                "WorkspaceId": self.workspace.attr_id,
                "WorkspaceEndpoint": self.workspace.attr_endpoint,
                "ServiceAccountName": SERVICE_ACCOUNT,
                "DataSources": stack.to_json_string(data_sources_json(prometheus.query_url, cdk.Aws.REGION)),
                "Dashboards": json.dumps(dashboards_json(environment_name), separators=(",", ":"), sort_keys=True),
                "AdminUserIds": list(settings.admin_user_ids),
                "AdminGroupIds": list(settings.admin_group_ids),
            },
        )

    def _role(self, environment_name: str, prometheus: PrometheusEndpoints) -> iam.Role:
        """The workspace role: Grafana of this account's workspaces only, reading AMP and CloudWatch metrics."""
        # Trust as Amazon Managed Grafana documents it against the confused deputy ("Cross-service confused deputy
        # prevention", https://docs.aws.amazon.com/grafana/latest/userguide/cross-service-confused-deputy-prevention.html):
        # aws:SourceAccount and aws:SourceArn, the latter with a wildcard for the workspace id, which is assigned
        # only after the workspace (which names this role) exists.
        workspaces = cdk.Fn.join(
            "", ["arn:", cdk.Aws.PARTITION, ":grafana:", cdk.Aws.REGION, ":", cdk.Aws.ACCOUNT_ID, ":/workspaces/*"]
        )
        role = iam.Role(
            self,
            "Role",
            description=f"mlcluster {environment_name}: Amazon Managed Grafana reads the Prometheus workspace and "
            "CloudWatch metrics",
            assumed_by=iam.ServicePrincipal(
                "grafana.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": workspaces},
                },
            ),
        )
        policy = iam.ManagedPolicy(
            self,
            "RolePolicy",
            description="Query this environment's Prometheus workspace and read CloudWatch metrics",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    sid="QueryPrometheus", actions=list(PROMETHEUS_QUERY), resources=[prometheus.workspace_arn]
                ),
                iam.PolicyStatement(sid="ReadCloudWatchMetrics", actions=list(CLOUDWATCH_READ), resources=["*"]),
            ],
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:GetMetricData, GetMetricStatistics and ListMetrics have no resource-level permissions (the "
            "Service Authorization Reference lists no resource type for them); the statement reads metrics only, "
            "for the Grafana CloudWatch data source showing the Lustre and cluster metrics.",
        )
        return role

    def _function(
        self, log_retention: logs.RetentionDays, removal_policy: cdk.RemovalPolicy, *, identity_center: bool
    ) -> lambda_.Function:
        """The provisioning function, with its own log group and grants on this workspace only.

        ``identity_center``: the workspace signs users in with IAM Identity
        Center, so UpdatePermissions (admins added or revoked) needs the
        Identity Center reads of ``IDENTITY_CENTER_ACTIONS`` too.
        """
        log_group = logs.LogGroup(self, "ProvisionerLogs", retention=log_retention, removal_policy=removal_policy)
        role = iam.Role(
            self,
            "ProvisionerRole",
            description="Writes the mlcluster data sources and dashboards into one Grafana workspace",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        )
        policy = iam.ManagedPolicy(
            role,
            "Policy",
            description="Manage the provisioning service account and its tokens, and admins, of one workspace",
            statements=[
                iam.PolicyStatement(
                    sid="OwnLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn],
                ),
                iam.PolicyStatement(
                    sid="ProvisionWorkspace", actions=list(PROVISIONING_ACTIONS), resources=[self.workspace_arn]
                ),
                *(_identity_center_statements() if identity_center else []),
            ],
            roles=[role],
        )
        if identity_center:
            acknowledge(
                policy,
                "AwsSolutions-IAM5[Resource::*]",
                "UpdatePermissions resolves the IAM Identity Center users and groups it is given with sso and "
                "sso-directory reads (Describe/Get/List only) that have no resource types in the Service "
                "Authorization Reference; the statement is the read subset AWS's own "
                "AWSGrafanaWorkspacePermissionManagementV2 grants for this call.",
            )
        function = lambda_.Function(
            self,
            "ProvisionerFunction",
            runtime=RUNTIME,
            code=lambda_.Code.from_asset(str(HANDLERS_DIR), exclude=list(ASSET_EXCLUDES)),
            handler="grafana_provisioner.app.on_event",
            timeout=PROVISIONER_TIMEOUT,
            memory_size=256,
            description="Writes the data sources and dashboards of an mlcluster Grafana workspace",
            role=role,
            log_group=log_group,
        )
        function.node.add_dependency(policy)
        quiet_redundant_role_dependency(function)
        acknowledge_custom_resource_lambdas(
            function,
            "The Grafana provisioning function",
            synchronous=True,
            changes=_RUN_CHANGES,
            outside_vpc=_OUTSIDE_VPC,
        )
        return function

    def _provider(
        self, function: lambda_.Function, log_retention: logs.RetentionDays, removal_policy: cdk.RemovalPolicy
    ) -> cr.Provider:
        log_group = logs.LogGroup(self, "ProviderLogs", retention=log_retention, removal_policy=removal_policy)
        return acknowledged_provider(
            self,
            on_event=function,
            log_group=log_group,
            serves="Grafana provisioning",
            changes=_RUN_CHANGES,
            outside_vpc=_OUTSIDE_VPC,
            no_secret_because="the token is made and deleted inside each invocation",
        )


#: Every identity store's ARN, the encryption context the identity store gives KMS.
IDENTITY_STORES = "arn:*:identitystore::*:identitystore/*"


def _identity_center_statements() -> list[iam.PolicyStatement]:
    """The Identity Center reads, and the key use the Service Authorization Reference lists as their dependency.

    ``sso:GetSharedSsoConfiguration`` and ``sso-directory:DescribeGroup``/
    ``DescribeUser`` depend on ``kms:Decrypt`` when the Identity Center
    instance encrypts with a customer managed key. The key is not ours to
    name, so the grant admits it only through Identity Center and the
    identity store and for their encryption contexts, as AWS's own
    AWSSSODirectoryAdministrator does.
    """
    return [
        iam.PolicyStatement(sid="ReadIdentityCenter", actions=list(IDENTITY_CENTER_ACTIONS), resources=["*"]),
        iam.PolicyStatement(
            sid="DecryptThroughIdentityCenter",
            actions=["kms:Decrypt"],
            resources=["*"],
            conditions={
                "StringLike": {"kms:ViaService": "sso.*.amazonaws.com"},
                "ArnLike": {"kms:EncryptionContext:aws:sso:instance-arn": "arn:*:sso:::instance/*"},
            },
        ),
        iam.PolicyStatement(
            sid="DecryptThroughIdentityStore",
            actions=["kms:Decrypt"],
            resources=["*"],
            conditions={
                "StringLike": {"kms:ViaService": "identitystore.*.amazonaws.com"},
                "ArnLike": {"kms:EncryptionContext:aws:identitystore:identitystore-arn": IDENTITY_STORES},
            },
        ),
    ]
