"""The collector's target refresher: Slurm's node list in, the file_sd files out, as the collector's user.

The script runs as it does on the node (``python3 collector_targets.py --config ...``)
as an unprivileged uid (setpriv), against a fake ``scontrol`` that prints what a
test puts in a file, and writes into a folder that uid owns under a fake root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlcluster.collector import TARGETS_CONFIG_FILE, CollectorInputs, pcluster_inputs, render
from mlcluster.config.pcluster import ComputeResourceConfig, PclusterConfig, QueueConfig
from mlcluster.lifecycle.collector import COLLECTOR_DIR
from mlcluster.lifecycle.collector.collector_targets import Config, Node, kinds_of, parse_nodes, target_groups

COLLECTOR_UID = 2990
SCRIPT = COLLECTOR_DIR / "collector_targets.py"

#: ``scontrol show nodes --oneliner`` of a ParallelCluster cluster: two GPU nodes up, one powered down,
#: one powering up (no address yet), a CPU node in a mixed queue, and a Trainium node. The State
#: values are as a real scontrol prints them (tests/system/test_slurm.py runs one): flags joined with
#: ``+``, never sinfo's suffixes (``#``, ``*``, ``~``); a node that has not answered yet has NOT_RESPONDING.
GPU_1 = (
    "NodeName=gpu-st-p5-1 Arch=x86_64 CoresPerSocket=48 CPUAlloc=0 AvailableFeatures=static,p5.48xlarge,p5,efa,gpu "
    "ActiveFeatures=static,p5.48xlarge,p5,efa,gpu Gres=gpu:h100:8 NodeAddr=10.1.0.20 NodeHostName=gpu-st-p5-1 "
    "OS=Linux 5.15.0-1051-aws #56-Ubuntu SMP RealMemory=2000000 State=IDLE+CLOUD Partitions=gpu "
    "Reason=none [root@2026-11-23T10:00:00]"
)
GPU_2 = (
    GPU_1.replace("gpu-st-p5-1", "gpu-st-p5-2").replace("10.1.0.20", "10.1.0.21").replace("IDLE+CLOUD", "MIXED+CLOUD")
)
GPU_DOWN = (
    "NodeName=gpu-dy-p5-1 AvailableFeatures=dynamic,p5.48xlarge,p5,efa,gpu NodeAddr=gpu-dy-p5-1 "
    "NodeHostName=gpu-dy-p5-1 State=IDLE+CLOUD+POWERED_DOWN Partitions=gpu"
)
GPU_BOOTING = (
    "NodeName=gpu-dy-p5-2 AvailableFeatures=dynamic,p5.48xlarge,p5,efa,gpu NodeAddr=gpu-dy-p5-2 "
    "NodeHostName=gpu-dy-p5-2 State=IDLE+CLOUD+NOT_RESPONDING+POWERING_UP Partitions=gpu"
)
CPU = (
    "NodeName=mixed-st-c5-1 AvailableFeatures=static,c5.4xlarge,c5 NodeAddr=10.1.0.40 State=ALLOCATED Partitions=mixed"
)
TRN = "NodeName=trn-st-trn1-1 AvailableFeatures=static,trn1.32xlarge,trn1,efa NodeAddr=10.1.0.50 State=IDLE Partitions=trn"


def cluster() -> PclusterConfig:
    def queue(name: str, *types: str) -> QueueConfig:
        return QueueConfig(
            name=name,
            compute_resources=tuple(
                ComputeResourceConfig(name=t.split(".")[0], instance_type=t, min_count=0, max_count=2) for t in types
            ),
        )

    return PclusterConfig(
        queues=(queue("gpu", "p5.48xlarge"), queue("mixed", "g5.12xlarge", "c5.4xlarge"), queue("trn", "trn1.32xlarge"))
    )


def inputs() -> CollectorInputs:
    return pcluster_inputs(
        cluster(),
        cluster_name="ml",
        environment="test",
        region="us-west-2",
        remote_write_url="https://example/api/v1/remote_write",
        scrape_interval_seconds=30,
    )


class Head:
    """A fake head node: the refresher's configuration, a fake scontrol, the collector's target folder."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "root"
        self.targets = self.root / "var/lib/mlcluster-collector/targets"
        self.targets.mkdir(parents=True)
        os.chown(self.targets, COLLECTOR_UID, COLLECTOR_UID)
        self.config = base / TARGETS_CONFIG_FILE
        self.config.write_text(render(inputs())[TARGETS_CONFIG_FILE])
        self.nodes = base / "nodes.txt"
        self.scontrol = base / "scontrol"
        self.scontrol.write_text(
            '#!/bin/sh\n[ "$*" = "show nodes --oneliner" ] || exit 2\n'
            f'[ -f {base}/fail ] && {{ echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1; }}\n'
            f"cat {self.nodes}\n"
        )
        self.scontrol.chmod(0o755)
        for path in (self.config, self.nodes):
            path.touch()

    def slurm(self, *lines: str) -> None:
        self.nodes.write_text("".join(f"{line}\n" for line in lines) if lines else "No nodes in the system\n")

    def run(self) -> subprocess.CompletedProcess[str]:
        """The refresher as the timer runs it: as the collector's user."""
        command = [sys.executable, str(SCRIPT), "--config", str(self.config), "--scontrol", str(self.scontrol)]
        return subprocess.run(
            ["setpriv", f"--reuid={COLLECTOR_UID}", f"--regid={COLLECTOR_UID}", "--clear-groups", *command],
            env={"PATH": "/usr/bin:/bin", "MLCLUSTER_ROOT": str(self.root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def targets_of(self, job: str) -> dict[str, str]:
        """node name -> address:port in ``job``'s file."""
        groups = json.loads((self.targets / f"{job}.json").read_text())
        return {g["labels"]["node"]: g["targets"][0] for g in groups}


@pytest.fixture
def head() -> Iterator[Head]:
    base = Path(tempfile.mkdtemp(prefix="mlc-collector-"))
    base.chmod(0o755)  # pytest's own tmp folders are root-only; the collector's user must reach the files
    try:
        yield Head(base)
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_nodes_with_an_instance_become_targets_of_their_jobs(head: Head) -> None:
    head.slurm(GPU_1, GPU_2, GPU_DOWN, GPU_BOOTING, CPU, TRN)
    done = head.run()
    assert done.returncode == 0, done.stderr
    assert head.targets_of("node") == {
        "gpu-st-p5-1": "10.1.0.20:9100",
        "gpu-st-p5-2": "10.1.0.21:9100",
        "mixed-st-c5-1": "10.1.0.40:9100",
        "trn-st-trn1-1": "10.1.0.50:9100",
    }
    # The CPU node of the mixed (GPU and CPU) queue is told apart by its instance type feature.
    assert head.targets_of("dcgm") == {"gpu-st-p5-1": "10.1.0.20:9400", "gpu-st-p5-2": "10.1.0.21:9400"}
    assert head.targets_of("neuron") == {"trn-st-trn1-1": "10.1.0.50:9410"}
    groups = json.loads((head.targets / "dcgm.json").read_text())
    assert groups[0]["labels"] == {"node": "gpu-st-p5-1", "partition": "gpu", "role": "compute"}
    for job in ("node", "dcgm", "neuron"):
        info = (head.targets / f"{job}.json").stat()
        assert (info.st_uid, oct(info.st_mode & 0o777)) == (COLLECTOR_UID, "0o644")
    assert "dcgm: 2 target(s) (updated)" in done.stdout


def test_nodes_coming_and_going_change_the_files_atomically(head: Head) -> None:
    head.slurm(GPU_1, GPU_DOWN)
    assert head.run().returncode == 0
    node_file = head.targets / "node.json"
    neuron_file = head.targets / "neuron.json"
    first, neuron_inode = node_file.stat().st_ino, neuron_file.stat().st_ino
    # gpu-st-p5-1 scales away (powered down, its address back to its name); gpu-dy-p5-1 comes up.
    head.slurm(
        GPU_1.replace("NodeAddr=10.1.0.20", "NodeAddr=gpu-st-p5-1").replace("IDLE+CLOUD", "IDLE+CLOUD+POWERING_DOWN"),
        GPU_DOWN.replace("NodeAddr=gpu-dy-p5-1", "NodeAddr=10.1.0.99").replace("+POWERED_DOWN", ""),
    )
    done = head.run()
    assert done.returncode == 0, done.stderr
    assert head.targets_of("node") == {"gpu-dy-p5-1": "10.1.0.99:9100"}
    assert head.targets_of("dcgm") == {"gpu-dy-p5-1": "10.1.0.99:9400"}
    assert node_file.stat().st_ino != first  # replaced by a rename, never rewritten in place
    assert neuron_file.stat().st_ino == neuron_inode  # unchanged content: left alone
    assert sorted(p.name for p in head.targets.iterdir()) == ["dcgm.json", "neuron.json", "node.json"]  # no temp files
    head.slurm()
    assert head.run().returncode == 0
    assert json.loads(node_file.read_text()) == []


def test_a_failing_scontrol_keeps_the_files_and_fails(head: Head) -> None:
    head.slurm(GPU_1)
    assert head.run().returncode == 0
    before = (head.targets / "node.json").read_text()
    (head.base / "fail").touch()
    done = head.run()
    assert done.returncode == 1
    assert "Unable to contact slurm controller" in done.stderr
    node = (head.targets / "node.json").read_text()
    assert node == before


def test_a_bad_configuration_is_named(head: Head) -> None:
    head.config.write_text(json.dumps({"output_dir": "relative/path", "jobs": []}))
    done = head.run()
    assert done.returncode == 1
    assert f"error: {head.config}: output_dir = 'relative/path' is not valid; allowed: an absolute path" in done.stderr
    head.config.write_text(json.dumps({"output_dir": "/x", "jobs": [{"job": "node", "port": 70000, "nodes": "all"}]}))
    assert "jobs[0]" in head.run().stderr


def test_the_collectors_user_cannot_write_anywhere_else(head: Head) -> None:
    """The refresher writes only where the collector's user may: a folder it does not own fails the run."""
    os.chown(head.targets, 0, 0)
    head.slurm(GPU_1)
    done = head.run()
    assert done.returncode == 1
    assert "Permission denied" in done.stderr
    assert list(head.targets.iterdir()) == []


CONFIG = Config(
    output_dir=Path("/t"),
    jobs=(),
    partitions={"gpu": frozenset({"gpu"}), "mixed": frozenset({"gpu"})},
    instance_types={"c5.4xlarge": frozenset()},
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (GPU_1, ["gpu-st-p5-1"]),
        (GPU_DOWN, []),
        (GPU_BOOTING, []),
        ("NodeName=a NodeAddr=10.0.0.1 State=FUTURE Partitions=gpu", []),
        # down but there: up == 0 shows it
        ("NodeName=a NodeAddr=10.0.0.1 State=DOWN+DRAIN+NOT_RESPONDING Partitions=gpu", ["a"]),
        ("NodeName=a NodeAddr=ip-10-0-0-1 State=IDLE Partitions=gpu", ["a"]),  # a host name counts
        # HyperPod: nodes named and addressed by host name, not cloud nodes.
        ("NodeName=ip-10-1-4-190 NodeAddr=ip-10-1-4-190 State=IDLE Partitions=p5", ["ip-10-1-4-190"]),
        ("NodeName=q-dy-c-1 NodeAddr=q-dy-c-1 State=IDLE+CLOUD Partitions=q", []),  # no instance yet
        ("NodeName=q-dy-c-1 NodeAddr=10.0.0.9 State=IDLE+CLOUD+NOT_RESPONDING+POWERING_UP Partitions=q", []),  # booting
        ("NodeName=a NodeAddr= State=IDLE Partitions=gpu", []),
    ],
)
def test_which_nodes_are_scraped(line: str, expected: list[str]) -> None:
    assert [n.name for n in parse_nodes(line)] == expected


def test_kinds_by_instance_type_feature_then_partition() -> None:
    cpu = Node("c", "10.0.0.1", ("mixed",), ("static", "c5.4xlarge"))
    unknown = Node("g", "10.0.0.2", ("mixed", "other"), ("dynamic",))
    assert kinds_of(cpu, CONFIG) == frozenset()
    assert kinds_of(unknown, CONFIG) == frozenset({"gpu"})


def test_ipv6_addresses_are_bracketed() -> None:
    from mlcluster.lifecycle.collector.collector_targets import Job

    config = Config(Path("/t"), (Job("node", 9100, "all"),), {}, {})
    groups = target_groups(parse_nodes("NodeName=a NodeAddr=fd00::1 State=IDLE Partitions=p"), config)
    assert groups["node"][0]["targets"] == ["[fd00::1]:9100"]
