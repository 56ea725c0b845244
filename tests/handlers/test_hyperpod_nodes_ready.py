"""The HyperPod node check: every state it can meet has a decision, and long checks never roll a cluster back.

The states come from botocore's SageMaker model (``ClusterStatus``,
``ClusterInstanceStatus``), not from a list typed here: a botocore release
that adds one fails ``test_every_state_has_a_decision`` until it has one.
The wait is walked with the fake clock: each poll moves time on by
``POLL_SECONDS`` and lets the fake service take one step.
"""

from __future__ import annotations

import botocore.session
import pytest

from mlcluster.handlers.hyperpod_cluster import app
from tests.handlers.conftest import Clock, FakeSageMaker, World, nodes_event

COUNTS = {"controller-machine": 1, "workers": 4}
#: Sleeps in one invocation; the look after the last one decides on nodes still settling.
POLLS = app.MAX_WAIT_SECONDS // app.POLL_SECONDS


def _enum(shape: str) -> list[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return list(model.shape_for(shape).enum)  # type: ignore[attr-defined]


def test_every_state_has_a_decision() -> None:
    assert sorted(app.NODE_DECISIONS) == sorted(_enum("ClusterInstanceStatus"))
    assert sorted(app.CLUSTER_DECISIONS) == sorted(_enum("ClusterStatus"))
    assert sorted(app.PREFLIGHT_DECISIONS) == sorted(_enum("ClusterStatus"))


def test_deep_health_checks_of_hours_do_not_fail_the_deploy(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Finding 3: InstanceStress and InstanceConnectivity can run for hours; the check succeeds at once, reporting."""
    cluster = fake.add("ml-cluster", COUNTS)
    for node in cluster.nodes[1:]:
        node.status = "DeepHealthCheckInProgress"
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert clock.sleeps == []
    assert result["Data"]["NotRunning"].startswith("workers: workers-0 DeepHealthCheckInProgress, workers-1 ")
    assert result["Data"]["ClusterStatus"] == "InService"


@pytest.mark.parametrize("state", ["Pending", "SystemUpdating", "AttachInProgress"])
def test_settling_nodes_are_waited_for_then_accepted(
    world: World, fake: FakeSageMaker, clock: Clock, state: str
) -> None:
    """Nodes still starting, patched or attached when the wait ends are reported, never a rollback."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = state
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert len(clock.sleeps) == POLLS
    assert clock.now <= app.MAX_WAIT_SECONDS
    assert result["Data"]["NotRunning"] == f"workers: workers-3 {state}"


def test_settling_nodes_that_start_running_end_the_wait(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Pending"
    cluster.node_changes = [{}, {"workers-3": "Running"}]
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert clock.sleeps == [app.POLL_SECONDS, app.POLL_SECONDS]
    assert result["Data"]["NotRunning"] == "none"


@pytest.mark.parametrize("state", ["Failure", "NotFound", "ShuttingDown", "DetachInProgress"])
def test_a_node_being_replaced_is_accepted(world: World, fake: FakeSageMaker, clock: Clock, state: str) -> None:
    """Automatic node recovery replaces a failed node: the deploy does not fail while it does."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = state
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert result["Data"]["NotRunning"] == f"workers: workers-3 {state}"


def test_a_replaced_node_that_runs_ends_the_wait(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Failure"
    cluster.node_changes = [{"workers-3": "ShuttingDown", "workers-9": "Pending"}, {"workers-9": "Running"}]
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert clock.sleeps == [app.POLL_SECONDS, app.POLL_SECONDS]
    assert result["Data"]["NotRunning"] == "workers: workers-3 ShuttingDown"


@pytest.mark.parametrize("state", ["Failure", "NotFound", "ShuttingDown"])
def test_without_node_recovery_a_failed_node_fails_with_its_message(
    world: World, fake: FakeSageMaker, clock: Clock, state: str
) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.node_recovery = "None"
    cluster.nodes[-1].status = state
    cluster.nodes[-1].message = "lifecycle script on_create.sh exited 1"
    expected = (
        rf"workers: 3 of 4 Running at the end of the wait \(workers-3 {state} \(lifecycle script on_create.sh "
        r"exited 1\); node recovery off\)"
    )
    with pytest.raises(app.NodesNotReadyError, match=expected):
        app.on_event(nodes_event(cluster.arn, COUNTS))


def test_missing_nodes_fail_at_the_end_of_the_wait(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """No capacity: two of four workers never appear; the reason names the group."""
    cluster = fake.add("ml-cluster", {**COUNTS, "workers": 2})
    with pytest.raises(
        app.NodesNotReadyError, match=r"workers: 2 of 4 Running at the end of the wait \(no other nodes"
    ):
        app.on_event(nodes_event(cluster.arn, COUNTS))
    assert clock.now <= app.MAX_WAIT_SECONDS


@pytest.mark.parametrize("status", ["RollingBack", "Failed", "Deleting"])
def test_a_failing_cluster_fails_at_once(world: World, fake: FakeSageMaker, clock: Clock, status: str) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status=status)
    cluster.failure_message = "capacity"
    with pytest.raises(app.NodesNotReadyError, match=rf"is {status} \(capacity\)"):
        app.on_event(nodes_event(cluster.arn, COUNTS))
    assert clock.sleeps == []


@pytest.mark.parametrize("status", ["Creating", "Updating", "SystemUpdating"])
def test_a_busy_cluster_is_waited_for(world: World, fake: FakeSageMaker, clock: Clock, status: str) -> None:
    cluster = fake.add("ml-cluster", COUNTS, status=status)
    cluster.upcoming = [status, "InService"]
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert result["Data"]["ClusterStatus"] == "InService"
    assert clock.sleeps == [app.POLL_SECONDS, app.POLL_SECONDS]


def test_a_cluster_busy_past_the_wait_is_judged_by_its_nodes(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """HyperPod patching the cluster for an hour is no reason to roll it back: its nodes decide."""
    cluster = fake.add("ml-cluster", COUNTS, status="SystemUpdating")
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert result["Data"] == {"ClusterStatus": "SystemUpdating", "NotRunning": "none"}


def test_unknown_states_fail_naming_them(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """A status the service adds later is a reason to stop, never read as still pending."""
    cluster = fake.add("ml-cluster", COUNTS, status="Hibernating")
    with pytest.raises(app.NodesNotReadyError, match="'Hibernating', a status this check does not know"):
        app.on_event(nodes_event(cluster.arn, COUNTS))
    verdict = app.judge_nodes(
        [{"InstanceGroupName": "workers", "InstanceId": "i-1", "InstanceStatus": {"Status": "Rebooting"}}],
        {"workers": 1},
        final=False,
        recovery=True,
    )
    assert not verdict.done
    assert verdict.failures == [
        "workers: i-1 Rebooting is in a status this check does not know (" + ", ".join(app.NODE_DECISIONS) + ")"
    ]


def test_unknown_preflight_status_fails(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    from tests.handlers.conftest import update_event

    fake.add("ml-cluster", COUNTS, status="Hibernating")
    old, new = world.props(world.spec(name="ml-cluster")), world.props(world.spec(name="ml-cluster", workers=3))
    with pytest.raises(RuntimeError, match="'Hibernating', a status this check does not know"):
        app.on_event(update_event("ml-cluster-preflight", new, old))
