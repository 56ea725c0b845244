"""A SageMaker HyperPod (Slurm) cluster: CloudFormation's native resource, between two read-only checks.

CloudFormation's ``AWS::SageMaker::Cluster`` (aws-cdk-lib ``CfnCluster``)
owns the cluster: its handlers call CreateCluster, UpdateCluster and
DeleteCluster, wait up to 720 minutes for each, roll a failed update back
with the old properties and delete what a failed create made. mlcluster adds
only what that handler does not do, as two custom resources that never
change a cluster (their functions may only describe clusters and list nodes):

- ``Preflight`` (before the cluster): the lifecycle files are uploaded and
  name this cluster's groups, subnets are private, security groups carry
  the self-referencing rules, a new name is free, a rename does not need a
  training plan's capacity twice, and an existing cluster is not busy
  (waited for, bounded) or gone.
- ``NodesReady`` (after the cluster): every group has its nodes (InService
  alone does not promise that). Nodes in a deep health check (hours) or
  being started, patched or replaced are accepted and reported, never a
  reason to roll the cluster back; only a failing cluster, a failed node
  nobody replaces, or a group short of nodes fails it.

The request is built once in the CreateCluster shape, checked at synth time
against the installed botocore's CreateCluster and UpdateCluster shapes (an
unknown field is refused by name), and rendered as the resource's
properties, whose names are the API's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import aws_cdk as cdk
import botocore.session
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from botocore.exceptions import ParamValidationError
from botocore.model import Shape, StringShape
from botocore.validate import validate_parameters
from constructs import Construct

import mlcluster.handlers
from mlcluster.config.hyperpod import GROUP_NAME, ML_INSTANCE, InstanceGroupConfig, WorkerGroupConfig
from mlcluster.constructs.data_bucket import REMOVAL_POLICIES
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle
from mlcluster.constructs.nag import (
    LAMBDA,
    acknowledge,
    acknowledge_compliance,
    acknowledge_wildcard_resource,
    quiet_redundant_role_dependency,
    skip_checkov,
)

#: The folder shipped as the Lambda asset: ``hyperpod_cluster`` sits at its root.
HANDLERS_DIR = Path(mlcluster.handlers.__file__).parent
#: The newest Python runtime aws-cdk-lib knows, which is what cdk-nag's AwsSolutions-L1 asks for.
RUNTIME = lambda_.Runtime.PYTHON_3_14
#: The checks wait (bounded) inside one invocation: Lambda's longest timeout.
CHECK_TIMEOUT = cdk.Duration.minutes(15)
#: What AWS::SageMaker::Cluster's schema takes (botocore's third, MultiNodeTrainingValidation, it does not).
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
TRAINING_PLAN_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/[a-z0-9-]+")
KMS_KEY = re.compile(r"[a-zA-Z0-9:/_-]{1,2048}")
TAG_TEXT = re.compile(r"[\w\s.:/=+\-@]*")
MAX_TAGS = 50
SlurmStrategy = Literal["Managed", "Overwrite", "Merge"]


def digest(value: object, length: int) -> str:
    """A short, stable hex digest of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


class HyperPodCluster(Construct):
    """A HyperPod cluster with Slurm, created, updated and deleted by CloudFormation itself.

    Creates:

    - ``Resource``: an ``AWS::SageMaker::Cluster`` named ``cluster_name``.
      Its name and VPC are create-only: CloudFormation refuses a change to
      the VPC of a named resource instead of replacing it, and a new name
      replaces the cluster (the new one is created before the old one is
      deleted). Instance counts, groups added or removed, node recovery,
      patch schedules and tags change in place.
    - ``Preflight`` and ``NodesReady``: ``Custom::HyperPodPreflight`` and
      ``Custom::HyperPodNodesReady`` backed by one CDK Provider and one
      read-only function (``mlcluster/handlers/hyperpod_cluster``).

    Default settings: node recovery ``Automatic``; the cluster's subnets and
    security groups for every group; HyperPod's Slurm configuration
    management off (the lifecycle scripts configure Slurm); the checks'
    logs kept one year and retained when the stack is deleted. Deleting the
    stack deletes the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        controller: InstanceGroupConfig,
        workers: Sequence[WorkerGroupConfig],
        subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        execution_roles: Mapping[str, iam.IRole],
        lifecycle: HyperPodLifecycle,
        login: InstanceGroupConfig | None = None,
        group_subnets: Mapping[str, Sequence[ec2.ISubnet]] | None = None,
        controller_security_groups: Sequence[ec2.ISecurityGroup] = (),
        node_recovery: Literal["Automatic", "None"] = "Automatic",
        slurm_config_strategy: SlurmStrategy | None = None,
        tags: Mapping[str, str] | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        log_removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the checks and the cluster resource.

        :param cluster_name: the cluster's name, 1-63 letters, digits and hyphens.
        :param controller: the Slurm controller group (one instance).
        :param workers: the worker groups, each with its Slurm partition.
        :param subnets: private subnets for the nodes (1 to 16): the cluster's ``VpcConfig``.
        :param security_groups: the nodes' security groups (1 to 5), with
            all-traffic self ingress and egress for EFA.
        :param execution_roles: instance group name -> the role its nodes run as
            (``HyperPodExecutionRole``), one entry per group.
        :param lifecycle: the lifecycle scripts; their groups must be this cluster's.
        :param login: the login group. Default: none.
        :param group_subnets: instance group name -> subnets that group uses
            instead of ``subnets`` (``OverrideVpcConfig``, same security groups).
            Default: none.
        :param controller_security_groups: groups the controller gets besides ``security_groups``
            (its ``OverrideVpcConfig``, in its own subnets or ``subnets``), e.g. the Slurm accounting
            database's client group, so that only the node running slurmdbd reaches the database.
            At most 5 groups in all. Default: none.
        :param node_recovery: ``Automatic`` or ``None``. Default: ``Automatic``.
        :param slurm_config_strategy: ``Managed``, ``Overwrite`` or ``Merge`` turns on
            HyperPod's Slurm configuration (``Orchestrator.Slurm``) with each group's
            node type and partition. Default: off.
        :param tags: tags on the cluster. Default: none.
        :param log_retention: how long the check function's logs are kept. Default: one year.
        :param log_removal_policy: RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY those logs with the
            stack. Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        tags = dict(tags or {})
        overrides = {name: list(group) for name, group in (group_subnets or {}).items()}
        groups = [controller, *([login] if login is not None else []), *workers]
        _check_props(
            cluster_name=cluster_name,
            controller=controller,
            login=login,
            workers=workers,
            subnets=subnets,
            security_groups=security_groups,
            execution_roles=execution_roles,
            group_subnets=overrides,
            controller_security_groups=controller_security_groups,
            lifecycle=lifecycle,
            node_recovery=node_recovery,
            slurm_config_strategy=slurm_config_strategy,
            tags=tags,
            log_removal_policy=log_removal_policy,
        )
        stack = cdk.Stack.of(self)
        self._log_retention = log_retention
        self._log_removal_policy = log_removal_policy
        self.controller_group = controller.instance_group_name
        self.cluster_name = cluster_name
        security_group_ids = [g.security_group_id for g in security_groups]
        node_types = {controller.instance_group_name: "Controller"}
        if login is not None:
            node_types[login.instance_group_name] = "Login"
        if controller_security_groups:
            # The controller's own OverrideVpcConfig: its subnets (or the cluster's) and the extra groups.
            overrides.setdefault(controller.instance_group_name, list(subnets))
        controller_ids = security_group_ids + [g.security_group_id for g in controller_security_groups]
        instance_groups = [
            self._group(
                group,
                execution_roles[group.instance_group_name],
                lifecycle,
                overrides.get(group.instance_group_name),
                controller_ids if group is controller else security_group_ids,
                node_types.get(group.instance_group_name, "Compute") if slurm_config_strategy else None,
            )
            for group in groups
        ]
        #: The CreateCluster request the resource is rendered from (deploy-time values as tokens).
        self.spec: dict[str, Any] = {
            "ClusterName": cluster_name,
            "InstanceGroups": instance_groups,
            "VpcConfig": {"SecurityGroupIds": security_group_ids, "Subnets": [s.subnet_id for s in subnets]},
            "NodeRecovery": node_recovery,
        }
        if slurm_config_strategy is not None:
            self.spec["Orchestrator"] = {"Slurm": {"SlurmConfigStrategy": slurm_config_strategy}}
        if tags:
            self.spec["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        check_against_botocore(self.spec)

        code = lambda_.Code.from_asset(
            str(HANDLERS_DIR), exclude=["__pycache__", "*.pyc", "grafana_provisioner", "accounting_user"]
        )
        check_fn = self._function(code, stack, lifecycle)
        self.provider = self._provider(check_fn)

        self.preflight = cdk.CustomResource(
            self,
            "Preflight",
            service_token=self.provider.service_token,
            resource_type="Custom::HyperPodPreflight",
            properties={
                "ClusterSpec": stack.to_json_string(self.spec),
                "ProvisioningParametersKey": lifecycle.provisioning_parameters_key,
            },
        )
        # The pre-flight reads the uploaded lifecycle files; nodes need their roles' policies before they boot.
        self.preflight.node.add_dependency(lifecycle.deployment)
        for role in execution_roles.values():
            for policy in role.node.find_all():
                if isinstance(policy, (iam.CfnManagedPolicy, iam.CfnPolicy)):
                    self.preflight.node.add_dependency(policy)

        self.resource = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=cluster_name,
            node_recovery=node_recovery,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=self.spec["VpcConfig"]["SecurityGroupIds"],
                subnets=self.spec["VpcConfig"]["Subnets"],
            ),
            tags=[cdk.CfnTag(key=k, value=v) for k, v in sorted(tags.items())] or None,
        )
        # The groups and the orchestrator are rendered verbatim from the request checked above: the resource's
        # property names are the API's.
        self.resource.add_property_override("InstanceGroups", instance_groups)
        if "Orchestrator" in self.spec:
            self.resource.add_property_override("Orchestrator", self.spec["Orchestrator"])
        self.resource.node.add_dependency(self.preflight)

        self.nodes_ready = cdk.CustomResource(
            self,
            "NodesReady",
            service_token=self.provider.service_token,
            resource_type="Custom::HyperPodNodesReady",
            properties={
                # A resolved attribute: the check looks at the cluster CloudFormation made, never at a name alone.
                "ClusterArn": self.resource.attr_cluster_arn,
                "ExpectedCounts": json.dumps({g.instance_group_name: g.instance_count for g in groups}),
                "SpecDigest": digest(stack.resolve(self.spec), 16),
            },
        )

    # -- attributes ------------------------------------------------------

    @property
    def cluster_arn(self) -> str:
        """The cluster's ARN."""
        return self.resource.attr_cluster_arn

    @property
    def cluster_status(self) -> str:
        """The cluster's status as CloudFormation last read it."""
        return self.resource.attr_cluster_status

    @property
    def cluster_id(self) -> str:
        """The cluster's id: the last part of its ARN."""
        return cdk.Fn.select(1, cdk.Fn.split("/", self.cluster_arn))

    def ssm_session_command(self) -> str:
        """The shell command that opens an SSM session on the controller node.

        HyperPod's SSM target is ``sagemaker-cluster:<cluster id>_<group>-<instance id>``;
        the controller's instance id is looked up with ``list-cluster-nodes`` when
        the command runs, so it stays right after the node is replaced.
        """
        region = cdk.Stack.of(self).region
        group = self.controller_group
        lookup = (
            f"aws sagemaker list-cluster-nodes --region {region} --cluster-name {self.cluster_name} "
            f"--query \"ClusterNodeSummaries[?InstanceGroupName=='{group}'].InstanceId | [0]\" --output text"
        )
        target = f"sagemaker-cluster:{self.cluster_id}_{group}-$({lookup})"
        return f'aws ssm start-session --region {region} --target "{target}"'

    # -- building blocks ------------------------------------------------

    @staticmethod
    def _group(
        group: InstanceGroupConfig,
        role: iam.IRole,
        lifecycle: HyperPodLifecycle,
        subnets: Sequence[ec2.ISubnet] | None,
        security_group_ids: list[str],
        slurm_node_type: str | None,
    ) -> dict[str, Any]:
        secondary: dict[str, Any] = {"VolumeSizeInGB": group.ebs_volume_size_gib}
        if group.ebs_volume_kms_key_id:
            secondary["VolumeKmsKeyId"] = group.ebs_volume_kms_key_id
        storage: list[dict[str, Any]] = [{"EbsVolumeConfig": secondary}]
        if group.root_volume_kms_key_id:
            # The service sizes the root volume itself: with RootVolume true it refuses VolumeSizeInGB.
            storage.append({"EbsVolumeConfig": {"RootVolume": True, "VolumeKmsKeyId": group.root_volume_kms_key_id}})
        spec: dict[str, Any] = {
            "InstanceGroupName": group.instance_group_name,
            "InstanceType": group.instance_type,
            "InstanceCount": group.instance_count,
            "LifeCycleConfig": {"SourceS3Uri": lifecycle.source_s3_uri, "OnCreate": lifecycle.on_create},
            "ExecutionRole": role.role_arn,
            "ThreadsPerCore": group.threads_per_core,
            "InstanceStorageConfigs": storage,
        }
        if checks := group.deep_checks():
            spec["OnStartDeepHealthChecks"] = list(checks)
        if group.training_plan_arn:
            spec["TrainingPlanArn"] = group.training_plan_arn
        if subnets:
            spec["OverrideVpcConfig"] = {
                "SecurityGroupIds": security_group_ids,
                "Subnets": [s.subnet_id for s in subnets],
            }
        if group.patch_schedule is not None:
            schedule = group.patch_schedule
            update: dict[str, Any] = {"ScheduleExpression": schedule.schedule_expression}
            deployment: dict[str, Any] = {}
            if schedule.max_batch_size is not None:
                deployment["RollingUpdatePolicy"] = {
                    "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": schedule.max_batch_size}
                }
            if schedule.wait_interval_seconds is not None:
                deployment["WaitIntervalInSeconds"] = schedule.wait_interval_seconds
            if deployment:
                update["DeploymentConfig"] = deployment
            spec["ScheduledUpdateConfig"] = update
        if slurm_node_type is not None:
            spec["SlurmConfig"] = {"NodeType": slurm_node_type}
            if isinstance(group, WorkerGroupConfig):
                spec["SlurmConfig"]["PartitionNames"] = [group.partition_name or group.instance_group_name]
        return spec

    def _function(self, code: lambda_.Code, stack: cdk.Stack, lifecycle: HyperPodLifecycle) -> lambda_.Function:
        """The check function, with its own log group and a role that can only read."""
        log_group = logs.LogGroup(
            self, "CheckLogs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        role = iam.Role(
            self,
            "CheckRole",
            description="Read-only checks before and after a HyperPod cluster resource (mlcluster)",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        )
        clusters = _cluster_arns(stack)
        lifecycle_files = lifecycle.bucket.arn_for_objects(f"{lifecycle.prefix}*")
        policy = iam.ManagedPolicy(
            role,
            "Policy",
            description="Describe HyperPod clusters and their nodes, read the lifecycle files and the network",
            statements=[
                iam.PolicyStatement(
                    sid="OwnLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn],
                ),
                iam.PolicyStatement(
                    sid="LookAtClusters",
                    actions=["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"],
                    resources=[clusters],
                ),
                iam.PolicyStatement(sid="ReadLifecycleFiles", actions=["s3:GetObject"], resources=[lifecycle_files]),
                iam.PolicyStatement(
                    # S3 answers HeadObject on a missing key with 404 only to callers that may list the bucket
                    # (403 otherwise), and a HeadObject carries no s3:prefix to condition on; the lifecycle
                    # bucket holds nothing but the lifecycle files.
                    sid="ListLifecycleFiles",
                    actions=["s3:ListBucket"],
                    resources=[lifecycle.bucket.bucket_arn],
                ),
                iam.PolicyStatement(
                    # On Update the checks ask whether their stack is UPDATE_ROLLBACK_IN_PROGRESS (a rollback
                    # reaches them as an Update, aws/aws-cdk#17040); only this stack, by its id.
                    sid="ReadOwnStack",
                    actions=["cloudformation:DescribeStacks"],
                    resources=[stack.stack_id],
                ),
                iam.PolicyStatement(
                    sid="CheckNetwork",
                    actions=["ec2:DescribeSubnets", "ec2:DescribeRouteTables", "ec2:DescribeSecurityGroups"],
                    resources=["*"],
                ),
            ],
            roles=[role],
        )
        function = lambda_.Function(
            self,
            "CheckFunction",
            runtime=RUNTIME,
            code=code,
            handler="hyperpod_cluster.app.on_event",
            timeout=CHECK_TIMEOUT,
            memory_size=256,
            description="Read-only checks before and after a HyperPod cluster resource",
            role=role,
            log_group=log_group,
        )
        function.node.add_dependency(policy)
        quiet_redundant_role_dependency(function)
        _acknowledge_handler_compliance(function, "The HyperPod check function")
        acknowledge_wildcard_resource(
            policy,
            clusters,
            "HyperPod cluster ARNs end in an id the service assigns at creation, so the cluster cannot be named in "
            "advance; the grant is DescribeCluster and ListClusterNodes only, which change nothing.",
        )
        acknowledge_wildcard_resource(
            policy,
            lifecycle_files,
            "The pre-flight checks that the OnCreate script and provisioning_parameters.json exist under the "
            "lifecycle prefix and reads the latter; the grant is read-only and limited to that prefix.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeSubnets, DescribeRouteTables and DescribeSecurityGroups have no resource-level permissions; "
            "the check uses them read-only to see that the subnets are private and the groups self-referencing.",
        )
        return function

    def _provider(self, check_fn: lambda_.Function) -> cr.Provider:
        log_group = logs.LogGroup(
            self, "ProviderLogs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        provider = cr.Provider(self, "Provider", on_event_handler=check_fn, log_group=log_group)
        acknowledge(
            provider,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "The custom resource framework's onEvent function gets the basic execution policy from aws-cdk-lib's "
            "Provider; it only lets it write its CloudWatch logs.",
        )
        quiet_redundant_role_dependency(provider)
        _acknowledge_handler_compliance(
            provider, "The custom resource framework's onEvent function", dlq_reason=FRAMEWORK_DLQ_REASON
        )
        skip_checkov(
            provider,
            "CKV_AWS_173",
            "The framework function's environment variable holds the ARN of the check function it calls, no "
            "secret; Lambda encrypts it at rest with its AWS managed key.",
            LAMBDA,
        )
        acknowledge_compliance(
            provider,
            "IAMNoInlinePolicy",
            "aws-cdk-lib's Provider writes its framework function's grant (invoke the check function) as the "
            "default policy of a role that belongs to the framework alone.",
        )
        acknowledge_wildcard_resource(
            provider,
            f"{check_fn.function_arn}:*",
            "The provider framework invokes the check function by ARN; the :* suffix only adds that one function's "
            "versions and aliases.",
        )
        return provider


def check_against_botocore(spec: Mapping[str, Any]) -> None:
    """Refuse, naming the field, a request the installed botocore's CreateCluster or UpdateCluster does not take.

    CreateCluster validates the whole request; UpdateCluster the fields it
    shares with it (CloudFormation updates them in place). A deploy-time value
    (a token) stands in as a string of the length its field asks for.
    """
    model = botocore.session.get_session().get_service_model("sagemaker")
    create = model.operation_model("CreateCluster").input_shape
    update = model.operation_model("UpdateCluster").input_shape
    problems: list[str] = []
    for name, shape, request in (
        ("CreateCluster", create, dict(spec)),
        ("UpdateCluster", update, {k: v for k, v in spec.items() if update is not None and k in update.members}),
    ):
        if shape is None:  # pragma: no cover - both operations have inputs
            raise RuntimeError(f"botocore's SageMaker model has no input for {name}")
        try:
            validate_parameters(_stand_in_tokens(request, shape), shape)
        except ParamValidationError as err:
            problems.append(f"{name}: {err.kwargs['report']}")
        # botocore's validator does not look at enumerations; the service refuses a value outside them.
        problems += [f"{name}: {problem}" for problem in _enum_problems(request, shape, "")]
    if problems:
        raise ValueError(
            f"HyperPodCluster: the installed botocore {botocore.__version__} does not take this request: "
            + "; ".join(problems)
        )


def _enum_problems(value: Any, shape: Shape, path: str) -> list[str]:
    """Every string of ``value`` that is not one of its field's enumeration, named by its path."""
    if shape.type_name == "string" and isinstance(value, str):
        allowed = shape.enum if isinstance(shape, StringShape) else []
        if allowed and not cdk.Token.is_unresolved(value) and value not in allowed:
            return [f"{path or 'value'}: {value!r} is not one of {', '.join(allowed)}"]
        return []
    if shape.type_name == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return [
            problem
            for k, v in value.items()
            if k in members
            for problem in _enum_problems(v, members[k], f"{path}.{k}" if path else k)
        ]
    if shape.type_name == "list" and isinstance(value, list):
        return [
            problem
            for i, item in enumerate(value)
            for problem in _enum_problems(item, shape.member, f"{path}[{i}]")  # type: ignore[attr-defined]
        ]
    return []


def _stand_in_tokens(value: Any, shape: Shape) -> Any:
    """``value`` with every unresolved token replaced by a string as long as ``shape`` asks (at least 1)."""
    if isinstance(value, str) and cdk.Token.is_unresolved(value):
        return "x" * max(int(shape.metadata.get("min", 1)), 1)
    if shape.type_name == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {k: _stand_in_tokens(v, members[k]) if k in members else v for k, v in value.items()}
    if shape.type_name == "list" and isinstance(value, list):
        return [_stand_in_tokens(item, shape.member) for item in value]  # type: ignore[attr-defined]
    return value


#: Why the check function needs no dead-letter queue: only the provider framework invokes it, synchronously.
HANDLER_DLQ_REASON = (
    "{what} is invoked synchronously by aws-cdk-lib's provider framework, which reports its failures to the stack "
    "itself; a dead-letter queue only receives events of asynchronous invocations."
)
#: Why the framework's own function needs none: CloudFormation invokes it asynchronously, and it reports failures.
FRAMEWORK_DLQ_REASON = (
    "{what} is invoked asynchronously by CloudFormation, and it reports every failure to the custom resource's "
    "response URL itself, which fails the stack operation; a dead-letter queue would only keep events "
    "CloudFormation has already failed, which nobody replays."
)


def _acknowledge_handler_compliance(scope: Construct, what: str, dlq_reason: str = HANDLER_DLQ_REASON) -> None:
    """The compliance packs' Lambda rules for the check function or (``FRAMEWORK_DLQ_REASON``) the framework's."""
    acknowledge_compliance(
        scope,
        "LambdaConcurrency",
        f"{what} runs a few times per stack operation; reserving concurrency would take capacity from the "
        "account's unreserved pool (and fails in accounts with the default low limit) for no protection.",
    )
    acknowledge_compliance(
        scope,
        "LambdaDLQ",
        dlq_reason.format(what=what),
    )
    acknowledge_compliance(
        scope,
        "LambdaInsideVPC",
        f"{what} only calls AWS APIs (SageMaker, S3, EC2, Lambda); running it in the VPC would add interfaces and a "
        "dependency on its NAT without reaching anything there.",
    )


def _cluster_arns(stack: cdk.Stack) -> str:
    """Every HyperPod cluster of the stack's account and region (ARNs end in a service-assigned id)."""
    return stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")


def _check_group(label: str, group: InstanceGroupConfig, problems: list[str]) -> None:
    name = group.instance_group_name
    if not re.fullmatch(GROUP_NAME, name):
        problems.append(
            f"{label}.instance_group_name: {name!r} is not allowed; use 1-63 letters, digits and hyphens, starting "
            "and ending with a letter or digit"
        )
    if not re.fullmatch(ML_INSTANCE, group.instance_type):
        problems.append(f"{label}.instance_type: {group.instance_type!r} is not a SageMaker type like 'ml.p5.48xlarge'")
    if not 0 <= group.instance_count <= 6758:
        problems.append(f"{label}.instance_count: {group.instance_count} is not allowed; use 0 to 6758")
    if group.threads_per_core not in (1, 2):
        problems.append(f"{label}.threads_per_core: {group.threads_per_core} is not allowed; use 1 or 2")
    if not 1 <= group.ebs_volume_size_gib <= 16384:
        problems.append(f"{label}.ebs_volume_size_gib: {group.ebs_volume_size_gib} is not allowed; use 1 to 16384")
    asked = group.deep_health_checks or ()
    bad_checks = [c for c in asked if c not in DEEP_HEALTH_CHECKS]
    if bad_checks or len(set(asked)) != len(asked):
        problems.append(
            f"{label}.deep_health_checks: {list(asked)} is not allowed; use each of "
            f"{', '.join(DEEP_HEALTH_CHECKS)} at most once"
        )
    if group.training_plan_arn is not None and not TRAINING_PLAN_ARN.fullmatch(group.training_plan_arn):
        problems.append(f"{label}.training_plan_arn: {group.training_plan_arn!r} is not a SageMaker training plan ARN")
    for field in ("ebs_volume_kms_key_id", "root_volume_kms_key_id"):
        key = getattr(group, field)
        if key is not None and not KMS_KEY.fullmatch(key):
            problems.append(f"{label}.{field}: {key!r} is not a KMS key ID or ARN")


def _check_props(
    *,
    cluster_name: str,
    controller: InstanceGroupConfig,
    login: InstanceGroupConfig | None,
    workers: Sequence[WorkerGroupConfig],
    subnets: Sequence[ec2.ISubnet],
    security_groups: Sequence[ec2.ISecurityGroup],
    execution_roles: Mapping[str, iam.IRole],
    group_subnets: Mapping[str, Sequence[ec2.ISubnet]],
    controller_security_groups: Sequence[ec2.ISecurityGroup],
    lifecycle: HyperPodLifecycle,
    node_recovery: str,
    slurm_config_strategy: str | None,
    tags: Mapping[str, str],
    log_removal_policy: cdk.RemovalPolicy,
) -> None:
    """Check every prop at once and raise one ValueError listing all problems."""
    problems: list[str] = []
    if not re.fullmatch(GROUP_NAME, cluster_name):
        problems.append(
            f"cluster_name: {cluster_name!r} is not allowed; use 1-63 letters, digits and hyphens, starting and "
            "ending with a letter or digit"
        )
    _check_group("controller", controller, problems)
    if controller.instance_count != 1:
        problems.append(f"controller.instance_count: {controller.instance_count} is not allowed; use 1")
    if login is not None:
        _check_group("login", login, problems)
    if not workers:
        problems.append("workers: [] is not allowed; give at least one worker group")
    for index, worker in enumerate(workers):
        _check_group(f"workers[{index}]", worker, problems)
    groups = [controller, *([login] if login is not None else []), *workers]
    names = [g.instance_group_name for g in groups]
    if len(set(names)) != len(names):
        problems.append(f"workers: group names {names} repeat; controller, login and worker groups must differ")
    if sorted(execution_roles) != sorted(set(names)):
        problems.append(
            f"execution_roles: given for {sorted(execution_roles)}, but the groups are {sorted(set(names))}; give "
            "each instance group its own role"
        )
    unknown = sorted(set(group_subnets) - set(names))
    if unknown:
        problems.append(f"group_subnets: {unknown} are not instance groups of this cluster ({names})")
    for name, chosen in group_subnets.items():
        if not 1 <= len(chosen) <= 16:
            problems.append(f"group_subnets[{name!r}]: {len(chosen)} given; HyperPod allows 1 to 16 (private subnets)")
    if slurm_config_strategy not in (None, "Managed", "Overwrite", "Merge"):
        problems.append(
            f"slurm_config_strategy: {slurm_config_strategy!r} is not allowed; use 'Managed', 'Overwrite', 'Merge' "
            "or leave it unset"
        )
    expected_workers = {w.instance_group_name: w.partition_name or w.instance_group_name for w in workers}
    planned = (lifecycle.controller_group, lifecycle.login_group, lifecycle.worker_groups)
    wanted = (controller.instance_group_name, login.instance_group_name if login else None, expected_workers)
    if planned != wanted:
        problems.append(
            f"lifecycle: its provisioning parameters name controller {planned[0]!r}, login {planned[1]!r} and "
            f"workers {planned[2]}, but this cluster has controller {wanted[0]!r}, login {wanted[1]!r} and "
            f"workers {wanted[2]}; build the lifecycle from the same groups"
        )
    if not 1 <= len(subnets) <= 16:
        problems.append(f"subnets: {len(subnets)} given; HyperPod allows 1 to 16 (private subnets)")
    if not 1 <= len(security_groups) <= 5:
        problems.append(f"security_groups: {len(security_groups)} given; HyperPod allows 1 to 5")
    elif len(security_groups) + len(controller_security_groups) > 5:
        problems.append(
            f"controller_security_groups: {len(controller_security_groups)} given besides {len(security_groups)} "
            "security_groups; HyperPod allows 5 groups on an instance group in all"
        )
    if node_recovery not in ("Automatic", "None"):
        problems.append(f"node_recovery: {node_recovery!r} is not allowed; use 'Automatic' or 'None'")
    if len(tags) > MAX_TAGS:
        problems.append(f"tags: {len(tags)} given; HyperPod allows at most {MAX_TAGS}")
    for key, value in tags.items():
        if not 1 <= len(key) <= 128 or not TAG_TEXT.fullmatch(key) or key.lower().startswith("aws:"):
            problems.append(
                f"tags: key {key!r} is not allowed; use 1-128 letters, digits, spaces and _.:/=+-@, not starting "
                "with 'aws:'"
            )
        if len(value) > 256 or not TAG_TEXT.fullmatch(value):
            problems.append(f"tags[{key!r}]: {value!r} is not allowed; use 0-256 letters, digits, spaces and _.:/=+-@")
    if log_removal_policy not in REMOVAL_POLICIES:
        problems.append(
            f"log_removal_policy: {log_removal_policy} is not allowed; use RemovalPolicy.RETAIN, "
            "RETAIN_ON_UPDATE_OR_DELETE or DESTROY"
        )
    if problems:
        raise ValueError("HyperPodCluster: " + "; ".join(problems))
