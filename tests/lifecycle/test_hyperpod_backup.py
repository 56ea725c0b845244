"""The controller's state off the root volume, and mlcluster-backup (the operator's step before patching).

Contract (lifecycle README): ``/usr/local/sbin/mlcluster-backup backup s3://BUCKET/PREFIX KMS_KEY_ARN`` prints
``MLCLUSTER_SHA256 <sha256> <file>`` per file; ``restore s3://BUCKET/PREFIX FILE=SHA256...`` restores
only files with those digests, plain files and folders, without the archive's owners; on the
controller, as root; exit 0 done, 1 failed, 2 bad usage; idempotent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, WORKER_IP, Sandbox

STATE = "/opt/sagemaker/mlcluster/slurmctld"
URI = "s3://ops-backups-123/ml/before-patch"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    sandbox = Sandbox(tmp_path_factory.mktemp("controller"), ips=CONTROLLER_IP)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox


def backup_tool(sandbox: Sandbox, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the installed /usr/local/sbin/mlcluster-backup the way SSM Run Command would."""
    env = {**sandbox.env(), "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle"), **extra}
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


def digests(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``FILE=SHA256`` restore arguments from a backup's ``MLCLUSTER_SHA256`` lines."""
    found = re.findall(r"^MLCLUSTER_SHA256 ([0-9a-f]{64}) (\S+)$", result.stdout, re.M)
    return [f"{name}={digest}" for digest, name in found]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_backup_then_restore_round_trips_and_can_run_again(controller: Sandbox) -> None:
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("jobs v1\n")
    tool = controller.root / "usr/local/sbin/mlcluster-backup"
    assert tool.stat().st_mode & 0o777 == 0o755
    before = len(controller.actions())
    for _ in range(2):  # a second backup replaces the objects
        result = backup_tool(controller, "backup", URI + "/", KEY)
        assert result.returncode == 0, result.stderr
        assert f"backup complete: {URI} (2 files)" in result.stderr
    actions = controller.actions()[before:]
    assert actions.index("systemctl stop slurmctld") < actions.index("systemctl start slurmctld")
    assert "mysqldump --single-transaction slurm_acct_db" in actions  # names no database: loads into the scratch
    assert (controller.state / "systemd/active/slurmctld").exists()
    sums = digests(result)
    assert sums == [
        f"accounting.sql.gz={sha(s3(controller, 'accounting.sql.gz').read_bytes())}",
        f"slurmctld-state.tar.gz={sha(s3(controller, 'slurmctld-state.tar.gz').read_bytes())}",
    ]
    assert not s3(controller, "SHA256SUMS").exists()  # digests never live next to the files they vouch for
    # Every upload is one PutObject naming SSE-KMS and the bucket's key (the bucket policy refuses others).
    puts = [a for a in actions if a.startswith("aws s3api put-object")]
    assert len(puts) == 4 and all(f"--server-side-encryption aws:kms --ssekms-key-id {KEY}" in a for a in puts)
    assert not [a for a in actions if a.startswith("aws s3 cp") and "s3://" in a.split()[-1]]
    assert b"slurm_acct_db" in gzip.decompress(s3(controller, "accounting.sql.gz").read_bytes())

    (state / "job_state").write_text("lost after patching\n")
    sql_before = (controller.state / "mysql.sql").read_text()
    for _ in range(2):  # a second restore gives the same state
        result = backup_tool(controller, "restore", URI, *sums)
        assert result.returncode == 0, result.stderr
        assert (state / "job_state").read_text() == "jobs v1\n"
        info = state.stat()
        assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)
    assert (controller.state / "mysql.sql").read_text().count("slurm_acct_db") > sql_before.count("slurm_acct_db")
    loads = [a for a in controller.actions() if "--user=mlcluster_restore" in a]
    assert loads and all(
        a.endswith("--sandbox --protocol=socket --user=mlcluster_restore slurm_acct_db_mlcrestore") for a in loads
    )
    sql = (controller.state / "mysql.sql").read_text()
    assert "GRANT ALL PRIVILEGES ON `slurm\\_acct\\_db\\_mlcrestore`.* TO 'mlcluster_restore'@'localhost';" in sql
    assert "GRANT ALL PRIVILEGES ON `slurm_acct_db`.*" not in sql
    assert "systemctl restart slurmdbd" in controller.actions()
    assert (controller.state / "systemd/active/slurmctld").exists()
    assert not list(state.parent.glob(".restore.*"))


def test_a_tampered_backup_is_not_restored_even_with_matching_sums_beside_it(controller: Sandbox) -> None:
    sums = digests(backup_tool(controller, "backup", URI, KEY))
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("current\n")
    forged = gzip.compress(b"not the backup")
    s3(controller, "slurmctld-state.tar.gz").write_bytes(forged)
    s3(controller, "SHA256SUMS").write_text(f"{sha(forged)}  slurmctld-state.tar.gz\n")  # the old self-vouching
    before = len(controller.actions())
    result = backup_tool(controller, "restore", URI, *sums)
    assert result.returncode == 1
    assert f"{URI}/slurmctld-state.tar.gz is not the file the backup wrote (its SHA-256 differs)" in result.stderr
    assert (state / "job_state").read_text() == "current\n"
    assert "systemctl stop slurmctld" not in controller.actions()[before:]


def archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o600, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.uid, info.gid = kind, mode, link, 2001, 2001
    return info


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([member("/etc/cron.d/x")], "has an absolute path '/etc/cron.d/x'"),
        ([member("./../../../etc/cron.d/x")], "has a '..' path './../../../etc/cron.d/x'"),
        ([member("..")], "has a '..' path '..'"),
        ([member("./job_state", tarfile.SYMTYPE, 0o777, "/etc/shadow")], "has a member of type 'l'"),
        ([member("./a"), member("./b", tarfile.LNKTYPE, link="./a")], "has a member of type 'h'"),
        ([member("./dev", tarfile.CHRTYPE)], "has a member of type 'c'"),
        ([member("./tool", mode=0o4755)], "has a setuid/setgid member (-rwsr-xr-x)"),
        ([member("./tool", mode=0o2755)], "has a setuid/setgid member (-rwxr-sr-x)"),
    ],
    ids=["absolute", "dotdot", "dotdot-alone", "symlink", "hardlink", "device", "setuid", "setgid"],
)
def test_restore_refuses_an_archive_it_did_not_write(
    controller: Sandbox, members: list[tarfile.TarInfo], message: str
) -> None:
    """Even with digests that match (a forged state), nothing but plain files and folders is restored."""
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("current\n")
    data = archive(*((m, b"x\n") for m in members))
    s3(controller, "slurmctld-state.tar.gz").write_bytes(data)
    before = len(controller.actions())
    result = backup_tool(controller, "restore", URI, f"slurmctld-state.tar.gz={sha(data)}")
    assert result.returncode == 1, result.stderr
    assert f"the state archive {message}; nothing was restored" in result.stderr, result.stderr
    assert (state / "job_state").read_text() == "current\n"
    assert "systemctl stop slurmctld" not in controller.actions()[before:]


def test_restore_keeps_no_owner_or_mode_from_the_archive(controller: Sandbox) -> None:
    state = controller.root / STATE.lstrip("/")
    data = archive((member("./", tarfile.DIRTYPE, 0o777), b""), (member("./job_state", mode=0o666), b"jobs\n"))
    s3(controller, "slurmctld-state.tar.gz").write_bytes(data)
    result = backup_tool(controller, "restore", URI, f"slurmctld-state.tar.gz={sha(data)}")
    assert result.returncode == 0, result.stderr
    restored = (state / "job_state").stat()
    assert (restored.st_uid, restored.st_gid, restored.st_mode & 0o777) == (0, 0, 0o600)  # not 2001, not 0666
    assert (state.stat().st_uid, state.stat().st_mode & 0o777) == (0, 0o700)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("backup",),
        ("backup", "/tmp/x"),
        ("snapshot", URI),
        ("backup", "s3://Bad_Bucket/x"),
        ("backup", "s3://ops-backups-123/x;id"),
        ("backup", "s3://ops-backups-123/a/../b"),
        ("backup", "s3://ops-backups-123"),
        ("backup", URI),
        ("backup", URI, "alias/patch-backups"),
        ("backup", URI, KEY + ";id"),
        ("backup", URI, KEY, "extra"),
        ("scheduled", URI),
        ("scheduled", URI, "alias/patch-backups"),
        ("scheduled", "s3://ops-backups-123/a/../b", KEY),
        ("restore", URI),
        ("restore", URI, "accounting.sql.gz=" + "0" * 64),
        ("restore", URI, "slurmctld-state.tar.gz=" + "0" * 63),
        ("restore", URI, "../x=" + "0" * 64),
    ],
)
def test_bad_usage_exits_2(controller: Sandbox, args: tuple[str, ...]) -> None:
    result = backup_tool(controller, *args)
    assert result.returncode == 2
    assert (
        "usage: mlcluster-backup backup|scheduled s3://BUCKET/PREFIX KMS_KEY_ARN | restore s3://BUCKET/PREFIX "
        "FILE=SHA256..." in (result.stderr)
    )
    # Where restore's digests come from: the journal or mlcluster; the bucket's SHA256SUMS only as a last
    # resort (after a controller replacement), with whom that trusts (the trust map's daily-copy row).
    said = " ".join(result.stderr.split())
    assert "digests should come from the journal" in said
    assert "journalctl -u mlcluster-backup-scheduled" in said
    assert "from mlcluster (patch state or its output). The bucket's SHA256SUMS is a last resort" in said
    assert "whoever can write the prefix can rewrite that file" in said


def test_a_missing_backup_fails_with_the_s3_error(controller: Sandbox) -> None:
    result = backup_tool(
        controller, "restore", "s3://ops-backups-123/never-written", "slurmctld-state.tar.gz=" + "0" * 64
    )
    assert result.returncode == 1
    assert "(404)" in result.stderr


def test_it_runs_on_the_controller_only(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP)
    assert sandbox.run("on_create.sh", "install_tools").returncode == 0
    result = backup_tool(sandbox, "backup", URI, KEY)
    assert result.returncode == 1
    assert "this is a worker node; run mlcluster-backup on the controller" in result.stderr


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real MariaDB server (Debian's mariadb-server, tests/system-packages.txt) on a private socket."""
    server, installer = shutil.which("mariadbd"), shutil.which("mariadb-install-db")
    if server is None or installer is None or shutil.which("mysql") is None:
        pytest.fail("the MariaDB server and client are needed: apt-get install mariadb-server mariadb-client")
    folder = tmp_path_factory.mktemp("mariadb")
    socket = folder / "sock"
    subprocess.run(
        [installer, "--no-defaults", f"--datadir={folder / 'data'}", "--user=root"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    process = subprocess.Popen(
        [
            server,
            "--no-defaults",
            f"--datadir={folder / 'data'}",
            f"--socket={socket}",
            "--skip-networking",
            "--user=root",
            f"--pid-file={folder / 'pid'}",
            f"--log-error={folder / 'error.log'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(120):
            if socket.exists():
                break
            time.sleep(0.25)
        else:
            pytest.fail(f"mariadbd did not start: {(folder / 'error.log').read_text()[-1000:]}")
        yield socket
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_a_shell_escape_in_the_dump_does_not_run_with_the_real_mariadb_client(
    controller: Sandbox, mariadb: Path, tmp_path: Path
) -> None:
    """The real client and server: a backup round-trips, and a `\\!` line in a dump is refused, not run as root."""
    (controller.base / ".my.cnf").write_text(f"[client]\nsocket={mariadb}\n")
    for tool in ("mysql", "mysqldump"):
        link = controller.state / "bin" / tool
        link.unlink()
        link.symlink_to(shutil.which(tool) or tool)
    subprocess.run(
        ["mysql", f"--socket={mariadb}", "--user=root"],
        input="CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE TABLE IF NOT EXISTS slurm_acct_db.job (id INT);"
        " INSERT INTO slurm_acct_db.job VALUES (7);",
        text=True,
        check=True,
        timeout=60,
    )
    backup = backup_tool(controller, "backup", URI, KEY)
    assert backup.returncode == 0, backup.stderr
    subprocess.run(
        ["mysql", f"--socket={mariadb}", "--user=root", "-e", "DELETE FROM slurm_acct_db.job"], check=True, timeout=60
    )
    restored = backup_tool(controller, "restore", URI, *digests(backup))
    assert restored.returncode == 0, restored.stderr
    rows = subprocess.run(
        ["mysql", f"--socket={mariadb}", "--user=root", "-N", "-e", "SELECT id FROM slurm_acct_db.job"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert rows.stdout.split() == ["7"]

    canary = tmp_path / "canary"
    dump = gzip.compress(f"SELECT 1;\n\\! /usr/bin/id > {canary}\nSELECT 2;\n".encode())
    s3(controller, "accounting.sql.gz").write_bytes(dump)
    sums = [s for s in digests(backup) if s.startswith("slurmctld")] + [f"accounting.sql.gz={sha(dump)}"]
    result = backup_tool(controller, "restore", URI, *sums)
    assert result.returncode == 1
    assert "Not allowed in the sandbox mode" in result.stderr
    assert not canary.exists()
    assert (controller.state / "systemd/active/slurmctld").exists()  # started again after the failure


@pytest.mark.parametrize(
    ("statement", "refusal"),
    [
        ("SELECT 'x' INTO OUTFILE '{canary}';", "FILE privilege"),
        ("SELECT LOAD_FILE('/etc/hostname') INTO @x; CREATE TABLE mysql.evil (a INT);", "denied"),
        ("CREATE USER 'evil'@'localhost' IDENTIFIED BY 'x';", "CREATE USER privilege"),
        ("GRANT ALL ON *.* TO 'mlcluster_restore'@'localhost';", "denied"),
        ("USE mysql; UPDATE user SET Password='' WHERE User='root';", "denied"),
        ("CREATE DATABASE /*!32312 IF NOT EXISTS*/ `slurm_acct_db`; USE `slurm_acct_db`; DROP TABLE job;", "denied"),
    ],
    ids=["into-outfile", "other-database", "create-user", "grant", "use-mysql", "names-the-live-database"],
)
def test_the_dump_loads_as_an_account_limited_to_the_accounting_database(
    controller: Sandbox, mariadb: Path, tmp_path: Path, statement: str, refusal: str
) -> None:
    """Real MariaDB: what the root account could do from a dump is refused, and the state is not swapped."""
    (controller.base / ".my.cnf").write_text(f"[client]\nsocket={mariadb}\n")
    for tool in ("mysql", "mysqldump"):
        link = controller.state / "bin" / tool
        link.unlink(missing_ok=True)
        link.symlink_to(shutil.which(tool) or tool)
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("before the backup\n")
    backup = backup_tool(controller, "backup", URI, KEY)
    assert backup.returncode == 0, backup.stderr
    (state / "job_state").write_text("current\n")
    canary = tmp_path / "canary"
    dump = gzip.compress(f"CREATE TABLE IF NOT EXISTS ok (id INT);\n{statement.format(canary=canary)}\n".encode())
    s3(controller, "accounting.sql.gz").write_bytes(dump)
    sums = [s for s in digests(backup) if s.startswith("slurmctld")] + [f"accounting.sql.gz={sha(dump)}"]
    result = backup_tool(controller, "restore", URI, *sums)
    assert result.returncode == 1, result.stderr
    assert refusal in result.stderr, result.stderr
    assert "loading the accounting dump failed" in result.stderr
    assert not canary.exists()
    # Atomic-ish: the staged state was not swapped in, and nothing is left behind.
    assert (state / "job_state").read_text() == "current\n"
    assert not list(state.parent.glob(".restore.*"))
    users = subprocess.run(
        ["mysql", f"--socket={mariadb}", "--user=root", "-N", "-e", "SELECT User FROM mysql.user"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert "mlcluster_restore" not in users and "evil" not in users
    assert (controller.state / "systemd/active/slurmctld").exists()


def _real_mysql(controller: Sandbox, mariadb: Path) -> None:
    """Point the controller's mysql and mysqldump at the real client and the test server."""
    (controller.base / ".my.cnf").write_text(f"[client]\nsocket={mariadb}\n")
    for tool in ("mysql", "mysqldump"):
        link = controller.state / "bin" / tool
        link.unlink(missing_ok=True)
        link.symlink_to(shutil.which(tool) or tool)


def _sql(mariadb: Path, statement: str) -> list[str]:
    """Run ``statement`` as MariaDB's root; the result's fields, whitespace-split."""
    result = subprocess.run(
        ["mysql", f"--socket={mariadb}", "--user=root", "-N", "-e", statement],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.split()


def test_a_dump_that_fails_half_way_leaves_the_accounting_database_untouched(
    controller: Sandbox, mariadb: Path
) -> None:
    """Real MariaDB: the dump loads into a scratch database; slurm_acct_db changes only in one swap, after the
    whole load succeeded. A load that fails after dropping and refilling a table changes nothing live."""
    _real_mysql(controller, mariadb)
    _sql(
        mariadb,
        "CREATE DATABASE IF NOT EXISTS slurm_acct_db; DROP TABLE IF EXISTS slurm_acct_db.job;"
        " CREATE TABLE slurm_acct_db.job (id INT); INSERT INTO slurm_acct_db.job VALUES (7);"
        " CREATE TABLE IF NOT EXISTS slurm_acct_db.assoc (id INT); DELETE FROM slurm_acct_db.assoc;"
        " INSERT INTO slurm_acct_db.assoc VALUES (70);",
    )
    backup = backup_tool(controller, "backup", URI, KEY)
    assert backup.returncode == 0, backup.stderr
    assert "CREATE DATABASE" not in gzip.decompress(s3(controller, "accounting.sql.gz").read_bytes()).decode()
    # A later change: a new row and a table the backup does not know.
    _sql(mariadb, "INSERT INTO slurm_acct_db.job VALUES (8); CREATE TABLE slurm_acct_db.later (id INT);")

    # Half-way: job is dropped, recreated and refilled, then a statement fails before assoc is reached.
    dump = gzip.compress(
        b"DROP TABLE IF EXISTS job;\nCREATE TABLE job (id INT);\nINSERT INTO job VALUES (1),(2);\n"
        b"INSERT INTO no_such_table VALUES (3);\nDROP TABLE IF EXISTS assoc;\n"
    )
    s3(controller, "accounting.sql.gz").write_bytes(dump)
    sums = [s for s in digests(backup) if s.startswith("slurmctld")] + [f"accounting.sql.gz={sha(dump)}"]
    result = backup_tool(controller, "restore", URI, *sums)
    assert result.returncode == 1, result.stderr
    assert sorted(_sql(mariadb, "SELECT id FROM slurm_acct_db.job")) == ["7", "8"]
    assert _sql(mariadb, "SELECT id FROM slurm_acct_db.assoc") == ["70"]
    assert "loading the accounting dump failed" in result.stderr
    assert "slurm_acct_db and the controller's state were left as they were" in result.stderr
    assert _sql(mariadb, "SHOW DATABASES LIKE 'slurm_acct_db%'") == ["slurm_acct_db"]  # no scratch left behind
    assert "mlcluster_restore" not in _sql(mariadb, "SELECT User FROM mysql.user")

    # A good dump: every table swapped in at once, a table made after the backup gone, no leftovers.
    backup_again = backup_tool(controller, "backup", URI, KEY)
    assert backup_again.returncode == 0, backup_again.stderr
    _sql(mariadb, "INSERT INTO slurm_acct_db.job VALUES (9); CREATE TABLE IF NOT EXISTS slurm_acct_db.later2 (id INT);")
    restored = backup_tool(controller, "restore", URI, *digests(backup_again))
    assert restored.returncode == 0, restored.stderr
    assert sorted(_sql(mariadb, "SELECT id FROM slurm_acct_db.job")) == ["7", "8"]
    assert _sql(mariadb, "SELECT id FROM slurm_acct_db.assoc") == ["70"]
    assert _sql(mariadb, "SHOW TABLES FROM slurm_acct_db") == ["assoc", "job", "later"]
    assert _sql(mariadb, "SHOW DATABASES LIKE 'slurm_acct_db%'") == ["slurm_acct_db"]


def test_a_dump_made_by_the_earlier_backup_with_databases_still_restores(controller: Sandbox, mariadb: Path) -> None:
    """Real MariaDB: the earlier backup.sh dumped with ``--databases slurm_acct_db``, so its dump opens with
    mysqldump's CREATE DATABASE and USE lines. A patch that backs up with the old tool and restores with the
    new one must still restore: those two whole lines are dropped, nothing else that names the database is."""
    _real_mysql(controller, mariadb)
    _sql(
        mariadb,
        "CREATE DATABASE IF NOT EXISTS slurm_acct_db; DROP TABLE IF EXISTS slurm_acct_db.job;"
        " DROP TABLE IF EXISTS slurm_acct_db.later; DROP TABLE IF EXISTS slurm_acct_db.later2;"
        " CREATE TABLE slurm_acct_db.job (id INT); INSERT INTO slurm_acct_db.job VALUES (41);",
    )
    backup = backup_tool(controller, "backup", URI, KEY)
    assert backup.returncode == 0, backup.stderr
    old_style = subprocess.run(
        ["mysqldump", f"--socket={mariadb}", "--user=root", "--single-transaction", "--databases", "slurm_acct_db"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert b"CREATE DATABASE /*!32312 IF NOT EXISTS*/ `slurm_acct_db`" in old_style
    assert b"\nUSE `slurm_acct_db`;\n" in old_style
    dump = gzip.compress(old_style)
    s3(controller, "accounting.sql.gz").write_bytes(dump)
    _sql(mariadb, "INSERT INTO slurm_acct_db.job VALUES (42);")
    sums = [s for s in digests(backup) if s.startswith("slurmctld")] + [f"accounting.sql.gz={sha(dump)}"]
    restored = backup_tool(controller, "restore", URI, *sums)
    assert restored.returncode == 0, restored.stderr
    assert _sql(mariadb, "SELECT id FROM slurm_acct_db.job") == ["41"]
    assert _sql(mariadb, "SHOW DATABASES LIKE 'slurm_acct_db%'") == ["slurm_acct_db"]


def test_the_restore_account_reaches_the_scratch_database_only_not_names_its_underscores_match(
    controller: Sandbox, mariadb: Path
) -> None:
    """Real MariaDB: in a database-level grant `_` matches any character; the grant escapes it, so a dump
    cannot create a look-alike database (``slurm-acct-db-mlcrestore``) that survives the clean-up."""
    _real_mysql(controller, mariadb)
    _sql(mariadb, "CREATE DATABASE IF NOT EXISTS slurm_acct_db;")
    backup = backup_tool(controller, "backup", URI, KEY)
    assert backup.returncode == 0, backup.stderr
    dump = gzip.compress(
        b"CREATE DATABASE `slurm-acct-db-mlcrestore`;\nCREATE TABLE `slurm-acct-db-mlcrestore`.t (id INT);\n"
    )
    s3(controller, "accounting.sql.gz").write_bytes(dump)
    sums = [s for s in digests(backup) if s.startswith("slurmctld")] + [f"accounting.sql.gz={sha(dump)}"]
    result = backup_tool(controller, "restore", URI, *sums)
    assert result.returncode == 1, result.stderr
    assert "denied" in result.stderr, result.stderr
    assert _sql(mariadb, "SHOW DATABASES LIKE 'slurm%mlcrestore'") == []


def test_the_single_put_limit_is_s3s_five_gib_and_can_only_be_lowered() -> None:
    """S3 takes at most 5 GiB in one PutObject; the bucket policy leaves no multipart way around it."""
    script = (HYPERPOD_DIR / "backup.sh").read_text(encoding="utf-8")
    assert f"\nS3_PUT_LIMIT={5 * 1024**3}\n" in script
    assert "S3_PUT_MAX_BYTES > S3_PUT_LIMIT" in script


@pytest.fixture(scope="module")
def stub_dump_controller(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """A controller of its own whose mysqldump stays the stub: its dump is the same bytes every run (the real
    client, which other tests link into the shared controller, writes the time into each dump)."""
    # The daily copy publishes its metric for the cluster node.env names (the scheduled_backup feature).
    scheduled = {"bucket": "ops-backups-123", "key_arn": KEY, "prefix": "ml/scheduled/", "cluster_name": "ml"}
    features = {**FEATURES, "docker": False, "enroot_pyxis": False, "scheduled_backup": scheduled}
    sandbox = Sandbox(tmp_path_factory.mktemp("sized"), ips=CONTROLLER_IP, features=features)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox


@pytest.mark.parametrize("verb", ["backup", "scheduled"])
def test_a_file_over_the_single_put_limit_stops_the_run_before_any_upload(
    stub_dump_controller: Sandbox, verb: str
) -> None:
    """Issue 30, item 5: a file over the limit fails naming itself, its size and the limit; nothing is uploaded.

    The limit is lowered to the largest file's size (found by a first run): that size is accepted, one byte less
    is refused. The files are the same in both runs (same state, the stub's dump)."""
    controller = stub_dump_controller
    state = controller.root / STATE.lstrip("/")
    (state / "job_state").write_text("jobs for the size check\n")
    uri = f"{URI}-size-{verb}"
    first = backup_tool(controller, verb, uri, KEY)
    assert first.returncode == 0, first.stderr
    prefix = controller.state / "s3" / uri.removeprefix("s3://")
    sizes = {path.name: path.stat().st_size for path in prefix.rglob("*.gz")}
    largest = max(sizes, key=lambda name: sizes[name])
    at_edge = backup_tool(controller, verb, uri, KEY, MLC_S3_PUT_MAX_BYTES=str(sizes[largest]))
    assert at_edge.returncode == 0, at_edge.stderr
    shutil.rmtree(prefix)
    before = len(controller.actions())
    over = backup_tool(controller, verb, uri, KEY, MLC_S3_PUT_MAX_BYTES=str(sizes[largest] - 1))
    assert over.returncode == 1
    assert (
        f"{largest} is {sizes[largest]} bytes; one upload to the backup bucket takes at most {sizes[largest] - 1} "
        "bytes (S3's single-PUT limit, 5 GiB; the bucket takes no multipart uploads). Nothing was uploaded."
    ) in over.stderr
    assert not [a for a in controller.actions()[before:] if a.startswith("aws s3")]
    assert not prefix.exists()
    assert (controller.state / "systemd/active/slurmctld").exists()  # a failed backup never leaves it stopped
