"""Issue 30: the accounting user function's statements, run on the real MariaDB, log slurmdbd in over TLS only.

The statements are the handler's own (``statements`` of mlcluster/handlers/accounting_user/app.py, with
``native_password_hash`` of the password), run as MariaDB's root, twice, on a MariaDB 10.11 of this test's own
(tests/system/slurm_cluster.py: its own temporary folder, a free loopback port, stopped at the end). The server
has TLS (a CA made here) but does NOT set ``require_secure_transport``, so a refusal without TLS comes from the
user's ``REQUIRE SSL``, and a user without it (``slurm``, made by the cluster) is the control.

- The hash is MariaDB's own ``PASSWORD()`` of the password, and MariaDB accepts the MySQL 8.0 form
  ``IDENTIFIED WITH mysql_native_password AS '*HASH'`` as is (no dialect of its own needed).
- ``mysql -u slurmdbd -p<password>`` over TLS logs in and sees the accounting database only; a wrong password
  is refused; the right one without TLS is refused.
- slurmdbd (Slurm 22.05, MariaDB Connector/C) logs in as that user with the lifecycle's TLS lines and makes its
  tables in the accounting database.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlcluster.handlers.accounting_user import app
from tests.system.slurm_cluster import DB_PASSWORD, SlurmCluster
from tests.system.system_tools import mysql_tcp, program
from tests.system.test_slurmdbd_tls_and_history import Tls, lifecycle_storage_lines

USER = "slurmdbd"
DATABASE = "slurm_acct_db"
#: A password of the form the secret holds (32 letters and digits); a throw-away database on loopback.
PASSWORD = "Tq4mlclusterAccountingOnly0w9Zx2"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Tls]]:
    """A MariaDB with TLS (not required server-wide) and munge, nothing else of Slurm running yet."""
    for name in ("mariadbd", "mariadb-install-db", "mysql", "munged", "slurmdbd", "sacctmgr"):
        program(name)
    root = tmp_path_factory.mktemp("usr")  # short: slurm_cluster.py's socket paths must fit in 108 bytes
    tls = Tls(root / "tls")
    options = tuple(option for option in tls.mariadb_options if not option.startswith("--require-secure-transport"))
    cluster = SlurmCluster(root / "s", mariadb_options=options)
    cluster.root.mkdir(mode=0o700)
    cluster.create()
    try:
        cluster.start_munge()
        cluster.start_mariadb()
        yield cluster, tls
    finally:
        cluster.shutdown()


def client(cluster: SlurmCluster, user: str, password: str, *tls: str, sql: str) -> tuple[int, str]:
    """``mysql`` over TCP to the test's MariaDB as ``user``; its exit code and output (stdout and stderr)."""
    done = mysql_tcp(cluster.ports["mysql"], user, password, "--batch", "--skip-column-names", *tls, f"--execute={sql}")
    return done.returncode, done.stdout + done.stderr


def test_the_handlers_statements_make_a_tls_only_user_of_the_accounting_database(
    database: tuple[SlurmCluster, Tls],
) -> None:
    cluster, tls = database
    password_hash = app.native_password_hash(PASSWORD)
    # The handler's hash is MariaDB's own stored form of the password.
    assert cluster.sql(f"SELECT PASSWORD('{PASSWORD}');").strip() == password_hash
    built = app.statements(USER, DATABASE, password_hash)
    assert PASSWORD not in " ".join(built)
    for _ in range(2):  # a retried Create, an Update: the second run changes nothing and fails nothing
        cluster.sql("".join(f"{sql};\n" for sql in built))
    assert cluster.sql(
        f"SELECT plugin, authentication_string, ssl_type FROM mysql.user WHERE user = '{USER}' AND host = '%';"
    ).split() == ["mysql_native_password", password_hash, "ANY"]
    assert cluster.sql(f"SELECT COUNT(*) FROM mysql.user WHERE user = '{USER}';").strip() == "1"

    with_tls = (f"--ssl-ca={tls.ca}", "--ssl-verify-server-cert")
    code, out = client(cluster, USER, PASSWORD, *with_tls, sql="SHOW DATABASES; SHOW STATUS LIKE 'Ssl_version';")
    assert code == 0, out
    lines = out.splitlines()
    assert sorted(lines[:-1]) == ["information_schema", DATABASE], out
    assert lines[-1].startswith("Ssl_version\tTLSv1."), out
    # It may use its database, and nothing else.
    code, out = client(
        cluster, USER, PASSWORD, *with_tls, sql=f"CREATE TABLE {DATABASE}.t (i INT); DROP TABLE {DATABASE}.t;"
    )
    assert code == 0, out
    code, out = client(cluster, USER, PASSWORD, *with_tls, sql="CREATE DATABASE other_db;")
    assert code != 0 and "Access denied" in out, out

    code, out = client(cluster, USER, PASSWORD[:-1] + "X", *with_tls, sql="SELECT 1;")
    assert code != 0 and "Access denied" in out, out
    code, out = client(cluster, USER, PASSWORD, "--skip-ssl", sql="SELECT 1;")
    assert code != 0 and "Access denied" in out, out
    # The control: the server itself takes connections without TLS (a user without REQUIRE SSL logs in).
    code, out = client(cluster, "slurm", DB_PASSWORD, "--skip-ssl", sql="SHOW STATUS LIKE 'Ssl_version';")
    assert code == 0 and out.split() == ["Ssl_version"], out


def test_slurmdbd_logs_in_as_the_user_over_tls(database: tuple[SlurmCluster, Tls]) -> None:
    """Slurm 22.05's accounting_storage/mysql (MariaDB Connector/C) authenticates with mysql_native_password."""
    cluster, tls = database
    cluster.sql("".join(f"{sql};\n" for sql in app.statements(USER, DATABASE, app.native_password_hash(PASSWORD))))
    conf = cluster.root / "etc/slurmdbd.conf"
    kept = [line for line in conf.read_text().splitlines() if not line.startswith("Storage")]
    lines = lifecycle_storage_lines("127.0.0.1", cluster.ports["mysql"], USER, PASSWORD, Path(tls.ca))
    assert f"StorageUser={USER}" in lines
    conf.write_text("\n".join([*kept, *lines]) + "\n")
    cluster.start_slurmdbd()  # waits until sacctmgr gets an answer
    tables = cluster.sql(f"SHOW TABLES FROM {DATABASE};").split()
    assert "cluster_table" in tables, tables
    # slurmdbd holds its connection open as that user; the user is REQUIRE SSL, so the connection is TLS.
    connected = cluster.sql(f"SELECT COUNT(*) FROM information_schema.processlist WHERE user = '{USER}';")
    assert int(connected.strip()) >= 1
    assert "mysql_real_connect failed" not in (cluster.log_dir / "slurmdbd.log").read_text(errors="replace")
