"""The data inventory (docs/reference/data.md): every resource holding data or history, each row checked here.

Each :class:`Row` says where the data lives, what deletes it, its second copy and how to restore
it, and carries a check that reads the example templates (the same assembly ``test_examples``
reads), the synth warnings or the guard's rules. ``test_readme_inventory_matches`` renders the
table and finds it on that page, so a row cannot be stated without being checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from mlcluster.config.project import check_environments
from mlcluster.replacement import DATA_BEARING_TYPES, is_data_bearing
from tests.support import ENVIRONMENTS, ROOT

Templates = dict[str, dict[str, Any]]


def of_type(templates: Templates, stack: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in templates[stack]["Resources"].values() if r["Type"] == kind]


def kept(resources: list[dict[str, Any]]) -> bool:
    """Retained on delete and replacement, deleted when its create rolls back."""
    return bool(resources) and all(
        r["DeletionPolicy"] == "RetainExceptOnCreate" and r["UpdateReplacePolicy"] == "Retain" for r in resources
    )


def warned(name: str, key: str) -> bool:
    return any(w.startswith(f"{ENVIRONMENTS}/{name}.yaml: {key}") for w in check_environments(ENVIRONMENTS).warnings)


@dataclasses.dataclass(frozen=True)
class Row:
    what: str
    where: str
    deleted_by: str
    second_copy: str
    restore: str
    check: Callable[[Templates], bool]


def _bucket(t: Templates) -> bool:
    (bucket, *_) = [
        r for r in of_type(t, "p5/Storage", "AWS::S3::Bucket") if "VersioningConfiguration" in r["Properties"]
    ]
    return kept([bucket]) and bucket["Properties"]["VersioningConfiguration"]["Status"] == "Enabled"


def _lustre(t: Templates) -> bool:
    dras = of_type(t, "p5/DataRepository", "AWS::FSx::DataRepositoryAssociation")
    exports = {tuple(d["Properties"]["S3"]["AutoExportPolicy"]["Events"]) for d in dras}
    return kept(of_type(t, "p5/Storage", "AWS::FSx::FileSystem")) and exports == {("NEW", "CHANGED")}


def _dras(t: Templates) -> bool:
    return kept(of_type(t, "p5/DataRepository", "AWS::FSx::DataRepositoryAssociation"))


def _openzfs(t: Templates) -> bool:
    (zfs,) = [
        r for r in of_type(t, "trn1/Storage", "AWS::FSx::FileSystem") if r["Properties"]["FileSystemType"] == "OPENZFS"
    ]
    return kept([zfs]) and zfs["Properties"]["OpenZFSConfiguration"]["AutomaticBackupRetentionDays"] > 0


def _key(t: Templates) -> bool:
    # Plainly retained, even when its create rolls back: data written under it in that window stays readable.
    keys = of_type(t, "p5/Network", "AWS::KMS::Key")
    retained = bool(keys) and all(r["DeletionPolicy"] == r["UpdateReplacePolicy"] == "Retain" for r in keys)
    return retained and is_data_bearing("AWS::KMS::Key", "Network/")


def _vault(t: Templates) -> bool:
    plans = of_type(t, "prod/Storage", "AWS::Backup::BackupPlan")
    return kept(of_type(t, "prod/Storage", "AWS::Backup::BackupVault")) and len(plans) == 1


def _logs(t: Templates) -> bool:
    groups = [r for name in ("p5/Network", "p5/Storage") for r in of_type(t, name, "AWS::Logs::LogGroup")]
    return kept(groups) and {g["Properties"]["RetentionInDays"] for g in groups} == {365}


def _prometheus(t: Templates) -> bool:
    (workspace,) = of_type(t, "hyperpod/Observability", "AWS::APS::Workspace")
    return kept([workspace]) and workspace["Properties"]["WorkspaceConfiguration"]["RetentionPeriodInDays"] > 0


def _grafana(t: Templates) -> bool:
    return kept(of_type(t, "p5/Observability", "AWS::Grafana::Workspace")) and bool(
        of_type(t, "p5/Observability", "Custom::GrafanaProvisioning")
    )


def _home(t: Templates) -> bool:
    return warned("p5", "cluster.pcluster.shared_storage.home_on_openzfs") and not warned(
        "trn1", "cluster.pcluster.shared_storage.home_on_openzfs"
    )


def _accounting(t: Templates) -> bool:
    return warned("hyperpod", "cluster.hyperpod.lifecycle.accounting.mode")


def _scripts(t: Templates) -> bool:
    cluster = t["hyperpod/Cluster"]["Resources"]
    # The lifecycle buckets, not the patch backups (issue 24: data, kept).
    lifecycle = [r for lid, r in cluster.items() if r["Type"] == "AWS::S3::Bucket" and lid.startswith("Lifecycle")]
    return (
        bool(lifecycle)
        and {b["DeletionPolicy"] for b in lifecycle} == {"Delete"}
        and kept(of_type(t, "p5/Cluster", "AWS::S3::Bucket"))
    )


GUARD = "refused at synth"
ROWS = [
    Row(
        "data bucket (S3)",
        "Storage stack (`storage.data_bucket`)",
        "a user's or job's delete; a DRA exporting `DELETED` (off by default); noncurrent-version expiry; "
        f"`on_delete: destroy`, a new name or the bucket leaving the file: {GUARD}",
        "versioning (every overwritten or deleted version); AWS Backup recovery points with `storage.data_bucket.backup`",
        "copy a noncurrent version back, or an AWS Backup restore job",
        _bucket,
    ),
    Row(
        "FSx for Lustre file system (`/fsx`)",
        "Storage stack (`storage.lustre`)",
        f"a create-only change (replacement) or `on_delete: destroy`: {GUARD}; a failed first create (RetainExceptOnCreate)",
        "the bucket, through the DRAs' automatic export (new and changed files). FSx backs up no Lustre file system "
        "linked to a data repository (CreateBackup's rule), so files outside the DRA paths have no copy",
        "a new file system whose DRAs import the bucket again (metadata on create, contents on first read)",
        _lustre,
    ),
    Row(
        "data repository associations",
        "DataRepository stack",
        "leaving the file: kept, still importing and exporting (synth warns with the delete command); the stack "
        f"leaving the app: {GUARD}",
        "the bucket itself (a DRA holds links, not data)",
        "add it back (after deleting the retained one); its metadata import runs again",
        _dras,
    ),
    Row(
        "FSx for OpenZFS (`/home` where `home_on_openzfs`)",
        "Storage stack (`storage.openzfs`)",
        f"a create-only change, removal or `on_delete: destroy`: {GUARD}",
        "automatic daily backups (`automatic_backup_retention_days`, kept after the file system is deleted only if "
        "user-initiated)",
        "restore a backup into a new file system",
        _openzfs,
    ),
    Row(
        "environment KMS key",
        "Network stack",
        f"scheduled deletion on `cdk destroy` with `on_delete: destroy`, or a shorter pending window: {GUARD}",
        "none: a key cannot be copied; everything encrypted under it (vault, logs, workspaces) needs it",
        "cancel the key deletion within its pending window",
        _key,
    ),
    Row(
        "backup vault and plan",
        "Storage stack (`storage.data_bucket.backup`)",
        f"removing `storage.data_bucket.backup`: {GUARD}; recovery points after `retention_days`",
        "none configured (AWS Backup copy jobs to another vault or account would be one)",
        "an AWS Backup restore job into the bucket or a new one",
        _vault,
    ),
    Row(
        "log groups (flow logs, Lustre, clusters, handlers)",
        "every stack",
        f"`retention.log_retention_days` (a shorter one: {GUARD}); `on_delete: destroy`: {GUARD}",
        "none: export what must outlive the retention ('aws logs create-export-task')",
        "-",
        _logs,
    ),
    Row(
        "Prometheus workspace (metrics)",
        "Observability stack (`observability.prometheus`)",
        f"`retention_days`; the stack leaving the app: {GUARD}",
        "none",
        "-",
        _prometheus,
    ),
    Row(
        "Grafana workspace (dashboards, users' settings)",
        "Observability stack (`observability.grafana`)",
        f"the stack leaving the app: {GUARD}",
        "the dashboards are code in this repository, provisioned on every deploy; users' own edits have none",
        "deploy again: the provisioner writes the dashboards",
        _grafana,
    ),
    Row(
        "ParallelCluster `/home` without OpenZFS",
        "the head node's root volume",
        "'cdk destroy ENV/Cluster', a new cluster (name, version or head node change), a lost head node",
        "none: synth warns (`home_on_openzfs: false`)",
        "-",
        _home,
    ),
    Row(
        "HyperPod Slurm accounting and slurmctld state",
        "the controller's volume (`/opt/sagemaker`, local MariaDB)",
        "a controller replacement, the cluster's deletion",
        "only the copy `mlcluster patch` takes around a patch: synth warns with `accounting.mode: local`; a "
        "database outside the cluster (`mode: remote`) is the scheduled copy",
        "`mlcluster patch` restores its own copy",
        _accounting,
    ),
    Row(
        "node and lifecycle scripts (S3)",
        "Cluster stack",
        "the HyperPod lifecycle bucket (a fixed name): its stack's deletion, so a redeploy can make it again; "
        "ParallelCluster's node scripts (a generated name) are kept as the environment keeps data",
        "this repository: every deploy uploads them again",
        "deploy again",
        _scripts,
    ),
]


def render() -> str:
    lines = [
        "| data or history | where it lives | what deletes it | its second copy | how to restore it |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r.what} | {r.where} | {r.deleted_by} | {r.second_copy} | {r.restore} |" for r in ROWS]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
def test_row_holds(row: Row, example_templates: Templates) -> None:
    assert row.check(example_templates), row.what


def test_every_data_bearing_type_has_a_row() -> None:
    """The guard's data-bearing types are all in the inventory (a new type needs a row)."""
    named = {
        "AWS::FSx::FileSystem": "FSx for Lustre file system (`/fsx`)",
        "AWS::FSx::DataRepositoryAssociation": "data repository associations",
        "AWS::KMS::Key": "environment KMS key",
        "AWS::Backup::BackupVault": "backup vault and plan",
        "AWS::Backup::BackupPlan": "backup vault and plan",
        "AWS::Backup::BackupSelection": "backup vault and plan",
        "AWS::APS::Workspace": "Prometheus workspace (metrics)",
        "AWS::Grafana::Workspace": "Grafana workspace (dashboards, users' settings)",
        "AWS::Logs::LogGroup": "log groups (flow logs, Lustre, clusters, handlers)",
        # Clusters: running jobs, and the node-local state in the last two rows.
        "Custom::PclusterCluster": "ParallelCluster `/home` without OpenZFS",
        "AWS::SageMaker::Cluster": "HyperPod Slurm accounting and slurmctld state",
    }
    assert set(named) == set(DATA_BEARING_TYPES)
    assert set(named.values()) <= {r.what for r in ROWS}


def test_docs_inventory_matches() -> None:
    page = (ROOT / "docs/reference/data.md").read_text(encoding="utf-8")
    assert render() in page, "docs/reference/data.md data inventory is stale; expected:\n" + render()
