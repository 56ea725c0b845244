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
from tests.handlers.test_hyperpod_paths import _spec


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
