"""The HyperPod shell scripts: lint, syntax, failure handling, remote accounting, re-runs, pre-check."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, WORKER_IP, Sandbox
from tests.support import ROOT

SCRIPTS = sorted(HYPERPOD_DIR.rglob("*.sh"))
#: Features that skip the slow package steps, for tests about the runner itself.
MINIMAL = {**FEATURES, "users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False}


def test_the_scripts_are_all_there() -> None:
    names = {str(path.relative_to(HYPERPOD_DIR)) for path in SCRIPTS}
    assert {"on_create.sh", "lib.sh", "precheck.sh", "steps/identify_node.sh", "steps/mount_fsx.sh"} <= names


def test_shellcheck_is_clean() -> None:
    result = subprocess.run(
        [str(ROOT / ".venv/bin/shellcheck"), "--external-sources", *map(str, SCRIPTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(HYPERPOD_DIR)))
def test_bash_syntax(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_a_failing_step_stops_the_run_and_is_named(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, extra_env={"STUB_FAIL": "mount"})
    result = sandbox.run()
    assert result.returncode != 0
    assert "step mount_fsx: FAILED (exit code 1); the run stops here." in result.stderr
    assert sandbox.step_order() == ["identify_node", "lustre_efa", "mount_fsx"]
    assert sandbox.actions() == []
    log = sandbox.read("/var/log/provision/mount_fsx.log")
    assert "mount: simulated failure" in log
    assert "still failing after 3 attempt(s), giving up" in log
    assert not (sandbox.root / "var/log/provision/add_users.log").exists()


def test_a_worker_whose_controller_never_answers_fails_in_wait_controller(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    sandbox = Sandbox(
        tmp_path,
        ips=WORKER_IP,
        controller_ip="127.0.0.1",
        features=MINIMAL,
        # A wait of 3 s polled every second: the wait is bounded by time, not by MLC_MAX_ATTEMPTS (3).
        extra_env={"MLC_SLURMCTLD_PORT": str(closed_port), "MLC_CONTROLLER_WAIT_SECONDS": "3", "MLC_POLL_SECONDS": "1"},
    )
    started = time.monotonic()
    result = sandbox.run()
    # bash's SECONDS counts whole seconds from a start that may fall late in a second, so a 3 s
    # deadline can pass after just over 2 s of wall time (measured 2.5 s on a loaded machine).
    assert time.monotonic() - started >= 2
    assert result.returncode != 0
    assert "step wait_controller: FAILED" in result.stderr
    assert sandbox.step_order() == [
        "identify_node",
        "lustre_efa",
        "mount_fsx",
        "mount_openzfs",
        "nccl_tests",
        "wait_controller",
    ]
    log = sandbox.read("/var/log/provision/wait_controller.log")
    assert f"slurmctld at 127.0.0.1:{closed_port} did not answer within 3s" in log
    assert not any("slurmd" in action for action in sandbox.actions())
    # Without the override a worker waits as long as the stack waits for the cluster: 12 hours.
    assert "MLC_CONTROLLER_WAIT_MINUTES=720\n" in sandbox.read("/etc/mlcluster/node.env")


def test_bad_features_stop_the_run_in_identify_node(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features={**FEATURES, "observability": "yes"})
    result = sandbox.run()
    assert result.returncode != 0
    assert "step identify_node: FAILED" in result.stderr
    assert "observability = 'yes' is not valid; allowed: true or false" in result.stdout
    assert sandbox.actions() == []


def test_a_node_missing_from_resource_config_is_reported(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips="10.9.9.9")
    result = sandbox.run()
    assert result.returncode != 0
    assert "addresses = ['10.9.9.9'] is not valid; none of them is a CustomerIpAddress" in result.stdout


def test_remote_accounting_reads_the_secret_and_keeps_it_out_of_logs(tmp_path: Path) -> None:
    arn = "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurm-db-AbCdEf"
    features = {**MINIMAL, "accounting": {"mode": "remote", "endpoint": "db.example.internal:3307", "secret_arn": arn}}
    secret = json.dumps({"username": "admin", "password": "pa55-Word"})
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=features, extra_env={"STUB_SECRET": secret})
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:]
    conf = sandbox.read("/opt/slurm/etc/slurmdbd.conf")
    assert "StorageHost=db.example.internal\nStoragePort=3307\nStorageUser=admin\nStoragePass=pa55-Word\n" in conf
    logs = "".join(p.read_text() for p in (sandbox.root / "var/log/provision").iterdir())
    assert "pa55-Word" not in result.stdout + result.stderr + logs + "\n".join(sandbox.actions())
    assert not any("mariadb" in action or action.startswith("mysql") for action in sandbox.actions())
    assert sandbox.actions().index("systemctl start slurmdbd") < sandbox.actions().index("systemctl start slurmctld")


def test_accounting_none_runs_no_database(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features={**MINIMAL, "accounting": {"mode": "none"}})
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:]
    assert "accounting" not in sandbox.step_order()
    assert not (sandbox.root / "opt/slurm/etc/slurmdbd.conf").exists()
    assert "include /opt/slurm/etc/accounting.conf" not in sandbox.read("/opt/slurm/etc/slurm.conf")


def test_named_steps_can_be_rerun_alone(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    result = sandbox.run("on_create.sh", "log_rotation")
    assert result.returncode == 0, result.stdout
    assert sandbox.step_order() == ["identify_node", "log_rotation"]
    assert (sandbox.root / "etc/logrotate.d/mlcluster-slurm").exists()
    # mlcluster-health appends a line per check every 5 minutes (health.sh's LOG_FILE)
    health_log = re.search(r'^LOG_FILE="\$MLC_ROOT(\S+)"$', (HYPERPOD_DIR / "health.sh").read_text(), re.M)
    assert health_log is not None
    rotation = sandbox.read("/etc/logrotate.d/mlcluster-health")
    assert f"\n{health_log[1]} {{\n    size 10M\n    rotate 5\n" in rotation


def test_an_unknown_step_is_refused_with_the_allowed_ones(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    result = sandbox.run("on_create.sh", "dockr")
    assert result.returncode != 0
    assert "unknown step 'dockr'; allowed: accounting add_users collector docker" in result.stderr
    assert sandbox.actions() == []


def test_precheck_fails_on_an_unprovisioned_node_with_mitigations(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP, gpu=True)
    result = sandbox.run("precheck.sh", "--user", "ubuntu")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    failed = {line.split()[2].rstrip(":") for line in lines if line.split()[1] == "FAIL"}
    assert failed == {
        "docker_installed",
        "enroot_runtime_path",
        "docker_data_root",
        "fsx_mounted",
        "pyxis_plugin",
        "slurmd_running",
        "home_shared",
        "nvidia_container_cli",
    }
    assert all("Mitigation: " in line for line in lines if " FAIL " in line)
    assert (
        "ip-10-1-0-20 FAIL home_shared: ubuntu's home is '/home/ubuntu', not a folder of ubuntu's at the shared home root/ubuntu."
        in result.stdout
    )
    assert lines[-1] == "ip-10-1-0-20: 8 check(s) failed"


def test_precheck_skips_what_does_not_apply(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    result = sandbox.run("precheck.sh", "--user", "root")
    assert "ip-10-1-0-10 SKIP nvidia_container_cli: no NVIDIA GPU on this node" in result.stdout
    assert "ip-10-1-0-10 SKIP home_shared:" in result.stdout
    bad = sandbox.run("precheck.sh", "--bogus")
    assert bad.returncode == 2
    assert "usage: precheck.sh [--user NAME]" in bad.stderr
