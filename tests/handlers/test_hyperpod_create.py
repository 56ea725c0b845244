"""Create: property parsing, pre-flight checks, CreateCluster, adoption and the watcher start."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.aws import describe_cluster
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from mlcluster.handlers.hyperpod_cluster.spec import PropertyError
from tests.handlers.conftest import (
    BUCKET,
    PARAMS_KEY,
    PREFIX,
    REGION,
    World,
    client,
    create_event,
    expected_name,
    handle_url,
    moto_cluster,
    operations,
    provisioning_parameters,
    put_parameters,
    requests_of,
    service_error,
    watcher_inputs,
)

Calls = list[tuple[str, dict[str, Any]]]


def test_create_checks_creates_and_starts_the_watcher(world: World, sagemaker_calls: Calls) -> None:
    """Numbers arrive as strings; the request sent is the spec with real integers."""
    spec = world.spec(workers="2")
    spec["InstanceGroups"][2]["ThreadsPerCore"] = "2"
    started = time.time()

    result = app.on_event(create_event(world.props(spec)))

    name = expected_name(spec)
    assert re.fullmatch(r"ml-cluster-[0-9a-f]{6}", name)
    assert result["PhysicalResourceId"] == name
    assert result["Data"] == {
        "ClusterName": name,
        "ClusterArn": f"arn:aws:sagemaker:{REGION}:123456789012:cluster/{name}",
        "ClusterStatus": "Creating",
    }
    assert operations(sagemaker_calls) == ["DescribeCluster", "CreateCluster"]
    (sent,) = requests_of(sagemaker_calls, "CreateCluster")
    workers = sent["InstanceGroups"][2]
    assert (workers["InstanceCount"], workers["ThreadsPerCore"]) == (2, 2)
    assert sent["VpcConfig"] == {"SecurityGroupIds": [world.sg], "Subnets": [world.private_subnet]}
    assert sent["Tags"] == [{"Key": "project", "Value": "mlcluster"}]
    assert sent["ClusterName"] == name
    described = describe_cluster(app.clients().sagemaker, name)
    assert described is not None
    assert [g["InstanceGroupName"] for g in described["InstanceGroups"]] == ["controller-machine", "login", "workers"]

    (watcher,) = watcher_inputs(world)
    assert watcher["ClusterName"] == name
    assert watcher["WaitHandleUrl"] == handle_url("create")
    assert watcher["ExpectedGroups"] == {"controller-machine": 1, "login": 1, "workers": 2}
    assert started + 43200 - 300 - 1 <= watcher["Deadline"] <= time.time() + 43200 - 300
    assert started + app.SETTLE_SECONDS - 1 <= watcher["NotBefore"] <= time.time() + app.SETTLE_SECONDS


def test_training_plan_and_deep_health_checks_pass_through(world: World, sagemaker_calls: Calls) -> None:
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/p5-plan"
    spec = world.spec()
    spec["InstanceGroups"][2]["TrainingPlanArn"] = plan
    spec["InstanceGroups"][2]["OnStartDeepHealthChecks"] = ["InstanceStress", "InstanceConnectivity"]

    app.on_event(create_event(world.props(spec)))

    (sent,) = requests_of(sagemaker_calls, "CreateCluster")
    assert sent["InstanceGroups"][2]["TrainingPlanArn"] == plan
    assert sent["InstanceGroups"][2]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]


def test_duplicate_create_adopts_the_existing_cluster(world: World, sagemaker_calls: Calls) -> None:
    """A retried Create finds the cluster and does not create a second one or a second watcher."""
    props = world.props()
    first = app.on_event(create_event(props))
    second = app.on_event(create_event(props))

    assert second["PhysicalResourceId"] == first["PhysicalResourceId"] == world.name
    assert second["Data"]["ClusterStatus"] == "InService"  # moto's clusters are InService at once
    assert operations(sagemaker_calls).count("CreateCluster") == 1
    assert len(client("sagemaker").list_clusters()["ClusterSummaries"]) == 1
    assert len(watcher_inputs(world)) == 1


def test_create_adopts_when_create_cluster_reports_the_name_in_use(
    world: World, sagemaker_calls: Calls, intercept: Any
) -> None:
    """A cluster created between our DescribeCluster and CreateCluster (a racing retry) is adopted."""
    app.on_event(create_event(world.props()))
    sagemaker_calls.clear()
    intercept(app.clients().sagemaker, "DescribeCluster", service_error("ResourceNotFound", "not found"), times=1)

    result = app.on_event(create_event(world.props()))

    assert operations(sagemaker_calls) == ["DescribeCluster", "CreateCluster", "DescribeCluster"]
    assert result["Data"]["ClusterStatus"] == "InService"
    assert len(client("sagemaker").list_clusters()["ClusterSummaries"]) == 1


def test_create_cluster_rejected_by_the_service_is_a_clear_error(world: World, intercept: Any) -> None:
    limit = service_error("ResourceLimitExceeded", "account limit for ml.p5.48xlarge cluster usage is 0")
    intercept(app.clients().sagemaker, "CreateCluster", limit)
    with pytest.raises(
        RuntimeError,
        match=rf"CreateCluster for HyperPod cluster '{world.name}' failed: ResourceLimitExceeded: account limit",
    ):
        app.on_event(create_event(world.props()))
    assert watcher_inputs(world) == []


def test_create_of_a_cluster_being_deleted_fails_clearly(world: World) -> None:
    app.on_event(create_event(world.props()))
    moto_cluster(world.name).status = "Deleting"
    with pytest.raises(RuntimeError, match=rf"'{world.name}' is being deleted; retry once it is gone"):
        app.on_event(create_event(world.props()))


def test_throttled_describe_is_retried_then_succeeds(world: World, sagemaker_calls: Calls, throttle: Any) -> None:
    delays = throttle("DescribeCluster", 2)
    result = app.on_event(create_event(world.props()))
    assert result["Data"]["ClusterStatus"] == "Creating"
    assert len(delays) == 2  # two back-offs, then the third attempt went through
    assert operations(sagemaker_calls) == ["DescribeCluster", "CreateCluster"]


def _fails_preflight(world: World, calls: Calls, props: dict[str, Any]) -> PreflightError:
    watchers = len(watcher_inputs(world))
    with pytest.raises(PreflightError) as caught:
        app.on_event(create_event(props))
    assert "CreateCluster" not in operations(calls)
    assert len(watcher_inputs(world)) == watchers
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
    app.on_event({"RequestType": "Delete", "PhysicalResourceId": expected_name(spec)})
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
        "S3 URI such as 's3://sagemaker-bucket/prefix/'"
    ]


def test_security_groups_without_self_rules_are_reported(world: World, sagemaker_calls: Calls) -> None:
    spec = world.spec(
        VpcConfig={
            "SecurityGroupIds": [world.sg, world.sg_ingress_only, world.sg_no_rules],
            "Subnets": [world.private_subnet],
        }
    )
    err = _fails_preflight(world, sagemaker_calls, world.props(spec))
    assert [p.split(" (all protocols")[0] for p in err.problems] == [
        f"security group {world.sg_ingress_only} lacks the self-referencing egress rule(s)",
        f"security group {world.sg_no_rules} lacks the self-referencing ingress and egress rule(s)",
    ]


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
        ({"CreateTimeoutSeconds": "soon"}, r"CreateTimeoutSeconds: 'soon' is not valid; expected a whole number"),
        (
            {"CreateTimeoutSeconds": "86400"},
            r"CreateTimeoutSeconds: '86400' is not valid; allowed: whole seconds from 600 to 43200",
        ),
        (
            {"WaitHandleUrl": "http://example.com/x?sig=1"},
            r"WaitHandleUrl: 'http://example.com/x' is not valid; expected the https URL",
        ),
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
            r"ClusterSpec.ClusterName: 'bad_name' is not valid; allowed: 1-56",
        ),
        (
            lambda s: s.update(ClusterName="a" * 57),
            r"ClusterSpec.ClusterName: 'a{57}' is not valid; allowed: 1-56 .* appends '-' and a 6-digit hash",
        ),
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


def test_missing_watcher_state_machine_is_a_clear_error(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(app.WATCHER_ENV)
    with pytest.raises(RuntimeError, match="WATCHER_STATE_MACHINE_ARN is not set"):
        app.on_event(create_event(world.props()))


def test_describe_cluster_helper(world: World) -> None:
    sagemaker = app.clients().sagemaker
    assert describe_cluster(sagemaker, world.name) is None
    app.on_event(create_event(world.props()))
    described = describe_cluster(sagemaker, world.name)
    assert described is not None
    assert (described["ClusterName"], described["ClusterStatus"]) == (world.name, "InService")


def test_unknown_request_type_is_refused(world: World) -> None:
    with pytest.raises(ValueError, match=r"RequestType: 'Rename' is not valid; expected Create, Update or Delete"):
        app.on_event({"RequestType": "Rename"})


def test_logged_event_hides_the_presigned_urls(world: World, caplog: pytest.LogCaptureFixture) -> None:
    event = {**create_event(world.props()), "ResponseURL": "https://cfn-response.example/?sig=secret"}
    app.on_event(event)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "secret" not in logged
    assert json.dumps(handle_url("create").split("?")[0])[1:-1] in logged
