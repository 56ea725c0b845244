"""The HyperPod checks: behaviour `make mutation MODULE=handlers` (sample 200, seed 1) showed no test asserted.

- A Create refused for a name in use names that cluster's status and ARN, what the operator deletes or keeps
  (app.py ``_new_cluster_problems`` mutants 4, 11); a failed cluster without a failure message says so and
  points to the node logs (``_nodes_ready`` mutant 63); an event without properties is refused naming them
  (``_preflight`` mutant 10).
- The function's log names the status the node check waits through (``_nodes_ready`` mutant 131) and the
  stack whose rollback skipped a check (``on_event`` mutant 52).
- A denied route-table read names the EC2 actions as AWS spells them (preflight.py ``_check_subnet`` mutant
  61); a security group answered without an egress list lacks the egress rule, no crash (``_missing_self_rules``
  mutant 31).
- Scalars CloudFormation turned into strings are coerced by the model's kinds: booleans both ways, any letter
  case (spec.py ``coerce`` mutants 57, 63), numbers of the model's float kind, a bad number inside a map named
  by its full path (mutants 48, 33); a value that is not a list where the model wants one is refused naming the
  key, never split into characters or crashed on (mutant 16).
"""

from __future__ import annotations

import logging
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from mlcluster.handlers.hyperpod_cluster.spec import PropertyError, coerce, parse_properties
from tests.handlers.conftest import (
    PARAMS_KEY,
    Clock,
    FakeSageMaker,
    World,
    create_event,
    nodes_event,
    service_error,
)
from tests.handlers.test_hyperpod_paths import COUNTS, _spec

Calls = list[tuple[str, dict[str, Any]]]
SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")
CREATE_CLUSTER = SAGEMAKER.operation_model("CreateCluster").input_shape


NAME_IN_USE_ADVICE = [
    ("Failed", "choose another cluster.name, or delete that failed cluster first"),
    # One in service may be another environment's: never advised to delete it.
    ("InService", "choose another cluster.name (that cluster may be in use: do not delete it to make room)"),
    ("Creating", "choose another cluster.name (that cluster may be in use: do not delete it to make room)"),
    # Every other state of ClusterStatus in botocore's model (Deleting: the name is free once it is gone).
    (
        "Deleting",
        "that cluster is being deleted: deploy again once its deletion has finished, or choose another cluster.name",
    ),
    ("RollingBack", "choose another cluster.name (that cluster may be in use: do not delete it to make room)"),
    ("SystemUpdating", "choose another cluster.name (that cluster may be in use: do not delete it to make room)"),
    ("Updating", "choose another cluster.name (that cluster may be in use: do not delete it to make room)"),
]


def test_the_advice_covers_every_cluster_status_in_botocores_model() -> None:
    assert sorted(status for status, _ in NAME_IN_USE_ADVICE) == sorted(SAGEMAKER.shape_for("ClusterStatus").enum)


@pytest.mark.parametrize(("status", "way"), NAME_IN_USE_ADVICE)
def test_a_create_refused_for_a_name_in_use_names_that_clusters_status_and_arn(
    world: World, fake: FakeSageMaker, status: str, way: str
) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status=status)
    with pytest.raises(PreflightError) as caught:
        app.on_event(create_event(world.props(_spec(world))))
    assert caught.value.problems == [
        f"a HyperPod cluster named 'ml-cluster' already exists (status {status}, {cluster.arn}); {way}"
    ]


def test_a_failed_cluster_without_a_failure_message_says_so_and_points_to_the_node_logs(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status="Failed")
    with pytest.raises(app.NodesNotReadyError) as caught:
        app.on_event(nodes_event(cluster.arn, COUNTS))
    cluster_id = cluster.arn.rsplit("/", 1)[-1]
    assert str(caught.value) == (
        f"HyperPod cluster ml-cluster is Failed (no failure message). Node logs: /aws/sagemaker/Clusters/ml-cluster/"
        f"{cluster_id}"
    )


def test_a_preflight_without_properties_is_refused_naming_them(world: World, sagemaker_calls: Calls) -> None:
    event = create_event(world.props())
    del event["ResourceProperties"]
    with pytest.raises(PropertyError) as caught:
        app.on_event(event)
    assert str(caught.value) == "ResourceProperties: expected the resource's properties, got None"
    assert sagemaker_calls == []


def test_the_node_check_logs_the_status_it_waits_through(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status="Creating")
    cluster.upcoming = ["InService"]
    caplog.set_level(logging.INFO, logger=app.__name__)
    assert app.on_event(nodes_event(cluster.arn, COUNTS))["Data"]["ClusterStatus"] == "InService"
    assert f"cluster ml-cluster is Creating; looking again in {app.POLL_SECONDS} s" in caplog.messages


def test_a_rollback_logs_which_stack_skipped_the_check(
    world: World, fake: FakeSageMaker, caplog: pytest.LogCaptureFixture
) -> None:
    world.stack.status = app.ROLLBACK_STATUS
    event = nodes_event("arn:aws:sagemaker:us-east-1:123456789012:cluster/abc", COUNTS, "Update", {"workers": 1})
    caplog.set_level(logging.INFO, logger=app.__name__)
    assert app.on_event(event)["Data"] == {"Checked": app.NOT_CHECKED}
    assert f"stack {event['StackId']} is UPDATE_ROLLBACK_IN_PROGRESS: {app.NODES_READY} not checked" in caplog.messages
    assert not fake.calls


def _fails_preflight(world: World, spec: dict[str, Any]) -> list[str]:
    with pytest.raises(PreflightError) as caught:
        app.on_event(create_event(world.props(spec)))
    return caught.value.problems


def test_a_denied_route_table_read_names_the_ec2_actions_as_aws_spells_them(
    world: World, fake: FakeSageMaker, intercept: Any
) -> None:
    """The operator checks the role's policy, the IAM policy simulator or CloudTrail's eventName for these names:
    each is ``ec2:`` and an operation of EC2's API, spelled as the API spells it, and the refused one is named."""
    message = "You are not authorized to perform this operation."
    intercept(app.clients().ec2, "DescribeRouteTables", service_error("UnauthorizedOperation", message, 403))
    problems = _fails_preflight(world, world.spec())
    assert problems == [
        f"subnet {world.private_subnet}: cannot inspect it (UnauthorizedOperation: {message}); the handler needs "
        "ec2:DescribeSubnets and ec2:DescribeRouteTables"
    ]
    named = [action.removeprefix("ec2:") for action in problems[0].split("needs ")[1].split(" and ")]
    assert "DescribeRouteTables" in named
    assert set(named) <= set(app.clients().ec2.meta.service_model.operation_names)


def test_a_group_answered_without_an_egress_list_lacks_the_egress_rule(
    world: World, fake: FakeSageMaker, intercept: Any
) -> None:
    """DescribeSecurityGroups' output model requires no member: a group answered without ``IpPermissionsEgress``
    has no egress rule, reported as such (not a TypeError as the reason CloudFormation shows)."""
    group = {
        "GroupId": world.sg,
        "GroupName": "nodes",
        "VpcId": world.vpc,
        "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": world.sg}]}],
    }
    answer = {"SecurityGroups": [group], "ResponseMetadata": {"HTTPStatusCode": 200}}
    intercept(
        app.clients().ec2, "DescribeSecurityGroups", (AWSResponse("https://stub.invalid/", 200, {}, None), answer)
    )  # type: ignore[arg-type]
    problems = _fails_preflight(world, world.spec())
    assert [p.split(" (all protocols")[0] for p in problems] == [
        f"security group {world.sg} lacks the self-referencing egress rule(s)"
    ]


def spec_with_root_volume(value: Any) -> dict[str, Any]:
    """A CreateCluster request whose first group's first volume carries ``RootVolume``."""
    return {
        "ClusterName": "ml-cluster",
        "InstanceGroups": [
            {
                "InstanceGroupName": "workers",
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": "2",
                "LifeCycleConfig": {"SourceS3Uri": "s3://b/lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod-exec",
                "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": "500", "RootVolume": value}}],
            }
        ],
        "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
    }


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False), ("False", False), ("TRUE", True)])
def test_a_boolean_turned_into_a_string_is_read_back(value: str, expected: bool) -> None:
    props = parse_properties(
        {"ClusterSpec": spec_with_root_volume(value), "ProvisioningParametersKey": PARAMS_KEY}, CREATE_CLUSTER
    )
    assert props.spec["InstanceGroups"][0]["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["RootVolume"] is expected


def test_a_string_that_is_no_boolean_is_refused_naming_its_path() -> None:
    with pytest.raises(PropertyError) as caught:
        parse_properties(
            {"ClusterSpec": spec_with_root_volume("yes"), "ProvisioningParametersKey": PARAMS_KEY}, CREATE_CLUSTER
        )
    assert str(caught.value) == (
        "ClusterSpec.InstanceGroups[0].InstanceStorageConfigs[0].EbsVolumeConfig.RootVolume: 'yes' is not valid; "
        "expected true or false"
    )


@pytest.mark.parametrize(
    ("vpc", "key"),
    [
        ({"SecurityGroupIds": ["sg-1"], "Subnets": "subnet-0123456789abcdef0"}, "VpcConfig.Subnets"),
        ([{"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]}], "VpcConfig"),
    ],
)
def test_a_value_that_is_not_the_kind_the_model_wants_is_refused_naming_the_key(vpc: Any, key: str) -> None:
    """A string where a list belongs is not split into one-letter subnets; a list where a structure belongs is
    reported by the model's validation, not a crash."""
    spec = {**spec_with_root_volume(True), "VpcConfig": vpc}
    with pytest.raises(PropertyError) as caught:
        parse_properties({"ClusterSpec": spec, "ProvisioningParametersKey": PARAMS_KEY}, CREATE_CLUSTER)
    assert str(caught.value).startswith(
        f"ClusterSpec is not a valid CreateCluster request: Invalid type for parameter {key}, "
    )


def test_numbers_of_every_model_kind_are_read_back_and_a_bad_one_named_by_its_full_path() -> None:
    """CreateCluster's model (botocore 1.44.8) has no float member and no map of numbers yet; coerce follows the
    model's kinds, so a botocore upgrade that brings one (the lock is refreshed) is read the same way. Shown with
    SageMaker shapes that have them: a variant weight (float) and trial component parameters (a map of
    structures holding a double)."""
    assert coerce("0.5", SAGEMAKER.shape_for("VariantWeight"), "Weight") == 0.5
    parameters = SAGEMAKER.shape_for("TrialComponentParameters")
    assert coerce({"lr": {"NumberValue": "0.01"}}, parameters, "Parameters") == {"lr": {"NumberValue": 0.01}}
    with pytest.raises(PropertyError) as caught:
        coerce({"lr": {"NumberValue": "fast"}}, parameters, "Parameters")
    assert str(caught.value) == "Parameters.lr.NumberValue: 'fast' is not valid; expected a number"
