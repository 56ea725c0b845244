"""A real single-machine Slurm for the tests: munge, MariaDB, slurmdbd, slurmctld and several slurmd.

Everything lives in one temporary folder and listens on 127.0.0.1 only: munged on a socket of its
own, MariaDB on a free loopback port (``--bind-address``) and its own socket, slurmdbd, slurmctld
and one slurmd per node on free loopback ports (``CommunicationParameters=NoInAddrAny,NoCtldInAddrAny``:
no daemon binds the wildcard address; slurmctld binds the address its host name resolves to, which
is loopback on these machines, and a test checks every port with ``ss``). The nodes are distinct ``NodeName`` s served by one slurmd
each (``slurmd -N NAME``, the multiple-slurmd layout: a port, spool folder and log per node).
Every daemon runs as root (the tests' user in CI) with ``SlurmUser=root``. Every wait is bounded.

Slurm's clients reach it through :attr:`SlurmCluster.env` (``SLURM_CONF``; slurm.conf names the
munge socket), MariaDB's through :meth:`SlurmCluster.sql` or an option file naming
:attr:`SlurmCluster.mysql_socket` (Debian's /etc/mysql/my.cnf names the system socket, which wins
over ``MYSQL_UNIX_PORT``). :meth:`SlurmCluster.service` starts and stops the daemons the way ``systemctl``
does on a node; ``python -m tests.system.slurm_cluster DIR ACTION SERVICE`` is the same from a
shell, which the ``systemctl`` stand-in of the backup round trip calls.

Slurm here is Debian 12's 22.05; the clusters run 24.11 or later. The tests rely only on formats
both keep: ``sinfo``/``squeue`` with explicit ``--format`` fields, ``scontrol show nodes --oneliner``
(``Key=Value`` pairs), ``sacct --parsable2``, and the ``srun`` output of the job itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The static nodes (one slurmd each), always up.
NODES = ("node-1", "node-2", "node-3")
#: A cloud node as ParallelCluster defines them: powered down until a job or ``power_up`` resumes it;
#: the ResumeProgram gives it its address, the test starts its slurmd (``slurmd -b``: a fresh boot,
#: which slurmctld waits for), the SuspendProgram stops it.
CLOUD_NODE = "cloud-1"
CLOUD_FEATURES = "dynamic,p5.48xlarge,p5,efa,gpu"
CLUSTER_NAME = "mlctest"
PARTITION = "batch"
CLOUD_PARTITION = "cloud"
DB_PASSWORD = "mlcluster-test-only"  # a throw-away database on loopback, removed with the folder
#: MariaDB sized for a test: 22 MB on disk instead of 114 MB (the default redo log is 96 MB), and no
#: flush to disk at each commit (a throw-away database; the dump and restore are what is tested).
MARIADB_SMALL = (
    "--innodb-buffer-pool-size=16M",
    "--innodb-log-file-size=4M",
    "--skip-log-bin",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
)
#: Upper bound of any single wait for a daemon.
START_TIMEOUT_S = 60.0


class ClusterError(RuntimeError):
    """A daemon did not start or answer in time; the message carries the end of its log."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


@dataclass
class SlurmCluster:
    """The folder of one cluster; :meth:`create` writes the configuration, :meth:`start` starts it."""

    root: Path
    #: slurm.conf's ``ClusterName``: the name slurmctld registers its records under in slurmdbd.
    cluster_name: str = CLUSTER_NAME
    #: More ``mariadbd`` options (TLS settings, for one).
    mariadb_options: tuple[str, ...] = ()

    # -- layout -----------------------------------------------------------------------------------
    @property
    def ports(self) -> dict[str, int]:
        return dict(json.loads((self.root / "ports.json").read_text()))

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc/slurm.conf"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def munge_socket(self) -> Path:
        return self.root / "run/munge.sock"

    @property
    def mysql_socket(self) -> Path:
        return self.root / "run/mysqld.sock"

    @property
    def env(self) -> dict[str, str]:
        """The environment in which Slurm's clients talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf)}

    def pid_file(self, service: str, node: str = "") -> Path:
        return self.root / "run" / f"{service}{'-' + node if node else ''}.pid"

    # -- configuration ----------------------------------------------------------------------------
    def create(self) -> None:
        """Write keys, folders and configuration files (nothing runs yet)."""
        for sub in ("etc", "run", "log", "state", "spool", "mysql"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        ports = {"slurmctld": free_port(), "slurmdbd": free_port(), "mysql": free_port()}
        ports.update({node: free_port() for node in (*NODES, CLOUD_NODE)})
        (self.root / "ports.json").write_text(json.dumps(ports))
        key = self.root / "etc/munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        host = socket.gethostname().split(".")[0]
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        node_lines = "".join(
            f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} CPUs=1 RealMemory=100 "
            "Features=static State=UNKNOWN\n"
            for node in NODES
        )
        node_lines += f"NodeName={CLOUD_NODE} Port={ports[CLOUD_NODE]} CPUs=1 RealMemory=100 Features={CLOUD_FEATURES} State=CLOUD\n"
        # ResumeProgram gives the node its address, as ParallelCluster's resume does once the instance
        # exists; the test then "boots" it (slurmd -b). SuspendProgram stops its slurmd.
        power = self.root / "etc/power.sh"
        power.write_text(
            "#!/bin/sh\n# ResumeProgram / SuspendProgram of the cloud node: power.sh resume|suspend HOSTLIST\n"
            f"export SLURM_CONF={self.slurm_conf}\n"
            'for node in $(scontrol show hostnames "$2"); do\n'
            '  if [ "$1" = resume ]; then\n'
            f'    scontrol update nodename="$node" nodeaddr=127.0.0.1 nodehostname={host}\n'
            "  else\n"
            f'    kill "$(cat {self.root}/run/slurmd-$node.pid)"\n'
            "  fi\n"
            "done\n"
        )
        power.chmod(0o700)
        for action in ("resume", "suspend"):
            script = self.root / f"etc/{action}.sh"
            script.write_text(f'#!/bin/sh\nexec {power} {action} "$1" >>{self.log_dir}/power.log 2>&1\n')
            script.chmod(0o700)
        self.slurm_conf.write_text(
            f"ClusterName={self.cluster_name}\n"
            f"SlurmctldHost={host}(127.0.0.1)\n"
            f"SlurmctldPort={ports['slurmctld']}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"{auth}CredType=cred/munge\n"
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n"
            f"StateSaveLocation={self.state_dir}\n"
            f"SlurmdSpoolDir={self.root}/spool/slurmd-%n\n"
            f"SlurmctldPidFile={self.pid_file('slurmctld')}\n"
            f"SlurmdPidFile={self.root}/run/slurmd-%n.pid\n"
            f"SlurmctldLogFile={self.log_dir}/slurmctld.log\n"
            f"SlurmdLogFile={self.log_dir}/slurmd-%n.log\n"
            "SlurmctldDebug=info\nSlurmdDebug=info\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
            "MpiDefault=none\nReturnToService=2\nSlurmdParameters=config_overrides\n"
            "SchedulerParameters=sched_interval=2\n"
            # The power-save thread looks every second (default 10) so the cloud node comes and goes quickly.
            "SlurmctldParameters=power_save_interval=1,power_save_min_interval=0\n"
            "SlurmctldTimeout=10\nSlurmdTimeout=30\nMessageTimeout=10\nInactiveLimit=0\nKillWait=2\n"
            "MinJobAge=300\nMaxArraySize=100\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={ports['slurmdbd']}\n"
            # With slurmdbd, this "password" is the munge socket of the accounting connection (slurm.conf(5)).
            f"AccountingStoragePass={self.munge_socket}\n"
            "PlugStackConfig=/dev/null\n"
            # Powered-down cloud nodes visible, as Slurm 23.02 and later always show them (22.05 hides them).
            "PrivateData=cloud\n"
            f"ResumeProgram={self.root}/etc/resume.sh\nSuspendProgram={self.root}/etc/suspend.sh\n"
            f"SuspendTime=3600\nSuspendTimeout=2\nResumeTimeout=60\nSuspendExcNodes={','.join(NODES)}\n"
            f"{node_lines}"
            f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP\n"
            f"PartitionName={CLOUD_PARTITION} Nodes={CLOUD_NODE} MaxTime=INFINITE State=UP\n"
        )
        dbd = self.root / "etc/slurmdbd.conf"
        dbd.write_text(
            f"{auth}CommunicationParameters=NoInAddrAny\nDbdAddr=127.0.0.1\nDbdHost={host}\nDbdPort={ports['slurmdbd']}\nSlurmUser=root\n"
            f"PidFile={self.pid_file('slurmdbd')}\nLogFile={self.log_dir}/slurmdbd.log\nDebugLevel=info\n"
            "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
            f"StoragePort={ports['mysql']}\nStorageUser=slurm\nStoragePass={DB_PASSWORD}\nStorageLoc=slurm_acct_db\n"
        )
        dbd.chmod(0o600)

    # -- daemons ----------------------------------------------------------------------------------
    def running_pid(self, pid_file: Path) -> int | None:
        """The pid in ``pid_file`` when that process runs and is one of this cluster's daemons, else None.

        A stale file's pid may belong to another process by now: its command line must name the daemon.
        """
        try:
            pid = int(pid_file.read_text().split()[0])
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            zombie = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, ValueError, IndexError):
            return None
        if zombie:  # exited, not yet reaped by its parent (MariaDB's is the test process)
            return None
        daemon = pid_file.stem.split("-", 1)[0].replace("mariadb", "mariadbd")
        return pid if daemon in command else None

    def _wait(self, what: str, ready: object, log: Path, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            time.sleep(0.2)
        raise ClusterError(f"{what} not ready after {timeout_s:.0f} s; {log}:\n{_tail(log)}")

    def _daemon(self, command: list[str], log: Path) -> None:
        """Start a daemon that forks itself; its own pid file tells where it is."""
        with log.open("a") as out:
            done = subprocess.run(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=START_TIMEOUT_S, check=False
            )
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(command)} exited {done.returncode}; {log}:\n{_tail(log)}")

    def _ok(self, *command: str) -> bool:
        try:
            done = subprocess.run(command, env=self.env, capture_output=True, timeout=15, check=False)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def start_munge(self) -> None:
        self._daemon(
            [
                "munged",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={self.root}/etc/munge.key",
                f"--log-file={self.log_dir}/munged.log",
                f"--pid-file={self.pid_file('munged')}",
                f"--seed-file={self.root}/run/munged.seed",
            ],
            self.log_dir / "munged.start.log",
        )
        self._wait(
            "munged", lambda: self._ok("munge", "--socket", str(self.munge_socket), "-n"), self.log_dir / "munged.log"
        )

    def start_mariadb(self) -> None:
        datadir = self.root / "mysql"
        if not (datadir / "mysql").is_dir():
            self._daemon(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                    *MARIADB_SMALL,
                ],
                self.log_dir / "mariadb-install.log",
            )
        log = self.log_dir / "mariadb.log"
        with log.open("a") as out:
            subprocess.Popen(
                [
                    "mariadbd",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    "--user=root",
                    f"--socket={self.mysql_socket}",
                    f"--port={self.ports['mysql']}",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                    f"--pid-file={self.pid_file('mariadb')}",
                    *MARIADB_SMALL,
                    "--performance-schema=OFF",
                    *self.mariadb_options,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait("MariaDB", lambda: self._ok("mysqladmin", f"--socket={self.mysql_socket}", "ping"), log)
        self.sql(
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )

    def sql(self, statements: str, database: str = "") -> str:
        """Run SQL as MariaDB's root over the socket; the tab-separated result."""
        done = subprocess.run(
            [
                "mysql",
                f"--socket={self.mysql_socket}",
                "--user=root",
                "--batch",
                "--skip-column-names",
                *([database] if database else []),
            ],
            input=statements,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(f"mysql: {done.stderr.strip()}")
        return done.stdout

    def start_slurmdbd(self) -> None:
        self._daemon(["slurmdbd"], self.log_dir / "slurmdbd.start.log")
        self._wait("slurmdbd", lambda: self._ok("sacctmgr", "-n", "show", "cluster"), self.log_dir / "slurmdbd.log")

    def start_slurmctld(self) -> None:
        self._daemon(["slurmctld", "-f", str(self.slurm_conf)], self.log_dir / "slurmctld.start.log")
        self._wait("slurmctld", lambda: self._ok("scontrol", "ping"), self.log_dir / "slurmctld.log")

    def start_slurmd(self, node: str, *, booted: bool = False) -> None:
        """Start the slurmd of ``node``; ``booted`` reports a fresh boot (``-b``), which a resumed cloud node needs."""
        self._daemon(
            ["slurmd", "-f", str(self.slurm_conf), "-N", node, *(["-b"] if booted else [])],
            self.log_dir / f"slurmd-{node}.start.log",
        )

    def stop(self, *pid_files: Path, timeout_s: float = 30.0) -> None:
        """SIGTERM the daemons of ``pid_files`` together, wait (bounded) until they are gone, then SIGKILL."""
        running = [(pid, file) for file in pid_files if (pid := self.running_pid(file)) is not None]
        for pid, _ in running:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while running and time.monotonic() < deadline:
            time.sleep(0.1)
            running = [(pid, file) for pid, file in running if self.running_pid(file) == pid]
        for pid, _ in running:
            os.kill(pid, signal.SIGKILL)

    def nodes_idle(self, *nodes: str) -> bool:
        done = subprocess.run(
            ["sinfo", "--noheader", "--Node", "--format=%N %t"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return all(states.get(node) == "idle" for node in nodes)

    def service(self, action: str, name: str) -> None:
        """``systemctl start|stop|restart NAME`` for slurmctld, slurmdbd, slurmd-NODE."""
        files = {"slurmctld": self.pid_file("slurmctld"), "slurmdbd": self.pid_file("slurmdbd")}
        files.update({f"slurmd-{node}": self.root / f"run/slurmd-{node}.pid" for node in (*NODES, CLOUD_NODE)})
        if name not in files or action not in ("start", "stop", "restart"):
            raise ClusterError(f"unknown service action: {action} {name}")
        if action in ("stop", "restart"):
            self.stop(files[name])
        if action in ("start", "restart"):
            if name == "slurmctld":
                self.start_slurmctld()
            elif name == "slurmdbd":
                self.start_slurmdbd()
            else:
                node = name.removeprefix("slurmd-")
                self.start_slurmd(node, booted=node == CLOUD_NODE)

    def start(self) -> None:
        """Start every daemon and wait until every node is idle."""
        self.start_munge()
        self.start_mariadb()
        self.start_slurmdbd()
        self.start_slurmctld()
        for node in NODES:
            self.start_slurmd(node)
        self._wait(f"nodes {NODES}", lambda: self.nodes_idle(*NODES), self.log_dir / "slurmctld.log")

    def shutdown(self) -> None:
        """Stop every daemon: the nodes and slurmctld, then slurmdbd and MariaDB, munge last (each bounded)."""
        self.stop(*(self.root / f"run/slurmd-{node}.pid" for node in (*NODES, CLOUD_NODE)), self.pid_file("slurmctld"))
        self.stop(self.pid_file("slurmdbd"))
        self.stop(self.pid_file("mariadb"))
        self.stop(self.pid_file("munged"))


if __name__ == "__main__":  # python -m tests.system.slurm_cluster DIR start|stop|restart SERVICE
    SlurmCluster(Path(sys.argv[1])).service(sys.argv[2], sys.argv[3])
