"""The HyperPod node check: every state it can meet has a decision, and long checks never roll a cluster back.

The states come from botocore's SageMaker model (``ClusterStatus``,
``ClusterInstanceStatus``), not from a list typed here: a botocore release
that adds one fails ``test_every_state_has_a_decision`` until it has one.
The waits run as the Provider framework runs them (``run_node_check``):
``on_event`` once, then ``is_complete`` every query interval, for at most the
framework's total timeout.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest

from mlcluster.handlers.hyperpod_cluster import app
from tests.handlers.conftest import Clock, FakeSageMaker, FrameworkTimeout, World, nodes_event, run_node_check

COUNTS = {"controller-machine": 1, "workers": 4}


def _enum(shape: str) -> list[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return list(model.shape_for(shape).enum)  # type: ignore[attr-defined]


def test_every_state_has_a_decision() -> None:
    assert sorted(app.NODE_DECISIONS) == sorted(_enum("ClusterInstanceStatus"))
    assert sorted(app.CLUSTER_DECISIONS) == sorted(_enum("ClusterStatus"))
    assert sorted(app.PREFLIGHT_DECISIONS) == sorted(_enum("ClusterStatus"))


def test_the_settling_time_fits_the_framework_timeout() -> None:
    """The check decides itself (success or a reason) before the framework gives up with a bare timeout."""
    assert app.SETTLE_SECONDS + 2 * app.QUERY_INTERVAL_SECONDS <= app.TOTAL_TIMEOUT_SECONDS <= 3600


def test_deep_health_checks_of_hours_do_not_fail_the_deploy(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Finding 3: InstanceStress and InstanceConnectivity can run for hours; the check succeeds and reports them."""
    cluster = fake.add("ml-cluster", COUNTS)
    for node in cluster.nodes[1:]:
        node.status = "DeepHealthCheckInProgress"
    result = run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    assert clock.sleeps == []
    assert "workers-0 DeepHealthCheckInProgress" in result["Data"]["NotRunning"]
    assert result["Data"]["ClusterStatus"] == "InService"


@pytest.mark.parametrize("state", ["Pending", "SystemUpdating", "AttachInProgress"])
def test_settling_nodes_are_waited_for_then_accepted(
    world: World, fake: FakeSageMaker, clock: Clock, state: str
) -> None:
    """Nodes starting, patched or replaced past the settling time are reported, not a rollback."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = state
    result = run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    assert app.SETTLE_SECONDS <= clock.now < app.TOTAL_TIMEOUT_SECONDS
    assert result["Data"]["NotRunning"] == f"workers: workers-3 {state}"


def test_a_replaced_node_is_waited_for(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Automatic node recovery: the failed node shuts down and a new one starts, then runs."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Failure"
    cluster.node_changes = [{"workers-3": "ShuttingDown", "workers-9": "Pending"}, {}, {"workers-9": "Running"}]
    result = run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    assert clock.now == 3 * app.QUERY_INTERVAL_SECONDS
    assert result["Data"]["NotRunning"] == "workers: workers-3 ShuttingDown"


@pytest.mark.parametrize("state", ["Failure", "NotFound"])
def test_failed_nodes_fail_with_their_message_after_the_settling_time(
    world: World, fake: FakeSageMaker, clock: Clock, state: str
) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = state
    with pytest.raises(app.NodesNotReady, match=rf"workers: 3 of 4 Running after 45 min \(workers-3 {state}\)"):
        run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)


def test_missing_nodes_fail_after_the_settling_time(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """No capacity: two of four workers never appear; the reason names the group, never a bare timeout."""
    cluster = fake.add("ml-cluster", {**COUNTS, "workers": 2})
    with pytest.raises(app.NodesNotReady, match=r"workers: 2 of 4 Running after 45 min \(no other nodes\)"):
        run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)


@pytest.mark.parametrize("status", ["RollingBack", "Failed", "Deleting"])
def test_a_failing_cluster_fails_at_once(world: World, fake: FakeSageMaker, clock: Clock, status: str) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status=status)
    with pytest.raises(app.NodesNotReady, match=rf"is {status} \(no failure message\)"):
        run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    assert clock.sleeps == []


@pytest.mark.parametrize("status", ["Creating", "Updating", "SystemUpdating"])
def test_a_busy_cluster_is_waited_for(world: World, fake: FakeSageMaker, clock: Clock, status: str) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status=status)
    cluster.upcoming = [status, "InService"]
    result = run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    assert result["Data"]["ClusterStatus"] == "InService"
    assert clock.now == 2 * app.QUERY_INTERVAL_SECONDS


def test_unknown_states_fail_naming_them(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """A status the service adds later is a reason to stop, never read as still pending."""
    cluster = fake.add("ml-cluster", COUNTS, status="Hibernating")
    with pytest.raises(app.NodesNotReady, match="'Hibernating', a status this check does not know"):
        run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    verdict = app.judge_nodes(
        [{"InstanceGroupName": "workers", "InstanceId": "i-1", "InstanceStatus": {"Status": "Rebooting"}}],
        {"workers": 1},
        settled=False,
    )
    assert not verdict.done and verdict.failures == [
        "workers: i-1 Rebooting is in a status this check does not know (" + ", ".join(app.NODE_DECISIONS) + ")"
    ]


def test_a_lost_start_time_fails(world: World, fake: FakeSageMaker) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    event: dict[str, Any] = {**nodes_event(cluster.arn, COUNTS), "Data": {}}
    with pytest.raises(app.NodesNotReady, match="lost its start time"):
        app.is_complete(event)


def test_the_framework_timeout_is_never_what_fails(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Whatever the nodes do, the check answers before the framework's total timeout."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Pending"
    cluster.nodes[-2].status = "Failure"
    try:
        run_node_check(nodes_event(cluster.arn, COUNTS), fake, clock)
    except FrameworkTimeout:  # pragma: no cover - the failure this test exists for
        pytest.fail("the node check ran into the framework's total timeout")
    except app.NodesNotReady as err:
        assert "workers-2 Failure" in str(err)
