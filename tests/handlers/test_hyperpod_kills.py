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
