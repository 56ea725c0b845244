"""The HyperPod handler: behaviour `make mutation MODULE=handlers` showed no test asserted.

- A rollback whose properties are not a mapping still answers, and the log names which properties were bad
  (app.py ``_wait_for_rollback`` mutants 3, 10-12: the label lost or changed).
- The handler's clients use the session they are given, and a fresh default one without it
  (aws.py ``Clients.__init__`` mutant 2: "session and Session()").
"""

from __future__ import annotations

import logging

import boto3
import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.aws import Clients
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from tests.handlers.conftest import Clock, FakeSageMaker, World, update_event
from tests.handlers.test_hyperpod_paths import COUNTS, _spec


def test_a_rollback_with_unreadable_properties_answers_and_logs_which(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    event = update_event("ml-cluster-preflight", world.props(_spec(world)), world.props(_spec(world)))
    event["ResourceProperties"] = "garbage"
    caplog.set_level(logging.INFO, logger=app.__name__)
    result = app.on_event(event)
    assert result == {"PhysicalResourceId": event["PhysicalResourceId"], "Data": {"Checked": app.NOT_CHECKED}}
    (record,) = [r for r in caplog.records if r.getMessage().startswith("rollback: waiting for the cluster failed")]
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "ResourceProperties: expected the resource's properties, got 'garbage'"
    assert not fake.calls and not clock.sleeps


def test_clients_use_the_session_given_and_a_default_one_without(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    given = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="eu-west-1")
    assert Clients(given).sagemaker.meta.region_name == "eu-west-1"
    assert Clients().sagemaker.meta.region_name == "us-west-2"


def rollback_messages(world: World, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The rollback pre-flight's log lines (it answers NOT_CHECKED whatever it meets)."""
    world.stack.status = "UPDATE_ROLLBACK_IN_PROGRESS"
    event = update_event("ml-cluster-preflight", world.props(_spec(world)), world.props(_spec(world, workers=4)))
    caplog.set_level(logging.INFO, logger=app.__name__)
    assert app.on_event(event)["Data"] == {"Checked": app.NOT_CHECKED}
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollback:")]


def test_the_rollback_wait_logs_each_status_it_meets(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator reads in the function's log why the rollback went on (_wait_for_rollback's log mutants)."""
    fake.add("ml-cluster", COUNTS, status="RollingBack").upcoming = ["InService"]
    assert rollback_messages(world, caplog) == [
        f"rollback: cluster ml-cluster is RollingBack; looking again in {app.POLL_SECONDS} s",
        "rollback: cluster ml-cluster is InService; answering",
    ]


def test_the_rollback_wait_logs_a_cluster_gone(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """(mutmut_20: a missing cluster read as one, failing into the exception log.)"""
    assert rollback_messages(world, caplog) == ["rollback: cluster ml-cluster is gone; answering"]


def test_the_rollback_wait_logs_the_end_of_the_wait(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add("ml-cluster", COUNTS, status="Updating")
    messages = rollback_messages(world, caplog)
    assert messages[-1] == "rollback: cluster ml-cluster still Updating at the end of the wait; answering"
    assert set(messages[:-1]) == {f"rollback: cluster ml-cluster is Updating; looking again in {app.POLL_SECONDS} s"}


def test_the_rollback_wait_logs_a_failure_with_its_reason(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    fake.errors["DescribeCluster"] = [("AccessDeniedException", "not authorized")]
    assert rollback_messages(world, caplog) == ["rollback: waiting for the cluster failed; answering"]
    assert "AccessDeniedException" in caplog.text


def preflight_problems(world: World) -> list[str]:
    """The problems of an update's pre-flight that fails (the cluster's state is set by the caller)."""
    event = update_event("ml-cluster-preflight", world.props(_spec(world, workers=3)), world.props(_spec(world)))
    with pytest.raises(PreflightError) as caught:
        app.on_event(event)
    assert str(caught.value).startswith("Pre-flight checks failed for HyperPod cluster 'ml-cluster':\n- ")
    return caught.value.problems


def test_an_update_of_a_cluster_deleted_outside_cloudformation_gives_the_way_back(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    """The whole message CloudFormation shows (_wait_until_updatable mutants 8, 12-16: words or list lost)."""
    assert preflight_problems(world) == [
        "the HyperPod cluster 'ml-cluster' no longer exists: it was deleted outside CloudFormation. Way back: if "
        "this update is rolled back and the rollback stops (UPDATE_ROLLBACK_FAILED), run `aws cloudformation "
        "continue-update-rollback --stack-name <environment>-Cluster --resources-to-skip <logical ids "
        "CloudFormation names>`; then either change cluster.name and deploy (a new cluster is created), or destroy "
        "the cluster stack and deploy again"
    ]


def test_an_update_of_a_cluster_in_an_unknown_status_names_the_known_ones(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    """(mutants 18-22: the status list or its separator lost.)"""
    fake.add("ml-cluster", COUNTS, status="Quiescing")
    assert preflight_problems(world) == [
        "the HyperPod cluster 'ml-cluster' is 'Quiescing', a status this check does not know (it knows InService, "
        "Failed, Creating, Updating, SystemUpdating, RollingBack, Deleting); deploy again when it is InService"
    ]
    assert clock.sleeps == []


def test_an_update_of_a_cluster_being_deleted_says_wait(world: World, fake: FakeSageMaker, clock: Clock) -> None:
    fake.add("ml-cluster", COUNTS, status="Deleting")
    assert preflight_problems(world) == [
        "the HyperPod cluster 'ml-cluster' is being deleted outside CloudFormation; wait, then deploy"
    ]


def test_the_update_wait_logs_each_look(
    world: World, fake: FakeSageMaker, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """(mutants 58-60: the wait's log line.) The update goes on once the cluster is InService."""
    fake.add("ml-cluster", COUNTS, status="Updating").upcoming = ["InService"]
    caplog.set_level(logging.INFO, logger=app.__name__)
    event = update_event("ml-cluster-preflight", world.props(_spec(world, workers=3)), world.props(_spec(world)))
    app.on_event(event)
    assert f"cluster ml-cluster is Updating; looking again in {app.POLL_SECONDS} s" in caplog.messages
    assert clock.sleeps == [app.POLL_SECONDS]


def test_an_update_waits_the_whole_budget_for_a_busy_cluster_then_names_it(
    world: World, fake: FakeSageMaker, clock: Clock
) -> None:
    """A look whose next poll ends exactly at the deadline is still made (mutant 49: ">=" gave up a poll early);
    the error names the cluster (mutant 50)."""
    fake.add("ml-cluster", COUNTS, status="Updating")
    assert preflight_problems(world) == [
        "the HyperPod cluster 'ml-cluster' is still Updating (an update or patching the service runs); UpdateCluster "
        "would be refused with ConflictException. Deploy again when `aws sagemaker describe-cluster --cluster-name "
        "ml-cluster` shows InService"
    ]
    assert clock.now == app.MAX_WAIT_SECONDS
    assert len(clock.sleeps) == app.MAX_WAIT_SECONDS // app.POLL_SECONDS
