"""``mlcluster smoke``: what the operator reads of a step, and the ``--json`` fields a script keys on
(issue 27, survivors of the cli sample with seed 3).

Driven like ``test_smoke``: moto's SSM Run Command or the HyperPod session, the node's answers from transcripts.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.cli.conftest import FakeNode, World, transcript
from tests.cli.test_smoke import (
    BARE_METAL_NCCL,
    TRN1_SINFO,
    healthy_hyperpod,
    healthy_trn1,
    trn1,  # noqa: F401 (the fixture)
)


def steps_of(stdout: str) -> dict[str, dict[str, Any]]:
    """The ``--json`` steps by their name."""
    return {step["step"]: step for step in json.loads(stdout)["steps"]}


def test_a_run_command_that_failed_to_run_says_what_to_look_at_next(pcluster: World, node: FakeNode) -> None:
    """Run Command ``Failed`` with no exit code (the agent could not run the script): the FAIL names the command
    to read its output again and the step's own next move, here sinfo's."""
    node.on("sinfo", "", code=-1, status="Failed")
    result = pcluster.run("smoke", "p5", "--json")
    assert result.exit_code == 1
    sinfo = steps_of(result.stdout)["sinfo"]
    assert (sinfo["outcome"], sinfo["summary"]) == ("FAIL", "Run Command Failed: Failed")
    command = sinfo["command_id"]
    assert command
    assert sinfo["look_at"] == (
        f"`aws ssm get-command-invocation --region us-east-2 --command-id {command} "
        f"--instance-id {pcluster.head_node}`; "
        "`mlcluster ssh p5`, then `sinfo -R` and `sudo systemctl status slurmctld`"
    )


def test_nccl_libraries_not_ready_keeps_the_command_id_and_the_library_data(pcluster: World, node: FakeNode) -> None:
    """The ldd check before the run failed on one node: the FAIL still carries the Run Command id (to read the
    whole output again) and ``--json`` the library folders of the node that passed."""
    node.on("sinfo", transcript("sinfo_pcluster.txt"))
    node.on(" hostname", "compute-gpu-st-p5-1\ncompute-gpu-st-p5-2\n")
    node.on("--container-image", transcript("container_p5.txt"))
    missing = transcript("nccl_check_missing.txt").replace("ip-10-1-4-190", "compute-gpu-st-p5-1")
    node.on(BARE_METAL_NCCL, missing.replace("ip-10-1-5-138", "compute-gpu-st-p5-2"), code=1)
    result = pcluster.run("smoke", "p5", "--nodes", "2", "--json")
    assert result.exit_code == 1
    nccl = steps_of(result.stdout)["nccl"]
    assert nccl["outcome"] == "FAIL"
    assert nccl["summary"].startswith(
        "the NCCL libraries are not ready on 1 of 2 nodes (checked with ldd before the run): "
        "compute-gpu-st-p5-2: ldd: not found: libmpi.so.40"
    ), nccl["summary"]
    command = nccl["command_id"]
    assert isinstance(command, str) and command
    assert f"--command-id {command} " in nccl["look_at"]
    assert nccl["data"] == {
        "library_path": {
            "compute-gpu-st-p5-1": "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:"
            "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/usr/local/cuda/lib64"
        },
        "tuner_settings": ["compute-gpu-st-p5-2: NCCL_PROTO=simple (/etc/nccl.conf)"],
    }


def test_smoke_json_gives_the_basis_of_the_nccl_pass_mark(hyperpod: World, node: FakeNode) -> None:
    """``pass_basis`` says where the pass mark comes from, in the words the step line prints."""
    healthy_hyperpod(node)
    result = hyperpod.run("smoke", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    nccl = steps_of(result.stdout)["nccl"]
    basis = "80% of the published 479.28 GB/s on 2 x p5.48xlarge at 8 GiB"
    assert nccl["data"]["pass_basis"] == basis
    assert f"(pass >= 383.42 GB/s: {basis})" in nccl["summary"]


def test_a_hyperpod_trainium_group_gets_its_neuron_devices_checked(hyperpod: World, node: FakeNode) -> None:
    """HyperPod names instance types with ``ml.``: an ``ml.trn1.32xlarge`` group is a Trainium type, so the
    neuron step runs on its nodes (not a SKIP saying it has no Neuron devices)."""
    path = hyperpod.environments / "hyperpod.yaml"
    config = yaml.safe_load(path.read_text())
    config["cluster"]["hyperpod"]["workers"][0]["instance_type"] = "ml.trn1.32xlarge"
    path.write_text(yaml.safe_dump(config))
    healthy_hyperpod(node)
    node.on("MLC-NEURON", "MLC-NEURON ip-10-1-4-190 devices=16 efa=8\nMLC-NEURON ip-10-1-5-138 devices=16 efa=8\n")
    node.on("nccom-test", "")
    result = hyperpod.run("smoke", "hyperpod", "--json")
    neuron = steps_of(result.stdout)["neuron"]
    assert (neuron["outcome"], neuron["summary"]) == ("PASS", "2 nodes list 16 Neuron devices each and 8 EFA devices")
    assert any("MLC-NEURON" in script for script in node.scripts)


def test_trainium_with_efa_off_skips_nccom_under_its_own_name(trn1: World, node: FakeNode) -> None:  # noqa: F811
    """A trn1 compute resource with ``efa: false`` cannot run the multi-node all-reduce: the step is reported
    as ``nccom`` (the line and the JSON key an operator's script reads), skipped with the type named."""
    path = trn1.environments / "trn1.yaml"
    config = yaml.safe_load(path.read_text())
    config["cluster"]["pcluster"]["queues"][0]["compute_resources"][0]["efa"] = False
    path.write_text(yaml.safe_dump(config))
    healthy_trn1(node)
    node.on("MLC-NEURON", "MLC-NEURON compute-trn-st-trn1-1 devices=16\nMLC-NEURON compute-trn-st-trn1-2 devices=16\n")
    result = trn1.run("smoke", "trn1")
    assert result.exit_code == 0, result.output
    assert "SKIP nccom: trn1.32xlarge: no multi-node nccom-test for this type" in result.stdout.splitlines()
    assert not any("nccom-test" in script for script in node.scripts)


def test_trainium_with_one_idle_node_skips_nccom_under_its_own_name(trn1: World, node: FakeNode) -> None:  # noqa: F811
    """sinfo found one idle node of the two: nccom is not run, and its SKIP line is the ``nccom`` step's."""
    healthy_trn1(node)
    node.on("sinfo", TRN1_SINFO.replace("compute-trn-st-trn1-2 idle", "compute-trn-st-trn1-2 alloc"))
    result = trn1.run("smoke", "trn1", "--json")
    assert result.exit_code == 1
    steps = steps_of(result.stdout)
    assert (steps["nccom"]["outcome"], steps["nccom"]["summary"]) == (
        "SKIP",
        "not run: sinfo found 1 idle node(s), 2 needed",
    )
    assert not any("nccom-test" in script for script in node.scripts)
