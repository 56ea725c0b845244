"""``mlcluster smoke``: step lines and ``--json`` data an operator reads (issue 27, the cli sample's survivors).

Driven like ``test_smoke``: moto's SSM Run Command, the node's answers from transcripts; each test asserts
the exit code and the whole line (or the JSON field) the operator reads.
"""

from __future__ import annotations

import json

from tests.cli.conftest import FakeNode, World
from tests.cli.test_smoke import (
    CONTAINER,
    healthy_hyperpod,
    healthy_trn1,
    smoke_over_socket,
    trn1,  # noqa: F401 (the fixture)
)

PINNED = "public.ecr.aws/docker/library/ubuntu@sha256:" + "0" * 64


def test_smoke_json_lists_the_sinfo_rows(hyperpod: World, node: FakeNode) -> None:
    healthy_hyperpod(node)
    result = hyperpod.run("smoke", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    sinfo = next(step for step in json.loads(result.stdout)["steps"] if step["step"] == "sinfo")
    assert [(r["partition"], r["nodes"], r["state"], r["nodelist"]) for r in sinfo["data"]["rows"]] == [
        ("p5", 2, "idle", "ip-10-1-4-190,ip-10-1-5-138")
    ]


def test_smoke_srun_failure_shows_the_first_300_characters(hyperpod: World, node: FakeNode) -> None:
    """The output of a failed ``srun hostname`` is cut at 300 characters: enough to read the error, one line."""
    healthy_hyperpod(node)
    said = "srun: error: Unable to allocate resources: Requested node configuration is not available\n" * 5
    node.on(" hostname", said, code=1)
    result = hyperpod.run("smoke", "hyperpod", "--json")
    assert result.exit_code == 1
    srun = next(step for step in json.loads(result.stdout)["steps"] if step["step"] == "srun")
    assert (srun["outcome"], srun["summary"]) == (
        "FAIL",
        f"`srun -N 2 hostname` exited 1, 0 host(s): {said.strip()[:300]}",
    )
    assert len(said.strip()) > 300


def test_smoke_pyxis_job_passes_and_names_the_image_and_its_os(trn1: World, node: FakeNode) -> None:  # noqa: F811
    """A partition without NVIDIA GPUs runs a plain Pyxis job with --image: PASS names the image and its OS."""
    healthy_trn1(node)
    node.on("--container-image", CONTAINER)
    result = trn1.run("smoke", "trn1", "--image", PINNED)
    assert result.exit_code == 0, result.output
    assert f"PASS container: {PINNED} ran through Pyxis: Ubuntu 22.04.5 LTS" in result.stdout.splitlines()


def test_smoke_json_gives_the_neuron_devices_per_node(trn1: World, node: FakeNode) -> None:  # noqa: F811
    healthy_trn1(node)
    result = trn1.run("smoke", "trn1", "--json")
    assert result.exit_code == 0, result.output
    neuron = next(step for step in json.loads(result.stdout)["steps"] if step["step"] == "neuron")["data"]
    assert neuron == {
        "devices": {"compute-trn-st-trn1-1": 16, "compute-trn-st-trn1-2": 16},
        "expected": 16,
        "efa_devices": {"compute-trn-st-trn1-1": 8, "compute-trn-st-trn1-2": 8},
        "efa_expected": 8,
    }


def test_smoke_socket_fallback_line_names_the_fabric_alone(pcluster: World, node: FakeNode) -> None:
    """Over socket no EFA device count is added: the fabric reads "socket", then the pass mark."""
    result = smoke_over_socket(pcluster, node)
    assert result.exit_code == 1
    line = next(line for line in result.stdout.splitlines() if line.startswith("FAIL nccl"))
    assert line.startswith(
        "FAIL nccl: peak busbw 2.8 GB/s at 4 GiB across 2 x p5.48xlarge over socket (pass >= 383.42 GB/s: "
    ), line
