"""``mlcluster health``: the whole of what an operator reads, and the exact job steps sent (issue 27 sweep).

The command-level tests compare, with a reviewed snapshot, the complete result of each scenario: exit code,
every stdout and stderr line or the complete ``--json`` document, every script sent to the controller (the
inlined health.sh replaced by a name: its own tests pin it) and each Run Command request's comment and time
bound. The unit tests pin each helper's whole answer at its edges.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion

from mlcluster.cli.health import (
    CONCURRENT_STEPS,
    Failure,
    NodeHealth,
    check_script,
    counts_known,
    expect_args,
    health_command,
    parse_health,
    parse_nodes,
    parse_steps,
    script_seconds,
    step_batches,
    unanswered,
)
from mlcluster.cli.smoke import NodeKind
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from tests.cli.conftest import Aws, FakeNode, World
from tests.cli.test_health import CHECKED, NODES

TOOL = shlex.quote((HYPERPOD_DIR / "health.sh").read_text(encoding="utf-8"))
P5 = NodeKind("p5", "p5.48xlarge", efa=True)


def normalised(text: str, world: World) -> str:
    """``text`` with the inlined tool and what changes from run to run replaced by fixed names."""
    text = text.replace(TOOL, "HEALTH_SH")
    text = re.sub(r"MLCLUSTER_SCRIPT_[0-9a-f]{16}", "MLCLUSTER_SCRIPT_X", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "COMMAND-ID", text)
    return text.replace(world.head_node, "HEAD-NODE") if world.head_node else text


def outcome(world: World, node: FakeNode, aws: Aws, *args: str) -> dict[str, Any]:
    """Everything the command did and said, as one comparable document."""
    result = world.run("health", world.env, *args)
    stdout = normalised(result.stdout, world)
    sent = [(p["Comment"], p["Parameters"]["executionTimeout"]) for p in aws.params("SendCommand")]
    return {
        "exit_code": result.exit_code,
        "stdout": json.loads(stdout) if "--json" in args else stdout.splitlines(),
        "stderr": normalised(result.stderr, world).splitlines(),
        "scripts": [normalised(s, world).splitlines() for s in node.scripts],
        "send_command": sent,
    }


TWO_IDLE = "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n"
NOT_ALLOCATED = (
    "ip-10-1-4-190: healthy\n"
    "srun: error: Unable to allocate resources: Requested nodes are busy\n"
    "MLC-STEP ip-10-1-5-138 exit=1 srun: error: Unable to allocate resources: Requested nodes are busy\n"
)
HYPERPOD: dict[str, tuple[str, str, int, tuple[str, ...]]] = {
    "drained-and-failed-text": (NODES, CHECKED, 0, ()),
    "drained-and-failed-json": (NODES, CHECKED, 0, ("--json",)),
    "deep-warning-json": (
        TWO_IDLE,
        "ip-10-1-4-190: healthy\nip-10-1-5-138: 0 critical, 1 warning\n"
        "ip-10-1-5-138 FAIL xid warning: Xid 13 since boot. Action: look up each code\n",
        0,
        ("--json", "--tier", "deep"),
    ),
    "warning-without-action-text": (
        TWO_IDLE,
        "ip-10-1-4-190: healthy\nip-10-1-5-138 FAIL xid warning: Xid 13 since boot\nip-10-1-5-138: 0 critical, 1 warning\n",
        0,
        (),
    ),
    "tool-missing-text": (
        TWO_IDLE,
        "ip-10-1-4-190: healthy\nslurmstepd: error: execve(): mlcluster-health: No such file or directory\n",
        2,
        (),
    ),
    "not-allocated-text": (TWO_IDLE, NOT_ALLOCATED, 0, ()),
    "not-allocated-json": (TWO_IDLE, NOT_ALLOCATED, 0, ("--json",)),
    "step-timed-out-deep-text": (
        TWO_IDLE,
        "ip-10-1-4-190: healthy\nMLC-STEP ip-10-1-5-138 exit=124\n",
        1,
        ("--tier", "deep"),
    ),
    "step-exited-text": (
        TWO_IDLE,
        "ip-10-1-4-190: healthy\nMLC-STEP ip-10-1-5-138 exit=137 srun: error: task 0 killed\n",
        1,
        (),
    ),
    "none-idle-text": (
        "ip-10-1-4-190|alloc|none\nip-10-1-5-138|drain|[maintenance] by admin\nip-10-1-6-21|down*|Not responding\n",
        "",
        0,
        (),
    ),
    "none-idle-json": ("ip-10-1-4-190|mix|none\nip-10-1-4-190|mix|none\n", "", 0, ("--json",)),
}


@pytest.mark.parametrize("scenario", list(HYPERPOD))
def test_health_hyperpod_whole_result(
    scenario: str, hyperpod: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion
) -> None:
    listing, checked, code, args = HYPERPOD[scenario]
    node.on("sinfo -h -N", listing)
    node.on("mlcluster-health", checked, code=code)
    assert outcome(hyperpod, node, aws, *args) == snapshot


def test_health_output_cut_off_whole_result(pcluster: World, node: FakeNode, aws: Aws) -> None:
    """The node whose answer fell past Run Command's 24,000 characters is "not checked", with what to do."""
    node.on("sinfo -h -N", "compute-gpu-st-p5-1|idle|none\ncompute-gpu-st-p5-2|idle|none\n")
    warning = "compute-gpu-st-p5-1 FAIL xid warning: Xid 13. Action: look up each code\n"
    node.on("mlcluster-health", (warning * (24000 // len(warning) + 1))[:24000])
    done = outcome(pcluster, node, aws)
    assert done["exit_code"] == 0
    assert done["stderr"] == []
    assert done["send_command"] == [
        ("mlcluster health p5: list nodes", ["120"]),
        ("mlcluster health p5: quick checks", ["360"]),
    ]
    cut = (
        ": output truncated at 24000 characters before its answer; fix the nodes listed and run again, "
        "or check a smaller partition with --partition"
    )
    lines = done["stdout"]
    # the node whose warnings filled the output is "warning" with them, noted; the other one "not checked"
    assert lines[0] == "WARNING compute-gpu-st-p5-1" + cut
    assert set(lines[1:-2]) == {"     xid (warning): Xid 13", "       action: look up each code"}
    assert lines[-2:] == [
        "NOT CHECKED compute-gpu-st-p5-2" + cut,
        "2 nodes in compute-gpu: 0 checked (quick), 0 critical",
    ]


def test_health_mixed_queue_and_unknown_type_whole_result(
    pcluster: World, node: FakeNode, aws: Aws, snapshot: SnapshotAssertion
) -> None:
    """Each resource's own counts; a type this package does not know is checked against the node's own file."""
    path = pcluster.environments / f"{pcluster.env}.yaml"
    data = yaml.safe_load(path.read_text())
    data["cluster"]["pcluster"]["queues"][0]["compute_resources"] += [
        {"name": "p4de-noefa", "instance_type": "p4de.24xlarge", "min_count": 0, "max_count": 2, "efa": False},
        {"name": "g6e", "instance_type": "g6e.48xlarge", "min_count": 0, "max_count": 2},
    ]
    path.write_text(yaml.safe_dump(data))
    node.on(
        "sinfo -h -N",
        "compute-gpu-st-p5-1|idle|none\ncompute-gpu-dy-p4de-noefa-1|idle|none\ncompute-gpu-st-p5-2|idle|none\n"
        "compute-gpu-dy-g6e-1|idle|none\ncompute-gpu-st-p5-3|alloc|none\n",
    )
    node.on(
        "mlcluster-health",
        "compute-gpu-st-p5-1: healthy\ncompute-gpu-st-p5-2: healthy\ncompute-gpu-dy-p4de-noefa-1: healthy\n"
        "compute-gpu-dy-g6e-1 FAIL health_env critical: /etc/mlcluster/health.env is missing. Action: rerun the "
        "lifecycle\ncompute-gpu-dy-g6e-1: 1 critical, 0 warning\n",
        code=1,
    )
    assert outcome(pcluster, node, aws, "--json") == snapshot


def test_health_listing_and_check_failures_are_errors(hyperpod: World, node: FakeNode) -> None:
    """No node listed, and a check run that never finished: the command stops with the reason, exit 1."""
    node.on("sinfo -h -N", "slurm_load_node: Unable to contact slurm controller\n", code=1)
    listed = hyperpod.run("health", "hyperpod")
    assert (listed.exit_code, listed.stdout, listed.stderr) == (
        1,
        "",
        "mlcluster: sinfo found no nodes in partition p5: slurm_load_node: Unable to contact slurm controller\n",
    )
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\n")
    node.on("mlcluster-health", "", code=-1, status="InProgress")
    stuck = hyperpod.run("health", "hyperpod")
    assert (stuck.exit_code, stuck.stdout) == (1, "")
    assert stuck.stderr.endswith(
        "mlcluster: quick checks did not finish on "
        "sagemaker-cluster:k3x9q2a1b2c3_controller-machine-i-0c0a1b2c3d4e5f601: TimedOut no result after 300 s; "
        "session stopped\n"
    )


# -- the helpers, each whole answer at its edges --------------------------------------------------------------------
def test_counts_are_known_only_where_the_tables_say_what_a_node_shows() -> None:
    assert counts_known(P5)
    assert counts_known(NodeKind("p5", "ml.p5.48xlarge", efa=True))
    assert counts_known(NodeKind("p5", "p5.48xlarge", efa=False))
    assert not counts_known(NodeKind("x", "p9.huge", efa=False))
    assert counts_known(NodeKind("g", "g5.xlarge", efa=True))  # EFA on, but a type without EFA: nothing to count
    assert expect_args(P5) == "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"
    assert expect_args(NodeKind("t", "trn1.32xlarge", efa=True)) == "--expect-gpus 0 --expect-efa 8 --expect-neuron 16"
    assert expect_args(None) == "--require-env"
    assert expect_args(NodeKind("x", "p9.huge", efa=True)) == "--require-env"
    assert health_command(P5, "deep") == (
        f"bash -c {TOOL} mlcluster-health --tier deep --expect-gpus 8 --expect-efa 32 --expect-neuron 0"
    )


def test_an_efa_type_missing_from_the_device_table_is_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlcluster.cli import health

    monkeypatch.setattr(health, "efa_devices", lambda instance_type: None)
    assert not counts_known(P5)
    assert counts_known(NodeKind("p5", "p5.48xlarge", efa=False))


def test_quick_batches_group_by_kind_in_first_seen_order_and_deep_is_one_per_node() -> None:
    other = NodeKind("p4", "p4de.24xlarge", efa=False)
    kinds = {"a": P5, "b": other, "c": P5, "d": None}
    assert step_batches(["a", "b", "c", "d"], kinds, "quick") == [
        (["a", "c"], "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"),
        (["b"], "--expect-gpus 8 --expect-efa 0 --expect-neuron 0"),
        (["d"], "--require-env"),
    ]
    assert step_batches(["a", "b", "c"], kinds, "deep") == [
        (["a"], "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"),
        (["b"], "--expect-gpus 8 --expect-efa 0 --expect-neuron 0"),
        (["c"], "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"),
    ]


@pytest.mark.parametrize(
    ("singles", "pairs", "seconds"),
    [
        (1, 0, 1 * 60 + 120),
        (CONCURRENT_STEPS, 0, 60 + 120),  # one full wave
        (CONCURRENT_STEPS + 1, 0, 2 * 60 + 120),  # one step over: a second wave
        (0, 1, 2 * 60 + 120),  # a batch of two: its wave, and its two nodes again in one more
        (0, CONCURRENT_STEPS // 2, 2 * 60 + 120),  # 16 nodes again: still one wave
        (0, CONCURRENT_STEPS // 2 + 1, 3 * 60 + 120),  # 18 nodes again: two waves
    ],
)
def test_the_check_scripts_bound_counts_its_waves(singles: int, pairs: int, seconds: int) -> None:
    batches = [([f"s{i}"], "x") for i in range(singles)] + [([f"p{i}", f"q{i}"], "x") for i in range(pairs)]
    assert script_seconds(batches, 60) == seconds


def test_the_check_script_whole_text(snapshot: SnapshotAssertion) -> None:
    """What the controller runs: one step per batch, a retry for each batch of several, the filter at the end."""
    batches = [(["n-1", "n-2"], "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"), (["n 3"], "--require-env")]
    quick = check_script("gpu q", batches, "quick", 120).replace(TOOL, "HEALTH_SH")
    deep = check_script("gpu", batches[1:], "deep", 1800).replace(TOOL, "HEALTH_SH")
    assert {"quick": quick.splitlines(), "deep": deep.splitlines()} == snapshot


def test_node_rows_keep_the_first_of_each_name_and_drop_none_reasons() -> None:
    listing = (
        "  gpu-1|idle|none  \n"
        "gpu-2|drain*|mlcluster-health: xid failed\n"
        "gpu-1|alloc|none\n"
        "-bad|idle|none\n"
        "gpu-3|IDLE|none\n"
        "gpu-4|down~|\n"
        "not a row\n"
    )
    assert [n.as_dict() for n in parse_nodes(listing)] == [
        {"node": "gpu-1", "state": "idle", "reason": "", "checked": False, "expects": "", "verdict": "not checked",
         "note": "", "failures": []},
        {"node": "gpu-2", "state": "drain*", "reason": "mlcluster-health: xid failed", "checked": False,
         "expects": "", "verdict": "critical", "note": "", "failures": []},
        {"node": "gpu-4", "state": "down~", "reason": "", "checked": False, "expects": "", "verdict": "not checked",
         "note": "", "failures": []},
    ]  # fmt: skip


def test_health_lines_with_and_without_srun_labels() -> None:
    text = (
        "0: gpu-1 FAIL ecc critical: GPU 1. Action: replace it\n"
        "gpu-1 FAIL xid warning: Xid 13\n"
        "3:  gpu-1: 1 critical, 1 warning\n"
        "  gpu-2: healthy  \n"
        "gpu-3: 0 critical, 0 warning\n"
        "gpu-4: unhealthy\n"
        "MLC-STEP gpu-5,gpu-6 exit=1 srun: error: Unable to allocate resources: busy\n"
        "MLC-STEP gpu-7 exit=124\n"
        "MLC-STEP-BATCH gpu-8 exit=1\n"
        "srun: error: Unable to allocate resources: busy\n"
        "srun: error: Unable to allocate resources: busy\n"
        "srun: error: Node gpu-9 not responding\n"
    )
    assert parse_health(text) == (
        [
            Failure("gpu-1", "ecc", "critical", "GPU 1", "replace it"),
            Failure("gpu-1", "xid", "warning", "Xid 13", ""),
        ],
        {"gpu-1", "gpu-2", "gpu-3"},
        {"gpu-5": 1, "gpu-6": 1, "gpu-7": 124},
    )
    assert parse_steps(text) == (
        {
            "gpu-5": "srun: error: Unable to allocate resources: busy",
            "gpu-6": "srun: error: Unable to allocate resources: busy",
            "gpu-7": "",
        },
        ["srun: error: Unable to allocate resources: busy", "srun: error: Node gpu-9 not responding"],
    )


def why(code: int | None, said: str = "", *, truncated: bool = False, exit_code: int = 1) -> dict[str, Any]:
    item = NodeHealth("gpu-1", "idle")
    unanswered(item, partition="gpu", code=code, said=said, exit_code=exit_code, truncated=truncated, seconds=120)
    return item.as_dict()


def test_a_node_without_an_answer_is_not_checked_or_critical_by_why() -> None:
    busy = "srun: error: Unable to allocate resources: Requested nodes are busy"
    assert why(1, busy) == {
        "node": "gpu-1", "state": "idle", "reason": "", "checked": False, "expects": "", "verdict": "not checked",
        "note": f"srun could not allocate it ({busy}); run the checks again", "failures": [],
    }  # fmt: skip
    assert why(None, truncated=True)["note"] == (
        "output truncated at 24000 characters before its answer; "
        "fix the nodes listed and run again, or check a smaller partition with --partition"
    )
    action = "look at `srun -w gpu-1 -p gpu hostname` and the node's slurmd log"

    def failure(detail: str) -> list[dict[str, str]]:
        return [{"host": "gpu-1", "check": "health_tool", "severity": "critical", "detail": detail, "action": action}]

    assert why(124)["failures"] == failure("no answer from mlcluster-health (its job step timed out after 120 s)")
    assert why(125, "srun: error: x")["failures"] == failure(
        "no answer from mlcluster-health (its job step exited 125: srun: error: x)"
    )
    # a step that timed out is critical even when srun said something; a cut output with a step exit is not "cut"
    assert why(0, truncated=True)["failures"] == failure("no answer from mlcluster-health (its job step exited 0)")
    assert why(None, exit_code=3) == {
        "node": "gpu-1", "state": "idle", "reason": "", "checked": False, "expects": "", "verdict": "critical",
        "note": "", "failures": failure("no answer from mlcluster-health (the checks exited 3)"),
    }  # fmt: skip
    assert why(None, "Unable to allocate resources")["verdict"] == "critical"  # no step exit: srun never said it


def test_a_verdict_comes_from_the_worst_finding() -> None:
    warn = Failure("n", "xid", "warning", "d", "")
    crit = Failure("n", "ecc", "critical", "d", "")
    assert NodeHealth("n", "idle", checked=True).verdict == "healthy"
    assert NodeHealth("n", "idle", checked=True, failures=[warn]).verdict == "warning"
    assert NodeHealth("n", "idle", checked=True, failures=[warn, crit]).verdict == "critical"
    assert NodeHealth("n", "drain", "mlcluster-health: ecc").verdict == "critical"
    assert NodeHealth("n", "drain", "admin: mlcluster-health: ecc").verdict == "not checked"
