"""``mlcluster update``: the plan of a live update as the operator reads it, and a resume that finds the fleet
already stopping (issue 27, cli sample seed 3, survivors).

Driven like ``test_update``: moto's CloudFormation, EC2 and DynamoDB (ParallelCluster's status table), a fake
clustermgtd that moves the fleet one step per poll.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlcluster.cli import update as update_module
from mlcluster.cli.errors import EXIT_INTERRUPTED
from tests.cli.conftest import Aws, World
from tests.cli.test_update import (
    ENV,
    Cloud,
    cloud,  # noqa: F401 (the fixture)
    drop_inference_queue,
    edited,
    fleet_writes,
    p4de,  # noqa: F401 (the fixture)
)

PLAN = """\
mlcluster update p4de: plan (nothing has been changed yet)
cluster p4de-train (ParallelCluster), stack p4de-Cluster in us-west-2

changes to the cluster configuration (1):
  in_place      Monitoring.Logs.CloudWatch.RetentionInDays  (ParallelCluster policy SUPPORTED)
                old: 365
                new: 30

steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)
"""


def test_the_plan_of_a_live_update_is_its_sections_and_nothing_else(p4de: World, cloud: Cloud) -> None:  # noqa: F811
    """``--plan-only`` prints the plan, whole: the heading, the change with both values, and the steps, each
    section set apart by one empty line (a script or a reviewer diffs two plans line by line)."""
    new = copy.deepcopy(cloud.deployed)
    new["Monitoring"]["Logs"]["CloudWatch"]["RetentionInDays"] = 30
    cloud.new = new
    result = p4de.run("update", ENV, "--plan-only")
    assert result.exit_code == 0, result.output
    assert result.stdout == PLAN
    assert cloud.deploys == []


def test_a_resume_that_finds_the_fleet_stopping_waits_without_asking_again(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while the stop this run asked for is under way; clustermgtd has moved the fleet on to STOPPING.
    The resume waits for STOPPED and writes nothing: a second STOP_REQUESTED over ParallelCluster's STOPPING
    would set its state back (the conditional write succeeds on STOPPING) and tell the operator a request it
    did not need."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    real = update_module.Fleet.wait
    waits = 0

    def interrupted(fleet: Any, *args: Any) -> None:
        nonlocal waits
        waits += 1
        if waits == 1:
            raise KeyboardInterrupt
        real(fleet, *args)

    monkeypatch.setattr(update_module.Fleet, "wait", interrupted)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert cloud.fleet() == "STOP_REQUESTED" and fleet_writes(aws) == ["STOP_REQUESTED"]
    cloud.set_fleet("STOPPING")  # clustermgtd's next loop
    resumed = p4de.run("update", ENV, "--resume", "--yes")
    assert resumed.exit_code == 0, resumed.output
    assert "requested STOP_REQUESTED" not in resumed.output
    assert "the compute fleet of p4de-train is STOPPED" in resumed.output
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"]  # the first run's request, then the start
    assert cloud.fleet_at_deploy == ["STOPPED"] and cloud.deployed == cloud.new and cloud.fleet() == "RUNNING"
