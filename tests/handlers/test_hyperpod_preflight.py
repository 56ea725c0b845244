"""The pre-flight's input checks: property parsing, lifecycle objects, provisioning parameters, network."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from mlcluster.handlers.hyperpod_cluster.spec import PropertyError
from tests.handlers.conftest import (
    BUCKET,
    PARAMS_KEY,
    PREFIX,
    FakeSageMaker,
    World,
    client,
    create_event,
    provisioning_parameters,
    put_parameters,
    service_error,
)

Calls = list[tuple[str, dict[str, Any]]]


def test_good_inputs_pass_and_only_describe_is_called(world: World, fake: FakeSageMaker) -> None:
    """Numbers arrive as strings; the check coerces them, passes, and only looks (DescribeCluster)."""
    result = app.on_event(create_event(world.props(world.spec(workers="2"))))
    assert result == {"PhysicalResourceId": f"{world.name}-preflight", "Data": {"ClusterName": world.name}}
    assert [op for op, _ in fake.calls] == ["DescribeCluster"]


def _fails_preflight(world: World, calls: Calls, props: dict[str, Any]) -> PreflightError:
    with pytest.raises(PreflightError) as caught:
        app.on_event(create_event(props))
    assert {op for op, _ in calls} <= {"DescribeCluster"}
    return caught.value


def test_missing_on_create_script_is_reported(world: World, sagemaker_calls: Calls) -> None:
    client("s3").delete_object(Bucket=BUCKET, Key=PREFIX + "on_create.sh")
    err = _fails_preflight(world, sagemaker_calls, world.props())
    assert err.problems == [
        "OnCreate script of group(s) controller-machine, login, workers: "
        f"s3://{BUCKET}/{PREFIX}on_create.sh does not exist; upload the lifecycle scripts before creating the cluster"
    ]
    assert str(err).startswith(f"Pre-flight checks failed for HyperPod cluster '{world.name}':\n- OnCreate script")


def test_unreadable_lifecycle_objects_name_the_permissions(
    world: World, sagemaker_calls: Calls, intercept: Any
) -> None:
    denied = service_error("403", "Forbidden", status=403)
    intercept(app.clients().s3, "HeadObject", denied)
    intercept(app.clients().s3, "GetObject", denied)
    err = _fails_preflight(world, sagemaker_calls, world.props())
    assert err.problems == [
        f"OnCreate script of group(s) controller-machine, login, workers: cannot read s3://{BUCKET}/{PREFIX}on_create.sh "
        "(403: Forbidden); the handler needs s3:GetObject on it and s3:ListBucket on the bucket (without it a missing "
        "object is 403)",
        f"provisioning parameters: cannot read s3://{BUCKET}/{PARAMS_KEY} (403: Forbidden); the handler needs "
        "s3:GetObject on it and s3:ListBucket on the bucket (without it a missing object is 403)",
    ]


def test_missing_provisioning_parameters_are_reported(world: World, sagemaker_calls: Calls) -> None:
    client("s3").delete_object(Bucket=BUCKET, Key=PARAMS_KEY)
    err = _fails_preflight(world, sagemaker_calls, world.props())
    assert err.problems == [
        f"provisioning parameters: s3://{BUCKET}/{PARAMS_KEY} does not exist; upload it with the lifecycle scripts"
    ]


def test_provisioning_parameters_outside_the_source_uri_are_reported(world: World, sagemaker_calls: Calls) -> None:
    err = _fails_preflight(
        world, sagemaker_calls, world.props(ProvisioningParametersKey="other/provisioning_parameters.json")
    )
    assert len(err.problems) == 1
    assert err.problems[0].startswith(
        f"ProvisioningParametersKey: 'other/provisioning_parameters.json' is not under s3://{BUCKET}/{PREFIX}"
    )


def test_group_named_in_provisioning_parameters_must_exist(world: World, sagemaker_calls: Calls) -> None:
    put_parameters(provisioning_parameters("workers", "gpu-b", login="login-nodes"))
    err = _fails_preflight(world, sagemaker_calls, world.props())
    groups = "(groups: controller-machine, login, workers)"
    assert err.problems == [
        f"provisioning parameters: s3://{BUCKET}/{PARAMS_KEY}: login_group is 'login-nodes', but ClusterSpec.InstanceGroups has no such group {groups}",
        f"provisioning parameters: s3://{BUCKET}/{PARAMS_KEY}: worker_groups[1].instance_group_name is 'gpu-b', but ClusterSpec.InstanceGroups has no such group {groups}",
    ]


def test_provisioning_parameters_that_are_not_json_are_reported(world: World, sagemaker_calls: Calls) -> None:
    client("s3").put_object(Bucket=BUCKET, Key=PARAMS_KEY, Body=b"{not json")
    err = _fails_preflight(world, sagemaker_calls, world.props())
    assert err.problems[0].startswith(f"provisioning parameters: s3://{BUCKET}/{PARAMS_KEY} is not valid JSON")


def test_public_subnet_is_reported(world: World, sagemaker_calls: Calls) -> None:
    spec = world.spec(
        VpcConfig={"SecurityGroupIds": [world.sg], "Subnets": [world.private_subnet, world.public_subnet]}
    )
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert len(err.problems) == 1
    assert err.problems[0].startswith(f"subnet {world.public_subnet} is public: its route table rtb-")
    assert f"sends 0.0.0.0/0 to {world.igw}; HyperPod nodes need private subnets" in err.problems[0]


def test_public_main_route_table_is_reported_for_a_subnet_without_association(
    world: World, sagemaker_calls: Calls
) -> None:
    ec2 = client("ec2")
    spec = world.spec(VpcConfig={"SecurityGroupIds": [world.sg], "Subnets": [world.main_table_subnet]})
    props = world.props(spec)
    # Private while the main table has only the local route ...
    app.on_event(create_event(props))
    # ... public once the main table routes to the internet gateway.
    ec2.create_route(RouteTableId=world.main_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=world.igw)
    sagemaker_calls.clear()
    err = _fails_preflight(world, sagemaker_calls, props)
    assert err.problems == [
        f"subnet {world.main_table_subnet} is public: the VPC's main route table (the subnet has no explicit "
        f"association) {world.main_table} sends 0.0.0.0/0 to {world.igw}; HyperPod nodes need private subnets "
        "(default route through a NAT gateway)"
    ]


def test_group_override_vpc_config_is_checked_too(world: World, sagemaker_calls: Calls) -> None:
    spec = world.spec()
    spec["InstanceGroups"][2]["OverrideVpcConfig"] = {"SecurityGroupIds": [world.sg], "Subnets": [world.public_subnet]}
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert [p.split(":")[0] for p in err.problems] == [f"subnet {world.public_subnet} is public"]


def test_source_uri_that_is_not_s3_is_reported(world: World, sagemaker_calls: Calls) -> None:
    spec = world.spec()
    for entry in spec["InstanceGroups"][:2]:
        entry["LifeCycleConfig"]["SourceS3Uri"] = "https://example.com/scripts/"
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert err.problems == [
        "LifeCycleConfig.SourceS3Uri of group(s) controller-machine, login: 'https://example.com/scripts/' is not an "
        "S3 URI such as 's3://bucket/prefix/'"
    ]


def test_security_groups_without_self_rules_are_reported(world: World, sagemaker_calls: Calls) -> None:
    spec = world.spec(
        VpcConfig={"SecurityGroupIds": [world.sg_ingress_only, world.sg_no_rules], "Subnets": [world.private_subnet]}
    )
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert [p.split(" (all protocols")[0] for p in err.problems] == [
        f"security group {world.sg_ingress_only} lacks the self-referencing egress rule(s)",
        f"security group {world.sg_no_rules} lacks the self-referencing ingress and egress rule(s)",
    ]
    assert "no other group of VpcConfig has both" in err.problems[0]


def test_one_group_with_self_rules_per_config_suffices(world: World, sagemaker_calls: Calls) -> None:
    """Issue 30c, item 2: the controller's OverrideVpcConfig adds the accounting client group (no self rules)."""
    spec = world.spec()
    client_group = {"SecurityGroupIds": [world.sg, world.sg_no_rules], "Subnets": [world.private_subnet]}
    spec["InstanceGroups"][0]["OverrideVpcConfig"] = client_group
    assert app.on_event(create_event(world.props(spec)))["Data"] == {"ClusterName": world.name}
    # The same client group alone on a group's override is refused: that group's nodes share no open group.
    name = spec["InstanceGroups"][2]["InstanceGroupName"]
    spec["InstanceGroups"][2]["OverrideVpcConfig"] = {**client_group, "SecurityGroupIds": [world.sg_no_rules]}
    sagemaker_calls.clear()
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert [p.split(" (all protocols")[0] for p in err.problems] == [
        f"security group {world.sg_no_rules} lacks the self-referencing ingress and egress rule(s)"
    ]
    assert f"no other group of InstanceGroups[{name}].OverrideVpcConfig has both" in err.problems[0]


def test_every_failed_check_is_reported_at_once(world: World, sagemaker_calls: Calls) -> None:
    client("s3").delete_object(Bucket=BUCKET, Key=PREFIX + "on_create.sh")
    spec = world.spec(
        VpcConfig={
            "SecurityGroupIds": [world.sg_no_rules, "sg-0000000000000dead"],
            "Subnets": [world.public_subnet, "subnet-0000dead"],
        }
    )
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    text = str(err)
    assert "on_create.sh does not exist" in text
    assert f"subnet {world.public_subnet} is public" in text
    assert "subnet subnet-0000dead: not found" in text
    assert f"security group {world.sg_no_rules} lacks" in text
    assert "security group sg-0000000000000dead: not found" in text
    assert len(err.problems) == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ClusterSpec": "{not json"}, r"ClusterSpec: not valid JSON"),
        ({"ClusterSpec": "[]"}, r"ClusterSpec: \[\] is not valid; expected a JSON object"),
        ({"ProvisioningParametersKey": ""}, r"ProvisioningParametersKey: '' is not valid; expected a non-empty string"),
    ],
)
def test_bad_properties_are_refused_before_any_call(
    world: World, sagemaker_calls: Calls, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(PropertyError, match=message):
        app.on_event(create_event(world.props(**change)))
    assert sagemaker_calls == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.update(ClusterName="bad_name"),
            r"ClusterSpec.ClusterName: 'bad_name' is not valid; allowed: 1-63",
        ),
        (lambda s: s.update(ClusterName="a" * 64), r"ClusterSpec.ClusterName: .a{64}. is not valid; allowed: 1-63"),
        (
            lambda s: s.update(InstanceGroups=[]),
            r"Invalid length for parameter InstanceGroups, value: 0, valid min length: 1",
        ),
        (
            lambda s: s.pop("InstanceGroups"),
            r"ClusterSpec.InstanceGroups: None is not valid; give at least one instance group",
        ),
        (lambda s: s["InstanceGroups"][0].update(Colour="red"), r'Unknown parameter in InstanceGroups\[0\]: "Colour"'),
        (
            lambda s: s["InstanceGroups"][2].update(InstanceCount="two"),
            r"ClusterSpec.InstanceGroups\[2\].InstanceCount: 'two' is not valid; expected a whole number",
        ),
        (
            lambda s: s["InstanceGroups"][1].update(InstanceGroupName="workers"),
            r"InstanceGroups\[2\].InstanceGroupName: 'workers' is used twice",
        ),
        (
            lambda s: s["InstanceGroups"][0]["LifeCycleConfig"].pop("OnCreate"),
            r"InstanceGroups\[0\].LifeCycleConfig.OnCreate: missing",
        ),
        (lambda s: s.pop("VpcConfig"), r"ClusterSpec.VpcConfig: None is not valid; give Subnets and SecurityGroupIds"),
    ],
)
def test_bad_cluster_specs_name_the_key(world: World, sagemaker_calls: Calls, edit: Any, message: str) -> None:
    spec = world.spec()
    edit(spec)
    with pytest.raises(PropertyError, match=message):
        app.on_event(create_event(world.props(spec)))
    assert sagemaker_calls == []


def test_unknown_request_type_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match=r"RequestType 'Rename' is not one of Create, Update, Delete"):
        app.on_event({"RequestType": "Rename"})


def test_unknown_resource_type_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match=r"ResourceType 'Custom::HyperPodCluster' is not"):
        app.on_event(create_event(world.props(), "Custom::HyperPodCluster"))


def test_s3_throttling_or_denial_is_not_read_as_success(world: World, fake: FakeSageMaker, intercept: Any) -> None:
    intercept(app.clients().s3, "GetObject", service_error("SlowDown", "Please reduce your request rate.", 503))
    with pytest.raises(PreflightError, match=r"cannot read s3://.*provisioning_parameters.json \(SlowDown"):
        app.on_event(create_event(world.props()))
    assert json.loads(world.props()["ClusterSpec"])["ClusterName"] == world.name
