"""HyperPodCluster on rendered CloudFormation: the native resource, the checks around it, their roles, errors.

One app holds the network, the lifecycle bucket, one execution role per
group and the cluster with every optional field; it is synthesized once with
cdk-nag's AwsSolutions pack and the three compliance packs on (synth fails on
any unacknowledged finding) and its template is linted by cfn-lint.
Validation is checked on clusters that are only constructed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

from mlcluster.config.hyperpod import InstanceGroupConfig, PatchScheduleConfig, WorkerGroupConfig
from mlcluster.config.network import Zone
from mlcluster.constructs.hyperpod_cluster import HyperPodCluster, check_against_botocore
from mlcluster.constructs.hyperpod_lifecycle import HyperPodLifecycle
from mlcluster.constructs.hyperpod_role import HyperPodExecutionRole
from mlcluster.constructs.log_key import EncryptLogGroups, EnvironmentKey
from mlcluster.constructs.nag import flatten_resource
from mlcluster.constructs.network import ClusterNetwork
from tests.support import cfn_lint

PLAN = "arn:aws:sagemaker:us-east-1:111111111111:training-plan/p5-plan"
KEY = "arn:aws:kms:us-east-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"
FSX_DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
CONTROLLER = InstanceGroupConfig(
    instance_group_name="controller-machine", instance_type="ml.m5.12xlarge", root_volume_kms_key_id=KEY
)
LOGIN = InstanceGroupConfig(instance_group_name="login", instance_type="ml.m5.4xlarge", instance_count=2)
GPU = WorkerGroupConfig(
    instance_group_name="gpu",
    instance_type="ml.p5.48xlarge",
    instance_count=4,
    threads_per_core=2,
    ebs_volume_size_gib=1000,
    ebs_volume_kms_key_id=KEY,
    deep_health_checks=("InstanceStress", "InstanceConnectivity"),
    training_plan_arn=PLAN,
    partition_name="train",
    patch_schedule=PatchScheduleConfig(
        schedule_expression="cron(0 3 ? * SUN *)", max_batch_size=2, wait_interval_seconds=300
    ),
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
    net = ClusterNetwork(
        stack,
        "Net",
        availability_zone_id="use1-az4",
        extra_zones=[Zone(availability_zone_id="use1-az6")],
    )
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
    roles = {
        name: HyperPodExecutionRole(
            stack,
            f"Role-{name}",
            vpc=net.vpc,
            subnets=net.private_subnets,
            security_groups=[net.security_group],
            lifecycle_bucket=lifecycle.bucket,
        ).role
        for name in ("controller-machine", "login", "gpu", "cpu")
    }
    cluster = HyperPodCluster(
        stack,
        "Cluster",
        cluster_name="mlc-dev",
        controller=CONTROLLER,
        login=LOGIN,
        workers=[GPU, CPU],
        subnets=net.private_subnets[:1],
        security_groups=[net.security_group],
        execution_roles=roles,
        lifecycle=lifecycle,
        group_subnets={"cpu": net.private_subnets[1:]},
        slurm_config_strategy="Managed",
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


def one(built: Built, kind: str) -> tuple[str, dict[str, Any]]:
    ((name, resource),) = of_type(built, kind).items()
    return name, resource


def joined(value: Any) -> str:
    """A Fn::Join (or plain string) as text, each reference written as cdk-nag does (``<Logical.Attr>``)."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(p if isinstance(p, str) else flatten_resource(p) for p in parts)
    return flatten_resource(value)


def flattened(value: Any) -> Any:
    """``value`` with every intrinsic written as text, so the rendered properties compare with the JSON spec."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
            return joined(value)
        return {k: flattened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [flattened(v) for v in value]
    return value


def groups(built: Built) -> dict[str, dict[str, Any]]:
    _, cluster = one(built, "AWS::SageMaker::Cluster")
    return {g["InstanceGroupName"]: flattened(g) for g in cluster["Properties"]["InstanceGroups"]}


def test_the_cluster_is_cloudformations_native_resource(built: Built) -> None:
    _, cluster = one(built, "AWS::SageMaker::Cluster")
    props = cluster["Properties"]
    assert props["ClusterName"] == "mlc-dev"
    assert props["NodeRecovery"] == "Automatic"
    assert props["Orchestrator"] == {"Slurm": {"SlurmConfigStrategy": "Managed"}}
    assert {t["Key"]: t["Value"] for t in props["Tags"]} == {"team": "ml", "cost-center": "1234"}
    assert len(props["VpcConfig"]["Subnets"]) == 1
    assert "DeletionPolicy" not in cluster  # deleting the stack deletes the billed cluster
    assert [g for g in groups(built)] == ["controller-machine", "login", "gpu", "cpu"]


def test_group_fields_a_hyperpod_user_expects(built: Built) -> None:
    by_name = groups(built)
    gpu, cpu, controller = by_name["gpu"], by_name["cpu"], by_name["controller-machine"]
    assert gpu["InstanceCount"] == 4 and gpu["ThreadsPerCore"] == 2
    assert gpu["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 1000, "VolumeKmsKeyId": KEY}}]
    assert controller["InstanceStorageConfigs"] == [
        {"EbsVolumeConfig": {"VolumeSizeInGB": 500}},
        {"EbsVolumeConfig": {"RootVolume": True, "VolumeKmsKeyId": KEY}},
    ]
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    # the CPU group and the controller ask for nothing and are not accelerated: no deep checks
    assert "OnStartDeepHealthChecks" not in cpu and "OnStartDeepHealthChecks" not in controller
    assert gpu["TrainingPlanArn"] == PLAN
    assert gpu["ScheduledUpdateConfig"] == {
        "ScheduleExpression": "cron(0 3 ? * SUN *)",
        "DeploymentConfig": {
            "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}},
            "WaitIntervalInSeconds": 300,
        },
    }
    assert [by_name[g]["SlurmConfig"] for g in by_name] == [
        {"NodeType": "Controller"},
        {"NodeType": "Login"},
        {"NodeType": "Compute", "PartitionNames": ["train"]},
        {"NodeType": "Compute", "PartitionNames": ["cpu"]},
    ]
    assert "OverrideVpcConfig" not in gpu
    _, cluster = one(built, "AWS::SageMaker::Cluster")
    vpc = flattened(cluster["Properties"]["VpcConfig"])
    # group_subnets moves the CPU group to the second private subnet only; its security groups stay the cluster's.
    (subnet,) = cpu["OverrideVpcConfig"]["Subnets"]
    assert subnet.startswith("<NetPrivate2Subnet") and subnet not in vpc["Subnets"]
    assert cpu["OverrideVpcConfig"]["SecurityGroupIds"] == vpc["SecurityGroupIds"]
    for name, group in by_name.items():
        role = group["ExecutionRole"]
        assert role.startswith(f"<Role{name.replace('-', '')}") and role.endswith(".Arn>")
        assert ("TrainingPlanArn" in group) == (name == "gpu")
    assert len({g["ExecutionRole"] for g in by_name.values()}) == 4  # one role per group


def test_preflight_checks_the_request_the_cluster_is_made_from(built: Built) -> None:
    name, preflight = one(built, "Custom::HyperPodPreflight")
    spec = json.loads(joined(preflight["Properties"]["ClusterSpec"]))
    assert [flattened(g) for g in spec["InstanceGroups"]] == list(groups(built).values())
    assert preflight["Properties"]["ProvisioningParametersKey"] == "lifecycle/provisioning_parameters.json"
    _, cluster = one(built, "AWS::SageMaker::Cluster")
    assert cluster["DependsOn"] == [name]
    # The pre-flight runs once the lifecycle files are uploaded and every role holds its policies.
    depends = set(preflight["DependsOn"])
    assert any(d.startswith("LifecycleUpload") for d in depends)
    policies = {k for k, v in of_type(built, "AWS::IAM::ManagedPolicy").items() if k.startswith("Role")}
    assert policies and policies <= depends


def test_node_check_follows_the_cluster_by_its_resolved_arn(built: Built) -> None:
    """Path 8: the node check's identity is CloudFormation's resolved attribute, not a name built here."""
    cluster_id, _ = one(built, "AWS::SageMaker::Cluster")
    _, nodes = one(built, "Custom::HyperPodNodesReady")
    assert nodes["Properties"]["ClusterArn"] == {"Fn::GetAtt": [cluster_id, "ClusterArn"]}
    assert json.loads(nodes["Properties"]["ExpectedCounts"]) == {
        "controller-machine": 1,
        "login": 2,
        "gpu": 4,
        "cpu": 2,
    }


def test_no_wait_condition_watcher_or_presigned_url(built: Built) -> None:
    """Issue 17 item 12 by removal: no wait handle, no state machine, nothing presigned in any property."""
    kinds = {v["Type"] for v in built.template["Resources"].values()}
    assert not {k for k in kinds if k.startswith(("AWS::CloudFormation::Wait", "AWS::StepFunctions"))}
    text = json.dumps(built.template)
    assert "WaitHandle" not in text and "X-Amz-Signature" not in text


def statements(built: Built, role_prefix: str) -> list[dict[str, Any]]:
    found = []
    for policy_type in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        for name, policy in of_type(built, policy_type).items():
            roles = json.dumps(policy["Properties"].get("Roles", []))
            if name.startswith(role_prefix) or f'"{role_prefix}' in roles:
                found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def test_check_function_can_only_look(built: Built) -> None:
    """Issue 17 item 7: nothing of ours can create, update or delete a cluster; CloudFormation's role does."""
    checks = statements(built, "ClusterCheckRole")
    actions = {a for s in checks for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {a for a in actions if a.startswith("sagemaker:")} == {
        "sagemaker:DescribeCluster",
        "sagemaker:ListClusterNodes",
    }
    assert not {a for a in actions if a.startswith(("iam:", "states:"))}
    assert not [a for a in actions if a.startswith("s3:") and a not in ("s3:GetObject", "s3:ListBucket")]
    every = json.dumps([s for prefix in ("Cluster",) for s in statements(built, prefix)])
    for verb in ("CreateCluster", "UpdateCluster", "DeleteCluster", "AddTags", "PassRole"):
        assert verb not in every


def test_check_function_reads_only_its_own_stack(built: Built) -> None:
    """The rollback test (DescribeStacks on the event's StackId) is granted on this stack's id only."""
    checks = statements(built, "ClusterCheckRole")
    cloudformation = [s for s in checks if any(str(a).startswith("cloudformation:") for a in _actions(s))]
    assert cloudformation == [
        {
            "Sid": "ReadOwnStack",
            "Effect": "Allow",
            "Action": "cloudformation:DescribeStacks",
            "Resource": {"Ref": "AWS::StackId"},
        }
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def test_one_check_function_with_the_newest_runtime_and_15_minutes(built: Built) -> None:
    functions = {k: v for k, v in of_type(built, "AWS::Lambda::Function").items() if k.startswith("ClusterCheck")}
    ((_, function),) = functions.items()
    assert function["Properties"]["Runtime"] == "python3.14"
    assert function["Properties"]["Timeout"] == 900
    assert function["Properties"]["Handler"] == "hyperpod_cluster.app.on_event"


def test_ssm_session_command_looks_up_the_controller(built: Built) -> None:
    command = joined(built.template["Outputs"]["ControllerSession"]["Value"])
    name, _ = one(built, "AWS::SageMaker::Cluster")
    cluster_id = json.dumps(
        {"Fn::Select": [1, {"Fn::Split": ["/", {"Fn::GetAtt": [name, "ClusterArn"]}]}]}, separators=(",", ":")
    )
    lookup = (
        "aws sagemaker list-cluster-nodes --region <AWS::Region> --cluster-name mlc-dev "
        "--query \"ClusterNodeSummaries[?InstanceGroupName=='controller-machine'].InstanceId | [0]\" --output text"
    )
    assert command == (
        f'aws ssm start-session --region <AWS::Region> --target "sagemaker-cluster:{cluster_id}'
        f'_controller-machine-$({lookup})"'
    )


def test_cfn_lint_clean(built: Built) -> None:
    assert cfn_lint([built.template_file]) == {str(built.template_file): []}


def test_acknowledgements_carry_specific_reasons(built: Built) -> None:
    metadata = json.loads((built.template_file.parent / "Cluster.metadata.json").read_text())
    acknowledged: dict[str, str] = {}
    for entries in metadata.values():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                acknowledged.update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})
    assert f"AwsSolutions-IAM5[Resource::{CLUSTERS}]" in acknowledged
    assert "NIST.800.53.R5-LambdaDLQ" in acknowledged
    assert "AwsSolutions-SF2" not in acknowledged  # no state machine left to excuse
    assert all(len(reason) > 40 for reason in acknowledged.values())


# -- botocore's shapes ---------------------------------------------------------------------------------


def _request(**group_changes: Any) -> dict[str, Any]:
    group = {
        "InstanceGroupName": "gpu",
        "InstanceType": "ml.p5.48xlarge",
        "InstanceCount": 2,
        "LifeCycleConfig": {"SourceS3Uri": "s3://mlc-lifecycle-dev/lifecycle/", "OnCreate": "on_create.sh"},
        "ExecutionRole": cdk.Token.as_string(cdk.Fn.get_att("Role", "Arn")),
        "ThreadsPerCore": 1,
        **group_changes,
    }
    return {
        "ClusterName": "mlc-dev",
        "InstanceGroups": [group],
        "VpcConfig": {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]},
    }


def test_botocore_takes_every_field_we_render_and_tokens_stand_in() -> None:
    check_against_botocore(_request(OnStartDeepHealthChecks=["MultiNodeTrainingValidation"]))


def test_a_field_botocore_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(ValueError) as caught:
        check_against_botocore(_request(WarmPoolSize=2))
    message = str(caught.value)
    assert 'CreateCluster: Unknown parameter in InstanceGroups[0]: "WarmPoolSize"' in message
    assert "UpdateCluster: Unknown parameter in InstanceGroups[0]" in message
    assert "the installed botocore 1." in message


def test_a_value_outside_botocores_enumeration_is_refused_by_path() -> None:
    """botocore's own validator skips enumerations; the service would refuse the value at deploy time."""
    schedule = {
        "ScheduleExpression": "cron(0 3 ? * SUN *)",
        "DeploymentConfig": {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "PERCENT", "Value": 25}}},
    }
    with pytest.raises(ValueError) as caught:
        check_against_botocore({**_request(ScheduledUpdateConfig=schedule), "NodeRecovery": "Automatic"})
    assert (
        "CreateCluster: InstanceGroups[0].ScheduledUpdateConfig.DeploymentConfig.RollingUpdatePolicy.MaximumBatchSize"
        ".Type: 'PERCENT' is not one of INSTANCE_COUNT, CAPACITY_PERCENTAGE"
    ) in str(caught.value)


def test_a_field_only_creation_takes_is_not_checked_against_update() -> None:
    """VpcConfig is create-only (UpdateCluster does not take it); CreateCluster's check still covers it."""
    with pytest.raises(ValueError, match=r"CreateCluster: .*VpcConfig"):
        check_against_botocore({**_request(), "VpcConfig": {"Subnet": ["subnet-1"]}})


# -- validation ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parts() -> dict[str, Any]:
    """An unsynthesized stack with imported network pieces, one lifecycle and imported roles."""
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
        "roles": {
            name: iam.Role.from_role_arn(stack, f"Role{name}", f"arn:aws:iam::111111111111:role/hyperpod-{name}")
            for name in ("controller-machine", "gpu", "cpu")
        },
    }


def make(parts: dict[str, Any], **changes: Any) -> HyperPodCluster:
    props: dict[str, Any] = {
        "cluster_name": "mlc-dev",
        "controller": CONTROLLER,
        "workers": [GPU, CPU],
        "subnets": parts["subnets"][:1],
        "security_groups": parts["groups"][:1],
        "execution_roles": parts["roles"],
        "lifecycle": parts["lifecycle"],
        **changes,
    }
    stack: cdk.Stack = parts["stack"]
    return HyperPodCluster(stack, f"Cluster{len(stack.node.children)}", **props)


def test_a_63_character_name_is_the_edge(parts: dict[str, Any]) -> None:
    assert make(parts, cluster_name="a" * 63).cluster_name == "a" * 63


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cluster_name": "a" * 64}, "cluster_name: 'aaaa"),
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
        (
            {"workers": [replace(GPU, root_volume_kms_key_id="key with spaces"), CPU]},
            "workers[0].root_volume_kms_key_id",
        ),
        ({"execution_roles_drop": "cpu"}, "execution_roles: given for ['controller-machine', 'gpu']"),
        ({"group_subnets": {"gpu-x": []}}, "group_subnets: ['gpu-x'] are not instance groups"),
        ({"group_subnets_count": 17}, "group_subnets['cpu']: 17 given"),
        ({"slurm_config_strategy": "Replace"}, "slurm_config_strategy: 'Replace' is not allowed"),
        ({"tags": {"aws:owner": "x"}}, "tags: key 'aws:owner' is not allowed"),
        ({"tags": {"team": "a" * 257}}, "tags['team']"),
        ({"log_removal_policy": cdk.RemovalPolicy.SNAPSHOT}, "log_removal_policy:"),
    ],
)
def test_bad_props_are_named(parts: dict[str, Any], changes: dict[str, Any], message: str) -> None:
    changes = dict(changes)  # the parametrized dict is shared by every run of this test in the process
    if "security_groups_count" in changes:
        changes["security_groups"] = parts["groups"][: changes.pop("security_groups_count")]
    if "execution_roles_drop" in changes:
        dropped = changes.pop("execution_roles_drop")
        changes["execution_roles"] = {k: v for k, v in parts["roles"].items() if k != dropped}
    if "group_subnets_count" in changes:
        changes["group_subnets"] = {"cpu": parts["subnets"][: changes.pop("group_subnets_count")]}
    with pytest.raises(ValueError, match="HyperPodCluster: ") as caught:
        make(parts, **changes)
    assert message in str(caught.value)


def test_controller_security_groups_reach_the_controller_alone(parts: dict[str, Any]) -> None:
    """Issue 30, item 4: the accounting database's client group on the controller's OverrideVpcConfig only."""
    cluster = make(parts, controller_security_groups=parts["groups"][1:5])  # 1 + 4 = 5 groups: the edge
    by_name = {g["InstanceGroupName"]: g for g in cluster.spec["InstanceGroups"]}
    controller = by_name.pop("controller-machine")["OverrideVpcConfig"]
    assert controller["Subnets"] == cluster.spec["VpcConfig"]["Subnets"]
    assert controller["SecurityGroupIds"] == [g.security_group_id for g in parts["groups"][:5]]
    assert all("OverrideVpcConfig" not in group for group in by_name.values())
    assert cluster.spec["VpcConfig"]["SecurityGroupIds"] == [parts["groups"][0].security_group_id]


def test_controller_security_groups_keep_the_controllers_own_subnets(parts: dict[str, Any]) -> None:
    chosen = parts["subnets"][3:5]
    cluster = make(parts, group_subnets={"controller-machine": chosen}, controller_security_groups=parts["groups"][1:2])
    (controller,) = [g for g in cluster.spec["InstanceGroups"] if g["InstanceGroupName"] == "controller-machine"]
    assert controller["OverrideVpcConfig"]["Subnets"] == [s.subnet_id for s in chosen]


def test_more_than_five_groups_on_the_controller_are_refused(parts: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="HyperPodCluster: ") as caught:
        make(parts, security_groups=parts["groups"][:2], controller_security_groups=parts["groups"][2:6])
    assert (
        "controller_security_groups: 4 given besides 2 security_groups; HyperPod allows 5 groups on an instance "
        "group in all"
    ) in str(caught.value)
