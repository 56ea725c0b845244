"""Issue 30: Slurm accounting in a database that requires TLS and outlives a cluster, against the real slurmdbd.

A Slurm of its own (tests/system/slurm_cluster.py: Debian 12's Slurm 22.05 and MariaDB 10.11, in its own
temporary folder on free loopback ports, stopped at the end), whose MariaDB requires TLS
(``require_secure_transport=ON``, as the managed database's parameter group sets it) with a server
certificate from a CA made here. slurmdbd.conf's ``Storage*`` lines are the ones the HyperPod accounting
step writes for a remote database (``slurmdbd_conf`` of mlcluster/lifecycle/hyperpod/steps/accounting.sh,
run by bash), ``StorageParameters=SSL_CA=<CA>`` included.

- TLS: slurmdbd connects with the CA that signed the server's certificate; with another CA it does not, and
  logs why; the server refuses a connection without TLS; a certificate of another host name from the right
  CA is accepted (the known limit the design notes state: Slurm never asks the client library to check the
  name).
- One history: slurmctld registers its ``ClusterName`` itself (the lifecycle runs no ``sacctmgr add
  cluster``); a cluster replaced (slurmctld stopped, a new state folder, the same ``ClusterName``, the same
  database) keeps the old job's record (``sacct --duplicates`` shows it: the job ID repeats); a second cluster
  of another name writes to the same database and ``sacct -M`` tells them apart, and refuses to start on the
  first one's state folder.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from tests.system import system_tools
from tests.system.conftest import DAEMONS
from tests.system.slurm_cluster import CLUSTER_NAME, DB_PASSWORD, NODES, SlurmCluster
from tests.system.system_tools import mysql_tcp, program, run

ACCOUNTING_STEP = HYPERPOD_DIR / "steps" / "accounting.sh"
OTHER_CLUSTER = "mlcother"
WAIT_S = 45.0
#: Any time before the tests: sacct shows only today's jobs unless told where to start.
SINCE = "--starttime=2000-01-01T00:00:00"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


class Tls:
    """The test's CA, a second CA that signed nothing of the server's, and the server's key and certificate."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(mode=0o700)
        self.folder = folder
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = folder / "ca.pem"
        self.other_ca = folder / "other-ca.pem"
        self.server_cert = folder / "server.pem"
        self.server_key = folder / "server-key.pem"
        self._pem(self.ca, _certificate("mlcluster test CA", self.ca_key, "mlcluster test CA", self.ca_key, ca=True))
        other_key = ec.generate_private_key(ec.SECP256R1())
        self._pem(self.other_ca, _certificate("another CA", other_key, "another CA", other_key, ca=True))
        self.issue([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])

    def issue(self, names: list[x509.GeneralName]) -> None:
        """A new server key and certificate from the CA, for ``names``."""
        key = ec.generate_private_key(ec.SECP256R1())
        self.server_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        self.server_key.chmod(0o600)
        self._pem(
            self.server_cert, _certificate("database", key, "mlcluster test CA", self.ca_key, ca=False, names=names)
        )

    @staticmethod
    def _pem(path: Path, certificate: x509.Certificate) -> None:
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))

    @property
    def mariadb_options(self) -> tuple[str, ...]:
        return (
            f"--ssl-ca={self.ca}",
            f"--ssl-cert={self.server_cert}",
            f"--ssl-key={self.server_key}",
            "--require-secure-transport=ON",
        )


def lifecycle_storage_lines(host: str, port: int, user: str, password: str, ca: Path) -> list[str]:
    """The ``Storage*`` lines of the slurmdbd.conf the accounting step writes for a remote database with ``ca``
    (its own ``slurmdbd_conf`` function, taken from the script and run by bash)."""
    function = re.search(r"^slurmdbd_conf\(\) \{\n.*?^\}\n", ACCOUNTING_STEP.read_text(), re.M | re.S)
    assert function, f"{ACCOUNTING_STEP} has no slurmdbd_conf function"
    done = run(
        "bash",
        "-c",
        f'set -euo pipefail\nDATABASE=slurm_acct_db\n{function[0]}\nslurmdbd_conf "$@"',
        "bash",
        host,
        str(port),
        user,
        password,
        str(ca),
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("Storage")]


def use_ca(cluster: SlurmCluster, ca: Path) -> None:
    """slurmdbd.conf with the lifecycle's ``Storage*`` lines for this cluster's database and ``ca``."""
    conf = cluster.root / "etc/slurmdbd.conf"
    kept = [line for line in conf.read_text().splitlines() if not line.startswith("Storage")]
    lines = lifecycle_storage_lines("127.0.0.1", cluster.ports["mysql"], "slurm", DB_PASSWORD, ca)
    conf.write_text("\n".join([*kept, *lines]) + "\n")


def until(what: str, ready: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    system_tools.until(what, ready, timeout_s)


def slurm(cluster: SlurmCluster, *command: str) -> subprocess.CompletedProcess[str]:
    return run(*command, env=cluster.env, cwd=cluster.root)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Tls]]:
    """A running Slurm whose accounting database requires TLS, slurmdbd configured by the lifecycle's lines."""
    for name in (*DAEMONS, "mysql"):
        program(name)
    # Short folder names: a job step's socket below the node's spool folder must fit in 108 bytes, under
    # xdist's popen-gwN and a TMPDIR such as /dev/shm too.
    root = tmp_path_factory.mktemp("acct")
    tls = Tls(root / "tls")
    cluster = SlurmCluster(root / "s", mariadb_options=tls.mariadb_options)
    cluster.root.mkdir(mode=0o700)
    cluster.create()
    use_ca(cluster, tls.ca)
    try:
        cluster.start()
        yield cluster, tls
    finally:
        cluster.shutdown()


def restart_slurmdbd(cluster: SlurmCluster) -> int:
    """Stop slurmdbd and start it without waiting for it to answer; the log's length before the start."""
    cluster.stop(cluster.pid_file("slurmdbd"))
    log = cluster.log_dir / "slurmdbd.log"
    mark = len(log.read_text(errors="replace")) if log.exists() else 0
    done = slurm(cluster, "slurmdbd")
    assert done.returncode == 0, done.stderr
    return mark


def logged_since(cluster: SlurmCluster, mark: int) -> str:
    return (cluster.log_dir / "slurmdbd.log").read_text(errors="replace")[mark:]


def answers(cluster: SlurmCluster) -> bool:
    return slurm(cluster, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").returncode == 0


def test_slurmdbd_connects_over_tls_with_the_ca_line_the_lifecycle_writes(
    tls_cluster: tuple[SlurmCluster, Tls],
) -> None:
    cluster, tls = tls_cluster
    conf = (cluster.root / "etc/slurmdbd.conf").read_text()
    assert f"StorageParameters=SSL_CA={tls.ca}\n" in conf
    assert f"StorageHost=127.0.0.1\nStoragePort={cluster.ports['mysql']}\n" in conf
    # The server requires TLS: the same user and password without TLS are refused.
    plain = mysql_tcp(cluster.ports["mysql"], "slurm", DB_PASSWORD, "--skip-ssl", "--execute=SELECT 1")
    assert plain.returncode != 0
    assert cluster.sql("SELECT @@require_secure_transport, @@have_ssl;").split() == ["1", "YES"]
    # slurmdbd answered (start waited for sacctmgr) and slurmctld registered its ClusterName in the database.
    assert CLUSTER_NAME in slurm(cluster, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").stdout.split()
    assert CLUSTER_NAME in cluster.sql("SELECT name FROM cluster_table;", "slurm_acct_db").split()
    # Its connection is encrypted: the server counts the TLS sessions it accepted.
    accepted = cluster.sql("SHOW GLOBAL STATUS LIKE 'Ssl_accepts';").split()
    assert int(accepted[1]) >= 1


def test_slurmdbd_refuses_a_server_certificate_its_ca_did_not_sign(tls_cluster: tuple[SlurmCluster, Tls]) -> None:
    """SSL_CA names a CA that did not sign the server's certificate: slurmdbd cannot connect and logs why."""
    cluster, tls = tls_cluster
    try:
        use_ca(cluster, tls.other_ca)
        mark = restart_slurmdbd(cluster)
        until("slurmdbd's refusal in its log", lambda: "mysql_real_connect failed" in logged_since(cluster, mark))
        logged = logged_since(cluster, mark)
        assert re.search(r"mysql_real_connect failed: 2026 TLS/SSL error: .*certificate", logged), logged
        assert "slurmdbd version" not in logged  # it never came up
        assert not answers(cluster)
    finally:
        use_ca(cluster, tls.ca)
        cluster.stop(cluster.pid_file("slurmdbd"))
        cluster.start_slurmdbd()
    assert answers(cluster)


def test_slurmdbd_does_not_check_the_server_name(tls_cluster: tuple[SlurmCluster, Tls]) -> None:
    """The known limit the design notes state: a certificate the CA signed for another host is accepted."""
    cluster, tls = tls_cluster
    try:
        tls.issue([x509.DNSName("not-this-database.invalid")])
        cluster.sql("FLUSH SSL;")
        mark = restart_slurmdbd(cluster)
        until("slurmdbd after the new certificate", lambda: answers(cluster))
        assert "mysql_real_connect failed" not in logged_since(cluster, mark)
        # The control: the MariaDB client asked to verify the name refuses the same certificate.
        checked = mysql_tcp(
            cluster.ports["mysql"],
            "slurm",
            DB_PASSWORD,
            f"--ssl-ca={tls.ca}",
            "--ssl-verify-server-cert",
            "--execute=SELECT 1",
        )
        assert checked.returncode != 0 and "certificate" in checked.stderr.lower(), checked.stderr
    finally:
        tls.issue([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        cluster.sql("FLUSH SSL;")
        cluster.stop(cluster.pid_file("slurmdbd"))
        cluster.start_slurmdbd()


def run_job(cluster: SlurmCluster, name: str) -> str:
    """Run a one-node batch job called ``name`` on node-1 to its end (``sbatch --wait``); its job ID."""
    done = slurm(
        cluster,
        "sbatch",
        "--parsable",
        "--wait",
        f"--job-name={name}",
        "--nodelist=node-1",
        "--output=/dev/null",
        "--wrap=true",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def history(cluster: SlurmCluster, clusters: str, *more: str) -> list[tuple[str, str, str, str]]:
    """``(cluster, job ID, job name, state)`` of every job ``sacct -M CLUSTERS`` shows (``more``: its options)."""
    done = slurm(
        cluster,
        "sacct",
        "-n",
        "-X",
        "-P",
        SINCE,
        f"--clusters={clusters}",
        "--format=Cluster,JobID,JobName,State",
        *more,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line]
    return [(cluster_name, job, name, state) for cluster_name, job, name, state in rows]


def recorded(cluster: SlurmCluster, clusters: str, name: str) -> Callable[[], bool]:
    return lambda: any(job[2] == name and job[3] == "COMPLETED" for job in history(cluster, clusters, "--duplicates"))


def test_a_replaced_cluster_and_a_second_cluster_keep_one_history(
    tls_cluster: tuple[SlurmCluster, Tls], tmp_path_factory: pytest.TempPathFactory
) -> None:
    cluster, _ = tls_cluster
    before = run_job(cluster, "before-replace")
    until("the first job's record", recorded(cluster, CLUSTER_NAME, "before-replace"))

    # The replacement: the controller and its nodes go, a new one starts with an empty state folder and the same
    # ClusterName, against the same database.
    cluster.stop(*(cluster.root / f"run/slurmd-{node}.pid" for node in NODES), cluster.pid_file("slurmctld"))
    old_state = cluster.state_dir
    new_state = cluster.root / "state-replaced"
    new_state.mkdir(mode=0o700)
    conf = cluster.slurm_conf.read_text()
    cluster.slurm_conf.write_text(conf.replace(f"StateSaveLocation={old_state}\n", f"StateSaveLocation={new_state}\n"))
    assert f"StateSaveLocation={new_state}\n" in cluster.slurm_conf.read_text()
    cluster.start_slurmctld()
    for node in NODES:
        cluster.start_slurmd(node)
    until("the new controller's nodes", lambda: cluster.nodes_idle(*NODES))
    after = run_job(cluster, "after-replace")
    until("the second job's record", recorded(cluster, CLUSTER_NAME, "after-replace"))
    jobs = history(cluster, CLUSTER_NAME, "--duplicates")
    names = {job[2]: job[1] for job in jobs}
    assert names == {"before-replace": before, "after-replace": after}, jobs
    assert all(job[0] == CLUSTER_NAME for job in jobs)
    # The new controller numbers jobs from 1 again: the two jobs share an ID, and sacct shows only the newer of
    # two records with one ID unless asked for --duplicates (the old record is there, told apart by its submit time).
    assert before == after, (before, after)
    assert [job[2] for job in history(cluster, CLUSTER_NAME)] == ["after-replace"]
    # One cluster in the database, not two.
    registered = slurm(cluster, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").stdout.split()
    assert registered.count(CLUSTER_NAME) == 1

    # A second cluster of another name, with its own controller and node, writes to the same slurmdbd.
    other = SlurmCluster(tmp_path_factory.mktemp("other"), cluster_name=OTHER_CLUSTER)  # short: see tls_cluster
    other.create()
    text = other.slurm_conf.read_text()
    for key, value in (
        ("AuthInfo", f"socket={cluster.munge_socket}"),
        ("AccountingStoragePort", str(cluster.ports["slurmdbd"])),
        ("AccountingStoragePass", str(cluster.munge_socket)),
    ):
        text = re.sub(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
    # Its controller pointed at the first cluster's old state folder (as a state folder on FSx would be, which
    # outlives a cluster): slurmctld refuses to start under another ClusterName than the one the folder records.
    stale = re.sub(r"^StateSaveLocation=.*$", f"StateSaveLocation={old_state}", text, flags=re.M)
    other.slurm_conf.write_text(stale)
    refused = run("slurmctld", "-D", "-f", str(other.slurm_conf), env=other.env, timeout_s=30)
    logged = (other.log_dir / "slurmctld.log").read_text(errors="replace")
    assert refused.returncode != 0 and "CLUSTER NAME MISMATCH" in logged + refused.stderr, (refused, logged[-2000:])
    other.slurm_conf.write_text(text)
    try:
        other.start_slurmctld()
        other.start_slurmd("node-1")
        until("the second cluster's node", lambda: other.nodes_idle("node-1"))
        run_job(other, "other-cluster")
        until("the second cluster's record", recorded(cluster, OTHER_CLUSTER, "other-cluster"))
        registered = slurm(cluster, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").stdout.split()
        assert {CLUSTER_NAME, OTHER_CLUSTER} <= set(registered)
        # sacct -M separates them; -M all shows both, each under its own name.
        assert {job[2] for job in history(cluster, OTHER_CLUSTER, "--duplicates")} == {"other-cluster"}
        assert "other-cluster" not in {job[2] for job in history(cluster, CLUSTER_NAME, "--duplicates")}
        both = {(job[0], job[2]) for job in history(cluster, "all", "--duplicates")}
        assert {
            (CLUSTER_NAME, "before-replace"),
            (CLUSTER_NAME, "after-replace"),
            (OTHER_CLUSTER, "other-cluster"),
        } <= both
    finally:
        stop_and_wait(other, other.root / "run/slurmd-node-1.pid", other.pid_file("slurmctld"))


def stop_and_wait(cluster: SlurmCluster, *pid_files: Path) -> None:
    """Stop the daemons of ``pid_files`` and wait (bounded) until their processes are gone: slurmctld removes its
    pid file before it has finished shutting down."""
    pids = [pid for file in pid_files if (pid := cluster.running_pid(file)) is not None]
    cluster.stop(*pid_files)
    until("the second cluster's daemons to exit", lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids))
