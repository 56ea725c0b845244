"""``mlcluster smoke``: the pass mark an operator sets, where to look after a failed Pyxis job, and the Run
Command history of a Trainium run (issue 27, survivors of the cli sample with seed 4).

Driven like ``test_smoke``: moto's SSM Run Command or the HyperPod session, the node's answers from transcripts.
"""

from __future__ import annotations

import json
from typing import Any

from tests.cli.conftest import Aws, FakeNode, World, transcript
from tests.cli.test_smoke import (
    BARE_METAL_NCCL,
    healthy_hyperpod,
    healthy_trn1,
    trn1,  # noqa: F401 (the fixture)
)

PINNED = "public.ecr.aws/docker/library/ubuntu@sha256:" + "0" * 64


def steps_of(stdout: str) -> dict[str, dict[str, Any]]:
    """The ``--json`` steps by their name."""
    return {step["step"]: step for step in json.loads(stdout)["steps"]}


def test_min_busbw_sets_the_bare_metal_nccl_pass_mark(hyperpod: World, node: FakeNode) -> None:
    """362.4 GB/s at 8 GiB fails p5's published mark (383.42 GB/s); the operator's ``--min-busbw 300`` is the mark
    instead: the nccl step passes, and its line and ``--json`` name the operator's figure as the basis."""
    healthy_hyperpod(node)
    node.on(BARE_METAL_NCCL, transcript("all_reduce_p5_slow.txt"))
    result = hyperpod.run("smoke", "hyperpod", "--json", "--min-busbw", "300")
    assert result.exit_code == 0, result.output
    nccl = steps_of(result.stdout)["nccl"]
    assert nccl["outcome"] == "PASS"
    assert nccl["summary"].startswith(
        "peak busbw 362.4 GB/s at 8 GiB across 2 x ml.p5.48xlarge over efa x 32 devices "
        "(pass >= 300 GB/s: --min-busbw 300 GB/s at the peak)"
    ), nccl["summary"]
    data = nccl["data"]
    assert (data["pass_busbw_gbytes"], data["pass_basis"], data["published_busbw_gbytes"]) == (
        300,
        "--min-busbw 300 GB/s at the peak",
        None,
    )
    # and at the edge: a mark just above the measured peak fails the same run
    higher = hyperpod.run("smoke", "hyperpod", "--json", "--min-busbw", "362.5")
    assert higher.exit_code == 1
    failed = steps_of(higher.stdout)["nccl"]
    assert failed["outcome"] == "FAIL"
    assert "362.4 GB/s at 8 GiB is below 362.5 GB/s" in failed["summary"]


def test_failed_pyxis_job_says_where_to_look_and_what_to_try(trn1: World, node: FakeNode) -> None:  # noqa: F811
    """A plain Pyxis job that exits 1: the FAIL keeps the Run Command id and tells the operator how to read the
    whole output again and what to try by hand next."""
    healthy_trn1(node)
    said = "pyxis: failed to import docker image\nslurmstepd: error: pyxis: child 1234 failed with error code: 1\n"
    node.on("--container-image", said, code=1)
    result = trn1.run("smoke", "trn1", "--json", "--image", PINNED)
    assert result.exit_code == 1
    container = steps_of(result.stdout)["container"]
    command = container["command_id"]
    assert command
    assert (container["outcome"], container["summary"], container["look_at"]) == (
        "FAIL",
        f"Pyxis job exited 1: {said.strip()}",
        f"`aws ssm get-command-invocation --region us-east-2 --command-id {command} "
        f"--instance-id {trn1.head_node}`; "
        "`srun --container-image=... true` by hand; check /opt/slurm/etc/plugstack.conf and enroot's paths",
    )


def test_each_trainium_step_is_named_in_the_run_command_history(trn1: World, node: FakeNode, aws: Aws) -> None:  # noqa: F811
    """Every step is one Run Command whose comment names the cluster and the step: what an operator reads in the
    console's command history (and ``aws ssm list-commands``) to tell a smoke run's commands apart."""
    healthy_trn1(node)
    result = trn1.run("smoke", "trn1")
    assert result.exit_code == 0, result.output
    comments = [params["Comment"] for params in aws.params("SendCommand")]
    assert comments == [
        "mlcluster smoke trn1: sinfo",
        "mlcluster smoke trn1: srun hostname",
        "mlcluster smoke trn1: neuron-ls",
        "mlcluster smoke trn1: nccom-test all-reduce",
    ]
