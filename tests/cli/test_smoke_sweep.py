"""``mlcluster smoke``: the whole of what an operator reads, for every kind of step outcome (issue 27 sweep).

Each scenario drives the command as ``test_smoke`` does (moto's Run Command or the HyperPod session, the node's
answers from transcripts) and compares, with a reviewed snapshot, the complete result: the exit code, every
stdout and stderr line, the complete ``--json`` document, every script sent to the node and every Run Command
request's comment and time bound. Only what truly varies is normalised: the heredoc marker, Run Command ids,
moto's instance ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion

from tests.cli.conftest import Aws, FakeNode, World, transcript
from tests.cli.test_smoke import (
    BARE_METAL_NCCL,
    SINFO_MIXED,
    TRN1_SINFO,
    healthy_hyperpod,
    healthy_trn1,
    trn1,  # noqa: F401 (the fixture)
    with_resources,
)

PINNED = "ubuntu@sha256:" + "0" * 64


def normalised(text: str, world: World) -> str:
    """``text`` with what changes from run to run replaced by a fixed name."""
    text = re.sub(r"MLCLUSTER_SCRIPT_[0-9a-f]{16}", "MLCLUSTER_SCRIPT_X", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "COMMAND-ID", text)
    if world.head_node:
        text = text.replace(world.head_node, "HEAD-NODE")
    return text


def outcome(world: World, node: FakeNode, aws: Aws, *args: str) -> dict[str, Any]:
    """Everything the command did and said, as one comparable document."""
    result = world.run("smoke", world.env, *args)
    sent = [
        {
            "comment": p["Comment"],
            "executionTimeout": p["Parameters"]["executionTimeout"],
            "DocumentName": p["DocumentName"],
        }
        for p in aws.params("SendCommand")
    ]
    stdout = normalised(result.stdout, world)
    said: Any = json.loads(stdout) if "--json" in args else stdout.splitlines()
    return {
        "exit_code": result.exit_code,
        "stdout": said,
        "stderr": normalised(result.stderr, world).splitlines(),
        "scripts": [normalised(s, world).splitlines() for s in node.scripts],
        "send_command": json.loads(normalised(json.dumps(sent), world)),
    }


Reply = tuple[Any, ...]


def then(base: Callable[[FakeNode], None] | None, *replies: Reply) -> Callable[[FakeNode], None]:
    """A node that answers as ``base`` does, except for ``replies`` (``FakeNode.on``'s arguments; later win)."""

    def setup(node: FakeNode) -> None:
        if base is not None:
            base(node)
        for reply in replies:
            node.on(*reply)

    return setup


def srun_two(node: FakeNode) -> None:
    node.on("sinfo", transcript("sinfo_pcluster.txt"))
    node.on(" hostname", "compute-gpu-st-p5-1\ncompute-gpu-st-p5-2\n")
    node.on("--container-image", transcript("container_p5.txt"))


HYPERPOD: dict[str, tuple[Callable[[FakeNode], None], tuple[str, ...]]] = {
    "healthy-text": (healthy_hyperpod, ()),
    "healthy-json": (healthy_hyperpod, ("--json",)),
    "slow-nccl-text": (then(healthy_hyperpod, (BARE_METAL_NCCL, transcript("all_reduce_p5_slow.txt"))), ()),
    "slow-nccl-min-busbw-json": (
        then(healthy_hyperpod, (BARE_METAL_NCCL, transcript("all_reduce_p5_slow.txt"))),
        ("--json", "--min-busbw", "300", "--step-timeout", "30"),
    ),
    "degraded-efa-json": (
        then(healthy_hyperpod, (BARE_METAL_NCCL, transcript("all_reduce_p5_degraded.txt"))),
        ("--json", "--min-busbw", "300"),
    ),
    "missing-library-json": (
        then(healthy_hyperpod, (BARE_METAL_NCCL, transcript("nccl_check_missing.txt"), 1)),
        ("--json",),
    ),
    "precheck-fail-json": (
        then(healthy_hyperpod, ("mlcluster-precheck", transcript("precheck_fail.txt"), 1)),
        ("--json",),
    ),
    "drained-text": (
        then(
            healthy_hyperpod,
            ("sinfo", transcript("sinfo_drained.txt")),
            ("mlcluster-precheck", "ip-10-1-4-190: all checks passed\n"),
        ),
        (),
    ),
    "one-node-json": (
        then(healthy_hyperpod, (" hostname", "ip-10-1-4-190\n")),
        ("--json", "--nodes", "1", "--step-timeout", "7200"),
    ),
    "blind-container-json": (
        then(
            healthy_hyperpod,
            (
                "--container-image",
                transcript("container_p5.txt").replace(
                    "MLC-CTR ip-10-1-5-138 gpus=8 uverbs=32 "
                    "plugin=/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",
                    "MLC-CTR ip-10-1-5-138 gpus=7 uverbs=0 plugin=none",
                ),
            ),
        ),
        ("--json",),
    ),
    "precheck-stuck-text": (then(healthy_hyperpod, ("mlcluster-precheck", "", -1, "InProgress")), ()),
    "nothing-answers-json": (
        then(
            healthy_hyperpod,
            (" hostname", "srun: error: Unable to allocate resources\n", 1),
            ("--container-image", "salloc: error: Job submit/allocate failed\n", 1),
            ("mlcluster-precheck", "", 1),
            (BARE_METAL_NCCL, "", 1),
        ),
        ("--json",),
    ),
}


@pytest.mark.parametrize("scenario", list(HYPERPOD))
def test_smoke_hyperpod_whole_result(
    scenario: str, hyperpod: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion
) -> None:
    setup, args = HYPERPOD[scenario]
    setup(node)
    assert outcome(hyperpod, node, aws, *args) == snapshot


PCLUSTER: dict[str, tuple[Callable[[FakeNode], None], tuple[str, ...]]] = {
    "socket-text": (then(srun_two, (BARE_METAL_NCCL, transcript("all_reduce_socket.txt"))), ()),
    "socket-json": (then(srun_two, (BARE_METAL_NCCL, transcript("all_reduce_socket.txt"))), ("--json",)),
    "run-command-failed-json": (then(srun_two, (BARE_METAL_NCCL, "", -1, "Failed")), ("--json",)),
    "sinfo-fails-text": (then(None, ("sinfo", "slurm_load_partitions: Unable to contact slurm controller\n", 1)), ()),
    "other-partition-json": (
        then(
            None,
            (
                "sinfo",
                "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
                "cpu*         up   infinite      2   idle cpu-st-c5-[1-2]\n"
                "gpu          up   infinite      1   idle gpu-st-g5-1\n"
                "MLC-NODES\n",
            ),
        ),
        ("--json",),
    ),
}


@pytest.mark.parametrize("scenario", list(PCLUSTER))
def test_smoke_pcluster_whole_result(
    scenario: str, pcluster: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion
) -> None:
    setup, args = PCLUSTER[scenario]
    setup(node)
    assert outcome(pcluster, node, aws, "--nodes", "2", *args) == snapshot


def test_smoke_mixed_queue_whole_result(pcluster: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion) -> None:
    """p5 (EFA) and p4de with EFA off in one queue: the kind with the most idle nodes is tested, alone."""
    with_resources(
        pcluster, {"name": "p4de-noefa", "instance_type": "p4de.24xlarge", "min_count": 0, "max_count": 3, "efa": False}
    )
    node.on("sinfo", SINFO_MIXED)
    node.on(" hostname", "compute-gpu-dy-p4de-noefa-1\ncompute-gpu-dy-p4de-noefa-2\n")
    node.on("--container-image", 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\n')
    assert outcome(pcluster, node, aws, "--nodes", "2", "--image", PINNED) == snapshot


def test_smoke_mixed_hyperpod_partition_whole_result(
    hyperpod: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion
) -> None:
    """Two instance groups of different types share a partition: Slurm's host names cannot tell them apart."""
    path = hyperpod.environments / "hyperpod.yaml"
    data = yaml.safe_load(path.read_text())
    workers = data["cluster"]["hyperpod"]["workers"]
    workers.append({**workers[0], "instance_group_name": "trn", "instance_type": "ml.trn1.32xlarge"})
    for w in workers:
        w["partition_name"] = "p5"
    path.write_text(yaml.safe_dump(data))
    healthy_hyperpod(node)
    assert outcome(hyperpod, node, aws, "--json") == snapshot


TRN1: dict[str, tuple[Callable[[FakeNode], None], tuple[str, ...]]] = {
    "healthy-json": (healthy_trn1, ("--json",)),
    "pyxis-text": (
        then(healthy_trn1, ("--container-image", 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\n')),
        ("--image", PINNED),
    ),
    "broken-text": (
        then(
            healthy_trn1,
            (
                "MLC-NEURON",
                "MLC-NEURON compute-trn-st-trn1-1 devices=16 efa=8\nMLC-NEURON compute-trn-st-trn1-2 devices=0\n",
            ),
            ("nccom-test", transcript("nccom_failed.txt")),
        ),
        ("--min-busbw", "50"),
    ),
    "nccom-exited-text": (then(healthy_trn1, ("nccom-test", transcript("nccom_trn1.txt"), 1)), ()),
    "pyxis-nothing-idle-text": (
        then(
            healthy_trn1,
            ("sinfo", TRN1_SINFO.replace("1 idle\n", "1 alloc\n").replace("2 idle\n", "2 alloc\n")),
        ),
        ("--image", PINNED),
    ),
    "slow-json": (
        then(healthy_trn1, ("MLC-NEURON", "MLC-NEURON compute-trn-st-trn1-1 devices=16 efa=7\n", 1)),
        ("--json", "--min-busbw", "47.2"),
    ),
}


@pytest.mark.parametrize("scenario", list(TRN1))
def test_smoke_trn1_whole_result(
    scenario: str,
    trn1: World,  # noqa: F811
    node: FakeNode,
    aws: Aws,
    snapshot: SnapshotAssertion,
) -> None:
    setup, args = TRN1[scenario]
    setup(node)
    assert outcome(trn1, node, aws, *args) == snapshot


# -- the pieces every step is built from, each whole at its edges -----------------------------------------------------
def test_a_kind_of_node_must_show_its_types_devices() -> None:
    from mlcluster.cli.smoke import NodeKind

    assert NodeKind("p5", "ml.p5.48xlarge", efa=True).expectations() == (8, 32, 0)
    assert NodeKind("p5", "p5.48xlarge", efa=False).expectations() == (8, 0, 0)
    assert NodeKind("t", "trn1.32xlarge", efa=True).expectations() == (0, 8, 16)
    assert NodeKind("g", "g5.xlarge", efa=True).expectations() == (1, 0, 0)  # EFA on a type without EFA devices
    assert NodeKind("c", "c5.xlarge", efa=False).expectations() == (0, 0, 0)
    assert NodeKind("x", "x9.unknown", efa=True).expectations() == (0, 0, 0)


def test_parallelcluster_node_names_tell_the_kind_exactly() -> None:
    from mlcluster.cli.smoke import NodeKind, Partition

    p5, dots = NodeKind("p5", "p5.48xlarge", efa=True), NodeKind("a.b", "p4de.24xlarge", efa=False)
    queue = Partition("q.1", (p5, dots), "pcluster")
    assert not queue.uniform
    assert [queue.kind_of(n) for n in ("q.1-st-p5-1", "q.1-dy-a.b-10", "qx1-st-p5-1", "q.1-st-axb-1", "q.1-st-p5-1x")] == [
        p5, dots, None, None, None,
    ]  # fmt: skip
    hyperpod = Partition("p", (p5, NodeKind("other", "p5.48xlarge", efa=True)))
    assert (hyperpod.uniform, hyperpod.kind_of("ip-10-1-4-190")) == (True, p5)
    assert Partition("p", (p5, dots)).kind_of("ip-10-1-4-190") is None


def test_a_bandwidth_is_judged_by_the_table_the_operator_or_nothing() -> None:
    from mlcluster.cli.expectations import expectation
    from mlcluster.cli.smoke import line_rate_mark

    # the table's own mark (its pass figure already carries --min-busbw when given: expectation() took it)
    assert line_rate_mark(expectation("p5.48xlarge"), 1.0) == ("line rate 400 GB/s, pass >= 200 GB/s", 200.0)
    assert line_rate_mark(expectation("p5.48xlarge", 250.5), 1.0) == ("line rate 400 GB/s, pass >= 250.5 GB/s", 250.5)
    assert expectation("trn1.32xlarge") is None
    assert line_rate_mark(None, 47.5) == ("pass >= 47.5 GB/s (--min-busbw)", 47.5)
    assert line_rate_mark(None, 0.0) == ("pass >= 0 GB/s (--min-busbw)", 0.0)
    assert line_rate_mark(None, None) == ("no expectation for this type (pass --min-busbw)", None)


def test_nccom_runs_once_on_the_first_node_of_the_whole_allocation() -> None:
    from mlcluster.cli.smoke import nccom_script

    assert nccom_script("-N 2 -p 'q 1' --nodelist=a,b", "a b", 64, 2, 900) == (
        "export FI_PROVIDER=efa\n"
        "timeout 900 salloc -N 2 -p 'q 1' --nodelist=a,b srun -N 1 -n 1 -w 'a b' bash -c "
        '\'ips=""; for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do '
        "ip=$(getent ahostsv4 \"$h\" | awk '\"'\"'NR == 1 {print $1}'\"'\"'); "
        '[ -n "$ip" ] || { echo "cannot resolve $h" >&2; exit 1; }; ips="$ips $ip"; done; '
        'set -- $ips; export NEURON_RT_ROOT_COMM_ID="$1:44444"; '
        'exec nccom-test -r 64 -N 2 -b 64M -e 1G -f 2 --check -d fp32 --non-interactive allr --hosts "$@"\' 2>&1'
    )


def test_nccom_is_judged_by_the_line_rate_once_the_table_knows_the_type(
    trn1: World,  # noqa: F811
    node: FakeNode,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No Trainium type is in the line-rate table yet; when one is (800 Gbit/s here), nccom takes its mark from it,
    as the NVIDIA steps do, and a peak of 47.1 GB/s fails half of 100 GB/s."""
    from mlcluster.cli import expectations

    monkeypatch.setitem(expectations.NETWORK_GBITS, "trn1.32xlarge", 800)
    healthy_trn1(node)
    result = trn1.run("smoke", "trn1", "--json")
    assert result.exit_code == 1
    step = json.loads(result.stdout)["steps"][-1]
    assert (step["step"], step["outcome"], step["summary"]) == (
        "nccom",
        "FAIL",
        "peak busbw 47.1 GB/s at 1024 MiB across 2 x trn1.32xlarge, 64 ranks "
        "(line rate 100 GB/s, pass >= 50 GB/s): below 50 GB/s",
    )
    assert (step["data"]["expected_line_rate_gbytes"], step["data"]["pass_busbw_gbytes"]) == (100.0, 50.0)
