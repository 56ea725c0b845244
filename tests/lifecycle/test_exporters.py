"""The metrics exporters on the nodes (both backends) against the contract in ``mlcluster/exporters.py``.

The EFA and Slurm textfile collectors run as an unprivileged user against a fake sysfs and fake
``sinfo``/``squeue``; their output is parsed with prometheus_client's text parser and checked against
the contract. The install steps run in the fake-root harnesses (``pcluster_sandbox``,
``hyperpod_sandbox``): pinned node exporter, checksum verified, a tampered download refused with
nothing installed, units enabled with ``User=mlc-exporter``, and a second run that changes nothing.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlcluster.config.hyperpod import LifecycleConfig
from mlcluster.config.pcluster import PclusterConfig
from mlcluster.config.schema import ConfigError, load_section
from mlcluster.exporters import EFA_METRICS, EXPORTERS, SLURM_METRICS
from mlcluster.lifecycle.exporters import EXPORTERS_DIR
from mlcluster.lifecycle.hyperpod import plan as hyperpod_plan
from mlcluster.lifecycle.pcluster import PCLUSTER_DIR
from mlcluster.pcluster.render import head_node_steps, login_node_steps, queue_steps
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, WORKER_IP, Sandbox
from tests.lifecycle.pcluster_sandbox import (
    EXPORTER,
    NODE_EXPORTER_TARBALL,
    PclusterNode,
    SigningKey,
    make_key,
    sandbox_base,
    sha256,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real chown, setpriv and root-owned folders")

USER = 2001
PORTS = {e.job: e.port for e in EXPORTERS}
UNIT_USER = "User=mlc-exporter"


def contract(job: str) -> set[str]:
    return set(next(e for e in EXPORTERS if e.job == job).metrics)


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text exposition, by sample name (the parser rejects bad syntax)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_the_dcgm_counters_are_the_contract() -> None:
    lines = [line for line in (EXPORTERS_DIR / "dcgm_counters.csv").read_text().splitlines() if line and line[0] != "#"]
    fields = [line.split(",")[0].strip() for line in lines]
    assert set(fields) == contract("dcgm") and len(fields) == len(set(fields))
    assert all(len(line.split(",")) == 3 for line in lines)
    assert not any(f.startswith("DCGM_FI_PROF_") for f in fields)  # profiling fields would need CAP_SYS_ADMIN


# ---------------------------------------------------------------- the textfile collectors, as a user


@pytest.fixture
def box() -> Iterator[Path]:
    """A folder the test user can reach, with an output folder the user owns (as mlc-exporter owns its own)."""
    with sandbox_base() as base:
        out = base / "textfile"
        out.mkdir()
        os.chown(out, USER, USER)
        yield base


def as_user(*command: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", *command],
        env={"PATH": path, "LANG": "C.UTF-8"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def efa_device(sysfs: Path, name: str, counters: dict[str, str], driver: str = "efa", port: str = "1") -> None:
    device = sysfs / "class/infiniband" / name
    (device / "ports" / port / "hw_counters").mkdir(parents=True)
    for counter, value in counters.items():
        (device / "ports" / port / "hw_counters" / counter).write_text(value)
    (device / "device").mkdir()
    (device / "device/driver").symlink_to(f"../../../bus/pci/drivers/{driver}")


ALL_EFA = {m.removeprefix("mlcluster_efa_").removesuffix("_total"): "0" for m in EFA_METRICS}


def test_efa_counters_of_every_efa_port_match_the_contract(box: Path) -> None:
    sysfs = box / "sys"
    efa_device(sysfs, "rdmap16s27", {**ALL_EFA, "rx_bytes": "123456789\n", "rx_drops": "7\n", "lifespan": "10\n"})
    efa_device(sysfs, "rdmap32s27", {**ALL_EFA, "rx_bytes": "5\n"})
    efa_device(sysfs, "mlx5_0", {"rx_bytes": "99\n"}, driver="mlx5_core")  # not EFA: left out
    proc = as_user("bash", str(EXPORTERS_DIR / "efa_metrics.sh"), str(box / "textfile"), str(sysfs))
    assert proc.returncode == 0, proc.stderr
    out = box / "textfile/mlcluster_efa.prom"
    assert out.stat().st_uid == USER and stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in (box / "textfile").iterdir()] == ["mlcluster_efa.prom"]  # no temporary file left
    found = samples(out.read_text())
    assert set(found) == set(EFA_METRICS)
    assert sorted(found["mlcluster_efa_rx_bytes_total"], key=lambda s: s[0]["device"]) == [
        ({"device": "rdmap16s27", "port": "1"}, 123456789.0),
        ({"device": "rdmap32s27", "port": "1"}, 5.0),
    ]
    assert found["mlcluster_efa_rx_drops_total"][0] == ({"device": "rdmap16s27", "port": "1"}, 7.0)
    families = {f.name: f.type for f in text_string_to_metric_families(out.read_text())}
    assert set(families.values()) == {"counter"}


def test_efa_counters_an_older_driver_lacks_are_left_out(box: Path) -> None:
    sysfs = box / "sys"
    efa_device(sysfs, "rdmap0s6", {"rx_bytes": "1", "tx_bytes": "2", "rx_drops": "0", "rdma_read_bytes": "3"})
    proc = as_user("bash", str(EXPORTERS_DIR / "efa_metrics.sh"), str(box / "textfile"), str(sysfs))
    assert proc.returncode == 0, proc.stderr
    found = samples((box / "textfile/mlcluster_efa.prom").read_text())
    assert set(found) == {f"mlcluster_efa_{c}_total" for c in ("rx_bytes", "tx_bytes", "rx_drops", "rdma_read_bytes")}


def fake_slurm(box: Path, sinfo: str, squeue: str, fail: bool = False) -> str:
    bin_dir = box / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, output in (("sinfo", sinfo), ("squeue", squeue)):
        script = bin_dir / name
        body = 'echo "slurm_load_partitions: Unable to contact slurm controller" >&2; exit 1' if fail else ""
        script.write_text(f"#!/bin/bash\n{body}\ncat <<'EOF'\n{output}EOF\n")
        script.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_slurm_counts_by_partition_and_state_match_the_contract(box: Path) -> None:
    path = fake_slurm(
        box,
        sinfo="p5 idle 3\np5 allocated 4\np5 idle 1\ncpu down* 2\n",
        squeue="p5 RUNNING\np5 RUNNING\np5 PENDING\ncpu,p5 PENDING\n",
    )
    proc = as_user("bash", str(EXPORTERS_DIR / "slurm_metrics.sh"), str(box / "textfile"), path=path)
    assert proc.returncode == 0, proc.stderr
    out = box / "textfile/mlcluster_slurm.prom"
    found = samples(out.read_text())
    assert set(found) == set(SLURM_METRICS)
    assert sorted((s[0]["partition"], s[0]["state"], s[1]) for s in found["mlcluster_slurm_nodes"]) == [
        ("cpu", "down*", 2.0),
        ("p5", "allocated", 4.0),
        ("p5", "idle", 4.0),
    ]
    assert sorted((s[0]["partition"], s[0]["state"], s[1]) for s in found["mlcluster_slurm_jobs"]) == [
        ("cpu,p5", "PENDING", 1.0),
        ("p5", "PENDING", 1.0),
        ("p5", "RUNNING", 2.0),
    ]
    assert out.stat().st_uid == USER and [p.name for p in (box / "textfile").iterdir()] == ["mlcluster_slurm.prom"]


def test_slurm_with_no_jobs_still_says_so(box: Path) -> None:
    path = fake_slurm(box, sinfo="p5 idle 2\n", squeue="")
    assert as_user("bash", str(EXPORTERS_DIR / "slurm_metrics.sh"), str(box / "textfile"), path=path).returncode == 0
    found = samples((box / "textfile/mlcluster_slurm.prom").read_text())
    assert "mlcluster_slurm_jobs" not in found and found["mlcluster_slurm_nodes"][0][1] == 2.0
    families = {f.name for f in text_string_to_metric_families((box / "textfile/mlcluster_slurm.prom").read_text())}
    assert families == set(SLURM_METRICS)  # the family is declared, with no series


def test_slurm_down_removes_the_file_rather_than_keep_stale_counts(box: Path) -> None:
    path = fake_slurm(box, sinfo="p5 idle 2\n", squeue="")
    assert as_user("bash", str(EXPORTERS_DIR / "slurm_metrics.sh"), str(box / "textfile"), path=path).returncode == 0
    path = fake_slurm(box, sinfo="", squeue="", fail=True)
    proc = as_user("bash", str(EXPORTERS_DIR / "slurm_metrics.sh"), str(box / "textfile"), path=path)
    assert proc.returncode == 1
    assert "Slurm did not answer" in proc.stderr
    assert list((box / "textfile").iterdir()) == []


# ---------------------------------------------------------------- ParallelCluster: the exporters step

MakeNode = Callable[..., PclusterNode]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    return make_key(tmp_path_factory.mktemp("gnupg") / "home", "mlcluster-test")


@pytest.fixture
def make_node(key: SigningKey) -> Iterator[MakeNode]:
    with sandbox_base() as base:
        count = iter(range(100))

        def make(**kwargs: Any) -> PclusterNode:
            return PclusterNode(base / f"node{next(count)}", key, **kwargs)

        yield make


def enabled(node: PclusterNode) -> list[str]:
    path = node.state / "enabled"
    return path.read_text().split() if path.exists() else []


def test_head_node_gets_node_exporter_and_slurm_counts_as_the_exporter_user(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    proc = node.run("head", "exporters")
    assert proc.returncode == 0, proc.stderr + node.log("exporters")
    assert "mlc-exporter:x:995:995::/nonexistent:/usr/sbin/nologin" in node.text("etc/passwd")
    unit = node.text("etc/systemd/system/mlcluster-node-exporter.service")
    assert UNIT_USER in unit and "Group=mlc-exporter" in unit
    assert f"--web.listen-address=:{PORTS['node']}" in unit
    assert "--collector.textfile.directory=/var/lib/mlcluster-exporters/textfile" in unit
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n", "PrivateTmp=yes"):
        assert hardening in unit
    assert node.owner_mode("var/lib/mlcluster-exporters") == (0, "0o755")
    assert node.owner_mode("var/lib/mlcluster-exporters/textfile") == (EXPORTER, "0o755")
    assert node.owner_mode("opt/mlcluster/node_exporter-1.8.2/node_exporter") == (0, "0o755")
    assert "has the pinned SHA-256" in node.log("exporters")
    slurm = node.text("etc/systemd/system/mlcluster-slurm-metrics.service")
    assert UNIT_USER in slurm and "ExecStart=/opt/mlcluster/bin/mlcluster-slurm-metrics" in slurm
    assert "ReadWritePaths=/var/lib/mlcluster-exporters/textfile" in slurm
    assert node.text("opt/mlcluster/bin/mlcluster-slurm-metrics") == (EXPORTERS_DIR / "slurm_metrics.sh").read_text()
    assert enabled(node) == ["mlcluster-node-exporter.service", "mlcluster-slurm-metrics.timer"]
    assert not (node.root / "etc/systemd/system/mlcluster-efa-metrics.timer").exists()  # no EFA device here


def test_compute_node_gets_efa_and_dcgm_but_no_slurm_counts(make_node: MakeNode) -> None:
    node = make_node()
    efa_device(node.root / "sys", "rdmap16s27", {"rx_bytes": "1"})
    proc = node.run("compute", "docker", "exporters")
    assert proc.returncode == 0, proc.stderr + node.log("exporters")
    assert enabled(node) == [
        "docker",
        "mlcluster-node-exporter.service",
        "mlcluster-efa-metrics.timer",
        "mlcluster-dcgm-exporter.service",
    ]
    efa = node.text("etc/systemd/system/mlcluster-efa-metrics.service")
    assert UNIT_USER in efa and "Type=oneshot" in efa
    assert "OnUnitActiveSec=15" in node.text("etc/systemd/system/mlcluster-efa-metrics.timer")
    dcgm = node.text("etc/systemd/system/mlcluster-dcgm-exporter.service")
    image = re.search(r"^DCGM_EXPORTER_IMAGE=(\S+)$", node.text("../scripts/pins.sh"), re.M)
    assert image and "@sha256:" in image[1]
    assert f"--user {EXPORTER}:{EXPORTER} --cap-drop ALL --security-opt no-new-privileges --read-only" in dcgm
    assert f"{image[1]} -f /etc/dcgm-exporter/mlcluster.csv -a :{PORTS['dcgm']}" in dcgm
    assert "SYS_ADMIN" not in dcgm.split("[Service]")[1]
    assert f"docker pull --quiet {image[1]}" in node.calls()
    assert node.text("etc/mlcluster/dcgm-counters.csv") == (EXPORTERS_DIR / "dcgm_counters.csv").read_text()


def test_gpu_node_without_docker_says_gpu_metrics_are_not_exported(make_node: MakeNode) -> None:
    node = make_node()
    assert node.run("compute", "exporters").returncode == 0
    assert "GPU metrics are not exported" in node.log("exporters")
    assert not (node.root / "etc/systemd/system/mlcluster-dcgm-exporter.service").exists()


def test_neuron_node_runs_neuron_monitor_with_the_verified_prometheus_client(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    node.add("opt/aws/neuron/bin/neuron-monitor", "#!/bin/sh\n", 0o755)
    node.add("opt/aws/neuron/bin/neuron-monitor-prometheus.py", "# front end\n")
    wheel = b"PK fake wheel"
    node.serve("prometheus_client-0.20.0-py3-none-any.whl", wheel)
    node.pin(PROMETHEUS_CLIENT_SHA256=sha256(wheel))
    proc = node.run("compute", "exporters")
    assert proc.returncode == 0, proc.stderr + node.log("exporters")
    unit = node.text("etc/systemd/system/mlcluster-neuron-monitor.service")
    assert UNIT_USER in unit
    assert f"neuron-monitor-prometheus.py --port {PORTS['neuron']}" in unit
    assert "PYTHONPATH=/opt/mlcluster/python/prometheus_client-0.20.0-py3-none-any.whl" in unit
    assert node.owner_mode("opt/mlcluster/python/prometheus_client-0.20.0-py3-none-any.whl") == (0, "0o644")
    assert "mlcluster-neuron-monitor.service" in enabled(node)


def test_tampered_node_exporter_is_refused_and_nothing_installed(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    node.serve("node_exporter-1.8.2.linux-amd64.tar.gz", b"not the release")
    proc = node.run("head", "exporters")
    assert proc.returncode == 1
    assert "SHA-256 mismatch" in node.log("exporters") and "not installed" in node.log("exporters")
    assert not (node.root / "opt/mlcluster/node_exporter-1.8.2").exists()
    assert not (node.root / "etc/systemd/system/mlcluster-node-exporter.service").exists()
    assert enabled(node) == []
    assert [p for p in (node.root / "var/lib/mlcluster/work").rglob("*") if not p.is_dir()] == []  # download gone


def test_second_run_changes_nothing(make_node: MakeNode) -> None:
    node = make_node()
    efa_device(node.root / "sys", "rdmap16s27", {"rx_bytes": "1"})
    assert node.run("head", "docker", "exporters").returncode == 0
    before = node.tree()
    first = len(node.calls())
    proc = node.run("head", "docker", "exporters")
    assert proc.returncode == 0, proc.stderr
    assert node.tree() == before
    again = node.calls()[first:]
    assert [c for c in again if c.split()[0] in {"curl", "useradd", "dnf"} or c.startswith("docker pull")] == []
    assert [c for c in again if c.startswith(("systemctl enable", "systemctl start", "systemctl restart"))] == []
    assert "node exporter 1.8.2 is installed" in node.log("exporters")


def test_a_textfile_folder_someone_else_made_stops_the_step(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    (node.root / "var/lib/mlcluster-exporters/textfile").mkdir(parents=True)
    os.chown(node.root / "var/lib/mlcluster-exporters/textfile", USER, USER)
    assert node.run("head", "exporters").returncode == 1
    assert f"is owned by uid {USER}, not mlc-exporter" in node.log("exporters")


def pcluster_config(**node_scripts: bool) -> PclusterConfig:
    data = {
        "queues": [{"name": "gpu", "compute_resources": [{"name": "p5", "instance_type": "p5.48xlarge"}]}],
        "login_nodes": {"instance_type": "m5.large"},
        "node_scripts": node_scripts,
    }
    return load_section(PclusterConfig, data, "test.yaml")


@pytest.mark.parametrize("exporters", [True, False])
def test_every_node_runs_the_exporters_step_last_only_with_prometheus(exporters: bool) -> None:
    cfg = pcluster_config()
    for steps in (
        head_node_steps(cfg, exporters=exporters),
        login_node_steps(cfg, exporters=exporters),
        queue_steps(cfg, cfg.queues[0], exporters=exporters),
    ):
        assert ("exporters" in steps) is exporters
        # After every step that installs software; only the collector and the health check come later.
        assert not exporters or set(steps[steps.index("exporters") + 1 :]) <= {"collector", "health_check"}


# ---------------------------------------------------------------- HyperPod: the observability step


def hyperpod_node(tmp_path: Path, ips: str, *, gpu: bool = False, served: bytes | None = None) -> Sandbox:
    """A HyperPod node with observability on, whose step trusts the harness's node exporter tarball."""
    sandbox = Sandbox(tmp_path, ips=ips, gpu=gpu, features={**FEATURES, "users": [], "observability": True})
    sandbox.trust_node_exporter(NODE_EXPORTER_TARBALL, served)
    return sandbox


def hyperpod_enabled(sandbox: Sandbox) -> set[str]:
    folder = sandbox.state / "systemd/enabled"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def test_hyperpod_controller_gets_node_exporter_and_slurm_counts(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP)
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mlc-exporter:x:999:999::/nonexistent:/usr/sbin/nologin" in sandbox.read("/etc/passwd")
    unit = sandbox.read("/etc/systemd/system/mlcluster-node-exporter.service")
    assert UNIT_USER in unit and f"--web.listen-address=:{PORTS['node']}" in unit and "ProtectSystem=strict" in unit
    assert UNIT_USER in sandbox.read("/etc/systemd/system/mlcluster-slurm-metrics.service")
    assert hyperpod_enabled(sandbox) == {"mlcluster-node-exporter", "mlcluster-slurm-metrics.timer"}
    textfile = (sandbox.root / "var/lib/mlcluster-exporters/textfile").stat()
    assert (textfile.st_uid, stat.S_IMODE(textfile.st_mode)) == (999, 0o755)
    assert (sandbox.root / "var/lib/mlcluster-exporters").stat().st_uid == 0
    assert not any(a.startswith("apt-get") and "prometheus-node-exporter" in a for a in sandbox.actions())


def test_hyperpod_gpu_worker_runs_dcgm_as_the_exporter_user_not_as_root(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, WORKER_IP, gpu=True)
    efa_device(sandbox.root / "sys", "rdmap16s27", {"rx_bytes": "1"})
    proc = sandbox.run("on_create.sh", "docker", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dcgm = sandbox.read("/etc/systemd/system/mlcluster-dcgm-exporter.service")
    assert "--user 999:999 --cap-drop ALL --security-opt no-new-privileges --read-only" in dcgm
    assert "@sha256:" in dcgm and f"-a :{PORTS['dcgm']}" in dcgm and "--cap-add" not in dcgm
    assert hyperpod_enabled(sandbox) >= {
        "mlcluster-node-exporter",
        "mlcluster-efa-metrics.timer",
        "mlcluster-dcgm-exporter",
    }
    assert "mlcluster-slurm-metrics.timer" not in hyperpod_enabled(sandbox)
    assert not any(a.startswith("docker run") for a in sandbox.actions())  # systemd starts it, not the step


def test_hyperpod_node_of_the_older_lifecycle_hands_port_9100_to_the_pinned_exporter(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP)
    for state in ("enabled", "active"):
        (sandbox.state / "systemd" / state).mkdir(parents=True, exist_ok=True)
        (sandbox.state / "systemd" / state / "prometheus-node-exporter").touch()
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    actions = sandbox.actions()
    stop = actions.index("systemctl disable --now prometheus-node-exporter")
    assert stop < actions.index("systemctl start mlcluster-node-exporter")
    assert "prometheus-node-exporter" not in hyperpod_enabled(sandbox)


def test_hyperpod_neuron_node_gets_the_pinned_tools_and_neuron_monitor(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, WORKER_IP)
    (sandbox.root / "dev").mkdir()
    (sandbox.root / "dev/neuron0").touch()
    for name in ("neuron-monitor", "neuron-monitor-prometheus.py"):  # what aws-neuronx-tools ships
        (sandbox.root / "opt/aws/neuron/bin").mkdir(parents=True, exist_ok=True)
        (sandbox.root / "opt/aws/neuron/bin" / name).write_text("# aws-neuronx-tools (test copy)\n")
    (sandbox.serve / "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB").write_text("FPR=00FA2C1079260870A76D2C285749CAD8646D9185\n")
    wheel = b"PK fake wheel"
    (sandbox.serve / "prometheus_client-0.20.0-py3-none-any.whl").write_bytes(wheel)
    sandbox.repin(
        "steps/observability.sh", r"^PROMETHEUS_CLIENT_SHA256=.*$", f"PROMETHEUS_CLIENT_SHA256={sha256(wheel)}"
    )
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The version ParallelCluster's neuron step pins (pins.sh), from the repository whose key was checked.
    version = re.search(r"aws-neuronx-tools=(\S+)", (PCLUSTER_DIR / "pins.sh").read_text())
    assert version and f"aws-neuronx-tools={version[1]}*" in " ".join(sandbox.actions())
    assert "neuron apt key verified: 00FA2C1079260870A76D2C285749CAD8646D9185" in sandbox.read(
        "/var/log/provision/observability.log"
    )
    unit = sandbox.read("/etc/systemd/system/mlcluster-neuron-monitor.service")
    assert UNIT_USER in unit and f"neuron-monitor-prometheus.py --port {PORTS['neuron']}" in unit
    assert "mlcluster-neuron-monitor" in hyperpod_enabled(sandbox)
    assert (sandbox.root / "opt/mlcluster/python/prometheus_client-0.20.0-py3-none-any.whl").read_bytes() == wheel


def test_hyperpod_tampered_node_exporter_is_refused(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP, served=b"not the release")
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode != 0
    assert "SHA-256 mismatch" in proc.stdout + proc.stderr
    assert not (sandbox.root / "opt/mlcluster/node_exporter-1.8.2").exists()
    assert hyperpod_enabled(sandbox) == set()


def test_hyperpod_second_run_changes_nothing(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP)
    assert sandbox.run("on_create.sh", "observability").returncode == 0
    before = sandbox.snapshot()
    actions = len(sandbox.actions())
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sandbox.snapshot() == before
    assert sandbox.actions()[actions:] == []


def test_hyperpod_steps_follow_the_features() -> None:
    on = hyperpod_plan.plan_steps("worker", hyperpod_plan.parse_features({**FEATURES, "observability": True}))
    off = hyperpod_plan.plan_steps("worker", hyperpod_plan.parse_features(FEATURES))
    assert "observability" in on and "observability" not in off


def test_the_older_lifecycle_switch_is_refused_with_the_new_key() -> None:
    with pytest.raises(ConfigError) as raised:
        load_section(LifecycleConfig, {"observability": True}, "env.yaml")
    message = raised.value.render()
    assert "observability" in message and "observability.prometheus.enabled: true" in message
    assert load_section(LifecycleConfig, {"observability": False}, "env.yaml").observability is False


# ---------------------------------------------------------------- an account named like the exporters' user

#: Accounts named mlc-exporter that must not be adopted (a cluster user, a directory user, root's uid),
#: and the edge that must: a system account without a login shell.
NOT_ADOPTED = [
    ("mlc-exporter:x:2005:2005::/home/mlc-exporter:/bin/bash", "uid 2005 with shell /bin/bash"),
    ("mlc-exporter:x:1000:1000::/home/mlc-exporter:/usr/sbin/nologin", "uid 1000 with shell /usr/sbin/nologin"),
    ("mlc-exporter:x:998:998::/nonexistent:/bin/sh", "uid 998 with shell /bin/sh"),
    ("mlc-exporter:x:0:0::/root:/usr/sbin/nologin", "uid 0 with shell /usr/sbin/nologin"),
]


@pytest.mark.parametrize(("entry", "named"), NOT_ADOPTED)
def test_hyperpod_an_account_named_like_the_exporter_user_is_not_adopted(
    tmp_path: Path, entry: str, named: str
) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP)
    with (sandbox.root / "etc/passwd").open("a") as passwd:
        passwd.write(entry + "\n")
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode != 0
    log = sandbox.read("/var/log/provision/observability.log")
    assert f"mlc-exporter exists as {named}, not as a system account (uid 1-999, no login shell)" in log
    assert not (sandbox.root / "etc/systemd/system/mlcluster-node-exporter.service").exists()
    assert not (sandbox.root / "var/lib/mlcluster-exporters/textfile").exists()


def test_hyperpod_an_existing_system_account_is_adopted(tmp_path: Path) -> None:
    sandbox = hyperpod_node(tmp_path, CONTROLLER_IP)
    with (sandbox.root / "etc/passwd").open("a") as passwd:
        passwd.write("mlc-exporter:x:997:997::/nonexistent:/usr/sbin/nologin\n")
    proc = sandbox.run("on_create.sh", "observability")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (sandbox.root / "var/lib/mlcluster-exporters/textfile").stat().st_uid == 997


@pytest.mark.parametrize(("entry", "named"), NOT_ADOPTED[:1])
def test_pcluster_an_account_named_like_the_exporter_user_is_not_adopted(
    make_node: MakeNode, entry: str, named: str
) -> None:
    node = make_node(gpu=False)
    with (node.root / "etc/passwd").open("a") as passwd:
        passwd.write(entry + "\n")
    assert node.run("head", "exporters").returncode == 1
    assert f"mlc-exporter exists as {named}, not as a system account" in node.log("exporters")
    assert not (node.root / "etc/systemd/system/mlcluster-node-exporter.service").exists()
