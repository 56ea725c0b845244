"""``mlcluster smoke`` and ``mlcluster update``: what a HyperPod group without EFA is taken for, the operator's
``--min-busbw`` for the Trainium all-reduce, and a resume after the fleet was started (issue 27, survivors
of the cli sample with seed 7).

Driven like ``test_smoke`` and ``test_update``: their worlds (moto, the node's answers from transcripts, the
fake ParallelCluster fleet table) and helpers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from mlcluster.cli import update as update_module
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED
from mlcluster.pcluster import instance_types
from tests.cli.conftest import Aws, FakeNode, World, error
from tests.cli.test_smoke import healthy_hyperpod, healthy_trn1, trn1  # noqa: F401 (trn1: the fixture)
from tests.cli.test_update import (
    ENV,
    Cloud,
    cloud,  # noqa: F401 (the fixture)
    drop_inference_queue,
    edited,
    fleet_writes,
    p4de,  # noqa: F401 (the fixture)
    stored,
)


def smoke_kind(world: World, node: FakeNode, instance_type: str) -> dict[str, Any]:
    """The node kind ``smoke --json`` reports for the HyperPod workers when their group is ``instance_type``."""
    path = world.environments / "hyperpod.yaml"
    config = yaml.safe_load(path.read_text())
    config["cluster"]["hyperpod"]["workers"][0]["instance_type"] = instance_type
    path.write_text(yaml.safe_dump(config))
    healthy_hyperpod(node)
    result = world.run("smoke", "hyperpod", "--json")
    steps = {step["step"]: step for step in json.loads(result.stdout)["steps"]}
    kind: dict[str, Any] = steps["sinfo"]["data"]["kind"]
    return kind


@pytest.mark.parametrize(
    ("instance_type", "efa"),
    [
        ("ml.g5.2xlarge", False),  # a GPU type without EFA
        ("ml.g7e.2xlarge", False),  # a type HyperPod offers that the instance table does not know
        ("ml.p5.48xlarge", True),  # the edge: a type with EFA
    ],
)
def test_a_hyperpod_group_is_an_efa_group_only_where_its_type_has_efa(
    hyperpod: World, node: FakeNode, instance_type: str, efa: bool
) -> None:
    """smoke's ``--json`` says whether the group under test uses EFA (a script reads it to judge the run):
    HyperPod turns EFA on for every type that has it, so a group of a type without EFA, or of a type the
    table does not know, is no EFA group (and smoke runs instead of failing on the unknown type)."""
    kind = smoke_kind(hyperpod, node, instance_type)
    assert kind == {"resource": "worker-group-1", "instance_type": instance_type, "efa": efa}


def test_min_busbw_is_the_nccom_pass_mark_also_where_the_table_knows_the_line_rate(
    trn1: World,  # noqa: F811
    node: FakeNode,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the expectation table knows trn1's line rate (800 Gbit/s: a default mark of 50 GB/s), the
    operator's ``--min-busbw 40`` still sets the mark of the Trainium all-reduce: 47.1 GB/s passes, and the
    line names the operator's mark. Without the flag the same run fails the table's mark."""
    monkeypatch.setitem(instance_types.NETWORK_GBITS, "trn1.32xlarge", 800)
    healthy_trn1(node)
    node.on(
        "MLC-NEURON",
        "MLC-NEURON compute-trn-st-trn1-1 devices=16 efa=8\nMLC-NEURON compute-trn-st-trn1-2 devices=16 efa=8\n",
    )
    result = trn1.run("smoke", "trn1", "--min-busbw", "40")
    assert result.exit_code == 0, result.output
    assert (
        "PASS nccom: peak busbw 47.1 GB/s at 1024 MiB across 2 x trn1.32xlarge, 64 ranks "
        "(line rate 100 GB/s, pass >= 40 GB/s)"
    ) in result.stdout
    default = trn1.run("smoke", "trn1")
    assert default.exit_code == 1
    assert "(line rate 100 GB/s, pass >= 50 GB/s): below 50 GB/s" in default.stdout


def test_a_resume_after_the_start_never_starts_the_fleet_again(
    p4de: World,  # noqa: F811
    cloud: Cloud,  # noqa: F811
    aws: Aws,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet was stopped, the update deployed and the fleet started; the verification's read is denied.
    Before the resume the operator stops the fleet themselves (maintenance). The resume only verifies: the
    start step is done, so it writes no START_REQUESTED over the operator's stop; the verification reports
    the stopped fleet and leaves it as the operator left it."""
    cloud.new = edited(p4de.environments, drop_inference_queue)
    deploy = cloud.deploy

    def deploy_then_deny_reads(argv: list[str], timeout: int, region: str | None = None) -> int:
        code = deploy(argv, timeout)
        aws.answer("cloudformation", "GetTemplate", always=error("AccessDenied", "refused", 400))
        return code

    monkeypatch.setattr(update_module, "run_deploy", deploy_then_deny_reads)
    result = p4de.run("update", ENV, "--yes")
    assert result.exit_code == EXIT_AWS, result.output
    assert list(stored(p4de)["steps"]) == ["stop", "deploy", "start"]
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"] and cloud.fleet() == "RUNNING"
    aws.sticky.pop(("cloudformation", "GetTemplate"))
    aws.answer("cloudformation", "GetTemplate", always=cloud.get_template)
    cloud.set_fleet("STOPPED")  # the operator's own stop, after this run's start
    resumed = p4de.run("update", ENV, "--resume")
    assert resumed.exit_code == EXIT_FAILED, resumed.output
    assert "resuming update run" in resumed.stderr and "(done: stop, deploy, start)" in resumed.stderr
    assert "verifying the update failed: the compute fleet is STOPPED, expected RUNNING" in resumed.stderr
    assert "the compute fleet was left as it is" in resumed.stderr
    assert fleet_writes(aws) == ["STOP_REQUESTED", "START_REQUESTED"] and cloud.fleet() == "STOPPED"
    assert "START_REQUESTED" not in resumed.output
    assert list(stored(p4de)["steps"]) == ["stop", "deploy", "start"] and stored(p4de)["complete"] is None
