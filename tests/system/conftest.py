"""The real Slurm cluster of the test session (tests/system/slurm_cluster.py).

One cluster per test run: under pytest-xdist the first worker that asks starts it, under a file
lock in the folder every worker shares, and the others use it. Each worker holds a lease file while
it may use the cluster; the worker that started it stops it at the end of its session, after the
other leases are gone (a bounded wait). Every test that needs Slurm sits in test_slurm.py today, so
``--dist loadfile`` gives it to one worker, and the lease matters only when that changes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from tests.system.slurm_cluster import SlurmCluster
from tests.system.system_tools import program

#: The programs the cluster runs; each missing one fails the tests that need the cluster.
DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sinfo", "sacctmgr")
#: How long the worker that started the cluster waits for the others before it stops the cluster.
LEASE_WAIT_S = 120.0


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[SlurmCluster]:
    """A running single-machine Slurm (3 static nodes, 1 cloud node) with accounting in MariaDB."""
    for name in DAEMONS:
        program(name)
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    lock = FileLock(str(shared / "slurm.lock"))
    ready = shared / "slurm.ready"  # holds the running cluster's folder
    leases = shared / "slurm-leases"
    lease = leases / f"{worker_id}-{os.getpid()}"
    started = False
    with lock:
        leases.mkdir(exist_ok=True)
        lease.touch()
        if ready.exists():
            cluster = SlurmCluster(Path(ready.read_text()))
        else:
            cluster = SlurmCluster(shared / f"slurm-{os.getpid()}")
            cluster.root.mkdir(mode=0o700)
            cluster.create()
            try:
                cluster.start()
            except BaseException:
                lease.unlink()
                cluster.shutdown()
                raise
            ready.write_text(str(cluster.root))
            started = True
    try:
        yield cluster
    finally:
        lease.unlink()
        if started:
            with lock:
                deadline = time.monotonic() + LEASE_WAIT_S
                while any(leases.iterdir()) and time.monotonic() < deadline:
                    time.sleep(0.5)
                ready.unlink()
                cluster.shutdown()
