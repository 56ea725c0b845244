"""``mlcluster health`` against the fake controller: node list, the checks on idle nodes, drained nodes."""

from __future__ import annotations

import json

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
    assert (
        "timeout 120 srun -N 2 -p p5 --nodelist=ip-10-1-4-190,ip-10-1-7-9 --exclusive --immediate=60 "
        "--ntasks-per-node=1 bash -c '#!/usr/bin/env bash\n# mlcluster-health:"
    ) in script
    # the tool goes with the command, with what a p5.48xlarge must show: 8 GPUs, 32 EFA devices
    assert (
        "' mlcluster-health --tier quick --expect-gpus 8 --expect-efa 32 --expect-neuron 0 2>&1 | grep -E"
    ) in script
    assert "check_fi_info()" in script
    assert "sinfo -h -N -p p5 -o '%N|%t|%E'" in node.scripts[0]


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
    assert "timeout 1800 srun" in node.scripts[1] and "mlcluster-health --tier deep --expect-gpus 8" in node.scripts[1]
    # nccl-tests are built with MPI=1: the deep tier's all_reduce needs Slurm's PMIx server (the smoke test's --mpi)
    assert "--ntasks-per-node=1 --mpi=pmix bash -c" in node.scripts[1]
    assert "--mpi=pmix" not in node.scripts[1].replace("--ntasks-per-node=1 --mpi=pmix bash -c", "")


def test_health_a_node_without_the_tool_is_critical(hyperpod: World, node: FakeNode) -> None:
    node.on("sinfo -h -N", "ip-10-1-4-190|idle|none\nip-10-1-5-138|idle|none\n")
    node.on(
        "mlcluster-health",
        "ip-10-1-4-190: healthy\nslurmstepd: error: execve(): mlcluster-health: No such file or directory\n",
        code=2,
    )
    result = hyperpod.run("health", "hyperpod")
    assert result.exit_code == 1
    assert "     health_tool (critical): no answer from mlcluster-health (srun exited 2)" in result.stdout


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
