"""The HyperPod checks: behaviour `make mutation MODULE=handlers` (sample 200, seed 2) showed no test asserted.

- ExpectedCounts written as a map in a template (CloudFormation delivers its numbers as strings) is read, not
  refused (app.py ``_expected_counts`` mutant 3).
- A rename refused for a training plan tells the operator the safe way in full (``_new_cluster_problems``
  mutant 23).
- The node check's log names the nodes it waits for (``_nodes_ready`` mutant 120); each request is logged with
  its type and logical id (``on_event`` mutants 19, 22).
- At the end of the wait, with node recovery off, nodes still starting count (``judge_nodes`` mutant 66).
- A subnet with no explicit route table is judged by its own VPC's main table: the filter sent is EC2's
  ``vpc-id`` (preflight.py ``_check_subnet`` mutant 39).
- An all-traffic rule without group pairs (a CIDR rule) is no self rule, and no crash (``_has_self_rule``
  mutant 16); every group lacking the rules is reported, also after one already reported (``check_network``
  mutant 59).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from tests.handlers.conftest import Clock, FakeSageMaker, World, create_event, delete_event, nodes_event, update_event
from tests.handlers.test_hyperpod_paths import COUNTS, PLAN, _spec

__all__ = ["Clock"]  # fixture type, used by name


def test_expected_counts_written_as_a_map_are_read(world: World, fake: FakeSageMaker) -> None:
    """A template may give ExpectedCounts as a map; CloudFormation hands its numbers on as strings."""
    cluster = fake.add("ml-cluster", COUNTS)
    event = nodes_event(cluster.arn, COUNTS)
    event["ResourceProperties"]["ExpectedCounts"] = {group: str(count) for group, count in COUNTS.items()}
    answer = app.on_event(event)
    assert answer["Data"] == {"ClusterStatus": "InService", "NotRunning": "none"}


def test_a_rename_on_a_training_plan_is_refused_with_the_whole_safe_way(world: World, fake: FakeSageMaker) -> None:
    fake.add("ml-cluster", COUNTS)
    old_spec = _spec(world, plan=PLAN)
    new_spec = _spec(world, name="ml-cluster-b", plan=PLAN)
    with pytest.raises(PreflightError) as caught:
        app.on_event(update_event("ml-cluster-preflight", world.props(new_spec), world.props(old_spec)))
    assert caught.value.problems == [
        "renaming the cluster from 'ml-cluster' to 'ml-cluster-b' creates the new cluster before CloudFormation "
        f"deletes the old one, but groups draw their capacity from training plan(s) {PLAN}, which hold only the "
        "instances the old cluster uses, so the new one cannot get its nodes. Safe way: set the instance count of "
        "the groups on the plan to 0 and deploy, rename with those counts still 0, then set them back; or destroy "
        "the cluster stack first (`cdk destroy <environment>/Cluster`; data in the storage stack stays), then "
        "deploy with the new name"
    ]


def test_the_node_check_logs_the_nodes_it_waits_for(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Pending"
    cluster.node_changes = [{cluster.nodes[-1].instance_id: "Running"}]
    caplog.set_level(logging.INFO, logger=app.__name__)
    assert app.on_event(nodes_event(cluster.arn, COUNTS))["Data"]["NotRunning"] == "none"
    assert (
        f"cluster ml-cluster (InService): ['workers: workers-1 Pending']; looking again in {app.POLL_SECONDS} s"
        in caplog.messages
    )


@pytest.mark.parametrize(
    ("event", "logged"),
    [
        (delete_event("ml-cluster-preflight"), f"Delete {app.PREFLIGHT} ClusterPreflight"),
        (
            {**delete_event("ml-cluster-nodes"), "ResourceType": app.NODES_READY, "LogicalResourceId": "Nodes1"},
            f"Delete {app.NODES_READY} Nodes1",
        ),
    ],
)
def test_each_request_is_logged_with_its_type_and_logical_id(
    event: dict[str, Any], logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=app.__name__)
    assert app.on_event(event) == {"PhysicalResourceId": event["PhysicalResourceId"]}
    assert [r.getMessage() for r in caplog.records if r.name == app.__name__] == [logged]


def test_at_the_end_nodes_still_starting_count_without_node_recovery() -> None:
    nodes = [
        {"InstanceGroupName": "workers", "InstanceId": "i-1", "InstanceStatus": {"Status": "Running"}},
        {"InstanceGroupName": "workers", "InstanceId": "i-2", "InstanceStatus": {"Status": "Pending"}},
    ]
    verdict = app.judge_nodes(nodes, {"workers": 2}, final=True, recovery=False)
    assert verdict == app.NodesVerdict(done=True, failures=[], pending=["workers: i-2 Pending"])


def _problems(world: World, spec: dict[str, Any]) -> list[str]:
    with pytest.raises(PreflightError) as caught:
        app.on_event(create_event(world.props(spec)))
    return caught.value.problems


def test_a_subnet_without_its_own_table_is_judged_by_its_vpcs_main_table(world: World, fake: FakeSageMaker) -> None:
    """EC2's filter names are lower case (``vpc-id``); another spelling is refused by EC2 as an unknown filter."""
    client = app.clients().ec2
    client.create_route(RouteTableId=world.main_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=world.igw)
    asked: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        asked.append(params)

    client.meta.events.register("provide-client-params.ec2.DescribeRouteTables", record, unique_id="m27h-record")
    try:
        spec = world.spec(VpcConfig={"SecurityGroupIds": [world.sg], "Subnets": [world.main_table_subnet]})
        problems = _problems(world, spec)
    finally:
        client.meta.events.unregister("provide-client-params.ec2.DescribeRouteTables", unique_id="m27h-record")
    assert asked == [
        {"Filters": [{"Name": "association.subnet-id", "Values": [world.main_table_subnet]}]},
        {"Filters": [{"Name": "vpc-id", "Values": [world.vpc]}, {"Name": "association.main", "Values": ["true"]}]},
    ]
    assert any(
        p.startswith(f"subnet {world.main_table_subnet} is public: the VPC's main route table") for p in problems
    )


def test_an_all_traffic_rule_from_addresses_is_no_self_rule(world: World, fake: FakeSageMaker, intercept: Any) -> None:
    """An all-protocol rule may name only CIDR ranges (no ``UserIdGroupPairs``): it admits no node by group."""
    group = {
        "GroupId": world.sg,
        "GroupName": "nodes",
        "VpcId": world.vpc,
        "IpPermissions": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}],
        "IpPermissionsEgress": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": world.sg}]}],
    }
    answer = {"SecurityGroups": [group], "ResponseMetadata": {"HTTPStatusCode": 200}}
    intercept(
        app.clients().ec2, "DescribeSecurityGroups", (AWSResponse("https://stub.invalid/", 200, {}, None), answer)
    )
    problems = _problems(world, world.spec())
    assert [p.split(" (all protocols")[0] for p in problems] == [
        f"security group {world.sg} lacks the self-referencing ingress rule(s)"
    ]


def test_every_group_lacking_the_rules_is_reported_once(world: World, fake: FakeSageMaker) -> None:
    """A group already reported for one configuration does not hide the next group of another."""
    spec = world.spec(VpcConfig={"SecurityGroupIds": [world.sg_no_rules], "Subnets": [world.private_subnet]})
    spec["InstanceGroups"][2]["OverrideVpcConfig"] = {
        "SecurityGroupIds": [world.sg_no_rules, world.sg_ingress_only],
        "Subnets": [world.private_subnet],
    }
    problems = [p.split(" (all protocols")[0] for p in _problems(world, spec) if p.startswith("security group")]
    assert problems == [
        f"security group {world.sg_no_rules} lacks the self-referencing ingress and egress rule(s)",
        f"security group {world.sg_ingress_only} lacks the self-referencing egress rule(s)",
    ]
