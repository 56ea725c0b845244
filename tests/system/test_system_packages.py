"""Every Debian package the real-component tests need is installed: a missing one fails the suite.

``make test`` installs them first (``make system-deps``); a machine where that did not happen must
not pass by skipping the tests that run Slurm, MariaDB, promtool and amtool.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.system.system_tools import packages, run

#: The programs the tests run, and the package each comes from (checked against ``dpkg -S``).
PROGRAMS = {
    "/usr/bin/promtool": "prometheus",
    "/usr/bin/amtool": "prometheus-alertmanager",
    "/usr/sbin/slurmctld": "slurmctld",
    "/usr/sbin/slurmd": "slurmd",
    "/usr/sbin/slurmdbd": "slurmdbd",
    "/usr/bin/sinfo": "slurm-client",
    "/usr/sbin/munged": "munge",
    "/usr/sbin/mariadbd": "mariadb-server-core",
    "/usr/bin/mariadb-install-db": "mariadb-server-core",
    "/usr/bin/mysqldump": "mariadb-client",
}


def test_every_listed_package_is_installed() -> None:
    listed = packages()
    assert {"slurmctld", "slurmd", "slurmdbd", "munge", "mariadb-server", "prometheus"} <= set(listed)
    status = {name: run("dpkg-query", "-W", "-f=${db:Status-Status}", name).stdout.strip() for name in listed}
    missing = sorted(name for name, state in status.items() if state != "installed")
    assert not missing, f"not installed: {missing}; run `make system-deps` as root"


def test_the_programs_come_from_the_listed_packages() -> None:
    for path, package in PROGRAMS.items():
        real = str(Path(path).resolve())  # slurmctld and slurmd are alternatives links to slurmctld-wlm...
        owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True, check=False)
        assert owner.returncode == 0 and owner.stdout.startswith(f"{package}:"), (path, owner.stdout, owner.stderr)
