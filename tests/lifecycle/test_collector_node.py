"""The collector step on a fake head node (ParallelCluster) and a fake controller (HyperPod).

The shared installer (``mlcluster/lifecycle/collector/collector_install.sh``) runs
through each backend's step with the harness's stubs: the pinned Prometheus
tarball is served by the curl stub (a test tarball whose SHA-256 the node's copy
of the installer pins), systemd and iptables are stubs that record their state,
and ownership on disk is real.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlcluster.collector import CollectorInputs, render
from mlcluster.lifecycle.collector import COLLECTOR_SCRIPTS
from mlcluster.lifecycle.exporters import EXPORTER_SCRIPTS
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, WORKER_IP, Sandbox
from tests.lifecycle.pcluster_sandbox import PclusterNode, SigningKey, make_key, sandbox_base, sha256, source_tarball

TARBALL_NAME = "prometheus-2.54.1.linux-amd64.tar.gz"
PROMETHEUS = source_tarball("prometheus-2.54.1.linux-amd64", {"prometheus": "#!/bin/sh\necho prometheus agent\n"})
COLLECTOR_UID = 990
INPUTS = CollectorInputs(
    cluster_name="ml",
    environment="test",
    region="us-west-2",
    remote_write_url="https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
    scrape_interval_seconds=30,
    head_label="head-node",
    partitions={"gpu": ("gpu",)},
)
USERADD = f"""
[[ " $* " == *" --system "* && " $* " == *" --user-group "* ]] || {{ echo "useradd stub: want --system --user-group" >&2; exit 2; }}
name="${{*: -1}}"
echo "$name:x:{COLLECTOR_UID}:{COLLECTOR_UID}::/nonexistent:/usr/sbin/nologin" >>"$ROOTDIR/etc/passwd"
echo "$name:x:{COLLECTOR_UID}:" >>"$ROOTDIR/etc/group"
"""
#: ParallelCluster's imds-access.sh as the head node has it: --allow USER adds the user's ACCEPT rule.
IMDS_ACCESS = """#!/bin/bash
echo "$*" >>"$STUB_STATE/imds-access"
[[ $1 == --allow ]] && echo "PARALLELCLUSTER_IMDS --destination 169.254.169.254 --jump ACCEPT --match owner --uid-owner $2" \
  >>"$STUB_STATE/iptables"
"""
IPTABLES = """args=()
for a in "$@"; do [[ $a == --wait ]] || args+=("$a"); done
[[ ${args[0]} == --check ]] && grep -qxF -- "${args[*]:1}" "$STUB_STATE/iptables" 2>/dev/null
"""


def _pin(installer: Path, sha: str) -> None:
    text, count = re.subn(
        r"^PROMETHEUS_SHA256_AMD64=.*$", f"PROMETHEUS_SHA256_AMD64={sha}", installer.read_text(), flags=re.M
    )
    assert count == 1
    installer.write_text(text)


def _collector_files(folder: Path, inputs: CollectorInputs = INPUTS) -> None:
    """What the upload puts next to the node scripts: the installer (pinned to the test tarball), refresher, config."""
    for script in COLLECTOR_SCRIPTS:
        shutil.copy(script, folder / script.name)
    _pin(folder / "collector_install.sh", sha256(PROMETHEUS))
    for name, text in render(inputs).items():
        (folder / name).write_text(text)


# ---------------------------------------------------------------- ParallelCluster


@pytest.fixture(scope="module")
def key() -> Iterator[SigningKey]:
    with sandbox_base() as base:
        yield make_key(base / "gnupg", "test")


@pytest.fixture
def head(key: SigningKey) -> Iterator[PclusterNode]:
    with sandbox_base() as base:
        node = PclusterNode(base, key, gpu=False)
        _collector_files(node.scripts)
        node.serve(TARBALL_NAME, PROMETHEUS)
        for name, body in (("useradd", USERADD.replace("$ROOTDIR", "$MLCLUSTER_ROOT")), ("iptables", IPTABLES)):
            (node.bin / name).write_text("#!/bin/bash\n" + body)
            (node.bin / name).chmod(0o755)
        node.add("opt/parallelcluster/scripts/imds/imds-access.sh", IMDS_ACCESS, 0o744)
        yield node


def test_pcluster_head_installs_the_pinned_collector_as_its_own_user(head: PclusterNode) -> None:
    done = head.run("head", "collector")
    assert done.returncode == 0, done.stderr + head.log("collector")
    assert head.text("opt/mlcluster/collector/bin/prometheus") == "#!/bin/sh\necho prometheus agent\n"
    assert head.owner_mode("opt/mlcluster/collector/bin/prometheus") == (0, "0o755")
    assert f"has the pinned SHA-256 {sha256(PROMETHEUS)}" in head.log("collector")
    assert f"mlc-collector:x:{COLLECTOR_UID}:{COLLECTOR_UID}::/nonexistent:/usr/sbin/nologin" in head.text("etc/passwd")
    unit = head.text("etc/systemd/system/mlcluster-collector.service")
    assert "\nUser=mlc-collector\n" in unit and "\nGroup=mlc-collector\n" in unit
    start = re.search(r"^ExecStart=(.*)$", unit, flags=re.M)
    assert start is not None
    assert start.group(1).split() == [
        "/opt/mlcluster/collector/bin/prometheus",
        "--enable-feature=agent",
        "--config.file=/etc/mlcluster/collector/prometheus.yml",
        "--storage.agent.path=/var/lib/mlcluster-collector/wal",
        "--web.listen-address=127.0.0.1:9090",
    ]
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/mlcluster-collector/wal"):
        assert f"\n{hardening}\n" in unit
    refresher = head.text("etc/systemd/system/mlcluster-collector-targets.service")
    assert "\nUser=mlc-collector\n" in refresher and "ReadWritePaths=/var/lib/mlcluster-collector/targets" in refresher
    # Memory bounded: a flood of samples kills the collector, not slurmctld or MariaDB beside it.
    # A share of the node's memory (systemd.resource-control: a percentage of physical memory), not 4G.
    assert "\nMemoryMax=25%\n" in unit and "\nMemoryMax=256M\n" in refresher
    assert "OnUnitActiveSec=1min" in head.text("etc/systemd/system/mlcluster-collector-targets.timer")
    assert head.text("etc/mlcluster/collector/prometheus.yml") == render(INPUTS)["collector.yml"]
    assert head.owner_mode("var/lib/mlcluster-collector") == (0, "0o755")
    assert head.owner_mode("var/lib/mlcluster-collector/wal") == (COLLECTOR_UID, "0o700")
    assert head.owner_mode("var/lib/mlcluster-collector/targets") == (COLLECTOR_UID, "0o755")
    enabled = (head.state / "enabled").read_text().split()
    assert {"mlcluster-collector.service", "mlcluster-collector-targets.timer"} <= set(enabled)
    assert "mlcluster-collector.service" in (head.state / "active").read_text().split()
    # Imds: Secured: the collector's user joins ParallelCluster's IMDS allow-list, through its own script.
    assert (head.state / "imds-access").read_text() == "--allow mlc-collector\n"


def test_pcluster_second_run_changes_nothing(head: PclusterNode) -> None:
    assert head.run("head", "collector").returncode == 0
    before = head.tree()
    calls = len(head.calls())
    done = head.run("head", "collector")
    assert done.returncode == 0, done.stderr
    assert head.tree() == before
    again = head.calls()[calls:]
    assert not [c for c in again if c.startswith(("curl", "systemctl restart", "systemctl enable"))], again
    assert (head.state / "imds-access").read_text() == "--allow mlc-collector\n"  # not asked twice
    assert "nothing changed" in head.log("collector")


def test_pcluster_a_new_configuration_restarts_the_collector(head: PclusterNode) -> None:
    assert head.run("head", "collector").returncode == 0
    changed = CollectorInputs(**{**INPUTS.__dict__, "scrape_interval_seconds": 60})
    (head.scripts / "collector.yml").write_text(render(changed)["collector.yml"])
    calls = len(head.calls())
    assert head.run("head", "collector").returncode == 0
    assert "scrape_interval: 60s" in head.text("etc/mlcluster/collector/prometheus.yml")
    assert "systemctl restart mlcluster-collector.service" in head.calls()[calls:]


def test_pcluster_tampered_download_is_refused_with_nothing_installed(head: PclusterNode) -> None:
    head.serve(TARBALL_NAME, source_tarball("prometheus-2.54.1.linux-amd64", {"prometheus": "#!/bin/sh\nevil\n"}))
    done = head.run("head", "collector")
    assert done.returncode != 0
    assert "SHA-256 mismatch" in head.log("collector") and "not installed" in head.log("collector")
    assert not (head.root / "opt/mlcluster/collector/bin/prometheus").exists()
    assert not (head.root / "etc/systemd/system/mlcluster-collector.service").exists()
    assert not (head.state / "enabled").exists() or "mlcluster-collector" not in (head.state / "enabled").read_text()
    assert not (head.state / "imds-access").exists()


def test_pcluster_collector_runs_on_the_head_node_only(head: PclusterNode) -> None:
    done = head.run("compute", "collector")
    assert done.returncode != 0
    assert "the collector runs on the head node only" in head.log("collector")
    assert not (head.root / "opt/mlcluster/collector").exists()


def test_pcluster_missing_configuration_is_named(head: PclusterNode) -> None:
    """A configuration that does not carry the collector's rendered file: run.sh refuses before the step runs."""
    (head.scripts / "collector_targets.json").unlink()
    done = head.run("head", "collector")
    assert done.returncode != 0
    assert "collector_targets.json has no --file in the arguments" in done.stderr
    assert not (head.root / "var/log/mlcluster/collector.log").exists()


# ---------------------------------------------------------------- HyperPod


def _controller(tmp_path: Path, collector: bool = True) -> Sandbox:
    box = Sandbox(
        tmp_path / "controller",
        ips=CONTROLLER_IP,
        features={"users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False, "collector": collector},
    )
    _collector_files(box.lifecycle, CollectorInputs(**{**INPUTS.__dict__, "head_label": "controller"}))
    # What HyperPodLifecycle uploads: on_create.sh whose manifest lists the collector's and the exporters'
    # files too (here the node's copies, whose installer pins the test tarball).
    extra = [box.lifecycle / script.name for script in (*COLLECTOR_SCRIPTS, *EXPORTER_SCRIPTS)]
    box.render_entrypoint(extra)
    (box.serve / TARBALL_NAME).write_bytes(PROMETHEUS)
    (box.bin / "useradd").write_text("#!/bin/bash\n" + USERADD.replace("$ROOTDIR", "$MLC_ROOT"))
    # The sandbox's uname answers -r (the kernel); the installer asks -m (the architecture) too.
    (box.bin / "uname").write_text("#!/bin/bash\ncase ${1:-} in -m) echo x86_64 ;; -r) echo 6.8.0-1024-aws ;; esac\n")
    (box.bin / "uname").chmod(0o755)
    return box


def _identify_and(box: Sandbox, *steps: str) -> subprocess.CompletedProcess[str]:
    """``on_create.sh STEP...``: check the manifest, identify the node, run the steps."""
    return box.run("on_create.sh", *steps)


def test_hyperpod_controller_installs_the_collector_and_opens_imds_to_it_alone(tmp_path: Path) -> None:
    box = _controller(tmp_path)
    done = _identify_and(box, "imds", "collector")
    assert done.returncode == 0, done.stderr
    assert box.read("/opt/mlcluster/collector/bin/prometheus") == "#!/bin/sh\necho prometheus agent\n"
    assert "\nUser=mlc-collector\n" in box.read("/etc/systemd/system/mlcluster-collector.service")
    assert (box.root / "var/lib/mlcluster-collector/wal").stat().st_uid == COLLECTOR_UID
    rules = (box.state / "iptables.rules").read_text().splitlines()
    # The imds step's REJECT for everyone but root, then the collector's ACCEPT, inserted later and so first.
    reject = "OUTPUT --destination 169.254.169.254 --protocol tcp --match owner ! --uid-owner 0 --jump REJECT"
    accept = "OUTPUT --destination 169.254.169.254 --protocol tcp --match owner --uid-owner mlc-collector --jump ACCEPT"
    assert reject in rules and accept in rules
    assert [r for r in rules if "ACCEPT" in r] == [accept]
    unit = box.read("/etc/systemd/system/mlcluster-imds-collector.service")
    assert "After=mlcluster-imds-root-only.service" in unit and "Before=mlcluster-collector.service" in unit
    assert (box.state / "systemd/enabled/mlcluster-imds-collector").exists()
    assert (box.state / "systemd/enabled/mlcluster-collector").exists()
    snapshot = box.snapshot()
    actions = len(box.actions())
    assert _identify_and(box, "collector").returncode == 0
    assert box.snapshot() == snapshot
    assert not [a for a in box.actions()[actions:] if a.startswith(("curl", "iptables", "systemctl restart"))]


def test_hyperpod_plan_runs_the_collector_on_the_controller_only(tmp_path: Path) -> None:
    from mlcluster.lifecycle.hyperpod.plan import Features, plan_steps

    assert "collector" in plan_steps("controller", Features(collector=True))
    assert plan_steps("controller", Features(collector=True)).index("imds") < plan_steps(
        "controller", Features(collector=True)
    ).index("collector")
    for role in ("worker", "login"):
        assert "collector" not in plan_steps(role, Features(collector=True))
    assert "collector" not in plan_steps("controller", Features(collector=False))


def test_hyperpod_collector_refuses_a_worker(tmp_path: Path) -> None:
    box = Sandbox(tmp_path / "worker", ips=WORKER_IP, features={"users": [], "docker": False, "enroot_pyxis": False})
    done = _identify_and(box, "collector")
    assert done.returncode != 0
    assert "the collector runs on the controller only (this node is a worker)" in done.stdout + done.stderr


def test_hyperpod_a_cluster_user_named_like_the_collector_gets_no_instance_role(tmp_path: Path) -> None:
    # lifecycle.users may name a login user mlc-collector (add_users runs before the collector step and makes
    # it as below): the collector must not adopt that account, or its owner would run the collector, own its
    # state and reach the instance metadata service through the collector's ACCEPT rule.
    box = _controller(tmp_path)
    with (box.root / "etc/passwd").open("a") as passwd:
        passwd.write("mlc-collector:x:2005:2005::/home/mlc-collector:/bin/bash\n")
    done = _identify_and(box, "imds", "collector")
    assert done.returncode != 0
    log = box.read("/var/log/provision/collector.log")
    assert "mlc-collector exists as uid 2005 with shell /bin/bash, not as a system account" in log
    assert "uid-owner mlc-collector" not in (box.state / "iptables.rules").read_text()
    assert not (box.root / "etc/systemd/system/mlcluster-collector.service").exists()
    assert not (box.root / "var/lib/mlcluster-collector").exists()
