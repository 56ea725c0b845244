"""The data inventory (docs/reference/data.md): every resource holding data or history, each row checked here.

Each :class:`Row` says where the data lives, what deletes it, its second copy and how to restore
it, and carries a check that reads the example templates (the same assembly ``test_examples``
reads), the synth warnings or the guard's rules. ``test_docs_inventory_matches`` renders the
table and finds it on that page, so a row cannot be stated without being checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from mlcluster.config.project import check_environments
from mlcluster.lifecycle.hyperpod.plan import SCHEDULED_COPY_METRIC
from mlcluster.replacement import (
    CONTROLLER_KEY,
    DATA_BEARING_TYPES,
    FATE_DAYS,
    FATE_KEPT,
    HYPERPOD_TYPE,
    KEEPING_POLICIES,
    MOUNTS_KEY,
    VOLUME_POLICIES_KEY,
    create_only_paths,
    is_data_bearing,
    stack_state,
)
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


def _accounting_database(t: Templates) -> bool:
    """The hyperpod-accounting example's database, as its Storage stack builds it for a retaining environment."""
    (cluster,) = of_type(t, "hyperpod-accounting/Storage", "AWS::RDS::DBCluster")
    (secret,) = of_type(t, "hyperpod-accounting/Storage", "AWS::SecretsManager::Secret")
    guarded = "AWS::RDS::DBCluster" in DATA_BEARING_TYPES
    return (
        guarded
        and cluster["DeletionPolicy"] == cluster["UpdateReplacePolicy"] == "Snapshot"
        # Off, so a failed first create rolls back; the snapshot policy and the guard keep the data.
        and cluster["Properties"]["DeletionProtection"] is False
        and cluster["Properties"]["BackupRetentionPeriod"] == 35
        # The master secret outlives the stack, but not a first create that rolls back.
        and (secret["DeletionPolicy"], secret["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
        and "AWS::RDS::DBCluster" in FATE_DAYS
        and _pcluster_accounting_secrets(t)
    )


def _pcluster_accounting_secrets(t: Templates) -> bool:
    """The pcluster-accounting example keeps both secrets: the master's and slurmdbd's bare password."""
    secrets = of_type(t, "pcluster-accounting/Storage", "AWS::SecretsManager::Secret")
    return len(secrets) == 2 and all(
        (s["DeletionPolicy"], s["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain") for s in secrets
    )


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
    return kept(groups) and {g["Properties"]["RetentionInDays"] for g in groups} == {365} and _create_logs(t)


def _create_logs(t: Templates) -> bool:
    """The logs of a failed cluster create outlive its rollback (``Retain``, not ``RetainExceptOnCreate``)."""
    cluster = t["hyperpod/Cluster"]["Resources"]
    diagnostic = [
        r
        for lid, r in cluster.items()
        if r["Type"] == "AWS::Logs::LogGroup" and lid.startswith(("ClusterCheckLogs", "ClusterProviderLogs"))
    ]
    (pcluster,) = of_type(t, "p5/Cluster", "Custom::PclusterCluster")
    node_logs = pcluster["Properties"]["ClusterConfiguration"]["Monitoring"]["Logs"]["CloudWatch"]
    return (
        len(diagnostic) == 2
        and all(r["DeletionPolicy"] == r["UpdateReplacePolicy"] == "Retain" for r in diagnostic)
        # Named by CloudFormation: a retried deploy never meets a kept group of the same name.
        and not any("LogGroupName" in r["Properties"] for r in diagnostic)
        and node_logs["DeletionPolicy"] == "Retain"
    )


def _prometheus(t: Templates) -> bool:
    (workspace,) = of_type(t, "hyperpod/Observability", "AWS::APS::Workspace")
    return kept([workspace]) and workspace["Properties"]["WorkspaceConfiguration"]["RetentionPeriodInDays"] > 0


def _grafana(t: Templates) -> bool:
    return kept(of_type(t, "p5/Observability", "AWS::Grafana::Workspace")) and bool(
        of_type(t, "p5/Observability", "Custom::GrafanaProvisioning")
    )


def _home(t: Templates) -> bool:
    """p5 and p4de put /home on a retained EBS volume of its own; none of the examples warns of /home."""
    homes = []
    for name in ("p5", "p4de"):
        (cluster,) = of_type(t, f"{name}/Cluster", "Custom::PclusterCluster")
        storage = cluster["Properties"]["ClusterConfiguration"]["SharedStorage"]
        homes += [s for s in storage if s["MountDir"] == "/home"]
    return (
        len(homes) == 2
        and all(h["StorageType"] == "Ebs" and h["EbsSettings"]["DeletionPolicy"] == "Retain" for h in homes)
        and all(h["EbsSettings"]["Encrypted"] is True for h in homes)
        and not any(warned(name, "cluster.pcluster.shared_storage") for name in ("p5", "p4de", "trn1"))
        # The guard sees the mount: the lock's record of the cluster names /home and its kind.
        and [
            (state.fate[MOUNTS_KEY].get("/home"), state.fate[VOLUME_POLICIES_KEY].get("/home"))
            for name in ("p5", "p4de")
            for state in stack_state(t[f"{name}/Cluster"], {}).resources.values()
            if state.type == "Custom::PclusterCluster"
        ]
        == [("Ebs", "Retain"), ("Ebs", "Retain")]
    )


def _accounting(t: Templates) -> bool:
    """The controller's features file names the patch backup bucket, its key and the scheduled prefix;
    the controller's role may put objects there, no lifecycle rule deletes objects (only unfinished multipart
    uploads), state.json stays the operator's.
    """
    cluster = t["hyperpod/Cluster"]["Resources"]
    (bucket,) = [
        lid for lid, r in cluster.items() if r["Type"] == "AWS::S3::Bucket" and lid.startswith("PatchBackups4")
    ]
    (key,) = [lid for lid, r in cluster.items() if r["Type"] == "AWS::KMS::Key" and lid.startswith("PatchBackupsKey")]
    features = [
        part
        for r in cluster.values()
        if r["Type"] == "Custom::CDKBucketDeployment"
        for marker in r["Properties"].get("SourceMarkers", [])
        for value in marker.values()
        if "scheduled_backup" in json.dumps(value)
        for part in value["Fn::Base64"]["Fn::Join"][1]
    ]
    prefix = "mlcluster/patch/ml-hyperpod/scheduled/"
    puts = [
        statement
        for r in cluster.values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
        if statement.get("Sid") == "PatchBackupObjects"
        and "s3:PutObject" in statement["Action"]
        and json.dumps(statement["Resource"]).endswith('"/mlcluster/patch/ml-hyperpod/*"]]}')
    ]
    (policy,) = [
        r
        for r in cluster.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    sids = {statement.get("Sid") for statement in policy["Properties"]["PolicyDocument"]["Statement"]}
    return (
        {"Ref": bucket} in features
        and {"Fn::GetAtt": [key, "Arn"]} in features
        and any(isinstance(part, str) and f'"prefix": "{prefix}"' in part for part in features)
        and len(puts) == 1
        and all(
            set(rule) <= {"Id", "Status", "AbortIncompleteMultipartUpload"}
            for rule in cluster[bucket]["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])
        )
        and {"OnlySseKms", "OnlyThisKey", "OnlyTheOperatorWritesTheState", "NoOtherNodeRole"} <= sids
        and not warned("hyperpod", "cluster.hyperpod.lifecycle")
        and any(
            SCHEDULED_COPY_METRIC
            in {
                query.get("MetricStat", {}).get("Metric", {}).get("MetricName")
                for query in r["Properties"].get("Metrics", [])
            }
            and r["Properties"]["TreatMissingData"] == "breaching"
            for r in of_type(t, "hyperpod/Observability", "AWS::CloudWatch::Alarm")
        )
        # The guard records the controller group, so a new name for it is refused like a new cluster.
        and [
            state.create_only.get(CONTROLLER_KEY)
            for state in stack_state(t["hyperpod/Cluster"], {}).resources.values()
            if state.type == HYPERPOD_TYPE
        ]
        == ["controller-machine"]
    )


def _scripts(t: Templates) -> bool:
    cluster = t["hyperpod/Cluster"]["Resources"]
    # The lifecycle buckets, not the patch backups (issue 24: data, kept).
    lifecycle = [r for lid, r in cluster.items() if r["Type"] == "AWS::S3::Bucket" and lid.startswith("Lifecycle")]
    return (
        bool(lifecycle)
        and {b["DeletionPolicy"] for b in lifecycle} == {"Delete"}
        and kept(of_type(t, "p5/Cluster", "AWS::S3::Bucket"))
    )


def _patch_backups(t: Templates) -> bool:
    cluster = t["hyperpod/Cluster"]["Resources"]
    buckets = [r for lid, r in cluster.items() if r["Type"] == "AWS::S3::Bucket" and lid.startswith("PatchBackups")]
    # The construct paths as the example's lock records them (the templates here carry no path metadata).
    locked = json.loads((ENVIRONMENTS / "hyperpod.lock.json").read_text(encoding="utf-8"))
    paths = [
        r["path"]
        for lid, r in locked["stacks"]["hyperpod-Cluster"]["resources"].items()
        if r["type"] == "AWS::S3::Bucket" and lid.startswith("PatchBackups")
    ]
    versioned = [r for r in buckets if "VersioningConfiguration" in r["Properties"]]
    return (
        len(buckets) == len(paths) == 2
        and kept(buckets)
        and all(is_data_bearing("AWS::S3::Bucket", path) for path in paths)
        and all(r["Properties"]["VersioningConfiguration"]["Status"] == "Enabled" for r in versioned)
        and bool(versioned)
    )


def _lifecycle_logs(t: Templates) -> bool:
    cluster = t["hyperpod/Cluster"]["Resources"]
    logs = [
        r
        for lid, r in cluster.items()
        if r["Type"] == "AWS::S3::Bucket" and lid.startswith("Lifecycle") and "AccessLogs" in lid
    ]
    return bool(logs) and {r["DeletionPolicy"] for r in logs} == {"Delete"}


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
        f"`retention.log_retention_days` (a shorter one: {GUARD}); `on_delete: destroy`: {GUARD}. A failed "
        "cluster create keeps its logs: the check and provider groups are `Retain` (not `RetainExceptOnCreate`), "
        "node logs are the service's own groups (ParallelCluster's retained)",
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
        "an EBS volume of its own, attached to the head node and shared over NFS (`shared_storage.home_volume`, "
        "on by default)",
        "nothing of the cluster's: kept (`deletion_policy: Retain`; `Delete` by default with `on_delete: destroy`) "
        f"when the cluster is deleted or replaced; a mount added at or removed from `/home` of a running cluster: {GUARD} "
        "(the homes would be hidden); `deletion_policy: Delete` where it was kept: refused at synth like "
        "`on_delete: destroy`; `home_volume.enabled: false` puts it on the head node's root volume (synth warns)",
        "none: the volume is kept, not copied (`deletion_policy: Snapshot` keeps a snapshot instead)",
        "attach the kept volume (listed by `mlcluster status`) to an instance and copy the homes into the new "
        "cluster's",
        _home,
    ),
    Row(
        "HyperPod Slurm accounting and slurmctld state",
        "the controller's volume (`/opt/sagemaker`, local MariaDB)",
        "a controller replacement (a new `cluster.hyperpod.controller.instance_group_name` on a kept cluster: "
        f"{GUARD} unless `Cluster/Cluster` is allowed, like a new cluster), the cluster's deletion",
        "a daily copy to the patch backup bucket (`lifecycle.scheduled_backup`, on by default; "
        "`scheduled/<weekday>/`, seven kept by overwriting) and the copy `mlcluster patch` takes around a patch; "
        "synth warns when `scheduled_backup: false` leaves local accounting without it; two days without a "
        "copy set the Observability stack's alarm off, and `mlcluster status` shows the last copy's age",
        "`mlcluster patch` restores its own copy; a daily copy with `mlcluster-backup restore` and the digests "
        "its run logged (or its `SHA256SUMS`)",
        _accounting,
    ),
    Row(
        "HyperPod patch backups (S3, with their access logs and KMS key)",
        "Cluster stack (`PatchBackups`)",
        f"`on_delete: destroy`, a replacement or versioning switched off: {GUARD}",
        "versioning (every overwritten or deleted version)",
        "`mlcluster patch` restores its run's copy; an older version by copying it back",
        _patch_backups,
    ),
    Row(
        "HyperPod lifecycle bucket access logs (who read the node scripts)",
        "Cluster stack, beside the lifecycle bucket",
        "the Cluster stack's deletion, with the lifecycle bucket (both emptied and deleted, as scripts every deploy "
        "uploads again are)",
        "none: CloudTrail S3 data events would be one",
        "-",
        _lifecycle_logs,
    ),
    Row(
        "Slurm accounting database (`storage.accounting`; HyperPod `accounting.mode: managed`, or ParallelCluster)",
        "Storage stack (Aurora MySQL Serverless v2)",
        f"a create-only change (a new key), its removal, shorter backups or `on_delete: destroy`: {GUARD}; deleting the "
        "stack (termination protection off) leaves a final snapshot and the retained secrets (deletion protection "
        "stays off so a failed create can roll back)",
        "automated backups (`backup_retention_days`, point-in-time restore) and the final snapshot on delete",
        "'aws rds restore-db-cluster-to-point-in-time' (or from the snapshot) into a new cluster; then, in one edit, "
        "remove `storage.accounting` (its allowance given: the current database goes, leaving a final snapshot) and "
        "point `accounting.mode: remote` (HyperPod) or `cluster.pcluster.slurm.accounting` (ParallelCluster: user "
        "`slurmdbd` and the retained slurmdbd password secret's ARN) at the restored cluster",
        _accounting_database,
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
        "AWS::RDS::DBCluster": "Slurm accounting database (`storage.accounting`; HyperPod `accounting.mode: managed`, or ParallelCluster)",
    }
    assert set(named) == set(DATA_BEARING_TYPES)
    assert set(named.values()) <= {r.what for r in ROWS}


def test_docs_inventory_matches() -> None:
    page = (ROOT / "docs/reference/data.md").read_text(encoding="utf-8")
    assert render() in page, "docs/reference/data.md data inventory is stale; expected:\n" + render()


#: Retained resources allowed a fixed physical name, each with why a redeploy after a teardown is safe.
FIXED_NAMES_SAFE = {
    ("AWS::RDS::DBCluster", "DBSubnetGroupName"): "a reference to the Storage stack's own DB subnet group, whose "
    "name CloudFormation generates; it names where the accounting database lives, not the database",
    ("Custom::PclusterCluster", "ClusterName"): "the name is how pcluster, mlcluster and ParallelCluster's own stack "
    "address the cluster; a cluster kept by its DeletionPolicy is still running (head node, jobs), so a redeploy "
    "refused with 'already exists' is the signal to delete or adopt it ('mlcluster status' lists it)",
}
#: Name properties of types without a bundled schema (``create_only_paths`` reads cfn-lint's).
NAME_PROPERTIES = {"Custom::PclusterCluster": ("ClusterName",)}


def _retained(resource: dict[str, Any]) -> bool:
    """Kept when its stack is deleted: by CloudFormation's policy, or by its own (ParallelCluster's ``DeletionPolicy``)."""
    if resource.get("DeletionPolicy") in KEEPING_POLICIES:
        return True
    return any(
        str(resource["Properties"].get(pointer, default)) in keeping
        for pointer, keeping, default in FATE_KEPT.get(resource["Type"], ())
    )


def _names(kind: str) -> list[str]:
    """The type's top-level create-only properties that name it (``BucketName``, ``LogGroupName``...)."""
    top = [p.split("/")[2] for p in create_only_paths(kind) if p.count("/") == 2]
    return [p for p in [*top, *NAME_PROPERTIES.get(kind, ())] if p.endswith("Name")]


def fixed_names(templates: Templates) -> dict[tuple[str, str], list[str]]:
    """Retained resources whose name does not change with a new deployment of their stack (no ``AWS::StackId``)."""
    found: dict[tuple[str, str], list[str]] = {}
    for stack, template in templates.items():
        for lid, resource in template["Resources"].items():
            if not _retained(resource):
                continue
            for name in _names(resource["Type"]):
                value = resource.get("Properties", {}).get(name)
                if value is not None and "AWS::StackId" not in json.dumps(value):
                    found.setdefault((resource["Type"], name), []).append(f"{stack}/{lid}")
    return found


def test_no_retained_resource_has_a_fixed_name(example_templates: Templates) -> None:
    """A retained resource with a fixed name makes a redeploy after a teardown fail with "already exists"."""
    found = fixed_names(example_templates)
    assert set(found) == set(FIXED_NAMES_SAFE), found
    # The check sees what it must: a fixed log group name on a retained group (the edge: the suffix clears it).
    group = {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "RetainExceptOnCreate"}
    named = {"x": {"Resources": {"G": group | {"Properties": {"LogGroupName": "/aws/fsx/lustre/x"}}}}}
    assert fixed_names(named) == {("AWS::Logs::LogGroup", "LogGroupName"): ["x/G"]}
    suffixed = {"Fn::Join": ["", ["/aws/fsx/lustre/x-", {"Fn::Select": [2, {"Ref": "AWS::StackId"}]}]]}
    assert fixed_names({"x": {"Resources": {"G": group | {"Properties": {"LogGroupName": suffixed}}}}}) == {}
    deleted = {"x": {"Resources": {"G": group | {"DeletionPolicy": "Delete", "Properties": {"LogGroupName": "n"}}}}}
    assert fixed_names(deleted) == {}


def test_retained_names_are_unique_per_deployment(example_templates: Templates) -> None:
    """The Lustre log group and the backup vault end with the last group of the stack id (deployment_name.py)."""
    suffix = {
        "Fn::Select": [4, {"Fn::Split": ["-", {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}]}]
    }
    (vault,) = of_type(example_templates, "prod/Storage", "AWS::Backup::BackupVault")
    assert vault["Properties"]["BackupVaultName"] == {"Fn::Join": ["", ["prod-Storage-", suffix]]}
    (group,) = [
        r
        for r in of_type(example_templates, "prod/Storage", "AWS::Logs::LogGroup")
        if "LogGroupName" in r["Properties"]
    ]
    parts = group["Properties"]["LogGroupName"]["Fn::Join"][1]
    assert parts[0].startswith("/aws/fsx/lustre/") and parts[-1] == suffix
