"""``mlcluster health`` against the fake controller: node list, the checks on idle nodes, drained nodes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from mlcluster.cli import health as health_module
from mlcluster.cli.health import check_script, expect_args, parse_health, parse_steps, script_seconds, step_batches
from mlcluster.cli.smoke import NodeKind, Partition
from tests.cli.conftest import Aws, FakeNode, World

NODES = (
    "ip-10-1-4-190|idle|none\n"
    "ip-10-1-5-138|drain|mlcluster-health: gpu_count xid failed\n"
    "ip-10-1-6-21|alloc|none\n"
    "ip-10-1-7-9|idle|none\n"
)
#: What the controller prints after HEALTH_FILTER: failed checks and each node's summary (health.sh's formats).
CHECKED = (
    "ip-10-1-4-190: healthy\n"
    "ip-10-1-7-9 FAIL ecc critical: GPU 1 (uncorrected 2, remap failure No). Action: drain the node and replace it "
    "(HyperPod: aws sagemaker batch-replace-cluster-nodes; ParallelCluster: scontrol update nodename=<node> "
    "state=power_down_force)\n"
    "ip-10-1-7-9 FAIL throttle warning: hardware clock slowdown on GPU 0. Action: check cooling and power\n"
    "ip-10-1-7-9: 1 critical, 1 warning\n"
)


def test_health_checks_idle_nodes_and_reports_drained_ones(hyperpod: World, node: FakeNode, aws: Aws) -> None:
    node.on("sinfo -h -N", NODES)
    node.on("mlcluster-health", CHECKED, code=1)
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "HEALTHY ip-10-1-4-190"
    assert lines[1] == "CRITICAL ip-10-1-5-138: drain, not checked now (mlcluster-health: gpu_count xid failed)"
    assert lines[2] == "NOT CHECKED ip-10-1-6-21: alloc, not checked now"
    assert lines[3] == "CRITICAL ip-10-1-7-9"
    assert lines[4] == "     ecc (critical): GPU 1 (uncorrected 2, remap failure No)"
    assert lines[5].startswith("       action: drain the node and replace it (HyperPod: aws sagemaker batch-replace")
    assert lines[6] == "     throttle (warning): hardware clock slowdown on GPU 0"
    assert lines[-1] == "4 nodes in p5: 2 checked (quick), 2 critical"
    assert "2 node(s) with critical findings: ip-10-1-5-138, ip-10-1-7-9" in result.stderr
    script = node.scripts[1]
    assert "h='#!/usr/bin/env bash\n# mlcluster-health:" in script and "check_fi_info()" in script
    assert (
        'timeout 120 srun -N "$count" -p p5 --nodelist="$nodes" --exclusive --immediate=60 '
        '--ntasks-per-node=1 bash -c "$h" mlcluster-health --tier quick "$@"'
    ) in script
    # the quick tier: one job step for the group's nodes, with what a p5.48xlarge must show: 8 GPUs, 32 EFA devices
    assert steps(script) == [
        "step 00000 2 ip-10-1-4-190,ip-10-1-7-9 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &"
    ]
    assert "sinfo -h -N -p p5 -o '%N|%t|%E'" in node.scripts[0]


def steps(script: str) -> list[str]:
    """The job steps the check script starts (one ``step`` line each)."""
    return [line for line in script.splitlines() if line.startswith("step ")]


def test_health_healthy_cluster_and_json(hyperpod: World, node: FakeNode) -> None:
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n")
    node.on("mlcluster-health", "ip-10-1-4-190: healthy\nip-10-1-5-138: 0 critical, 1 warning\n"
            "ip-10-1-5-138 FAIL xid warning: Xid 13 since boot. Action: look up each code\n")  # fmt: skip
    result = hyperpod.run("health", "hyperpod", "--tier", "deep", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["healthy"], data["tier"], data["partition"]) == (True, "deep", "p5")
    assert [(n["node"], n["verdict"]) for n in data["nodes"]] == [
        ("ip-10-1-4-190", "healthy"),
        ("ip-10-1-5-138", "warning"),
    ]
    assert data["nodes"][1]["failures"][0]["action"] == "look up each code"
    script = node.scripts[1]
    assert "timeout 1800 srun" in script and 'bash -c "$h" mlcluster-health --tier deep "$@"' in script
    # nccl-tests are built with MPI=1: the deep tier's all_reduce needs Slurm's PMIx server (the smoke test's --mpi),
    # one rank on one node per job step: each node is its own MPI world and gets its own verdict
    assert "--ntasks-per-node=1 --mpi=pmix --cpu-bind=none bash -c" in script
    assert "--mpi=pmix" not in script.replace("--ntasks-per-node=1 --mpi=pmix --cpu-bind=none bash -c", "")
    assert steps(script) == [
        "step 00000 1 ip-10-1-4-190 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &",
        "step 00001 1 ip-10-1-5-138 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &",
    ]
    assert (
        data["nodes"][0]["expects"]
        == "--expect-gpus 8 --expect-efa 32 --expect-neuron 0 (worker-group-1: ml.p5.48xlarge)"
    )


def test_health_a_node_without_the_tool_is_critical(hyperpod: World, node: FakeNode) -> None:
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n")
    node.on(
        "mlcluster-health",
        "ip-10-1-4-190: healthy\nslurmstepd: error: execve(): mlcluster-health: No such file or directory\n",
        code=2,
    )
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 1
    assert "     health_tool (critical): no answer from mlcluster-health (the checks exited 2)" in result.stdout


def test_health_no_nodes_and_unknown_partition(hyperpod: World, node: FakeNode) -> None:
    node.on("sinfo -h -N", "slurm_load_node: Unable to contact slurm controller (connect failure)\n", code=1)
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 1
    assert "sinfo found no nodes in partition p5: slurm_load_node: Unable to contact slurm controller" in result.stderr
    assert len(node.scripts) == 1
    bad = hyperpod.run("health", "hyperpod", "--partition", "gpu")
    assert bad.exit_code == 1
    assert "--partition gpu: not a partition of hyperpod (allowed: p5)" in bad.stderr


def test_health_session_that_times_out_is_an_error(hyperpod: World, node: FakeNode) -> None:
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\n")
    node.on("mlcluster-health", "", code=-1, status="TimedOut")
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 1
    assert "quick checks did not finish on" in result.stderr


# -- expectations per node: each compute resource's own instance type and efa setting -----------------------------
def mixed_queue(world: World) -> None:
    """The p5 environment's queue with a second compute resource: p4de.24xlarge with EFA off (``efa: false``)."""
    path = world.environments / f"{world.env}.yaml"
    data = yaml.safe_load(path.read_text())
    data["cluster"]["pcluster"]["queues"][0]["compute_resources"].append(
        {"name": "p4de-noefa", "instance_type": "p4de.24xlarge", "min_count": 0, "max_count": 2, "efa": False}
    )
    path.write_text(yaml.safe_dump(data))


def test_health_expects_each_compute_resources_own_type_and_efa(pcluster: World, node: FakeNode) -> None:
    """A queue of a p5 resource (EFA on) and a p4de resource with ``efa: false``: each node is checked against its
    own resource (named in its Slurm name), so the p4de nodes expect no EFA device instead of the p5's 32."""
    mixed_queue(pcluster)
    node.on(
        "sinfo -h -N",
        "compute-gpu-st-p5-1|idle|none\ncompute-gpu-dy-p4de-noefa-1|idle|none\ncompute-gpu-st-p5-2|idle|none\n",
    )
    node.on(
        "mlcluster-health",
        "compute-gpu-st-p5-1: healthy\ncompute-gpu-st-p5-2: healthy\ncompute-gpu-dy-p4de-noefa-1: healthy\n",
    )
    result = pcluster.run("health", "p5", "--json")
    assert result.exit_code == 0, result.output
    assert steps(node.scripts[1]) == [
        "step 00000 2 compute-gpu-st-p5-1,compute-gpu-st-p5-2 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &",
        "step 00001 1 compute-gpu-dy-p4de-noefa-1 --expect-gpus 8 --expect-efa 0 --expect-neuron 0 &",
    ]
    expects = {n["node"]: n["expects"] for n in json.loads(result.stdout)["nodes"]}
    assert expects["compute-gpu-dy-p4de-noefa-1"].endswith("(p4de-noefa: p4de.24xlarge)")
    # deep: one job step per node, each with its own node's counts
    node.scripts.clear()
    assert pcluster.run("health", "p5", "--tier", "deep").exit_code == 0
    assert steps(node.scripts[1]) == [
        "step 00000 1 compute-gpu-st-p5-1 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &",
        "step 00001 1 compute-gpu-dy-p4de-noefa-1 --expect-gpus 8 --expect-efa 0 --expect-neuron 0 &",
        "step 00002 1 compute-gpu-st-p5-2 --expect-gpus 8 --expect-efa 32 --expect-neuron 0 &",
    ]


def test_node_kinds_from_parallelclusters_node_names() -> None:
    """``<queue>-<st|dy>-<resource>-<n>``: a resource whose name starts like another's is told apart; a name of
    another queue or shape is no kind."""
    p5, p5big = NodeKind("p5", "p5.48xlarge", efa=True), NodeKind("p5-big", "p5en.48xlarge", efa=True)
    queue = Partition("gpu", (p5, p5big), "pcluster")
    assert queue.kind_of("gpu-st-p5-1") == p5
    assert queue.kind_of("gpu-dy-p5-12") == p5
    assert queue.kind_of("gpu-st-p5-big-3") == p5big
    assert queue.kind_of("other-st-p5-1") is None
    assert queue.kind_of("gpu-xx-p5-1") is None
    assert queue.kind_of("gpu-st-p5-") is None


def test_hyperpod_groups_of_different_types_in_one_partition_use_the_nodes_own_file() -> None:
    """HyperPod names Slurm nodes by host: where groups of different types share a partition the operator command
    cannot tell them apart, so those nodes run with --require-env (their own health.env decides, or they fail);
    groups of one type are uniform and get the counts."""
    mixed = Partition("gpu", (NodeKind("a", "ml.p5.48xlarge", True), NodeKind("b", "ml.p4d.24xlarge", True)))
    assert mixed.kind_of("ip-10-1-4-190") is None
    assert step_batches(["ip-10-1-4-190"], {"ip-10-1-4-190": None}, "quick") == [(["ip-10-1-4-190"], "--require-env")]
    same = Partition("gpu", (NodeKind("a", "ml.p5.48xlarge", True), NodeKind("b", "ml.p5.48xlarge", True)))
    assert same.uniform and same.kind_of("ip-10-1-4-190") == same.kinds[0]


# -- the check script itself, under bash, with a stand-in srun ------------------------------------------------------
#: srun as the check script calls it: records its arguments and how many sruns run at once, then prints what
#: $DATA/<node> holds for each node of --nodelist (hangs when $DATA/<node>.hang exists) and exits with
#: $DATA/<node>.code. A node with $DATA/<node>.busy (taken by another job) fails the whole step with srun's
#: allocation error, before any node runs anything.
FAKE_SRUN = r"""#!/bin/bash
line=""; prev=""
for a in "$@"; do if [ "$prev" = -c ]; then line+=" SCRIPT"; else line+=" $a"; fi; prev=$a; done
printf '%s\n' "${line# }" >>"$DATA/calls"
nodes=""; count=""
while (($#)); do
  case $1 in
    --nodelist=*) nodes=${1#--nodelist=} ;;
    -N) count=$2; shift ;;
  esac
  shift
done
for host in ${nodes//,/ }; do
  if [ -e "$DATA/$host.busy" ]; then
    echo "srun: error: Unable to allocate resources: Requested nodes are busy" >&2
    exit 1
  fi
done
touch "$DATA/running.$$"
n=$(ls "$DATA" | grep -c '^running\.')
echo "$n" >>"$DATA/concurrency"
sleep 0.3
code=0
for host in ${nodes//,/ }; do
  if [ -e "$DATA/$host.hang" ]; then rm -f "$DATA/running.$$"; exec sleep 30; fi
  cat "$DATA/$host"
  [ ! -e "$DATA/$host.code" ] || code=$(<"$DATA/$host.code")
done
rm -f "$DATA/running.$$"
exit "$code"
"""


def test_the_deep_tier_gives_each_node_its_own_verdict_under_bash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One bad node (its single-node all-reduce fails) is critical alone, a hung node's step ends at its timeout,
    the others are healthy; at most CONCURRENT_STEPS sruns run at once."""
    monkeypatch.setattr(health_module, "CONCURRENT_STEPS", 2)
    data, tools, scratch = tmp_path / "data", tmp_path / "bin", tmp_path / "tmp"
    for folder in (data, tools, scratch):
        folder.mkdir()
    (tools / "srun").write_text(FAKE_SRUN)
    (tools / "srun").chmod(0o755)
    names = ["q-st-p5-1", "q-st-p5-2", "q-st-p5-3", "q-st-p5-4", "q-st-p5-5"]
    for name in names:
        (data / name).write_text(f"{name}: healthy\n")
    (data / "q-st-p5-2").write_text(
        "q-st-p5-2 FAIL nccl_single critical: all_reduce on 8 GPUs failed: x. Action: check NVLink\n"
        "q-st-p5-2: 1 critical, 0 warning\n"
    )
    (data / "q-st-p5-2.code").write_text("1")
    (data / "q-st-p5-4.hang").touch()
    kind = NodeKind("p5", "p5.48xlarge", efa=True)
    batches = step_batches(names, dict.fromkeys(names, kind), "deep")
    script = check_script("q", batches, "deep", 2)
    done = run_script(script, tools, data, scratch)
    calls = (data / "calls").read_text().splitlines()
    assert len(calls) == 5 and all(c.startswith("-N 1 -p q --nodelist=q-st-p5-") for c in calls), calls
    assert all(
        c.endswith(
            "--cpu-bind=none bash -c SCRIPT mlcluster-health --tier deep --expect-gpus 8 --expect-efa 32 --expect-neuron 0"
        )
        for c in calls
    ), calls
    assert max(int(n) for n in (data / "concurrency").read_text().split()) == 2
    failures, answered, exits = parse_health(done.stdout)
    assert answered == {"q-st-p5-1", "q-st-p5-2", "q-st-p5-3", "q-st-p5-5"}, done.stdout
    assert [(f.host, f.check) for f in failures] == [("q-st-p5-2", "nccl_single")]
    assert exits == {"q-st-p5-2": 1, "q-st-p5-4": 124}
    assert list(scratch.iterdir()) == []  # the script's own folder went
    # the deep tier binds no CPU (one rank drives all 8 GPUs with its threads), as the smoke test
    assert all("--mpi=pmix --cpu-bind=none bash -c" in c for c in calls), calls
    # a progress line on stderr as each step ends (keeps a long session's output flowing); the parser ignores them
    progress = sorted(line for line in done.stderr.splitlines() if line.startswith("MLC-PROGRESS "))
    assert progress == [
        "MLC-PROGRESS q-st-p5-1 exit=0",
        "MLC-PROGRESS q-st-p5-2 exit=1",
        "MLC-PROGRESS q-st-p5-3 exit=0",
        "MLC-PROGRESS q-st-p5-4 exit=124",
        "MLC-PROGRESS q-st-p5-5 exit=0",
    ], done.stderr
    assert parse_health(done.stdout + done.stderr) == parse_health(done.stdout)
    assert parse_steps(done.stdout + done.stderr) == parse_steps(done.stdout)


def run_script(
    script: str, tools: Path, data: Path, scratch: Path, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    """The check script under bash, with the stand-in srun first on PATH."""
    return subprocess.run(
        ["bash", "-c", "set -o pipefail\n" + prelude + script],
        env={"PATH": f"{tools}:/usr/bin:/bin", "DATA": str(data), "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fake_cluster(tmp_path: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """The stand-in srun's folders: its data (each node healthy), its bin, a TMPDIR."""
    data, tools, scratch = tmp_path / "data", tmp_path / "bin", tmp_path / "tmp"
    for folder in (data, tools, scratch):
        folder.mkdir()
    (tools / "srun").write_text(FAKE_SRUN)
    (tools / "srun").chmod(0o755)
    for name in names:
        (data / name).write_text(f"{name}: healthy\n")
    return data, tools, scratch


def test_a_quick_batch_refused_for_one_taken_node_runs_again_node_by_node(tmp_path: Path) -> None:
    """The quick tier's one ``srun -N 3`` fails for all when one node was taken after the listing: its nodes run
    again, one step each; the free ones answer, the taken one keeps srun's own words (not dropped by the filter)."""
    names = ["q-st-p5-1", "q-st-p5-2", "q-st-p5-3"]
    data, tools, scratch = fake_cluster(tmp_path, names)
    (data / "q-st-p5-2.busy").touch()
    kind = NodeKind("p5", "p5.48xlarge", efa=True)
    batches = step_batches(names, dict.fromkeys(names, kind), "quick")
    done = run_script(check_script("q", batches, "quick", 5), tools, data, scratch)
    calls = [c.split(" --exclusive")[0] for c in (data / "calls").read_text().splitlines()]
    assert calls[0] == "-N 3 -p q --nodelist=q-st-p5-1,q-st-p5-2,q-st-p5-3"
    assert sorted(calls[1:]) == [f"-N 1 -p q --nodelist={n}" for n in names]
    failures, answered, exits = parse_health(done.stdout)
    assert (failures, answered) == ([], {"q-st-p5-1", "q-st-p5-3"}), done.stdout
    assert exits == {"q-st-p5-2": 1}, done.stdout
    said, errors = parse_steps(done.stdout)
    assert said == {"q-st-p5-2": "srun: error: Unable to allocate resources: Requested nodes are busy"}
    assert errors == ["srun: error: Unable to allocate resources: Requested nodes are busy"]
    # a batch that answered (even with a critical node) does not run again
    (data / "q-st-p5-2.busy").unlink()
    (data / "calls").unlink()
    (data / "q-st-p5-2").write_text("q-st-p5-2 FAIL ecc critical: GPU 1. Action: x\nq-st-p5-2: 1 critical, 0 warning\n")
    (data / "q-st-p5-2.code").write_text("1")
    done = run_script(check_script("q", batches, "quick", 5), tools, data, scratch)
    assert len((data / "calls").read_text().splitlines()) == 1
    assert parse_health(done.stdout)[1] == set(names)
    # the timeout allows the rerun: a wave of batches, then the batches' nodes one by one
    assert script_seconds(batches, 120) == 2 * 120 + 120
    assert script_seconds(step_batches(names, dict.fromkeys(names, kind), "deep"), 1800) == 1800 + 120


def test_the_throttle_sleeps_where_bash_has_no_wait_n(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bash 4.2 (Amazon Linux 2) has no ``wait -n``: it fails at once, and the throttle must sleep, not spin."""
    monkeypatch.setattr(health_module, "CONCURRENT_STEPS", 2)
    names = [f"q-st-p5-{i}" for i in range(1, 6)]
    data, tools, scratch = fake_cluster(tmp_path, names)
    kind = NodeKind("p5", "p5.48xlarge", efa=True)
    old_bash = (
        'wait() { if [ "${1:-}" = -n ]; then echo x >>"$DATA/waits"; '
        'echo "bash: wait: -n: invalid option" >&2; return 2; fi; builtin wait "$@"; }\n'
    )
    script = check_script("q", step_batches(names, dict.fromkeys(names, kind), "deep"), "deep", 5)
    done = run_script(script, tools, data, scratch, prelude=old_bash)
    assert parse_health(done.stdout)[1] == set(names), done.stdout + done.stderr
    assert max(int(n) for n in (data / "concurrency").read_text().split()) <= 2
    assert len((data / "waits").read_text().split()) < 15
    assert "invalid option" not in done.stderr


def test_health_a_node_whose_step_timed_out_says_so(hyperpod: World, node: FakeNode) -> None:
    """A node's job step ended by ``timeout`` (124) or refused by srun: named per node, the others unaffected."""
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\nip-10-1-6-21|idle|none\n")
    node.on(
        "mlcluster-health",
        "ip-10-1-4-190: healthy\nMLC-STEP ip-10-1-5-138 exit=124\nMLC-STEP ip-10-1-6-21 exit=1\n",
        code=1,
    )
    result = hyperpod.run("health", "hyperpod", "--tier", "deep", "--json")
    assert result.exit_code == 1
    nodes = {n["node"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["ip-10-1-4-190"]["verdict"] == "healthy"
    assert nodes["ip-10-1-5-138"]["failures"][0]["detail"] == (
        "no answer from mlcluster-health (its job step timed out after 1800 s)"
    )
    assert nodes["ip-10-1-6-21"]["failures"][0]["detail"] == "no answer from mlcluster-health (its job step exited 1)"


def test_health_a_node_that_warned_and_then_hung_is_critical(hyperpod: World, node: FakeNode) -> None:
    """A node that printed a warning and then hung (no summary, its step ended by ``timeout``) ran only part of
    its checks: critical, with the warning kept beside the health_tool failure, and the command exits 1."""
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n")
    node.on(
        "mlcluster-health",
        "ip-10-1-4-190: healthy\n"
        "ip-10-1-5-138 FAIL xid warning: Xid 13 since boot. Action: look up each code\n"
        "MLC-STEP ip-10-1-5-138 exit=124\n",
        code=1,
    )
    result = hyperpod.run("health", "hyperpod", "--tier", "deep", "--json")
    assert result.exit_code == 1, result.output
    nodes = {n["node"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["ip-10-1-5-138"]["verdict"] == "critical"
    assert [(f["check"], f["severity"]) for f in nodes["ip-10-1-5-138"]["failures"]] == [
        ("xid", "warning"),
        ("health_tool", "critical"),
    ]
    assert nodes["ip-10-1-5-138"]["failures"][1]["detail"] == (
        "no answer from mlcluster-health (its job step timed out after 1800 s)"
    )


def test_health_a_node_srun_could_not_allocate_is_not_checked(hyperpod: World, node: FakeNode) -> None:
    """A node taken by a job between the listing and srun: srun's own error is shown and the node is "not
    checked" (it was never reached), not critical; another srun error (a node failure) stays critical."""
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n")
    busy = "srun: error: Unable to allocate resources: Requested nodes are busy"
    node.on("mlcluster-health", f"ip-10-1-4-190: healthy\n{busy}\nMLC-STEP ip-10-1-5-138 exit=1 {busy}\n", code=0)
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == f"NOT CHECKED ip-10-1-5-138: srun could not allocate it ({busy}); run the checks again"
    assert busy in lines[2:]
    assert lines[-1] == "2 nodes in p5: 1 checked (quick), 0 critical"
    node.scripts.clear()
    lost = "srun: error: Node failure on ip-10-1-5-138"
    node.on("mlcluster-health", f"ip-10-1-4-190: healthy\n{lost}\nMLC-STEP ip-10-1-5-138 exit=1 {lost}\n", code=0)
    data = json.loads(hyperpod.run("health", "hyperpod", "--json").stdout)
    assert data["srun_errors"] == [lost]
    assert data["nodes"][1]["verdict"] == "critical"
    assert (
        data["nodes"][1]["failures"][0]["detail"] == f"no answer from mlcluster-health (its job step exited 1: {lost})"
    )


def test_health_output_cut_at_run_commands_limit_leaves_the_rest_not_checked(pcluster: World, node: FakeNode) -> None:
    """Run Command keeps 24000 characters of output: a node whose lines fell past the cut was never heard, not
    found broken: "not checked (output truncated)" with what to do, not critical; the nodes heard are kept."""
    node.on("sinfo -h -N", "compute-gpu-st-p5-1|idle|none\ncompute-gpu-st-p5-2|idle|none\n")
    warning = "compute-gpu-st-p5-1 FAIL xid warning: Xid 13 since boot, with a long detail. Action: look up each code\n"
    text = warning * (24000 // len(warning) + 1)
    node.on("mlcluster-health", text[:24000], code=0)
    result = pcluster.run("health", "p5", "--json")
    assert result.exit_code == 0, result.output
    nodes = {n["node"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["compute-gpu-st-p5-1"]["verdict"] == "warning"
    assert nodes["compute-gpu-st-p5-2"]["verdict"] == "not checked"
    assert nodes["compute-gpu-st-p5-2"]["note"].startswith("output truncated at 24000 characters before its answer")
    assert "--partition" in nodes["compute-gpu-st-p5-2"]["note"]
    # one character less is the whole output: a node with no line at all then is critical
    node.on("mlcluster-health", text[:23999], code=0)
    nodes = {n["node"]: n for n in json.loads(pcluster.run("health", "p5", "--json").stdout)["nodes"]}
    assert nodes["compute-gpu-st-p5-2"]["verdict"] == "critical"


@pytest.mark.parametrize(
    ("instance_type", "efa", "expected"),
    [
        # in the tables: the counts (the edge that is accepted)
        ("p5.48xlarge", True, "--expect-gpus 8 --expect-efa 32 --expect-neuron 0"),
        ("ml.trn1.32xlarge", True, "--expect-gpus 0 --expect-efa 8 --expect-neuron 16"),
        ("g5.48xlarge", False, "--expect-gpus 8 --expect-efa 0 --expect-neuron 0"),
        ("m5.large", True, "--expect-gpus 0 --expect-efa 0 --expect-neuron 0"),
        # not in INSTANCE_TYPES, or an EFA type with EFA on and no EFA_DEVICES count: the node's own health.env
        ("p6e-gb200.36xlarge", True, "--require-env"),
        ("ml.p6e-gb200.36xlarge", True, "--require-env"),
        ("g5.48xlarge", True, "--require-env"),
        ("g6e.48xlarge", True, "--require-env"),
    ],
)
def test_types_missing_from_the_tables_use_the_nodes_own_file(instance_type: str, efa: bool, expected: str) -> None:
    """An instance type the tables do not know would be checked against zeros and pass: it runs with
    --require-env, so its own health.env decides (or it fails)."""
    assert expect_args(NodeKind("r", instance_type, efa)) == expected


def test_health_prints_brackets_in_reasons_and_srun_text_as_written(hyperpod: World, node: FakeNode) -> None:
    """A drain reason is free text anyone with scontrol can set, and srun's errors quote what they like: a
    ``[bold]`` or a stray ``[/x]`` in them is printed as written, not read as Rich markup (which would drop it
    or raise MarkupError mid-report)."""
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|drain|ops [bold]rma[/x] ticket [42]\n"
            "ip-10-1-6-21|idle|none\n")  # fmt: skip
    said = "srun: error: [/x] Unable to allocate resources: Requested nodes are busy [bold]"
    node.on("mlcluster-health", f"ip-10-1-4-190: healthy\n{said}\nMLC-STEP ip-10-1-6-21 exit=1 {said}\n", code=0)
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == "NOT CHECKED ip-10-1-5-138: drain, not checked now (ops [bold]rma[/x] ticket [42])"
    assert lines[2] == f"NOT CHECKED ip-10-1-6-21: srun could not allocate it ({said}); run the checks again"
    assert said in lines[3:]
