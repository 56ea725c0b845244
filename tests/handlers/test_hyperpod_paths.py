"""Issue 10's paths, walked with the events CloudFormation sends to the checks around the native cluster.

The cluster itself is ``AWS::SageMaker::Cluster``: CloudFormation's handler
calls CreateCluster, UpdateCluster and DeleteCluster and waits for them. What
is ours, and tested here against the stateful fake of SageMaker, is what runs
before it (``Custom::HyperPodPreflight``) and after it
(``Custom::HyperPodNodesReady``) on each path. Between the events, the tests
do to the fake what CloudFormation's handler (or the service) would do.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from tests.handlers.conftest import (
    Clock,
    FakeSageMaker,
    World,
    create_event,
    delete_event,
    nodes_event,
    update_event,
)

COUNTS = {"controller-machine": 1, "login": 1, "workers": 2}
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-two-weeks-0001"


def _spec(world: World, name: str = "ml-cluster", workers: int = 2, plan: str | None = None) -> dict[str, Any]:
    spec = world.spec(name=name, workers=workers)
    if plan is not None:
        spec["InstanceGroups"][2]["TrainingPlanArn"] = plan
    return spec


def _only_looked(fake: FakeSageMaker) -> None:
    """The checks never call anything but DescribeCluster and ListClusterNodes."""
    assert {op for op, _ in fake.calls} <= {"DescribeCluster", "ListClusterNodes"}


def test_create_path_succeeds_only_when_every_node_runs(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 4: InService with a worker still Pending is not success; the node check waits for it to run."""
    app.on_event(create_event(world.props(_spec(world))))  # the name is free
    # CloudFormation's handler created the cluster and saw InService; one worker is still booting.
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.nodes[-1].status = "Pending"
    cluster.node_changes = [{}, {"workers-1": "Running"}]
    result = app.on_event(nodes_event(cluster.arn, COUNTS))
    assert result["Data"] == {"ClusterStatus": "InService", "NotRunning": "none"}
    assert clock.sleeps == [app.POLL_SECONDS, app.POLL_SECONDS]
    _only_looked(fake)


def test_target_count_without_running_nodes_fails_with_the_nodes(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    """Path 4: TargetCount 2 but one node failed and node recovery is off: failure naming the node."""
    cluster = fake.add("ml-cluster", COUNTS)
    cluster.node_recovery = "None"
    cluster.nodes[-1].status = "Failure"
    with pytest.raises(RuntimeError) as caught:
        app.on_event(nodes_event(cluster.arn, COUNTS))
    message = str(caught.value)
    assert "workers: 1 of 2 Running at the end of the wait (workers-1 Failure; node recovery off)" in message
    assert "/aws/sagemaker/Clusters/ml-cluster/" in message
    assert clock.now <= app.MAX_WAIT_SECONDS


def test_create_refuses_a_name_taken_by_another_cluster(world: World, fake: FakeSageMaker) -> None:
    """Path 2: a Create never adopts or shadows a cluster it did not make; it fails before CreateCluster."""
    fake.add("ml-cluster", COUNTS)
    with pytest.raises(PreflightError, match=r"a HyperPod cluster named 'ml-cluster' already exists \(status"):
        app.on_event(create_event(world.props(_spec(world))))
    _only_looked(fake)


def test_update_waits_for_a_system_updating_cluster(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 5: the service is patching; the pre-flight waits, then lets CloudFormation's UpdateCluster go."""
    cluster = fake.add("ml-cluster", COUNTS, status="SystemUpdating")
    cluster.upcoming = ["SystemUpdating", "Updating", "InService"]
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    app.on_event(update_event("ml-cluster-preflight", new, old))
    assert cluster.status == "InService"
    assert len(clock.sleeps) == 3
    _only_looked(fake)


def test_busy_cluster_is_given_up_on_within_minutes(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Paths 3 and 5: a cluster busy for hours fails the update within the bound, with the reason and next step."""
    fake.add("ml-cluster", COUNTS, status="Updating")
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    with pytest.raises(PreflightError) as caught:
        app.on_event(update_event("ml-cluster-preflight", new, old))
    assert "is still Updating" in str(caught.value)
    assert "Deploy again when `aws sagemaker describe-cluster --cluster-name ml-cluster` shows InService" in str(
        caught.value
    )
    assert clock.now <= app.MAX_WAIT_SECONDS


def test_lambda_context_bounds_the_wait(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 3: the wait ends before the function's own timeout, so the answer always reaches CloudFormation."""
    fake.add("ml-cluster", COUNTS, status="SystemUpdating")

    class Context:
        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 120_000

    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    with pytest.raises(PreflightError, match="still SystemUpdating"):
        app.on_event(update_event("ml-cluster-preflight", new, old), Context())
    assert clock.now <= 120 - app.ANSWER_MARGIN_SECONDS


def test_cluster_deleted_out_of_band_gives_the_way_back(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 5: the update stops before CloudFormation's UpdateCluster, saying what happened and what to do."""
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    with pytest.raises(PreflightError) as caught:
        app.on_event(update_event("ml-cluster-preflight", new, old))
    message = str(caught.value)
    assert "no longer exists: it was deleted outside CloudFormation" in message
    assert "continue-update-rollback" in message and "change cluster.name" in message
    assert clock.sleeps == []


def test_cluster_being_deleted_out_of_band_is_not_updated(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    fake.add("ml-cluster", COUNTS, status="Deleting")
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    with pytest.raises(PreflightError, match="is being deleted outside CloudFormation"):
        app.on_event(update_event("ml-cluster-preflight", new, old))


def test_failed_update_then_rollback(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 1: the update's node check fails; the rollback's events (old properties) pass on the same cluster."""
    cluster = fake.add("ml-cluster", COUNTS)
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=4))
    bigger = {**COUNTS, "workers": 4}
    app.on_event(update_event("ml-cluster-preflight", new, old))
    # CloudFormation's UpdateCluster: two more workers asked for, neither gets capacity.
    cluster.targets["workers"] = 4
    with pytest.raises(RuntimeError, match=r"workers: 2 of 4 Running"):
        app.on_event(nodes_event(cluster.arn, bigger, "Update", old=COUNTS))
    # Rollback: CloudFormation updates the cluster back (old counts), then sends the checks the old properties.
    cluster.targets["workers"] = 2
    cluster.status = "Updating"
    cluster.upcoming = ["InService"]
    app.on_event(update_event("ml-cluster-preflight", old, new))
    result = app.on_event(nodes_event(cluster.arn, COUNTS, "Update", old=bigger))
    assert result["PhysicalResourceId"] == "ml-cluster-nodes"
    assert list(fake.clusters) == ["ml-cluster"]
    _only_looked(fake)


def test_rollback_node_check_is_answered_without_a_check(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """aws/aws-cdk#17040: the rollback's Update (same physical id) must not fail again and stop the rollback.

    The cluster is still RollingBack, which would fail the node check; during UPDATE_ROLLBACK_IN_PROGRESS it
    does not look at it.
    """
    cluster = fake.add("ml-cluster", COUNTS, status="RollingBack")
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    event = nodes_event(cluster.arn, COUNTS, "Update", old={**COUNTS, "workers": 4})
    result = app.on_event(event)
    assert result == {"PhysicalResourceId": event["PhysicalResourceId"], "Data": {"Checked": app.NOT_CHECKED}}
    assert world.stack.calls == [{"StackName": event["StackId"]}]
    assert fake.calls == []
    assert clock.sleeps == []


def test_rollback_preflight_waits_for_a_busy_cluster_then_answers(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    """Issue 29 (the issue-25 follow-up): the failed update may still run (Updating, RollingBack); the
    rollback's UpdateCluster would meet a ConflictException, so the pre-flight waits (bounded) until it is
    InService, without checking anything, and answers success."""
    fake.add("ml-cluster", COUNTS, status="RollingBack").upcoming = ["Updating", "InService"]
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=4))
    event = update_event("ml-cluster-preflight", old, new)
    result = app.on_event(event)
    assert result == {"PhysicalResourceId": event["PhysicalResourceId"], "Data": {"Checked": app.NOT_CHECKED}}
    assert clock.sleeps == [app.POLL_SECONDS, app.POLL_SECONDS]
    assert [operation for operation, _ in fake.calls] == ["DescribeCluster"] * 3


@pytest.mark.parametrize(
    ("setup", "sleeps"),
    [
        ("busy for ever", app.MAX_WAIT_SECONDS // app.POLL_SECONDS),
        ("gone", 0),
        ("deleting", 0),
        ("throttled", 0),
        ("denied", 0),
        ("bad properties", 0),
    ],
)
def test_rollback_preflight_answers_success_whatever_it_meets(
    world: World, fake: FakeSageMaker, clock: Clock, setup: str, sleeps: int
) -> None:
    """No path of the rollback's pre-flight fails: a failure would stop the rollback in UPDATE_ROLLBACK_FAILED."""
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=4))
    if setup == "busy for ever":
        fake.add("ml-cluster", COUNTS, status="Updating")
    elif setup == "deleting":
        fake.add("ml-cluster", COUNTS, status="Deleting")
    elif setup == "throttled":
        fake.errors["DescribeCluster"] = [("ThrottlingException", "Rate exceeded")] * 10
    elif setup == "denied":
        fake.errors["DescribeCluster"] = [("AccessDeniedException", "not authorized")]
    elif setup == "bad properties":
        old = {"ClusterSpec": "not json"}
    event = update_event("ml-cluster-preflight", old, new)
    result = app.on_event(event)
    assert result == {"PhysicalResourceId": event["PhysicalResourceId"], "Data": {"Checked": app.NOT_CHECKED}}
    assert len(clock.sleeps) == sleeps
    assert all(operation == "DescribeCluster" for operation, _ in fake.calls)


@pytest.mark.parametrize("resource_type", [app.PREFLIGHT, app.NODES_READY])
@pytest.mark.parametrize("properties", ["good", "garbage"])
def test_delete_never_fails(world: World, fake: FakeSageMaker, resource_type: str, properties: str) -> None:
    """A Delete (the rollback of a create, the cleanup of a replaced physical id, a stack deletion) removes
    nothing of ours and calls nothing: it cannot fail, whatever the properties."""
    props: Any = world.props(_spec(world)) if properties == "good" else {"ClusterSpec": 7}
    event = {
        "RequestType": "Delete",
        "ResourceType": resource_type,
        "LogicalResourceId": "Check",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/dev-Cluster/1",
        "PhysicalResourceId": "ml-cluster-preflight",
        "ResourceProperties": props,
    }
    assert app.on_event(event) == {"PhysicalResourceId": "ml-cluster-preflight"}
    assert fake.calls == [] and world.stack.calls == []


@pytest.mark.parametrize(
    "status", ["UPDATE_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", "ROLLBACK_IN_PROGRESS"]
)
def test_an_update_outside_an_update_rollback_is_checked(
    world: World, fake: FakeSageMaker, clock: Clock, status: str
) -> None:
    """Only UPDATE_ROLLBACK_IN_PROGRESS skips: in any other status a RollingBack cluster fails the node check."""
    cluster = fake.add("ml-cluster", COUNTS, status="RollingBack")
    world.stack.status = status
    with pytest.raises(RuntimeError, match="is RollingBack"):
        app.on_event(nodes_event(cluster.arn, COUNTS, "Update", old={**COUNTS, "workers": 4}))
    assert len(world.stack.calls) == 1


def test_create_does_not_ask_for_the_stack(world: World, fake: FakeSageMaker) -> None:
    """A Create is never a rollback of an update: no DescribeStacks."""
    app.on_event(create_event(world.props(_spec(world))))
    assert world.stack.calls == []


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("AccessDenied", "User is not authorized to perform: cloudformation:DescribeStacks"),
        ("ValidationError", "Stack with id arn:aws:cloudformation:us-east-1:123456789012:stack/dev/1 does not exist"),
        ("Throttling", "Rate exceeded"),
    ],
)
@pytest.mark.parametrize("resource_type", [app.PREFLIGHT, app.NODES_READY])
def test_a_stack_that_cannot_be_read_fails_the_update(
    world: World, fake: FakeSageMaker, clock: Clock, code: str, message: str, resource_type: str
) -> None:
    """Neither skipped as a rollback nor checked as an update: the event fails naming the error and the grant."""
    cluster = fake.add("ml-cluster", COUNTS)
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    world.stack.errors = [(code, message)]
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=4))
    if resource_type == app.PREFLIGHT:
        event = update_event("ml-cluster-preflight", old, new)
    else:
        event = nodes_event(cluster.arn, COUNTS, "Update", old={**COUNTS, "workers": 4})
    with pytest.raises(RuntimeError) as caught:
        app.on_event(event)
    assert str(caught.value) == (
        f"DescribeStacks for {event['StackId']} failed: {code}: {message}; the checks need "
        "cloudformation:DescribeStacks on their own stack to tell an update from its rollback"
    )
    assert fake.calls == []


def test_rename_creates_before_delete_and_checks_the_new_name(world: World, fake: FakeSageMaker) -> None:
    """Replacement: a new name must be free; the old cluster is CloudFormation's to delete afterwards."""
    fake.add("ml-cluster", COUNTS)
    old, new = world.props(_spec(world)), world.props(_spec(world, name="ml-cluster-b"))
    result = app.on_event(update_event("ml-cluster-preflight", new, old))
    assert result["PhysicalResourceId"] == "ml-cluster-preflight"
    assert [params["ClusterName"] for _, params in fake.calls] == ["ml-cluster-b"]


@pytest.mark.parametrize("plan_in", ["new", "old"])
def test_rename_with_a_training_plan_is_refused_before_anything_is_made(
    world: World, fake: FakeSageMaker, plan_in: str
) -> None:
    """Path 7: create-before-delete cannot get a training plan's instances twice; refused with the safe way."""
    fake.add("ml-cluster", COUNTS)
    old_spec = _spec(world, plan=PLAN if plan_in == "old" else None)
    new_spec = _spec(world, name="ml-cluster-b", plan=PLAN if plan_in == "new" else None)
    with pytest.raises(PreflightError) as caught:
        app.on_event(update_event("ml-cluster-preflight", world.props(new_spec), world.props(old_spec)))
    message = str(caught.value)
    assert PLAN in message
    assert "destroy the cluster stack first (`cdk destroy <environment>/Cluster`" in message


def test_rename_with_no_instances_on_the_training_plan_is_not_refused(world: World, fake: FakeSageMaker) -> None:
    """Path 7's safe way: with the plan's groups at 0 nodes in both clusters, nothing is asked of the plan twice."""
    fake.add("ml-cluster", {**COUNTS, "workers": 0})
    old = world.props(_spec(world, workers=0, plan=PLAN))
    new = world.props(_spec(world, name="ml-cluster-b", workers=0, plan=PLAN))
    app.on_event(update_event("ml-cluster-preflight", new, old))


def test_in_place_update_with_a_training_plan_is_not_refused(world: World, fake: FakeSageMaker) -> None:
    """Path 7's edge: same name, more nodes on the plan, no second cluster: allowed."""
    fake.add("ml-cluster", COUNTS)
    old, new = world.props(_spec(world, plan=PLAN)), world.props(_spec(world, workers=3, plan=PLAN))
    app.on_event(update_event("ml-cluster-preflight", new, old))


def test_delete_events_touch_nothing(world: World, fake: FakeSageMaker) -> None:
    """Path 6 is CloudFormation's (DeleteCluster and its wait); the checks' Delete makes no call at all."""
    fake.add("ml-cluster", COUNTS, status="Updating")
    assert app.on_event(delete_event("ml-cluster-preflight", world.props())) == {
        "PhysicalResourceId": "ml-cluster-preflight"
    }
    assert app.on_event({**nodes_event("arn", COUNTS), "RequestType": "Delete", "PhysicalResourceId": "x-nodes"}) == {
        "PhysicalResourceId": "x-nodes"
    }
    assert fake.calls == []


def test_node_check_names_the_cluster_by_its_resolved_arn(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    """Path 8: the node check looks up the ARN CloudFormation resolved, never a name that may be reused."""
    cluster = fake.add("ml-cluster", COUNTS)
    app.on_event(nodes_event(cluster.arn, COUNTS))
    assert {params["ClusterName"] for _, params in fake.calls} == {cluster.arn}
    with pytest.raises(ValueError, match=r"ClusterArn: 'ml-cluster' is not valid"):
        app.on_event(nodes_event("ml-cluster", COUNTS))


@pytest.mark.parametrize(
    ("operation", "code", "expected"),
    [
        ("DescribeCluster", "AccessDeniedException", r"DescribeCluster for HyperPod cluster .* AccessDeniedException"),
        ("DescribeCluster", "ValidationException", r"DescribeCluster for HyperPod cluster .* ValidationException"),
        ("ListClusterNodes", "ThrottlingException", r"ListClusterNodes for arn:.* failed: ThrottlingException"),
        ("ListClusterNodes", "ResourceNotFound", r"ListClusterNodes for arn:.* failed: ResourceNotFound"),
    ],
)
def test_service_errors_are_failures_not_success(
    world: World, fake: FakeSageMaker, clock: Clock, operation: str, code: str, expected: str
) -> None:
    cluster = fake.add("ml-cluster", COUNTS)
    fake.errors[operation] = [(code, "injected")] * 20
    with pytest.raises(RuntimeError, match=expected):
        app.on_event(nodes_event(cluster.arn, COUNTS))


def test_conflict_during_describe_is_reported(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    fake.add("ml-cluster", COUNTS)
    fake.errors["DescribeCluster"] = [("ConflictException", "busy")]
    old, new = world.props(_spec(world)), world.props(_spec(world, workers=3))
    with pytest.raises(RuntimeError, match="ConflictException: busy"):
        app.on_event(update_event("ml-cluster-preflight", new, old))


def test_throttled_describe_is_retried_by_the_client(world: World, throttle: Any) -> None:
    """A burst of throttling (at the HTTP layer, moto behind it) is ridden out by botocore's standard retries."""
    delays = throttle("DescribeCluster", 3)
    app.on_event(create_event(world.props(_spec(world))))
    assert len(delays) == 3


def test_expected_counts_must_be_json_counts(world: World, fake: FakeSageMaker) -> None:
    event = nodes_event("arn:aws:sagemaker:us-east-1:123456789012:cluster/abc", COUNTS)
    event["ResourceProperties"]["ExpectedCounts"] = json.dumps(["workers"])
    with pytest.raises(ValueError, match=r"ExpectedCounts: .* expected JSON \{group name: count\}"):
        app.on_event(event)
