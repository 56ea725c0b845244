"""Slurm's HealthCheckProgram as mlcluster renders it for ParallelCluster, run by a real slurmd.

The settings are the rendered configuration's ``SlurmSettings.CustomSlurmSettings`` (ParallelCluster
writes each as a ``Key=Value`` line of slurm.conf); only the program's path is moved into the test's
folder, since the node's ``/usr/local/sbin`` is not ours here. The program is the one the health_check
step writes, running the real node health tool (HyperPod's ``health.sh``) against a fake root whose
``nvidia-smi`` shows 7 of 8 GPUs. One node's slurmd is restarted with that configuration (slurmd runs
the program when it starts, before it registers): the node must drain, with the failed check in the
reason ``scontrol show node`` prints.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlcluster.lifecycle.pcluster import HEALTH_CHECK_PROGRAM, HEALTH_TOOL
from mlcluster.pcluster.render import render_cluster_config
from tests.pcluster.pcluster_support import inputs, pcluster
from tests.system.slurm_cluster import NODES, SlurmCluster
from tests.system.system_tools import run

NODE = NODES[-1]
WAIT_S = 40.0
#: ``nvidia-smi -L`` of a p5.48xlarge with one GPU gone: the format is one ``GPU <i>: <name> (UUID: GPU-<uuid>)``
#: line per GPU (nvidia-smi(1), "-L, --list-gpus").
SEVEN_GPUS = "".join(
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-0000-0000-0000-000000000000)\\n" for i in range(7)
)


def scontrol_node(cluster: SlurmCluster, node: str) -> str:
    return run("scontrol", "show", "node", node, "--oneliner", env=cluster.env).stdout


@pytest.fixture
def health_node(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """Afterwards the node's slurmd runs the cluster's own configuration again and the node is resumed."""
    yield slurm_cluster
    slurm_cluster.service("restart", f"slurmd-{NODE}")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        run("scontrol", "update", f"nodename={NODE}", "state=resume", env=slurm_cluster.env)
        if slurm_cluster.nodes_idle(NODE):
            return
        time.sleep(0.5)
    pytest.fail(f"{NODE} did not come back to idle")


def test_rendered_health_check_drains_a_node_failing_a_quick_check(health_node: SlurmCluster, tmp_path: Path) -> None:
    cluster = health_node
    config = render_cluster_config(
        pcluster("queues: [{name: gpu, compute_resources: [{name: p5, instance_type: p5.48xlarge}]}]"), inputs()
    )
    settings = {k: v for item in config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"] for k, v in item.items()}
    assert settings["HealthCheckProgram"] == HEALTH_CHECK_PROGRAM

    fake = tmp_path / "node"
    smi = fake / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] && printf "{SEVEN_GPUS}" && exit 0\nexit 0\n')
    smi.chmod(0o755)
    env_file = fake / "etc/mlcluster/health.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("MLC_EXPECT_GPUS=8\nMLC_EXPECT_EFA=0\nMLC_EXPECT_NEURON=0\n")
    program = tmp_path / HEALTH_CHECK_PROGRAM.lstrip("/")
    program.parent.mkdir(parents=True)
    # As the health_check step writes it, with the fake root and this cluster's slurm.conf (slurmd
    # starts the program with an empty environment).
    program.write_text(
        "#!/bin/sh\n"
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"export PATH MLC_ROOT={fake} SLURM_CONF={cluster.slurm_conf}\n"
        f"exec bash {HEALTH_TOOL} --tier quick --drain\n"
    )
    program.chmod(0o755)
    settings["HealthCheckProgram"] = str(program)
    conf = tmp_path / "slurm.conf"
    conf.write_text(cluster.slurm_conf.read_text() + "".join(f"{key}={value}\n" for key, value in settings.items()))

    cluster.stop(cluster.root / f"run/slurmd-{NODE}.pid")
    cluster._daemon(["slurmd", "-f", str(conf), "-N", NODE], cluster.log_dir / f"slurmd-{NODE}.start.log")
    deadline = time.monotonic() + WAIT_S
    shown = ""
    while time.monotonic() < deadline:
        shown = scontrol_node(cluster, NODE)
        if "DRAIN" in shown:
            break
        time.sleep(0.5)
    state = re.search(r"\bState=(\S+)", shown)
    assert state and "DRAIN" in state[1], shown
    reason = re.search(r"\bReason=(.*?)(?: \[|$)", shown)
    assert reason and reason[1].startswith("mlcluster-health: gpu_count"), shown
    assert all("DRAIN" not in scontrol_node(cluster, other) for other in NODES[:-1])
