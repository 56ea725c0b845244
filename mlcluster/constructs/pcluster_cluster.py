"""An AWS ParallelCluster cluster launched through ParallelCluster's own CloudFormation custom resource."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from mlcluster.constructs.nag import acknowledge, acknowledge_compliance, acknowledge_wildcard_resource
from mlcluster.constructs.session_manager import session_channels_statement
from mlcluster.pcluster import checks
from mlcluster.pcluster.provider_iam import NODE_POLICY_PATH

#: The newest ParallelCluster 3 release this project is tested with (its schema
#: package is pinned to the same version in requirements/pcluster.in).
DEFAULT_PCLUSTER_VERSION = "3.16.1"


def provider_template_url(version: str) -> str:
    """The official provider template of ``version``, in the deploying region and partition."""
    return cdk.Fn.sub(
        "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
        f"/parallelcluster/{version}/templates/custom_resource/cluster.yaml"
    )


def check_cluster_name(name: str, *, stack_name: str | None, slurm_accounting: bool) -> None:
    """Raise ``ValueError`` unless ``name`` is a cluster name ParallelCluster accepts here.

    The rules are the pre-deploy checks' (``mlcluster.pcluster.checks``):
    letters, digits and hyphens starting with a letter; at most 60
    characters, or 40 with Slurm accounting; different from the
    CloudFormation stack's name. Unresolved tokens are not checked.
    """
    if cdk.Token.is_unresolved(name):
        return
    known_stack = stack_name if stack_name is not None and not cdk.Token.is_unresolved(stack_name) else None
    problems = checks.check_cluster_name(name, stack_name=known_stack, accounting=slurm_accounting)
    if problems:
        raise ValueError("cluster_name: " + "; ".join(p.message for p in problems))


class PclusterCluster(Construct):
    """A ParallelCluster 3 cluster as part of a CDK stack.

    Creates the ParallelCluster provider stack from the official template of
    the pinned version (a nested ``AWS::CloudFormation::Stack``) and a
    ``Custom::PclusterCluster`` resource carrying the cluster's name and its
    configuration (the pcluster YAML as an object, CloudFormation references
    allowed). ParallelCluster's own Lambda validates, creates, updates and
    deletes the cluster, polling every two minutes.

    Default settings:
    - ParallelCluster 3.16.1.
    - ``deletion_policy="Retain"``: deleting the stack leaves the cluster
      running; pass ``"Delete"`` for throw-away environments.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_configuration: Mapping[str, Any],
        version: str = DEFAULT_PCLUSTER_VERSION,
        deletion_policy: Literal["Delete", "Retain"] = "Retain",
        slurm_accounting: bool = False,
        provider_additional_iam_policies: Sequence[str] = (),
        provider_role: iam.IRole | None = None,
    ) -> None:
        """Create the provider stack and the cluster.

        :param cluster_name: the cluster's name (cannot change after creation).
        :param cluster_configuration: the ParallelCluster 3 configuration.
        :param version: ParallelCluster version of the provider. Default: 3.16.1.
        :param deletion_policy: ``Retain`` (default) or ``Delete`` the cluster with the stack.
        :param slurm_accounting: whether the configuration enables Slurm accounting
            (shortens the allowed name to 40 characters). Default: false.
        :param provider_additional_iam_policies: policy ARNs the provider's own Lambda
            role also gets (the template's ``AdditionalIamPolicies``). Default: none.
        :param provider_role: the role the provider's Lambda functions run with (the
            template's ``CustomLambdaRole``; ``PclusterProviderRole`` makes one scoped to
            this cluster). Default: the template's own broad role.
        """
        super().__init__(scope, construct_id)
        if not re.fullmatch(r"3\.\d+\.\d+", version):
            raise ValueError(f"version: {version!r} is not a ParallelCluster 3 version such as '3.16.1'")
        if deletion_policy not in ("Delete", "Retain"):
            raise ValueError(f"deletion_policy: {deletion_policy!r} is not allowed; use 'Delete' or 'Retain'")
        stack = cdk.Stack.of(self)
        check_cluster_name(cluster_name, stack_name=stack.stack_name, slurm_accounting=slurm_accounting)
        if provider_role is not None and provider_additional_iam_policies:
            raise ValueError(
                "provider_additional_iam_policies: the provider template ignores them with a provider_role; "
                "grant what the role needs on the role itself"
            )
        parameters = {}
        if provider_additional_iam_policies:
            parameters["AdditionalIamPolicies"] = ",".join(provider_additional_iam_policies)
        if provider_role is not None:
            parameters["CustomLambdaRole"] = provider_role.role_arn
        self.provider = cdk.CfnStack(
            self,
            "Provider",
            template_url=provider_template_url(version),
            parameters=parameters or None,
        )
        self.resource = cdk.CfnResource(
            self,
            "Resource",
            type="Custom::PclusterCluster",
            properties={
                "ServiceToken": self.provider.get_att("Outputs.ServiceToken"),
                "ClusterName": cluster_name,
                "ClusterConfiguration": dict(cluster_configuration),
                "DeletionPolicy": deletion_policy,
            },
        )
        self.cluster_name = cluster_name
        self.version = version

    @property
    def head_node_instance_id(self) -> str:
        """The head node's EC2 instance ID."""
        return self.resource.get_att("headNode.instanceId").to_string()

    @property
    def head_node_private_ip(self) -> str:
        """The head node's private IP address."""
        return self.resource.get_att("headNode.privateIpAddress").to_string()

    @property
    def validation_messages(self) -> str:
        """Validation messages of the last create or update, as ParallelCluster reports them."""
        return self.resource.get_att("validationMessages").to_string()

    @property
    def ssm_command(self) -> str:
        """The shell command that opens an SSM session on the head node."""
        return cdk.Fn.join(
            "", ["aws ssm start-session --region ", cdk.Aws.REGION, " --target ", self.head_node_instance_id]
        )


def session_manager_policy(scope: Construct, construct_id: str) -> iam.ManagedPolicy:
    """A node policy for Session Manager only: no ``ssm:GetParameter*``, unlike AmazonSSMManagedInstanceCore.

    The SSM agent registers the instance (``ssm:UpdateInstanceInformation``)
    and opens the session channels (``ssmmessages:*Channel``); nothing else is
    needed for Session Manager. It lives under ``/parallelcluster/`` so that
    ParallelCluster's provider may attach it to the node roles.
    """
    policy = iam.ManagedPolicy(
        scope,
        construct_id,
        path=NODE_POLICY_PATH,
        description="Session Manager on ParallelCluster nodes, without SSM parameter reads",
        statements=[
            iam.PolicyStatement(
                sid="RegisterWithSsm",
                actions=["ssm:UpdateInstanceInformation"],
                resources=[cdk.Stack.of(scope).format_arn(service="ec2", resource="instance", resource_name="*")],
            ),
            session_channels_statement(),
        ],
    )
    acknowledge_wildcard_resource(
        policy,
        cdk.Stack.of(scope).format_arn(service="ec2", resource="instance", resource_name="*"),
        "The SSM agent registers the instance it runs on; the node's instance ID is not known before launch, and "
        "ParallelCluster attaches this policy to the node role, so the instance can only be its own.",
    )
    acknowledge_wildcard_resource(
        policy,
        "*",
        "The ssmmessages channel actions have no resource-level permissions (Service Authorization Reference); "
        "the session itself is authorized by the caller's ssm:StartSession on the instance.",
    )
    return policy


def permissions_boundary(scope: Construct, construct_id: str, *, cluster_name: str) -> iam.ManagedPolicy:
    """The permissions boundary of every role ParallelCluster creates for ``cluster_name``.

    Everything the roles' own policies allow, except IAM and account changes
    and SSM parameter reads beyond the CloudWatch agent's ``AmazonCloudWatch-*``
    configuration. It lives under ``/parallelcluster/`` and is rendered as the
    configuration's ``Iam.PermissionsBoundary``; the provider role may create
    roles only with it.
    """
    stack = cdk.Stack.of(scope)
    boundary = iam.ManagedPolicy(
        scope,
        construct_id,
        path=NODE_POLICY_PATH,
        description=f"Permissions boundary of the roles ParallelCluster creates for {cluster_name}",
        statements=[
            iam.PolicyStatement(sid="Everything", actions=["*"], resources=["*"]),
            iam.PolicyStatement(
                sid="NoIamOrAccountChanges",
                effect=iam.Effect.DENY,
                actions=list(BOUNDARY_DENIED_IAM),
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="NoParameterReadsBeyondTheCloudWatchAgent",
                effect=iam.Effect.DENY,
                actions=["ssm:GetParameter*"],
                not_resources=[
                    stack.format_arn(service="ssm", resource="parameter", resource_name="AmazonCloudWatch-*")
                ],
            ),
        ],
    )
    boundary_reason = (
        "A permissions boundary caps the roles ParallelCluster creates for this cluster; it grants nothing "
        "itself. It allows what those roles' own policies allow, minus IAM and account changes and SSM "
        "parameter reads."
    )
    acknowledge(boundary, "AwsSolutions-IAM5[Action::*]", boundary_reason)
    acknowledge(boundary, "AwsSolutions-IAM5[Resource::*]", boundary_reason)
    acknowledge_compliance(boundary, "IAMPolicyNoStatementsWithAdminAccess", boundary_reason)
    acknowledge_compliance(boundary, "IAMPolicyNoStatementsWithFullAccess", boundary_reason)
    return boundary


#: Actions the provider's boundary denies to every role ParallelCluster creates for this cluster.
BOUNDARY_DENIED_IAM = (
    "iam:Add*",
    "iam:Attach*",
    "iam:Create*",
    "iam:Delete*",
    "iam:Detach*",
    "iam:Put*",
    "iam:Remove*",
    "iam:Set*",
    "iam:Tag*",
    "iam:Untag*",
    "iam:Update*",
    "organizations:*",
    "account:*",
)


class PclusterProviderRole(Construct):
    """The role ParallelCluster's provider runs with, scoped to one cluster (the ``CustomLambdaRole``).

    Without it, the provider template makes its own role with
    ParallelCluster's default policies, which may create and attach IAM roles
    and policies across the account. This role has the same kinds of
    permission (from ParallelCluster's documented policies,
    ``cloudformation/policies/parallelcluster-policies.yaml`` and
    ``cloudformation/custom_resource/cluster.yaml``), narrowed to this
    cluster:

    - IAM: roles and instance profiles only under ``/parallelcluster/<cluster>/``
      (node roles) and ``/parallelcluster/<cluster>-*`` (ParallelCluster's
      Lambda roles); every role it creates must carry ``boundary``; it may
      attach exactly ``attachable_policy_arns`` and pass the cluster's roles
      to EC2 and Lambda only.
    - CloudFormation, DynamoDB, Lambda: the cluster's own stacks, tables and
      functions by name; the stack that holds the cluster resource may be
      described (the provider copies its tags).
    - S3: ParallelCluster's buckets (``parallelcluster-*``, the regional
      ``<region>-aws-parallelcluster`` artifacts), the provider's own event
      bucket (named after its nested stack, inside this stack), and reading
      ``readable_objects`` (the node scripts, which its validators check).
    - EC2, Auto Scaling, load balancing, CloudWatch, logs, Route 53, FSx:
      as ParallelCluster documents them, limited to this region where the
      service has no resource-level permissions.

    ``boundary`` (made by ``permissions_boundary``) is the permissions
    boundary ParallelCluster puts on every role it creates for the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        boundary: iam.IManagedPolicy,
        attachable_policy_arns: Sequence[str],
        readable_objects: Sequence[str] = (),
        secret_arns: Sequence[str] = (),
    ) -> None:
        """Create the boundary and the role.

        :param cluster_name: the cluster's name (ParallelCluster names its stack, roles and tables after it).
        :param boundary: the permissions boundary every role the provider creates must carry
            (``permissions_boundary``; render it as ``Iam.PermissionsBoundary``).
        :param attachable_policy_arns: the managed policies the configuration attaches to node roles
            (``AdditionalIamPolicies``, plus CloudWatchAgentServerPolicy when logs are on).
        :param readable_objects: S3 object ARNs (patterns) the provider's validators read, e.g. the node scripts.
        :param secret_arns: Secrets Manager secrets the configuration names (the accounting password).
        """
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        partition, account, region = stack.partition, stack.account, stack.region
        in_region = {"StringEquals": {"aws:RequestedRegion": region}}
        iam_arn = f"arn:{partition}:iam::{account}"
        node_roles = f"{iam_arn}:role/parallelcluster/{cluster_name}/*"
        lambda_roles = f"{iam_arn}:role/parallelcluster/{cluster_name}-*"
        profiles = f"{iam_arn}:instance-profile/parallelcluster/{cluster_name}/*"

        self.boundary = boundary
        boundary_arn = self.boundary.managed_policy_arn

        with_boundary = {"StringEquals": {"iam:PermissionsBoundary": boundary_arn}}
        statements = [
            iam.PolicyStatement(
                sid="OwnLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name="/aws/lambda/pcluster-cfn-*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    ),
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=f"/aws/lambda/{stack.stack_name}-*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    ),
                ],
            ),
            iam.PolicyStatement(
                sid="Tracing", actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords"], resources=["*"]
            ),
            iam.PolicyStatement(
                sid="Ec2",
                actions=[
                    "ec2:Describe*",
                    "ec2:AllocateAddress",
                    "ec2:AssociateAddress",
                    "ec2:AttachNetworkInterface",
                    "ec2:AuthorizeSecurityGroupEgress",
                    "ec2:AuthorizeSecurityGroupIngress",
                    "ec2:CreateFleet",
                    "ec2:CreateLaunchTemplate",
                    "ec2:CreateLaunchTemplateVersion",
                    "ec2:CreateNetworkInterface",
                    "ec2:CreatePlacementGroup",
                    "ec2:CreateSecurityGroup",
                    "ec2:CreateSnapshot",
                    "ec2:CreateTags",
                    "ec2:DeleteTags",
                    "ec2:CreateVolume",
                    "ec2:DeleteLaunchTemplate",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeletePlacementGroup",
                    "ec2:DeleteSecurityGroup",
                    "ec2:DeleteVolume",
                    "ec2:DisassociateAddress",
                    "ec2:ModifyLaunchTemplate",
                    "ec2:ModifyNetworkInterfaceAttribute",
                    "ec2:ModifyVolume",
                    "ec2:ModifyVolumeAttribute",
                    "ec2:ReleaseAddress",
                    "ec2:RevokeSecurityGroupEgress",
                    "ec2:RevokeSecurityGroupIngress",
                    "ec2:RunInstances",
                    "ec2:TerminateInstances",
                ],
                resources=["*"],
                conditions=in_region,
            ),
            iam.PolicyStatement(
                sid="ClusterTables",
                actions=[
                    "dynamodb:DescribeTable",
                    "dynamodb:ListTagsOfResource",
                    "dynamodb:CreateTable",
                    "dynamodb:DeleteTable",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:Query",
                    "dynamodb:TagResource",
                    "dynamodb:UntagResource",
                ],
                resources=[
                    stack.format_arn(
                        service="dynamodb", resource="table", resource_name=f"parallelcluster-{cluster_name}"
                    ),
                    stack.format_arn(
                        service="dynamodb", resource="table", resource_name=f"parallelcluster-slurm-{cluster_name}"
                    ),
                ],
            ),
            iam.PolicyStatement(
                sid="HostedZones",
                actions=[
                    "route53:ChangeResourceRecordSets",
                    "route53:ChangeTagsForResource",
                    "route53:CreateHostedZone",
                    "route53:DeleteHostedZone",
                    "route53:GetChange",
                    "route53:GetHostedZone",
                    "route53:ListResourceRecordSets",
                    "route53:ListQueryLoggingConfigs",
                ],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="ClusterStacks",
                actions=[
                    "cloudformation:CreateStack",
                    "cloudformation:UpdateStack",
                    "cloudformation:DeleteStack",
                    "cloudformation:DescribeStacks",
                    "cloudformation:DescribeStackEvents",
                    "cloudformation:DescribeStackResources",
                    "cloudformation:GetTemplate",
                ],
                resources=[
                    stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{cluster_name}/*"),
                    stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{cluster_name}-*/*"),
                ],
            ),
            iam.PolicyStatement(
                sid="ParentStackTags",
                actions=["cloudformation:DescribeStacks"],
                resources=[stack.stack_id],
            ),
            iam.PolicyStatement(sid="ListStacks", actions=["cloudformation:ListStacks"], resources=["*"]),
            iam.PolicyStatement(
                sid="DashboardsAndAlarms",
                actions=[
                    "cloudwatch:PutDashboard",
                    "cloudwatch:ListDashboards",
                    "cloudwatch:DeleteDashboards",
                    "cloudwatch:GetDashboard",
                    "cloudwatch:PutMetricAlarm",
                    "cloudwatch:DeleteAlarms",
                    "cloudwatch:DescribeAlarms",
                    "cloudwatch:PutCompositeAlarm",
                ],
                resources=["*"],
                conditions=in_region,
            ),
            iam.PolicyStatement(
                sid="ReadIam",
                actions=[
                    "iam:GetRole",
                    "iam:GetRolePolicy",
                    "iam:GetPolicy",
                    "iam:SimulatePrincipalPolicy",
                    "iam:GetInstanceProfile",
                ],
                resources=[
                    f"{iam_arn}:role/*",
                    f"{iam_arn}:policy/*",
                    f"arn:{partition}:iam::aws:policy/*",
                    f"{iam_arn}:instance-profile/*",
                ],
            ),
            iam.PolicyStatement(
                sid="ClusterInstanceProfiles",
                actions=[
                    "iam:CreateInstanceProfile",
                    "iam:DeleteInstanceProfile",
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                ],
                resources=[profiles],
            ),
            iam.PolicyStatement(
                sid="ClusterRolesWithBoundary",
                actions=["iam:CreateRole", "iam:PutRolePolicy", "iam:DeleteRolePolicy"],
                resources=[node_roles, lambda_roles],
                conditions=with_boundary,
            ),
            iam.PolicyStatement(
                sid="ClusterRoles",
                actions=["iam:DeleteRole", "iam:TagRole", "iam:UntagRole"],
                resources=[node_roles, lambda_roles],
            ),
            iam.PolicyStatement(
                sid="AttachTheConfiguredPolicies",
                actions=["iam:AttachRolePolicy", "iam:DetachRolePolicy"],
                resources=[node_roles, lambda_roles],
                conditions={
                    "ArnEquals": {"iam:PolicyARN": list(dict.fromkeys(attachable_policy_arns))},
                    **with_boundary,
                },
            ),
            # An edit that drops a policy from AdditionalIamPolicies (observability off drops CollectorRemoteWrite)
            # detaches one the new configuration no longer names: any node policy of this stack (CloudFormation
            # names them <stack name>-<logical id>-<suffix> under /parallelcluster/), or the CloudWatch agent's.
            iam.PolicyStatement(
                sid="DetachTheAppsPolicies",
                actions=["iam:DetachRolePolicy"],
                resources=[node_roles],
                conditions={
                    "ArnLike": {
                        "iam:PolicyARN": [
                            f"{iam_arn}:policy/parallelcluster/{stack.stack_name}-*",
                            f"arn:{partition}:iam::aws:policy/CloudWatchAgentServerPolicy",
                        ]
                    },
                    **with_boundary,
                },
            ),
            iam.PolicyStatement(
                sid="PassClusterRoles",
                actions=["iam:PassRole"],
                resources=[node_roles, lambda_roles],
                conditions={
                    "StringEqualsIfExists": {"iam:PassedToService": ["lambda.amazonaws.com", f"ec2.{stack.url_suffix}"]}
                },
            ),
            iam.PolicyStatement(
                sid="ServiceLinkedRoles",
                actions=["iam:CreateServiceLinkedRole"],
                resources=[f"{iam_arn}:role/aws-service-role/*"],
                conditions={
                    "StringEquals": {
                        "iam:AWSServiceName": [
                            "fsx.amazonaws.com",
                            "s3.data-source.lustre.fsx.amazonaws.com",
                            "elasticloadbalancing.amazonaws.com",
                            "autoscaling.amazonaws.com",
                        ]
                    }
                },
            ),
            iam.PolicyStatement(
                sid="ClusterFunctions",
                actions=[
                    "lambda:CreateFunction",
                    "lambda:TagResource",
                    "lambda:DeleteFunction",
                    "lambda:GetFunctionConfiguration",
                    "lambda:GetFunction",
                    "lambda:InvokeFunction",
                    "lambda:AddPermission",
                    "lambda:RemovePermission",
                    "lambda:UpdateFunctionConfiguration",
                    "lambda:ListTags",
                    "lambda:UntagResource",
                ],
                resources=[
                    stack.format_arn(
                        service="lambda",
                        resource="function",
                        resource_name="pcluster-*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    ),
                ],
            ),
            iam.PolicyStatement(
                sid="ParallelClusterBuckets",
                actions=["s3:*"],
                resources=[f"arn:{partition}:s3:::parallelcluster-*"],
                conditions=in_region,
            ),
            iam.PolicyStatement(
                sid="ProviderEventBucket",
                actions=["s3:*Object", "s3:ListBucket", "s3:ListBucketVersions", "s3:DeleteObjectVersion"],
                resources=[
                    f"arn:{partition}:s3:::{stack.stack_name.lower()}-cluster*",
                    f"arn:{partition}:s3:::{stack.stack_name.lower()}-cluster*/*",
                ],
            ),
            iam.PolicyStatement(
                sid="ParallelClusterArtifacts",
                actions=["s3:Get*", "s3:List*"],
                resources=[f"arn:{partition}:s3:::{region}-aws-parallelcluster*"],
            ),
            iam.PolicyStatement(
                sid="FileSystems",
                actions=["fsx:Describe*", "fsx:ListTagsForResource", "fsx:TagResource"],
                resources=[stack.format_arn(service="fsx", resource="*", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME)],
            ),
            iam.PolicyStatement(
                sid="Logs",
                actions=[
                    "logs:DeleteLogGroup",
                    "logs:PutRetentionPolicy",
                    "logs:DescribeLogGroups",
                    "logs:CreateLogGroup",
                    "logs:TagResource",
                    "logs:UntagResource",
                    "logs:DescribeMetricFilters",
                    "logs:PutMetricFilter",
                    "logs:DeleteMetricFilter",
                    "logs:ListTagsForResource",
                ],
                resources=["*"],
                conditions=in_region,
            ),
            iam.PolicyStatement(
                sid="ReservationGroups",
                actions=["resource-groups:ListGroupResources", "resource-groups:GetGroupConfiguration"],
                resources=[stack.format_arn(service="resource-groups", resource="group", resource_name="*")],
            ),
            iam.PolicyStatement(
                sid="LoginNodes",
                actions=[
                    "autoscaling:CreateAutoScalingGroup",
                    "autoscaling:DeleteAutoScalingGroup",
                    "autoscaling:DeleteLifecycleHook",
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeLifecycleHooks",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:PutLifecycleHook",
                    "autoscaling:UpdateAutoScalingGroup",
                    "autoscaling:DeleteTags",
                    "autoscaling:CreateOrUpdateTags",
                    "elasticloadbalancing:*",
                ],
                resources=["*"],
                conditions=in_region,
            ),
        ]
        if readable_objects:
            statements.append(
                iam.PolicyStatement(sid="NodeScripts", actions=["s3:GetObject"], resources=list(readable_objects))
            )
        if secret_arns:
            statements.append(
                iam.PolicyStatement(
                    sid="AccountingSecret", actions=["secretsmanager:DescribeSecret"], resources=list(secret_arns)
                )
            )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"ParallelCluster's provider for cluster {cluster_name} (CustomLambdaRole)",
            inline_policies={"Provider": iam.PolicyDocument(statements=statements)},
        )
        self.statements = statements
        reason = (
            f"ParallelCluster's provider for cluster {cluster_name}: the actions are those of ParallelCluster's "
            "documented policies for creating a cluster; the service has no resource-level permission for them or "
            "the resource is named by ParallelCluster at create time, so it is scoped by name prefix or region."
        )
        for statement in statements:
            for action in statement.actions:
                if "*" in action:
                    acknowledge(self.role, f"AwsSolutions-IAM5[Action::{action}]", reason)
            for resource in statement.resources:
                if "*" in resource:
                    acknowledge_wildcard_resource(self.role, resource, reason)
        acknowledge_compliance(self.role, "IAMNoInlinePolicy", "The provider's policy belongs to this one role only.")
        acknowledge_compliance(self.role, "IAMPolicyNoStatementsWithFullAccess", reason)
