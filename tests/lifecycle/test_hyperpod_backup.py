"""The controller's state off the root volume, and mlcluster-backup (the operator's step before patching).

Contract (lifecycle README): ``/usr/local/sbin/mlcluster-backup backup|restore s3://BUCKET/PREFIX``
on the controller, as root; exit 0 done, 1 failed, 2 bad usage; idempotent.
"""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, WORKER_IP, Sandbox

STATE = "/opt/sagemaker/mlcluster/slurmctld"
URI = "s3://ops-backups-123/ml/before-patch"


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    sandbox = Sandbox(tmp_path_factory.mktemp("controller"), ips=CONTROLLER_IP)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox


def backup_tool(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed /usr/local/sbin/mlcluster-backup the way SSM Run Command would."""
    env = {**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle")}
    return subprocess.run(
        ["bash", str(sandbox.root / "usr/local/sbin/mlcluster-backup"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def s3(sandbox: Sandbox, key: str) -> Path:
    return sandbox.state / "s3" / URI.removeprefix("s3://") / key


def test_slurmctld_state_lives_off_the_root_volume(controller: Sandbox) -> None:
    assert f"StateSaveLocation={STATE}\n" in controller.read("/opt/slurm/etc/slurm.conf")
    info = (controller.root / STATE.lstrip("/")).stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)  # SlurmUser is root unless slurm.conf says otherwise


def test_the_accounting_database_lives_off_the_root_volume(controller: Sandbox) -> None:
    datadir = controller.root / "opt/sagemaker/mlcluster/mysql"
    assert "datadir = /opt/sagemaker/mlcluster/mysql\n" in controller.read("/etc/mysql/mariadb.conf.d/60-mlcluster.cnf")
    assert (datadir.stat().st_uid, datadir.stat().st_mode & 0o777) == (402, 0o700)
    assert (datadir / "ibdata1").read_text() == "ibdata\n"  # the package's files moved over once


def test_without_the_secondary_volume_the_state_goes_to_fsx(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features={**FEATURES, "docker": False, "enroot_pyxis": False})
    mounts = sandbox.root / "proc/mounts"
    mounts.write_text("".join(line for line in mounts.read_text().splitlines(True) if "opt/sagemaker" not in line))
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-2000:]
    assert "StateSaveLocation=/fsx/.mlcluster/controller/slurmctld\n" in sandbox.read("/opt/slurm/etc/slurm.conf")


def test_backup_then_restore_round_trips_and_can_run_again(controller: Sandbox) -> None:
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("jobs v1\n")
    tool = controller.root / "usr/local/sbin/mlcluster-backup"
    assert tool.stat().st_mode & 0o777 == 0o755
    before = len(controller.actions())
    for _ in range(2):  # a second backup replaces the objects
        result = backup_tool(controller, "backup", URI + "/")
        assert result.returncode == 0, result.stderr
        assert f"backup complete: {URI} (2 files)" in result.stderr
    actions = controller.actions()[before:]
    assert actions.index("systemctl stop slurmctld") < actions.index("systemctl start slurmctld")
    assert "mysqldump --single-transaction --databases slurm_acct_db" in actions
    assert (controller.state / "systemd/active/slurmctld").exists()
    sums = s3(controller, "SHA256SUMS").read_text()
    assert "slurmctld-state.tar.gz" in sums and "accounting.sql.gz" in sums
    assert b"slurm_acct_db" in gzip.decompress(s3(controller, "accounting.sql.gz").read_bytes())

    (state / "job_state").write_text("lost after patching\n")
    sql_before = (controller.state / "mysql.sql").read_text()
    for _ in range(2):  # a second restore gives the same state
        result = backup_tool(controller, "restore", URI)
        assert result.returncode == 0, result.stderr
        assert (state / "job_state").read_text() == "jobs v1\n"
        info = state.stat()
        assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)
    assert (controller.state / "mysql.sql").read_text().count("slurm_acct_db") > sql_before.count("slurm_acct_db")
    assert "systemctl restart slurmdbd" in controller.actions()
    assert (controller.state / "systemd/active/slurmctld").exists()
    assert not list(state.parent.glob(".restore.*"))


def test_a_tampered_backup_is_not_restored(controller: Sandbox) -> None:
    assert backup_tool(controller, "backup", URI).returncode == 0
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("current\n")
    s3(controller, "slurmctld-state.tar.gz").write_bytes(gzip.compress(b"not the backup"))
    before = len(controller.actions())
    result = backup_tool(controller, "restore", URI)
    assert result.returncode == 1
    assert f"the backup in {URI} does not match its SHA256SUMS; nothing was restored" in result.stderr
    assert (state / "job_state").read_text() == "current\n"
    assert "systemctl stop slurmctld" not in controller.actions()[before:]


@pytest.mark.parametrize(
    "args", [(), ("backup",), ("backup", "/tmp/x"), ("snapshot", URI), ("backup", "s3://Bad_Bucket/x")]
)
def test_bad_usage_exits_2(controller: Sandbox, args: tuple[str, ...]) -> None:
    result = backup_tool(controller, *args)
    assert result.returncode == 2
    assert "usage: mlcluster-backup backup|restore s3://BUCKET/PREFIX" in result.stderr


def test_a_missing_backup_fails_with_the_s3_error(controller: Sandbox) -> None:
    result = backup_tool(controller, "restore", "s3://ops-backups-123/never-written")
    assert result.returncode == 1
    assert "(404)" in result.stderr


def test_it_runs_on_the_controller_only(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP)
    assert sandbox.run("on_create.sh", "install_tools").returncode == 0
    result = backup_tool(sandbox, "backup", URI)
    assert result.returncode == 1
    assert "this is a worker node; run mlcluster-backup on the controller" in result.stderr
