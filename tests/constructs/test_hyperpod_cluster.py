"""HyperPodCluster on rendered CloudFormation: the request, the wait condition, the watcher, the handlers, errors.

One app holds the network, the lifecycle bucket, the execution role and the
cluster; it is synthesized once with cdk-nag's AwsSolutions pack and the
three compliance packs on (synth fails on any unacknowledged finding) and its
template is linted by cfn-lint. Names, logical ids and wait-handle hashes are
compared on clusters that are only constructed, never synthesized.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

from mlcluster.config.hyperpod import InstanceGroupConfig, WorkerGroupConfig
from mlcluster.constructs.hyperpod_cluster import HyperPodCluster
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle
from mlcluster.constructs.hyperpod_role import HyperPodExecutionRole
from mlcluster.constructs.log_key import EncryptLogGroups, EnvironmentKey
from mlcluster.constructs.nag import flatten_resource
from mlcluster.constructs.network import ClusterNetwork

PLAN = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-plan"
FSX_DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
CONTROLLER = InstanceGroupConfig(instance_group_name="controller-machine", instance_type="ml.m5.12xlarge")
LOGIN = InstanceGroupConfig(instance_group_name="login", instance_type="ml.m5.4xlarge", instance_count=2)
GPU = WorkerGroupConfig(
    instance_group_name="gpu",
    instance_type="ml.p5.48xlarge",
    instance_count=4,
    threads_per_core=2,
    ebs_volume_size_gib=1000,
    deep_health_checks=("InstanceStress", "InstanceConnectivity"),
    training_plan_arn=PLAN,
    partition_name="train",
)
CPU = WorkerGroupConfig(instance_group_name="cpu", instance_type="ml.c5.4xlarge", instance_count=2)
CLUSTERS = "arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:cluster/*"


class Built:
    """The synthesized template, its file and the cluster construct."""

    def __init__(self, template_file: Path, cluster: HyperPodCluster) -> None:
        self.template_file = template_file
        self.template: dict[str, Any] = json.loads(template_file.read_text())
        self.cluster = cluster


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(out))
    stack = cdk.Stack(app, "Cluster")
    net = ClusterNetwork(stack, "Net", availability_zone_id="use1-az4")
    lifecycle = HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="dev",
        controller_group="controller-machine",
        login_group="login",
        worker_groups={"gpu": "train", "cpu": "cpu"},
        fsx_dns_name=FSX_DNS,
        fsx_mount_name="abcdefgh",
    )
    role = HyperPodExecutionRole(
        stack,
        "ExecutionRole",
        vpc=net.vpc,
        subnets=net.private_subnets,
        security_groups=[net.security_group],
        lifecycle_bucket=lifecycle.bucket,
    )
    cluster = HyperPodCluster(
        stack,
        "Cluster",
        cluster_name="mlc-dev",
        controller=CONTROLLER,
        login=LOGIN,
        workers=[GPU, CPU],
        subnets=net.private_subnets,
        security_groups=[net.security_group],
        execution_role=role.role,
        lifecycle=lifecycle,
        create_timeout_hours=6,
        tags={"team": "ml", "cost-center": "1234"},
    )
    cdk.CfnOutput(stack, "ControllerSession", value=cluster.ssm_session_command())
    # As the environment stage does: every log group under a rotated customer-managed key.
    log_key = EnvironmentKey(stack, "LogKey", environment_name="dev", removal_policy=cdk.RemovalPolicy.DESTROY)
    cdk.Aspects.of(app).add(
        EncryptLogGroups(log_key.key, retention=logs.RetentionDays.ONE_YEAR, removal_policy=cdk.RemovalPolicy.DESTROY)
    )
    packs = (AwsSolutionsChecks(app), NIST80053R5Checks(app), HIPAASecurityChecks(app), PCIDSS321Checks(app))
    cdk.Validations.of(app).add_plugins(*packs)
    app.synth()  # raises on any unacknowledged cdk-nag finding of any pack
    return Built(out / "Cluster.template.json", cluster)


def of_type(built: Built, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in built.template["Resources"].items() if v["Type"] == kind}


def joined(value: Any) -> str:
    """A Fn::Join (or plain string) as text, each reference written as cdk-nag does (``<Logical.Attr>``).

    Literal parts are kept as they are (they hold JSON braces); only the
    references in between are flattened.
    """
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(p if isinstance(p, str) else flatten_resource(p) for p in parts)
    return flatten_resource(value)


def custom_resource(built: Built) -> tuple[str, dict[str, Any]]:
    ((name, resource),) = of_type(built, "Custom::HyperPodCluster").items()
    return name, resource


def cluster_spec(built: Built) -> dict[str, Any]:
    _, resource = custom_resource(built)
    spec: dict[str, Any] = json.loads(joined(resource["Properties"]["ClusterSpec"]))
    return spec


def groups(built: Built) -> dict[str, dict[str, Any]]:
    return {g["InstanceGroupName"]: g for g in cluster_spec(built)["InstanceGroups"]}


def logical_id(built: Built, kind: str, prefix: str) -> str:
    (found,) = [k for k in of_type(built, kind) if k.startswith(prefix)]
    return found


def lifecycle_bucket(built: Built) -> str:
    (found,) = [k for k, v in of_type(built, "AWS::S3::Bucket").items() if "BucketName" in v["Properties"]]
    return found


# -- the CreateCluster request --------------------------------------------------------------------


def test_spec_carries_the_base_name_and_the_name_comes_from_the_handler(built: Built) -> None:
    """The handler appends the create-only hash; the construct only knows the name as an attribute."""
    assert cluster_spec(built)["ClusterName"] == "mlc-dev"
    name, _ = custom_resource(built)
    stack = cdk.Stack.of(built.cluster)
    assert stack.resolve(built.cluster.cluster_name) == {"Fn::GetAtt": [name, "ClusterName"]}
    assert stack.resolve(built.cluster.cluster_arn) == {"Fn::GetAtt": [name, "ClusterArn"]}


def test_groups_in_order_with_lifecycle_role_and_counts(built: Built) -> None:
    spec = cluster_spec(built)
    assert [g["InstanceGroupName"] for g in spec["InstanceGroups"]] == ["controller-machine", "login", "gpu", "cpu"]
    bucket = lifecycle_bucket(built)
    role = logical_id(built, "AWS::IAM::Role", "ExecutionRole")
    for group in spec["InstanceGroups"]:
        assert group["LifeCycleConfig"] == {"SourceS3Uri": f"s3://<{bucket}>/lifecycle/", "OnCreate": "on_create.sh"}
        assert group["ExecutionRole"] == f"<{role}.Arn>"
    by_name = groups(built)
    assert by_name["controller-machine"]["InstanceCount"] == 1
    assert by_name["login"]["InstanceCount"] == 2
    assert by_name["gpu"]["InstanceType"] == "ml.p5.48xlarge" and by_name["gpu"]["InstanceCount"] == 4


def test_threads_per_core_and_ebs_size(built: Built) -> None:
    by_name = groups(built)
    assert by_name["gpu"]["ThreadsPerCore"] == 2
    assert by_name["cpu"]["ThreadsPerCore"] == 1
    assert by_name["gpu"]["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 1000}}]
    assert by_name["controller-machine"]["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]


def test_deep_health_checks_and_training_plan_only_where_set(built: Built) -> None:
    by_name = groups(built)
    assert by_name["gpu"]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert by_name["gpu"]["TrainingPlanArn"] == PLAN
    for name in ("controller-machine", "login", "cpu"):
        assert "OnStartDeepHealthChecks" not in by_name[name] and "TrainingPlanArn" not in by_name[name]


def test_vpc_recovery_and_tags(built: Built) -> None:
    spec = cluster_spec(built)
    subnet = logical_id(built, "AWS::EC2::Subnet", "NetPrivate1")
    group = logical_id(built, "AWS::EC2::SecurityGroup", "Net")
    assert spec["VpcConfig"] == {"SecurityGroupIds": [f"<{group}.GroupId>"], "Subnets": [f"<{subnet}>"]}
    assert spec["NodeRecovery"] == "Automatic"
    assert spec["Tags"] == [{"Key": "cost-center", "Value": "1234"}, {"Key": "team", "Value": "ml"}]


def test_other_resource_properties(built: Built) -> None:
    _, resource = custom_resource(built)
    props = resource["Properties"]
    assert props["CreateTimeoutSeconds"] == 6 * 3600
    assert props["ProvisioningParametersKey"] == "lifecycle/provisioning_parameters.json"
    handle = logical_id(built, "AWS::CloudFormation::WaitConditionHandle", "ClusterWaitHandle")
    assert props["WaitHandleUrl"] == {"Ref": handle}
    provider = logical_id(built, "AWS::Lambda::Function", "ClusterProviderframeworkonEvent")
    assert props["ServiceToken"] == {"Fn::GetAtt": [provider, "Arn"]}


def test_cluster_waits_for_the_lifecycle_upload_and_the_role_policies(built: Built) -> None:
    _, resource = custom_resource(built)
    depends = set(resource["DependsOn"])
    assert logical_id(built, "Custom::CDKBucketDeployment", "LifecycleUpload") in depends
    policies = {k for k in of_type(built, "AWS::IAM::ManagedPolicy") if k.startswith("ExecutionRole")}
    assert policies and policies <= depends


# -- the wait condition ---------------------------------------------------------------------------


def test_wait_condition_timeout_and_dependency(built: Built) -> None:
    name, _ = custom_resource(built)
    handle = logical_id(built, "AWS::CloudFormation::WaitConditionHandle", "ClusterWaitHandle")
    ((condition_id, condition),) = of_type(built, "AWS::CloudFormation::WaitCondition").items()
    assert condition["Properties"] == {"Count": 1, "Handle": {"Ref": handle}, "Timeout": str(6 * 3600)}
    assert condition["DependsOn"] == [name]
    # Both logical ids carry the same hash of the request.
    assert handle.removeprefix("ClusterWaitHandle")[:8] == condition_id.removeprefix("ClusterWaitCondition")[:8]


# -- the watcher state machine ----------------------------------------------------------------------


def watcher(built: Built) -> dict[str, Any]:
    ((_, machine),) = [(k, v) for k, v in of_type(built, "AWS::StepFunctions::StateMachine").items() if "Watcher" in k]
    return machine["Properties"]


def test_watcher_loops_watch_choice_wait(built: Built) -> None:
    definition = json.loads(joined(watcher(built)["DefinitionString"]))
    states = definition["States"]
    assert definition["StartAt"] == "Watch"
    watch_fn = logical_id(built, "AWS::Lambda::Function", "ClusterWatchFunction")
    assert states["Watch"]["Type"] == "Task" and states["Watch"]["Resource"] == f"<{watch_fn}.Arn>"
    assert states["Watch"]["Next"] == "Signalled"
    assert states["Signalled"]["Choices"] == [{"Variable": "$.done", "BooleanEquals": True, "Next": "Done"}]
    assert states["Signalled"]["Default"] == "WaitOneMinute"
    assert states["WaitOneMinute"] == {"Type": "Wait", "Seconds": 60, "Next": "Watch"}
    assert states["Done"] == {"Type": "Succeed"}
    assert definition["TimeoutSeconds"] == 6 * 3600 + 600


def test_watcher_logs_all_without_execution_data_and_traces(built: Built) -> None:
    props = watcher(built)
    assert props["StateMachineType"] == "STANDARD"
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert props["TracingConfiguration"] == {"Enabled": True}
    (destination,) = props["LoggingConfiguration"]["Destinations"]
    group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert built.template["Resources"][group]["Properties"]["RetentionInDays"] == 365


# -- handlers and the provider ----------------------------------------------------------------------


def handler_functions(built: Built) -> dict[str, dict[str, Any]]:
    return {
        v["Properties"]["Handler"]: v["Properties"]
        for k, v in of_type(built, "AWS::Lambda::Function").items()
        if str(v["Properties"].get("Handler", "")).startswith("hyperpod_cluster.")
    }


def test_three_python_handlers_with_the_newest_runtime(built: Built) -> None:
    functions = handler_functions(built)
    assert set(functions) == {
        "hyperpod_cluster.app.on_event",
        "hyperpod_cluster.app.is_complete",
        "hyperpod_cluster.app.watch",
    }
    assert {f["Runtime"] for f in functions.values()} == {"python3.14"}
    assert all(f["Timeout"] >= 60 for f in functions.values())
    on_event = functions["hyperpod_cluster.app.on_event"]
    machine = next(k for k in of_type(built, "AWS::StepFunctions::StateMachine") if "Watcher" in k)
    assert on_event["Environment"]["Variables"] == {"WATCHER_STATE_MACHINE_ARN": {"Ref": machine}}


def test_handler_asset_holds_the_package_without_caches(built: Built) -> None:
    folders = {p.parent.parent for p in built.template_file.parent.glob("asset.*/hyperpod_cluster/app.py")}
    (folder,) = folders
    assert (folder / "hyperpod_cluster" / "spec.py").is_file()
    assert not list(folder.rglob("__pycache__"))


def test_provider_waits_up_to_an_hour_every_30_seconds(built: Built) -> None:
    ((_, machine),) = [(k, v) for k, v in of_type(built, "AWS::StepFunctions::StateMachine").items() if "waiter" in k]
    definition = json.loads(joined(machine["Properties"]["DefinitionString"]))
    retry = definition["States"]["framework-isComplete-task"]["Retry"][0]
    assert retry["IntervalSeconds"] == 30 and retry["MaxAttempts"] == 120
    assert machine["Properties"]["LoggingConfiguration"]["Level"] == "ALL"


def handler_statements(built: Built, role_prefix: str) -> dict[str, dict[str, Any]]:
    (policy,) = [
        v for k, v in of_type(built, "AWS::IAM::ManagedPolicy").items() if k.startswith(f"Cluster{role_prefix}Role")
    ]
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_on_event_role_is_least_privilege(built: Built) -> None:
    statements = handler_statements(built, "OnEventFunction")
    manage = statements["ManageCluster"]
    assert set(manage["Action"]) == {
        "sagemaker:CreateCluster",
        "sagemaker:UpdateCluster",
        "sagemaker:DeleteCluster",
        "sagemaker:DescribeCluster",
        "sagemaker:ListClusterNodes",
        "sagemaker:AddTags",
        "sagemaker:DeleteTags",
    }
    assert joined(manage["Resource"]) == CLUSTERS
    passing = statements["PassExecutionRole"]
    role = logical_id(built, "AWS::IAM::Role", "ExecutionRole")
    assert passing["Action"] == "iam:PassRole" and passing["Resource"] == {"Fn::GetAtt": [role, "Arn"]}
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    bucket = lifecycle_bucket(built)
    assert joined(statements["ReadLifecycleFiles"]["Resource"]) == f"<{bucket}.Arn>/lifecycle/*"
    assert statements["ListLifecycleFiles"]["Resource"] == {"Fn::GetAtt": [bucket, "Arn"]}
    assert set(statements["CheckNetwork"]["Action"]) == {
        "ec2:DescribeSubnets",
        "ec2:DescribeRouteTables",
        "ec2:DescribeSecurityGroups",
    }
    machine = next(k for k in of_type(built, "AWS::StepFunctions::StateMachine") if "Watcher" in k)
    assert statements["StartWatcher"] == {
        "Sid": "StartWatcher",
        "Effect": "Allow",
        "Action": "states:StartExecution",
        "Resource": {"Ref": machine},
    }
    assert statements["UseTrainingPlans"]["Resource"] == PLAN
    log_group = logical_id(built, "AWS::Logs::LogGroup", "ClusterOnEventFunctionLogs")
    assert statements["OwnLogs"]["Resource"] == {"Fn::GetAtt": [log_group, "Arn"]}


def test_watch_and_is_complete_roles_only_read_or_delete(built: Built) -> None:
    watch = handler_statements(built, "WatchFunction")["WatchCluster"]
    assert set(watch["Action"]) == {"sagemaker:DescribeCluster", "sagemaker:ListClusterNodes"}
    finish = handler_statements(built, "IsCompleteFunction")["FinishDeletion"]
    assert set(finish["Action"]) == {"sagemaker:DescribeCluster", "sagemaker:DeleteCluster"}
    assert joined(watch["Resource"]) == joined(finish["Resource"]) == CLUSTERS


# -- access and compliance ----------------------------------------------------------------------------


def test_ssm_session_command_looks_up_the_controller(built: Built) -> None:
    command = joined(built.template["Outputs"]["ControllerSession"]["Value"])
    name, _ = custom_resource(built)
    cluster_id = json.dumps(
        {"Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetAtt": [name, "ClusterArn"]}]}]}, separators=(",", ":")
    )
    lookup = (
        f"aws sagemaker list-cluster-nodes --region <AWS::Region> --cluster-name <{name}.ClusterName> "
        "--query \"ClusterNodeSummaries[?InstanceGroupName=='controller-machine'].InstanceId | [0]\" --output text"
    )
    assert command == (
        f'aws ssm start-session --region <AWS::Region> --target "sagemaker-cluster:{cluster_id}'
        f'_controller-machine-$({lookup})"'
    )


def test_cfn_lint_clean(built: Built) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "parseable", "--", str(built.template_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_acknowledgements_carry_specific_reasons(built: Built) -> None:
    metadata = json.loads((built.template_file.parent / "Cluster.metadata.json").read_text())
    acknowledged: dict[str, str] = {}
    for entries in metadata.values():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                acknowledged.update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    assert f"AwsSolutions-IAM5[Resource::{CLUSTERS}]" in acknowledged
    assert "AwsSolutions-SF2" in acknowledged and "NIST.800.53.R5-LambdaDLQ" in acknowledged
    assert all(len(reason) > 40 for reason in acknowledged.values())


# -- name and wait-handle hashes (constructed only) ------------------------------------------------


@pytest.fixture(scope="module")
def parts() -> dict[str, Any]:
    """An unsynthesized stack with imported network pieces, one lifecycle and an imported role."""
    stack = cdk.Stack(cdk.App(), "Variants")
    lifecycle = HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="dev",
        controller_group="controller-machine",
        worker_groups={"gpu": "train", "cpu": "cpu"},
        fsx_dns_name=FSX_DNS,
        fsx_mount_name="abcdefgh",
    )
    return {
        "stack": stack,
        "lifecycle": lifecycle,
        "subnets": [ec2.Subnet.from_subnet_id(stack, f"Subnet{i}", f"subnet-{i:017x}") for i in range(17)],
        "groups": [ec2.SecurityGroup.from_security_group_id(stack, f"Sg{i}", f"sg-{i:017x}") for i in range(6)],
        "role": iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/hyperpod-nodes"),
    }


def make(parts: dict[str, Any], **changes: Any) -> HyperPodCluster:
    props: dict[str, Any] = {
        "cluster_name": "mlc-dev",
        "controller": CONTROLLER,
        "workers": [GPU, CPU],
        "subnets": parts["subnets"][:1],
        "security_groups": parts["groups"][:1],
        "execution_role": parts["role"],
        "lifecycle": parts["lifecycle"],
        **changes,
    }
    stack: cdk.Stack = parts["stack"]
    return HyperPodCluster(stack, f"Cluster{len(stack.node.children)}", **props)


@pytest.fixture(scope="module")
def baseline(parts: dict[str, Any]) -> HyperPodCluster:
    return make(parts)


def spec_of(cluster: HyperPodCluster) -> dict[str, Any]:
    """The ClusterSpec property of an unsynthesized cluster, references flattened."""
    resource = cluster.resource.node.default_child
    assert isinstance(resource, cdk.CfnResource)
    properties = cdk.Stack.of(cluster).resolve(resource._cfn_properties)
    spec: dict[str, Any] = json.loads(joined(properties["ClusterSpec"]))
    return spec


@pytest.mark.parametrize(
    "changes",
    [
        {"workers": [replace(GPU, instance_type="ml.p5e.48xlarge"), CPU]},
        {"workers": [replace(GPU, threads_per_core=1), CPU]},
        {"subnets_from": 1},
        {"workers": [replace(GPU, instance_count=16), CPU]},
        {"node_recovery": "None"},
        {"tags": {"team": "research"}},
        {"create_timeout_hours": 3},
    ],
    ids=["instance_type", "threads_per_core", "vpc", "instance_count", "node_recovery", "tags", "timeout"],
)
def test_every_change_keeps_the_base_name_and_gets_a_new_wait_handle(
    parts: dict[str, Any], baseline: HyperPodCluster, changes: dict[str, Any]
) -> None:
    """Whether a change replaces the cluster is the handler's call; the construct only renews the wait handle."""
    if "subnets_from" in changes:
        start = changes.pop("subnets_from")
        changes["subnets"] = parts["subnets"][start : start + 1]
    changed = make(parts, **changes)
    assert spec_of(changed)["ClusterName"] == spec_of(baseline)["ClusterName"] == "mlc-dev"
    assert spec_of(changed) != spec_of(baseline) or changes.keys() == {"create_timeout_hours"}
    assert changed.wait_handle.node.id != baseline.wait_handle.node.id
    assert changed.wait_condition.node.id != baseline.wait_condition.node.id


def test_the_same_props_give_the_same_ids(parts: dict[str, Any], baseline: HyperPodCluster) -> None:
    again = make(parts)
    assert spec_of(again) == spec_of(baseline)
    assert again.wait_handle.node.id == baseline.wait_handle.node.id
    assert again.wait_condition.node.id == baseline.wait_condition.node.id


def standalone(workers: list[WorkerGroupConfig]) -> tuple[str, dict[str, Any], str]:
    """A cluster alone in its own stack: the custom resource's logical id, its spec, the wait condition's id."""
    stack = cdk.Stack(cdk.App(), "Alone")
    lifecycle = HyperPodLifecycle(
        stack,
        "Lifecycle",
        environment_name="dev",
        controller_group="controller-machine",
        worker_groups={w.instance_group_name: w.partition_name or w.instance_group_name for w in workers},
        fsx_dns_name=FSX_DNS,
        fsx_mount_name="abcdefgh",
    )
    cluster = HyperPodCluster(
        stack,
        "Cluster",
        cluster_name="mlc-dev",
        controller=CONTROLLER,
        workers=workers,
        subnets=[ec2.Subnet.from_subnet_id(stack, "Subnet", "subnet-00000000000000001")],
        security_groups=[ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-00000000000000001")],
        execution_role=iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/hyperpod-nodes"),
        lifecycle=lifecycle,
    )
    resource = cluster.resource.node.default_child
    assert isinstance(resource, cdk.CfnResource)
    return stack.get_logical_id(resource), spec_of(cluster), stack.get_logical_id(cluster.wait_condition)


def test_adding_a_worker_group_keeps_the_resource_and_its_name() -> None:
    """The handler adds the group in place; a new logical id or name would make CloudFormation replace the cluster."""
    before_id, before_spec, before_wait = standalone([GPU, CPU])
    extra = WorkerGroupConfig(instance_group_name="cpu-b", instance_type="ml.c5.9xlarge", instance_count=3)
    after_id, after_spec, after_wait = standalone([GPU, CPU, extra])

    assert after_id == before_id
    assert after_spec["ClusterName"] == before_spec["ClusterName"] == "mlc-dev"
    assert [g["InstanceGroupName"] for g in after_spec["InstanceGroups"]] == [
        "controller-machine",
        "gpu",
        "cpu",
        "cpu-b",
    ]
    assert after_wait != before_wait


# -- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cluster_name": "a" * 57}, "cluster_name: 'aaaa"),
        ({"cluster_name": "mlc_dev"}, "cluster_name: 'mlc_dev' is not allowed"),
        ({"controller": replace(CONTROLLER, instance_count=2)}, "controller.instance_count: 2 is not allowed; use 1"),
        ({"workers": []}, "workers: [] is not allowed"),
        ({"workers": [replace(GPU, instance_type="p5.48xlarge"), CPU]}, "workers[0].instance_type: 'p5.48xlarge'"),
        ({"workers": [replace(GPU, deep_health_checks=("Stress",)), CPU]}, "workers[0].deep_health_checks"),
        ({"workers": [replace(GPU, training_plan_arn="plan"), CPU]}, "workers[0].training_plan_arn: 'plan'"),
        ({"workers": [GPU, replace(CPU, instance_group_name="gpu")]}, "repeat"),
        ({"workers": [GPU]}, "lifecycle: its provisioning parameters name"),
        ({"workers": [GPU, replace(CPU, partition_name="batch")]}, "lifecycle: its provisioning parameters name"),
        ({"subnets": []}, "subnets: 0 given"),
        ({"security_groups_count": 6}, "security_groups: 6 given"),
        ({"node_recovery": "Manual"}, "node_recovery: 'Manual' is not allowed"),
        ({"create_timeout_hours": 13}, "create_timeout_hours: 13 is not allowed"),
        ({"create_timeout_hours": 0}, "create_timeout_hours: 0 is not allowed"),
        ({"tags": {"aws:owner": "x"}}, "tags: key 'aws:owner' is not allowed"),
        ({"tags": {"team": "a" * 257}}, "tags['team']"),
        ({"log_removal_policy": cdk.RemovalPolicy.SNAPSHOT}, "log_removal_policy:"),
    ],
)
def test_bad_props_are_named(parts: dict[str, Any], changes: dict[str, Any], message: str) -> None:
    if "security_groups_count" in changes:
        changes["security_groups"] = parts["groups"][: changes.pop("security_groups_count")]
    with pytest.raises(ValueError, match="HyperPodCluster: ") as caught:
        make(parts, **changes)
    assert message in str(caught.value)
