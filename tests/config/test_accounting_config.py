"""``storage.accounting`` and ``accounting.mode: managed``: edges accepted, every refusal naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, load_environment
from tests.support import ROOT, write_env

TWO_ZONES = {"availability_zone_id": "use1-az4", "extra_zones": [{"availability_zone_id": "use1-az6"}]}
WORKER = {"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge"}
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:slurm-AbCdEf"


def hyperpod(mode: str = "managed", **accounting: Any) -> dict[str, Any]:
    return {
        "backend": "hyperpod",
        "hyperpod": {"workers": [WORKER], "lifecycle": {"accounting": {"mode": mode, **accounting}}},
    }


def environment(
    database: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None, network: dict[str, Any] = TWO_ZONES
) -> dict[str, Any]:
    data: dict[str, Any] = {"network": network, "cluster": cluster or hyperpod()}
    if database is not None:
        data["storage"] = {"accounting": database}
    return data


def refusal(tmp_path: Path, data: dict[str, Any], key: str) -> str:
    path = write_env(tmp_path, "acct", data)
    with pytest.raises(ConfigError) as caught:
        load_environment(path)
    lines = [line for line in str(caught.value).splitlines() if line.startswith(f"{path}: {key}: ")]
    assert lines, f"nothing reported at {key}: {caught.value}"
    return lines[0]


def test_defaults_pause_at_zero_and_keep_35_days(tmp_path: Path) -> None:
    config = load_environment(write_env(tmp_path, "acct", environment({}))).config
    database = config.storage.accounting
    assert database is not None
    assert (database.min_capacity_acu, database.max_capacity_acu, database.auto_pause_minutes) == (0, 2, 60)
    assert (database.backup_retention_days, database.rotation_days) == (35, 30)
    assert config.cluster.hyperpod is not None
    assert config.cluster.hyperpod.lifecycle.accounting.mode == "managed"


def test_edges_are_accepted(tmp_path: Path) -> None:
    edges = {
        "min_capacity_acu": 256,
        "max_capacity_acu": 256,
        "auto_pause_minutes": 1440,
        "backup_retention_days": 1,
        "rotation_days": 1000,
    }
    database = load_environment(write_env(tmp_path, "acct", environment(edges))).config.storage.accounting
    assert database is not None and database.max_capacity_acu == 256
    halves = {"min_capacity_acu": 0.5, "max_capacity_acu": 1.5}
    database = load_environment(write_env(tmp_path, "acct", environment(halves))).config.storage.accounting
    assert database is not None and (database.min_capacity_acu, database.max_capacity_acu) == (0.5, 1.5)


def test_a_database_kept_while_no_cluster_runs(tmp_path: Path) -> None:
    config = load_environment(write_env(tmp_path, "acct", environment({}, {"backend": "none"}))).config
    assert config.storage.accounting is not None


@pytest.mark.parametrize(
    ("database", "key", "allowed"),
    [
        ({"min_capacity_acu": 0.25}, "storage.accounting.min_capacity_acu", "0 to 256 Aurora capacity units in steps"),
        ({"max_capacity_acu": 2.2}, "storage.accounting.max_capacity_acu", "in steps of 0.5"),
        ({"max_capacity_acu": 0.5}, "storage.accounting.max_capacity_acu", "a number from 1 to 256"),
        ({"min_capacity_acu": 4}, "storage.accounting.min_capacity_acu", "at most max_capacity_acu (2)"),
        ({"auto_pause_minutes": 4}, "storage.accounting.auto_pause_minutes", "a number from 5 to 1440"),
        ({"backup_retention_days": 36}, "storage.accounting.backup_retention_days", "a number from 1 to 35"),
        ({"engine": "mariadb"}, "storage.accounting.engine", "unknown key"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, database: dict[str, Any], key: str, allowed: str) -> None:
    assert allowed in refusal(tmp_path, environment(database), key)


def test_one_zone_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, environment({}, network={"availability_zone_id": "use1-az4"}), "storage.accounting")
    assert "at least two zones: add network.extra_zones" in line


def test_managed_needs_the_database(tmp_path: Path) -> None:
    line = refusal(tmp_path, environment(None), "cluster.hyperpod.lifecycle.accounting.mode")
    assert "needs a storage.accounting section" in line


def test_managed_takes_no_endpoint(tmp_path: Path) -> None:
    cluster = hyperpod(endpoint="db.example.com:3306")
    line = refusal(tmp_path, environment({}, cluster), "cluster.hyperpod.lifecycle.accounting.mode")
    assert "managed takes both from storage.accounting" in line


def test_a_database_no_cluster_uses_is_refused(tmp_path: Path) -> None:
    line = refusal(tmp_path, environment({}, hyperpod("local")), "storage.accounting")
    assert "set cluster.hyperpod.lifecycle.accounting.mode: managed" in line


def pcluster(**slurm: Any) -> dict[str, Any]:
    return {
        "backend": "pcluster",
        "name": "a" * 40,
        "pcluster": {
            "slurm": slurm,
            "queues": [
                {"name": "gpu", "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "efa": False}]}
            ],
        },
    }


def test_parallelcluster_uses_the_managed_database(tmp_path: Path) -> None:
    """The edge: a 40-character cluster name (ParallelCluster's limit with accounting) and a 64-character name."""
    env = load_environment(write_env(tmp_path, "acct", environment({"database_name": "a" * 64}, pcluster())))
    assert env.config.storage.accounting is not None
    assert env.config.storage.accounting.database_name == "a" * 64


def test_the_database_name_defaults_to_slurmdbds_own(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "acct", environment({}, pcluster())))
    assert env.config.storage.accounting is not None
    assert env.config.storage.accounting.database_name == "slurm_acct_db"


@pytest.mark.parametrize("name", ["", "a" * 65, "Slurm", "slurm-acct", "slurm`acct"])
def test_a_bad_database_name_is_refused(tmp_path: Path, name: str) -> None:
    line = refusal(tmp_path, environment({"database_name": name}, pcluster()), "storage.accounting.database_name")
    assert "1-64 lowercase letters, digits and '_'" in line


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("mysql", "mysql"),
        ("sys", "sys"),
        ("performance_schema", "performance_schema"),
        ("information_schema", "information_schema"),
        # MySQL reads '_' in GRANT ... ON `db`.* as any one character: these grant on the system schema too.
        ("my_ql", "mysql"),
        ("_____", "mysql"),
        ("___", "sys"),
        ("performance_schem_", "performance_schema"),
        ("information_______", "information_schema"),
    ],
)
def test_a_mysql_system_schema_is_refused(tmp_path: Path, name: str, schema: str) -> None:
    """Issue 30 (review): slurmdbd's user gets GRANT ALL on ``database_name``.*; on mysql.* it could ALTER USER the
    master. Refused for both backends, naming the schema and what is allowed."""
    for cluster in (pcluster(), hyperpod()):
        path = write_env(tmp_path, "acct", environment({"database_name": name}, cluster))
        with pytest.raises(ConfigError) as caught:
            load_environment(path)
        key = (
            f"{path}: storage.accounting.database_name: {name!r} is not valid; it names MySQL's system schema {schema} "
        )
        (line,) = [line for line in str(caught.value).splitlines() if line.startswith(key)]
        assert "allowed: a name of your own such as slurm_acct_db" in line


@pytest.mark.parametrize(
    "name", ["mysql_x", "mysqlx", "mysql_", "sys_", "sys1_", "_sys", "performance_schemas", "ysql"]
)
def test_a_name_beside_a_system_schema_is_accepted(tmp_path: Path, name: str) -> None:
    """The edge: another length, or another letter than '_' where the schema differs, covers no system schema."""
    env = load_environment(write_env(tmp_path, "acct", environment({"database_name": name}, pcluster())))
    assert env.config.storage.accounting is not None
    assert env.config.storage.accounting.database_name == name


def test_admit_node_group_is_refused_with_parallelcluster(tmp_path: Path) -> None:
    """Issue 30 (review): every ParallelCluster queue carries network.security_group, so the HyperPod upgrade bridge
    would admit every job to 3306."""
    line = refusal(tmp_path, environment({"admit_node_group": True}, pcluster()), "storage.accounting.admit_node_group")
    assert "every ParallelCluster queue carries network.security_group" in line
    assert "allowed with ParallelCluster: false" in line
    off = load_environment(write_env(tmp_path, "acct", environment({"admit_node_group": False}, pcluster())))
    assert off.config.storage.accounting is not None and not off.config.storage.accounting.admit_node_group


def test_admit_node_group_is_accepted_with_hyperpod(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, "acct", environment({"admit_node_group": True}, hyperpod())))
    assert env.config.storage.accounting is not None and env.config.storage.accounting.admit_node_group


def test_parallelcluster_with_a_database_of_its_own_too_is_refused(tmp_path: Path) -> None:
    own = {"uri": "db.example.com:3306", "user_name": "slurm", "password_secret_arn": SECRET}
    line = refusal(tmp_path, environment({}, pcluster(accounting=own)), "cluster.pcluster.slurm.accounting")
    assert "already uses storage.accounting (the managed database): remove one of the two" in line


def test_accounting_settings_parallelcluster_writes_are_refused(tmp_path: Path) -> None:
    cluster = pcluster(custom_settings={"AccountingStorageUser": "root", "PriorityWeightAge": "1000"})
    line = refusal(tmp_path, environment({}, cluster), "cluster.pcluster.slurm.custom_settings.AccountingStorageUser")
    assert "with storage.accounting ParallelCluster manages this Slurm setting" in line


def test_another_database_name_is_refused_for_hyperpod(tmp_path: Path) -> None:
    line = refusal(tmp_path, environment({"database_name": "history"}, hyperpod()), "storage.accounting.database_name")
    assert "HyperPod's controller keeps slurmdbd's default database: allowed: slurm_acct_db" in line


def test_a_long_cluster_name_is_refused_with_the_managed_database(tmp_path: Path) -> None:
    from mlcluster.pcluster.checks import check_environment

    cluster = {**pcluster(), "name": "a" * 41}
    env = load_environment(write_env(tmp_path, "acct", environment({}, cluster)))
    messages = [f.message for f in check_environment(env) if f.path == "cluster.name"]
    assert any("at most 40 allowed with Slurm accounting" in m for m in messages), messages
    no_database = load_environment(write_env(tmp_path / "plain", "acct", {"network": TWO_ZONES, "cluster": cluster}))
    assert not [f for f in check_environment(no_database) if f.path == "cluster.name"]


def test_the_storage_digest_counts_database_name_only_off_its_default(tmp_path: Path) -> None:
    """A setting added after environments were deployed leaves their Storage digest as it was (no consumer
    update for nothing), and still counts once it is set."""
    from mlcluster.stacks.common import producer_digest

    def digest(database: dict[str, Any], folder: str) -> str:
        env = load_environment(write_env(tmp_path / folder, "acct", environment(database, pcluster())))
        return producer_digest(env, "Storage")

    unset = digest({}, "unset")
    assert digest({"database_name": "slurm_acct_db"}, "default") == unset
    assert digest({"database_name": "train_history"}, "set") != unset
    # The hyperpod-accounting example's Storage digest as its committed snapshot records it, from before the setting.
    example = load_environment(ROOT / "environments" / "hyperpod-accounting.yaml")
    assert producer_digest(example, "Storage") == "2a9fef81ae4f2889"
