"""A SageMaker HyperPod (Slurm) cluster as a CloudFormation custom resource that can wait up to 12 hours.

A custom resource gets at most an hour, and creating a HyperPod cluster can
take far longer. The cluster resource therefore only starts the work: its
handler (``mlcluster/handlers/hyperpod_cluster``) checks the inputs and calls
CreateCluster or UpdateCluster, then starts a Step Functions watcher that
looks at the cluster once a minute and signals an
``AWS::CloudFormation::WaitCondition`` when it is InService or has failed.
The wait condition (up to 12 hours) is what the stack waits on. Deletions fit
in the hour and are waited for by the custom resource itself.

The construct passes the base name; the handler names the cluster
``<base>-<hash of the create-only fields>`` and decides, from the old and new
properties, whether an update goes in place (instance counts, added or
removed groups) or needs a new cluster (a create-only change such as an
existing group's instance type), whose new name CloudFormation sees as a
new physical id, so it deletes the old cluster afterwards. The cluster's
name is therefore known at deploy time only (``cluster_name`` is a token).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk import custom_resources as cr
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
WATCHER_ENV = "WATCHER_STATE_MACHINE_ARN"
#: The longest base name: the handler adds ``-`` and a 6-character hash, and HyperPod allows 63.
MAX_BASE_NAME = 56
HASH_LENGTH = 6
#: A WaitCondition waits at most 12 hours.
MAX_CREATE_TIMEOUT_HOURS = 12
#: How often the watcher looks at the cluster, and how long it runs past the wait condition's timeout.
WATCH_INTERVAL = cdk.Duration.seconds(60)
WATCHER_MARGIN_SECONDS = 600
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
TRAINING_PLAN_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/[a-z0-9-]+")
TAG_TEXT = re.compile(r"[\w\s.:/=+\-@]*")
MAX_TAGS = 50


def digest(value: object, length: int) -> str:
    """A short, stable hex digest of a JSON-able value."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


class HyperPodCluster(Construct):
    """A HyperPod cluster with Slurm, created, updated and deleted by CloudFormation.

    Creates:

    - ``Resource``: a ``Custom::HyperPodCluster`` whose ``ClusterSpec``
      property is the CreateCluster request (JSON), backed by a CDK Provider
      with an ``on_event`` and an ``is_complete`` Lambda function.
    - ``Watcher``: a standard Step Functions state machine that runs the
      ``watch`` function once a minute until it has signalled the outcome.
    - A ``WaitConditionHandle`` and ``WaitCondition`` whose logical ids carry
      a hash of the request and timeout, so every create and every update
      gets a fresh handle (a wait condition cannot be updated).

    The custom resource's logical id and ``ClusterSpec.ClusterName`` (the
    base name) stay the same across updates. The handler names the cluster
    ``<cluster_name>-<hash>``, the hash taken over the fields HyperPod fixes
    at creation. Changing one of an existing group (e.g. its instance type),
    the subnets or security groups, or the base name gives a new cluster
    under a new name; CloudFormation then deletes the old one. Instance
    counts, added and removed worker groups, node recovery and tags change
    in place.

    Default settings:
    - Node recovery ``Automatic``; the stack waits up to 12 hours for the
      cluster to be InService.
    - Lambda and state machine logs kept one year, retained when the stack is
      deleted; the state machine logs ALL events (without execution data,
      which holds the presigned wait handle URL) and is traced with X-Ray.
    - Deleting the stack deletes the cluster.
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
        execution_role: iam.IRole,
        lifecycle: HyperPodLifecycle,
        login: InstanceGroupConfig | None = None,
        node_recovery: Literal["Automatic", "None"] = "Automatic",
        create_timeout_hours: int = MAX_CREATE_TIMEOUT_HOURS,
        tags: Mapping[str, str] | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        log_removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the cluster resource, its provider, the watcher and the wait condition.

        :param cluster_name: the base of the cluster's name (1-56 letters, digits
            and hyphens); the handler appends a hash of the create-only fields.
        :param controller: the Slurm controller group (one instance).
        :param workers: the worker groups, each with its Slurm partition.
        :param subnets: private subnets for the nodes (1 to 16).
        :param security_groups: the nodes' security groups (1 to 5), with
            all-traffic self ingress and egress for EFA.
        :param execution_role: the role the nodes run as (``HyperPodExecutionRole``).
        :param lifecycle: the lifecycle scripts; their groups must be this cluster's.
        :param login: the login group. Default: none.
        :param node_recovery: ``Automatic`` or ``None``. Default: ``Automatic``.
        :param create_timeout_hours: how long the stack waits for the cluster to
            be InService after a create or update, 1 to 12. Default: 12.
        :param tags: tags on the cluster (and its nodes). Default: none.
        :param log_retention: how long the functions' and the watcher's logs are kept. Default: one year.
        :param log_removal_policy: RETAIN or DESTROY those logs with the stack. Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        tags = dict(tags or {})
        _check_props(
            cluster_name=cluster_name,
            controller=controller,
            login=login,
            workers=workers,
            subnets=subnets,
            security_groups=security_groups,
            lifecycle=lifecycle,
            node_recovery=node_recovery,
            create_timeout_hours=create_timeout_hours,
            tags=tags,
            log_removal_policy=log_removal_policy,
        )
        stack = cdk.Stack.of(self)
        self._log_retention = log_retention
        self._log_removal_policy = log_removal_policy
        self.controller_group = controller.instance_group_name
        groups = [controller, *([login] if login is not None else []), *workers]

        spec: dict[str, Any] = {
            "ClusterName": cluster_name,
            "InstanceGroups": [self._group(g, execution_role, lifecycle) for g in groups],
            "VpcConfig": {
                "SecurityGroupIds": [g.security_group_id for g in security_groups],
                "Subnets": [s.subnet_id for s in subnets],
            },
            "NodeRecovery": node_recovery,
        }
        if tags:
            spec["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        timeout_seconds = create_timeout_hours * 3600
        change = digest([stack.resolve(spec), timeout_seconds], 8)

        code = lambda_.Code.from_asset(str(HANDLERS_DIR), exclude=["__pycache__", "*.pyc"])
        watch_fn = self._function(
            "WatchFunction",
            code,
            "hyperpod_cluster.app.watch",
            cdk.Duration.minutes(3),
            "Looks at a HyperPod cluster and signals its wait condition when the create or update is done",
            [
                iam.PolicyStatement(
                    sid="WatchCluster",
                    actions=["sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"],
                    resources=[_cluster_arns(stack)],
                )
            ],
        )
        self.watcher = self._watcher(watch_fn, timeout_seconds)
        training_plans = sorted({g.training_plan_arn for g in groups if g.training_plan_arn})
        on_event_fn = self._function(
            "OnEventFunction",
            code,
            "hyperpod_cluster.app.on_event",
            cdk.Duration.minutes(5),
            "Creates, updates and deletes a HyperPod cluster and starts its watcher",
            self._on_event_statements(stack, execution_role, lifecycle, training_plans),
            environment={WATCHER_ENV: self.watcher.state_machine_arn},
        )
        self._acknowledge_on_event(on_event_fn, lifecycle)
        is_complete_fn = self._function(
            "IsCompleteFunction",
            code,
            "hyperpod_cluster.app.is_complete",
            cdk.Duration.minutes(2),
            "Reports whether a HyperPod cluster being deleted is gone",
            [
                iam.PolicyStatement(
                    sid="FinishDeletion",
                    actions=["sagemaker:DescribeCluster", "sagemaker:DeleteCluster"],
                    resources=[_cluster_arns(stack)],
                )
            ],
        )
        self.provider = self._provider(on_event_fn, is_complete_fn)

        self.wait_handle = cdk.CfnWaitConditionHandle(self, f"WaitHandle{change}")
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::HyperPodCluster",
            properties={
                "ClusterSpec": stack.to_json_string(spec),
                "WaitHandleUrl": self.wait_handle.ref,
                "CreateTimeoutSeconds": timeout_seconds,
                "ProvisioningParametersKey": lifecycle.provisioning_parameters_key,
            },
        )
        # The lifecycle files must be uploaded, and the nodes' role must hold its policies, before nodes boot.
        self.resource.node.add_dependency(lifecycle.deployment)
        for policy in execution_role.node.find_all():
            if isinstance(policy, (iam.CfnManagedPolicy, iam.CfnPolicy)):
                self.resource.node.add_dependency(policy)
        self.wait_condition = cdk.CfnWaitCondition(
            self, f"WaitCondition{change}", handle=self.wait_handle.ref, timeout=str(timeout_seconds), count=1
        )
        self.wait_condition.node.add_dependency(self.resource)

    # -- attributes ------------------------------------------------------

    @property
    def cluster_name(self) -> str:
        """The cluster's name (``<cluster_name>-<hash>``, chosen by the handler): the resource's ``ClusterName``."""
        return self.resource.get_att_string("ClusterName")

    @property
    def cluster_arn(self) -> str:
        """The cluster's ARN, from the custom resource."""
        return self.resource.get_att_string("ClusterArn")

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
    def _group(group: InstanceGroupConfig, role: iam.IRole, lifecycle: HyperPodLifecycle) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "InstanceGroupName": group.instance_group_name,
            "InstanceType": group.instance_type,
            "InstanceCount": group.instance_count,
            "LifeCycleConfig": {"SourceS3Uri": lifecycle.source_s3_uri, "OnCreate": lifecycle.on_create},
            "ExecutionRole": role.role_arn,
            "ThreadsPerCore": group.threads_per_core,
            "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": group.ebs_volume_size_gib}}],
        }
        if group.deep_health_checks:
            spec["OnStartDeepHealthChecks"] = list(group.deep_health_checks)
        if group.training_plan_arn:
            spec["TrainingPlanArn"] = group.training_plan_arn
        return spec

    def _function(
        self,
        name: str,
        code: lambda_.Code,
        handler: str,
        timeout: cdk.Duration,
        description: str,
        statements: list[iam.PolicyStatement],
        environment: Mapping[str, str] | None = None,
    ) -> lambda_.Function:
        """A handler function with its own log group and a role limited to that group and ``statements``."""
        log_group = logs.LogGroup(
            self, f"{name}Logs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        role = iam.Role(
            self,
            f"{name}Role",
            description=f"{description} (mlcluster HyperPod handler)",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        )
        policy = iam.ManagedPolicy(
            role,
            "Policy",
            description=f"What {handler} needs, and its own log group",
            statements=[
                iam.PolicyStatement(
                    sid="OwnLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[log_group.log_group_arn],
                ),
                *statements,
            ],
            roles=[role],
        )
        function = lambda_.Function(
            self,
            name,
            runtime=RUNTIME,
            code=code,
            handler=handler,
            timeout=timeout,
            memory_size=256,
            description=description,
            role=role,
            log_group=log_group,
            environment=dict(environment or {}),
        )
        function.node.add_dependency(policy)
        if environment:
            skip_checkov(
                function,
                "CKV_AWS_173",
                f"The {handler} function's environment variables ({', '.join(sorted(environment))}) hold resource "
                "ARNs, no secrets; Lambda encrypts them at rest with its AWS managed key.",
                LAMBDA,
            )
        quiet_redundant_role_dependency(function)
        _acknowledge_handler_compliance(function, f"{handler} ({description.lower()})")
        acknowledge_wildcard_resource(
            policy,
            _cluster_arns(cdk.Stack.of(self)),
            "HyperPod cluster ARNs end in an id the service assigns at creation (not the name), so the cluster "
            "this handler manages cannot be named in advance; the scope is HyperPod clusters of this account "
            "and region.",
        )
        return function

    def _on_event_statements(
        self,
        stack: cdk.Stack,
        execution_role: iam.IRole,
        lifecycle: HyperPodLifecycle,
        training_plans: Sequence[str],
    ) -> list[iam.PolicyStatement]:
        statements = [
            iam.PolicyStatement(
                sid="ManageCluster",
                actions=[
                    "sagemaker:CreateCluster",
                    "sagemaker:UpdateCluster",
                    "sagemaker:DeleteCluster",
                    "sagemaker:DescribeCluster",
                    "sagemaker:ListClusterNodes",
                    "sagemaker:AddTags",
                    "sagemaker:DeleteTags",
                ],
                resources=[_cluster_arns(stack)],
            ),
            iam.PolicyStatement(
                sid="PassExecutionRole",
                actions=["iam:PassRole"],
                resources=[execution_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            ),
            iam.PolicyStatement(
                sid="ReadLifecycleFiles",
                actions=["s3:GetObject"],
                resources=[lifecycle.bucket.arn_for_objects(f"{lifecycle.prefix}*")],
            ),
            iam.PolicyStatement(
                # S3 answers HeadObject on a missing key with 404 only to callers that may list the bucket
                # (403 otherwise), and a HeadObject carries no s3:prefix to condition on; the lifecycle
                # bucket holds nothing but the lifecycle files.
                sid="ListLifecycleFiles",
                actions=["s3:ListBucket"],
                resources=[lifecycle.bucket.bucket_arn],
            ),
            iam.PolicyStatement(
                sid="CheckNetwork",
                actions=["ec2:DescribeSubnets", "ec2:DescribeRouteTables", "ec2:DescribeSecurityGroups"],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="StartWatcher", actions=["states:StartExecution"], resources=[self.watcher.state_machine_arn]
            ),
        ]
        if training_plans:
            statements.append(
                iam.PolicyStatement(
                    sid="UseTrainingPlans",
                    actions=["sagemaker:CreateCluster", "sagemaker:UpdateCluster", "sagemaker:DescribeTrainingPlan"],
                    resources=list(training_plans),
                )
            )
        return statements

    def _acknowledge_on_event(self, function: lambda_.Function, lifecycle: HyperPodLifecycle) -> None:
        role = function.role
        if role is None:
            raise RuntimeError(f"{function.node.path} has no role")
        policy = role.node.find_child("Policy")
        acknowledge_wildcard_resource(
            policy,
            lifecycle.bucket.arn_for_objects(f"{lifecycle.prefix}*"),
            "Before CreateCluster the handler checks that the OnCreate script and provisioning_parameters.json "
            "exist under the lifecycle prefix and reads the latter; the grant is limited to that prefix.",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeSubnets, DescribeRouteTables and DescribeSecurityGroups have no resource-level permissions; "
            "the handler uses them read-only to check that the subnets are private and the groups self-referencing.",
        )

    def _watcher(self, watch_fn: lambda_.Function, timeout_seconds: int) -> sfn.StateMachine:
        """Watch -> done? -> wait a minute -> watch, until the outcome is signalled or the timeout passes."""
        watch = tasks.LambdaInvoke(
            self,
            "Watch",
            lambda_function=watch_fn,
            payload_response_only=True,
            retry_on_service_exceptions=True,
        )
        watch.add_retry(
            errors=["States.TaskFailed"],
            interval=cdk.Duration.seconds(30),
            max_attempts=3,
            backoff_rate=2,
        )
        wait = sfn.Wait(self, "WaitOneMinute", time=sfn.WaitTime.duration(WATCH_INTERVAL))
        done = sfn.Choice(self, "Signalled").when(
            sfn.Condition.boolean_equals("$.done", True), sfn.Succeed(self, "Done")
        )
        done.otherwise(wait)
        wait.next(watch)
        log_group = logs.LogGroup(
            self, "WatcherLogs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        machine = sfn.StateMachine(
            self,
            "Watcher",
            comment="Waits for a HyperPod cluster to be InService or failed, then signals its wait condition",
            definition_body=sfn.DefinitionBody.from_chainable(watch.next(done)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=cdk.Duration.seconds(timeout_seconds + WATCHER_MARGIN_SECONDS),
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
            tracing_enabled=True,
        )
        acknowledge(
            machine,
            "AwsSolutions-IAM5[Resource::*]",
            "Step Functions delivers logs and X-Ray traces through logs:*LogDelivery and xray:Put* actions that have "
            "no resource-level permissions; the role is only assumable by this state machine.",
        )
        quiet_redundant_role_dependency(machine)
        acknowledge_compliance(
            machine,
            "IAMNoInlinePolicy",
            "aws-cdk-lib writes the watcher role's grants (invoke the watch function, deliver logs and traces) as "
            "its default policy; the role belongs to this state machine alone.",
        )
        acknowledge_wildcard_resource(
            machine,
            f"{watch_fn.function_arn}:*",
            "The watcher invokes its watch function by ARN; the :* suffix only adds that one function's versions "
            "and aliases.",
        )
        return machine

    def _provider(self, on_event_fn: lambda_.Function, is_complete_fn: lambda_.Function) -> cr.Provider:
        log_group = logs.LogGroup(
            self, "ProviderLogs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        waiter_logs = logs.LogGroup(
            self, "ProviderWaiterLogs", retention=self._log_retention, removal_policy=self._log_removal_policy
        )
        provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=on_event_fn,
            is_complete_handler=is_complete_fn,
            query_interval=cdk.Duration.seconds(30),
            total_timeout=cdk.Duration.hours(1),
            log_group=log_group,
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=waiter_logs, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
        )
        acknowledge(
            provider,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "The custom resource framework's own functions (onEvent, isComplete, onTimeout) get the basic execution "
            "policy from aws-cdk-lib's Provider; it only lets them write their CloudWatch logs.",
        )
        acknowledge(
            provider,
            "AwsSolutions-IAM5[Resource::*]",
            "The framework's waiter state machine delivers its logs through logs:*LogDelivery and related actions, "
            "which have no resource-level permissions; only that state machine's role holds them.",
        )
        acknowledge(
            provider,
            "AwsSolutions-SF2",
            "The framework's waiter state machine only polls the is_complete function while a cluster is deleted; "
            "aws-cdk-lib's Provider offers no tracing option for it, and its logs (level ALL) record every step.",
        )
        quiet_redundant_role_dependency(provider)
        _acknowledge_handler_compliance(
            provider, "The custom resource framework's functions", dlq_reason=FRAMEWORK_DLQ_REASON
        )
        acknowledge_compliance(
            provider,
            "IAMNoInlinePolicy",
            "aws-cdk-lib's Provider writes its framework functions' and waiter's grants (invoke the handlers, "
            "deliver logs) as default policies of roles that belong to the framework alone.",
        )
        skip_checkov(
            provider,
            "CKV_AWS_173",
            "The framework functions' environment variables hold the ARNs of the handler functions and the waiter "
            "state machine they call, no secrets; Lambda encrypts them at rest with its AWS managed key.",
            LAMBDA,
        )
        invoked = [on_event_fn, is_complete_fn] + [
            child
            for child in provider.node.children
            if isinstance(child, lambda_.Function) and child.node.id in ("framework-isComplete", "framework-onTimeout")
        ]
        for function in invoked:
            acknowledge_wildcard_resource(
                provider,
                f"{function.function_arn}:*",
                f"The provider framework invokes {function.node.id} by ARN; the :* suffix only adds that one "
                "function's versions and aliases.",
            )
        return provider


#: Why our handlers need no dead-letter queue: nothing invokes them asynchronously.
HANDLER_DLQ_REASON = (
    "{what} are invoked synchronously, by aws-cdk-lib's provider framework or by Step Functions, which retry and "
    "report failures themselves; a dead-letter queue only receives events of asynchronous invocations."
)
#: Why the provider framework's own functions need none: the one invoked asynchronously reports failures itself.
FRAMEWORK_DLQ_REASON = (
    "{what}: CloudFormation invokes the onEvent function asynchronously, and it reports every failure to the "
    "custom resource's response URL itself, which fails the stack operation; the waiter state machine invokes "
    "isComplete and onTimeout synchronously. A dead-letter queue would only keep events CloudFormation has "
    "already failed, which nobody replays."
)


def _acknowledge_handler_compliance(scope: Construct, what: str, dlq_reason: str = HANDLER_DLQ_REASON) -> None:
    """The compliance packs' Lambda rules for our handlers or (with ``FRAMEWORK_DLQ_REASON``) the framework's."""
    acknowledge_compliance(
        scope,
        "LambdaConcurrency",
        f"{what} run a few times per stack operation; reserving concurrency would take capacity from the "
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
        f"{what} only call AWS APIs (SageMaker, S3, EC2, Step Functions) and the CloudFormation wait handle URL; "
        "running them in the VPC would add interfaces and a dependency on its NAT without reaching anything there.",
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
    bad_checks = [c for c in group.deep_health_checks if c not in DEEP_HEALTH_CHECKS]
    if bad_checks or len(set(group.deep_health_checks)) != len(group.deep_health_checks):
        problems.append(
            f"{label}.deep_health_checks: {list(group.deep_health_checks)} is not allowed; use each of "
            f"{', '.join(DEEP_HEALTH_CHECKS)} at most once"
        )
    if group.training_plan_arn is not None and not TRAINING_PLAN_ARN.fullmatch(group.training_plan_arn):
        problems.append(f"{label}.training_plan_arn: {group.training_plan_arn!r} is not a SageMaker training plan ARN")


def _check_props(
    *,
    cluster_name: str,
    controller: InstanceGroupConfig,
    login: InstanceGroupConfig | None,
    workers: Sequence[WorkerGroupConfig],
    subnets: Sequence[ec2.ISubnet],
    security_groups: Sequence[ec2.ISecurityGroup],
    lifecycle: HyperPodLifecycle,
    node_recovery: str,
    create_timeout_hours: int,
    tags: Mapping[str, str],
    log_removal_policy: cdk.RemovalPolicy,
) -> None:
    """Check every prop at once and raise one ValueError listing all problems."""
    problems: list[str] = []
    if not re.fullmatch(GROUP_NAME, cluster_name) or len(cluster_name) > MAX_BASE_NAME:
        problems.append(
            f"cluster_name: {cluster_name!r} is not allowed; use 1-{MAX_BASE_NAME} letters, digits and hyphens, "
            f"starting and ending with a letter or digit (a '-' and a {HASH_LENGTH}-character hash are appended)"
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
    if node_recovery not in ("Automatic", "None"):
        problems.append(f"node_recovery: {node_recovery!r} is not allowed; use 'Automatic' or 'None'")
    if (
        isinstance(create_timeout_hours, bool)
        or not isinstance(create_timeout_hours, int)
        or not 1 <= create_timeout_hours <= MAX_CREATE_TIMEOUT_HOURS
    ):
        problems.append(
            f"create_timeout_hours: {create_timeout_hours!r} is not allowed; use a whole number of hours from 1 to "
            f"{MAX_CREATE_TIMEOUT_HOURS} (a wait condition waits at most 12 hours)"
        )
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
        problems.append(f"log_removal_policy: {log_removal_policy} is not allowed; use RemovalPolicy.RETAIN or DESTROY")
    if problems:
        raise ValueError("HyperPodCluster: " + "; ".join(problems))
