"""Day two: every edit operators make, synthesized before and after, with what it replaces.

Each edit is applied to one of the baselines (ParallelCluster with two DRAs
and OpenZFS; HyperPod; data only; HyperPod with the managed accounting database), synthesized in its own app under the same stage
name (so names and hashes match the baseline's), reduced to a snapshot and
compared with the baseline by ``mlcluster.replacement``. The table states,
per edit, the resources replaced and whether the synth-time guard refuses
the edit without an allowance. The day-two table (docs/reference/edits.md) is rendered from
the same results (``render_table``) and checked against them.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import time
from pathlib import Path
from typing import Any

import pytest

import mlcluster.app
from mlcluster.app import build_app, project_context
from mlcluster.config import load_environment
from mlcluster.deploy_outcomes import outcome_checks
from mlcluster.lockfile import (
    Lock,
    missing_lock,
    notices,
    orphan_locks,
    refusals,
    stack_refusals,
    unprotected,
    write_lock,
)
from mlcluster.replacement import Change, Snapshot, compare, snapshot_from_assembly
from mlcluster.stacks.stage import StageScopedPack
from tests.support import ROOT, write_env

STAGE = "dt"

PCLUSTER: dict[str, Any] = {
    "tags": {"Project": "mlcluster"},
    "network": {"availability_zone": "us-east-2a"},
    "storage": {
        "lustre": {
            "data_repository_associations": [
                {"file_system_path": "/data", "data_bucket_prefix": "data/"},
                {"file_system_path": "/ckpt", "data_bucket_prefix": "ckpt/"},
            ]
        },
        "openzfs": {"deployment_type": "SINGLE_AZ_HA_2", "storage_capacity_gib": 256, "throughput_capacity_mbps": 160},
    },
    "cluster": {
        "backend": "pcluster",
        "name": "dt-train",
        "pcluster": {
            "head_node": {"instance_type": "m5.8xlarge"},
            "queues": [
                {
                    "name": "gpu",
                    "compute_resources": [
                        {"name": "p5", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}
                    ],
                }
            ],
        },
    },
}

HYPERPOD: dict[str, Any] = {
    "tags": {"Project": "mlcluster"},
    "network": {"availability_zone_id": "usw2-az4"},
    "cluster": {
        "backend": "hyperpod",
        "name": "dt-hp",
        "hyperpod": {
            "controller": {"instance_group_name": "controller", "instance_type": "ml.m5.12xlarge"},
            "workers": [
                {"instance_group_name": "gpu-a", "instance_type": "ml.p5.48xlarge", "instance_count": 2},
                {"instance_group_name": "gpu-b", "instance_type": "ml.p5.48xlarge", "instance_count": 1},
            ],
            "lifecycle": {"users": [{"name": "alice", "uid": 2001}]},
        },
    },
}
#: Data only (no cluster): cdk-nag packs beyond AwsSolutions judge the network and storage stacks.
DATA_ONLY: dict[str, Any] = {
    **{k: v for k, v in PCLUSTER.items() if k != "cluster"},
    "storage": {**PCLUSTER["storage"], "data_bucket": {"encryption": "kms", "backup": {}}},
}
#: HyperPod with the managed Slurm accounting database (Aurora needs a second zone).
HYPERPOD_ACCOUNTING: dict[str, Any] = {
    **HYPERPOD,
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "storage": {"accounting": {}},
    "cluster": {
        **HYPERPOD["cluster"],
        "hyperpod": {
            **HYPERPOD["cluster"]["hyperpod"],
            "lifecycle": {**HYPERPOD["cluster"]["hyperpod"]["lifecycle"], "accounting": {"mode": "managed"}},
        },
    },
}
#: ParallelCluster with the managed Slurm accounting database (slurmdbd's own user, issue 30e).
PCLUSTER_ACCOUNTING: dict[str, Any] = {
    **PCLUSTER,
    "network": {"availability_zone": "us-east-2a", "extra_zones": [{"availability_zone": "us-east-2b"}]},
    "storage": {**PCLUSTER["storage"], "accounting": {}},
}
#: HyperPod with worker group gpu-b in a second zone (its OverrideVpcConfig reads that zone's subnet from the
#: Network stack's output).
HYPERPOD_ZONES: dict[str, Any] = {
    **HYPERPOD,
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "cluster": {
        **HYPERPOD["cluster"],
        "hyperpod": {
            **HYPERPOD["cluster"]["hyperpod"],
            "workers": [
                HYPERPOD["cluster"]["hyperpod"]["workers"][0],
                {**HYPERPOD["cluster"]["hyperpod"]["workers"][1], "zones": ["usw2-az1"]},
            ],
        },
    },
}
BASES = {
    "pcluster": PCLUSTER,
    "hyperpod": HYPERPOD,
    "data-only": DATA_ONLY,
    "hyperpod-accounting": HYPERPOD_ACCOUNTING,
    "pcluster-accounting": PCLUSTER_ACCOUNTING,
    "hyperpod-zones": HYPERPOD_ZONES,
}
ACCOUNTING_DB = "Storage/AccountingDatabase/Cluster/Resource"

LUSTRE = "Storage/Lustre/Resource"
OPENZFS = "Storage/OpenZfs/Resource"
PCLUSTER_CLUSTER = "Cluster/Cluster/Resource"
HYPERPOD_CLUSTER = "Cluster/Cluster/Resource"
DATA = "DataRepository/Lustre/AssociationData"
CKPT = "DataRepository/Lustre/AssociationCkpt"
PC = "cluster.pcluster"
#: Every log group of the ParallelCluster baseline (their retention follows retention.log_retention_days).
LOG_GROUPS = frozenset(
    {
        "Cluster/NodeScripts/UploadLogs/Resource",
        "Network/Network/FlowLogGroup/Resource",
        "Storage/Lustre/LogGroup/Resource",
    }
)
#: Every data-bearing resource the ParallelCluster baseline retains on delete.
RETAINED = LOG_GROUPS | {
    "DataRepository/Lustre/AssociationCkpt",
    "DataRepository/Lustre/AssociationData",
    "Network/EnvironmentKey/Resource/Resource",
    "Observability/AlarmTopicKey/Resource",
    "Storage/DataBucket/AccessLogs/Resource",
    "Storage/DataBucket/Resource/Resource",
    "Storage/Lustre/Resource",
    "Storage/OpenZfs/Resource",
}
PC_FLEET_STOP = (
    "ParallelCluster policy COMPUTE_FLEET_STOP (its cluster schema): applied with the compute fleet stopped; "
    "a plain 'cdk deploy' fails at the cluster resource and rolls back"
)
#: What ``mlcluster update ENV`` does with an edit, by its deploy outcome (``mlcluster.deploy_outcomes``).
UPDATE_DOES = {
    "refused": "nothing: refused at synth",
    "fleet_stop": "stops the compute fleet, deploys, starts it",
    "rollback_stop": "stops the compute fleet (the rollback would need it stopped), deploys, starts it",
    "in_place": "deploys",
}
HP = "cluster.hyperpod"
DRAS = "storage.lustre.data_repository_associations"
_DELETE = object()


@dataclasses.dataclass(frozen=True)
class Edit:
    """One day-two edit: dotted key paths set (or deleted) on a baseline."""

    name: str
    base: str
    settings: dict[str, Any]
    #: Data-bearing resources the edit replaces or deletes (what the guard refuses).
    refused: frozenset[str] = frozenset()
    #: Every other resource replaced (not data-bearing: made again, nothing lost);
    #: ``Stack/*`` stands for one or more resources of that stack.
    also_replaced: frozenset[str] = frozenset()
    safe_way: str = ""
    #: What the service itself does with an in-place update, when it matters.
    note: str = ""
    #: Stacks the guard refuses as a whole: dropped from the app, or losing termination protection.
    stacks: frozenset[str] = frozenset()
    #: The deploy outcome (``mlcluster.deploy_outcomes``): ``refused`` at synth as a deploy that would fail,
    #: ``fleet_stop`` (passes with the note that ``mlcluster update`` must deploy it), ``rollback_stop`` (in place,
    #: but its rollback needs the fleet stopped: noted, and ``mlcluster update`` stops it), or ``in_place``.
    deploy: str = "in_place"


def edit(name: str, base: str, settings: dict[str, Any], **kwargs: Any) -> Edit:
    return Edit(
        name,
        base,
        settings,
        refused=frozenset(kwargs.pop("refused", ())),
        also_replaced=frozenset(kwargs.pop("also_replaced", ())),
        stacks=frozenset(kwargs.pop("stacks", ())),
        **kwargs,
    )


EDITS = [
    # -- storage -------------------------------------------------------------
    edit(
        "Lustre capacity 1200 -> 2400 GiB",
        "pcluster",
        {"storage.lustre.storage_capacity_gib": 2400},
        note="grows in place; FSx optimizes for hours and takes no other increase meanwhile (synth notes it)",
    ),
    edit(
        "Lustre throughput 250 -> 500 MB/s/TiB",
        "pcluster",
        {"storage.lustre.throughput_mbps_per_tib": 500},
        deploy="refused",
        safe_way="FSx changes it in place but CloudFormation's resource specification replaces: keep the file's "
        "value, run 'aws fsx update-file-system --lustre-configuration PerUnitStorageThroughput=500'",
    ),
    edit(
        "Lustre deployment type PERSISTENT_2 -> PERSISTENT_1",
        "pcluster",
        {
            "storage.lustre.deployment_type": "PERSISTENT_1",
            "storage.lustre.throughput_mbps_per_tib": 200,
            "storage.lustre.lustre_version": "2.12",
        },
        refused={LUSTRE, DATA, CKPT},
        safe_way="new file system: export to S3, back up, allow, re-import",
    ),
    edit("Lustre compression LZ4 -> NONE", "pcluster", {"storage.lustre.data_compression": "NONE"}),
    edit(
        "Lustre EFA on",
        "pcluster",
        {
            "storage.lustre.efa_enabled": True,
            "storage.lustre.storage_capacity_gib": 4800,
            "storage.lustre.throughput_mbps_per_tib": 1000,
        },
        refused={LUSTRE, DATA, CKPT},
        also_replaced={"Storage/Lustre/ClientIngress1", "Storage/Lustre/SecurityGroup/Resource"},
        safe_way="as deployment type",
    ),
    edit(
        "Lustre security group dedicated -> cluster",
        "pcluster",
        {"storage.lustre.security_group": "cluster"},
        refused={LUSTRE, DATA, CKPT},
        safe_way="as deployment type (SecurityGroupIds is create-only)",
    ),
    edit(
        "add a DRA",
        "pcluster",
        {f"{DRAS}.2": {"file_system_path": "/models", "data_bucket_prefix": "models/"}},
    ),
    edit(
        "change a DRA's bucket prefix",
        "pcluster",
        {f"{DRAS}.1.data_bucket_prefix": "checkpoints/"},
        refused={CKPT},
        deploy="refused",
        safe_way="the new DRA would be created while the retained old one holds /ckpt (an allowance does not help): "
        "export the path, remove the DRA and deploy, delete the retained one, then add it with the new prefix",
    ),
    edit(
        "change a DRA's file system path",
        "pcluster",
        {f"{DRAS}.1.file_system_path": "/checkpoints"},
        deploy="refused",
        safe_way="the new DRA would overlap the retained old one: export the path, remove the DRA and deploy, "
        "delete the retained one, then add it with the new path",
    ),
    edit("change a DRA's auto-import events", "pcluster", {f"{DRAS}.1.auto_import_events": ["NEW"]}),
    edit(
        "remove a DRA",
        "pcluster",
        {f"{DRAS}.1": _DELETE},
        note="not refused (no data is deleted), but DeletionPolicy Retain keeps the DRA importing and exporting "
        "outside the stack: synth warns, with the command that deletes it and keeps files and objects",
    ),
    edit(
        "every DRA removed",
        "pcluster",
        {DRAS: []},
        stacks={"dt-DataRepository dropped"},
        safe_way="destroy the DataRepository stack first, delete its retained DRAs (--no-delete-data-in-file-system), "
        "lock, then edit",
    ),
    edit("bucket SSE-S3 -> SSE-KMS", "pcluster", {"storage.data_bucket.encryption": "kms"}),
    edit(
        "bucket SSE-KMS -> SSE-S3 (the created key goes)",
        "data-only",
        {"storage.data_bucket.encryption": "s3"},
        refused={"Storage/DataBucket/Key/Resource"},
        safe_way="keep the key until every object is re-encrypted (S3 Batch Operations copy), then allow",
    ),
    edit(
        "bucket name set",
        "pcluster",
        {"storage.data_bucket.name": "dt-training-data-123"},
        refused={"Storage/DataBucket/Resource/Resource", DATA, CKPT},
        also_replaced={"Storage/DataBucket/Resource/Policy/Resource"},
        safe_way="keep the name; or copy objects to the new bucket first, then allow",
    ),
    edit("OpenZFS throughput 160 -> 320 MB/s", "pcluster", {"storage.openzfs.throughput_capacity_mbps": 320}),
    edit(
        "OpenZFS capacity 256 -> 128 GiB",
        "pcluster",
        {"storage.openzfs.storage_capacity_gib": 128},
        deploy="refused",
        safe_way="FSx cannot shrink a file system: keep 256 GiB, or copy /home to a new, smaller one",
    ),
    edit(
        "OpenZFS deployment type HA_2 -> SINGLE_AZ_2",
        "pcluster",
        {"storage.openzfs.deployment_type": "SINGLE_AZ_2"},
        refused={OPENZFS},
        safe_way="new /home: copy it (rsync from a node) or restore a backup, then allow",
    ),
    edit(
        "OpenZFS removed",
        "pcluster",
        {"storage.openzfs": _DELETE},
        refused={OPENZFS},
        safe_way="copy /home elsewhere first, then allow",
    ),
    edit(
        "data bucket backup removed",
        "data-only",
        {"storage.data_bucket.backup": _DELETE},
        refused={
            "Storage/DataBucketBackup/Vault/Resource",
            "Storage/DataBucketBackup/Plan/Resource",
            "Storage/DataBucketBackup/Plan/DataBucket/Resource",
        },
        safe_way="keep it; to retire it, copy the recovery points to another vault, then allow vault, plan and "
        "selection",
    ),
    # -- environment-wide ------------------------------------------------------
    edit(
        "log retention 365 -> 90 days",
        "pcluster",
        {"retention.log_retention_days": 90},
        refused=LOG_GROUPS,
        safe_way="export the logs older than 90 days first (create-export-task), then allow each log group",
    ),
    edit(
        "retention.on_delete retain -> destroy",
        "pcluster",
        {"retention.on_delete": "destroy"},
        # the ParallelCluster cluster's own DeletionPolicy decides whether the head node's /home survives
        refused=RETAINED | {"Cluster/Cluster/Resource"},
        stacks={
            "dt-Network unprotected",
            "dt-Storage unprotected",
            "dt-DataRepository unprotected",
            "dt-Observability unprotected",
        },
        safe_way="keep retain; to tear down: 'cdk destroy' (the data stays), copy, delete the retained resources "
        "by hand; or take each resource's second copy and allow it by name",
    ),
    edit("tag added", "pcluster", {"tags.CostCenter": "ml"}),
    edit("compliance pack added", "data-only", {"compliance.packs": ["nist-800-53-r5"]}),
    # -- network -----------------------------------------------------------------
    edit(
        "VPC CIDR changed",
        "pcluster",
        {"network.cidr": "10.20.0.0/16"},
        refused={LUSTRE, OPENZFS, DATA, CKPT},
        also_replaced={"Network/*", "Storage/*"},
        safe_way="new network is new storage: build a second environment and copy",
    ),
    edit("extra zone added", "pcluster", {"network.extra_zones": [{"availability_zone": "us-east-2b"}]}),
    edit(
        "NAT per zone (with an extra zone)",
        "pcluster",
        {"network.extra_zones": [{"availability_zone": "us-east-2b"}], "network.nat_gateways": "per_zone"},
    ),
    # -- ParallelCluster ------------------------------------------------------------
    edit(
        "cluster.backend pcluster -> none",
        "pcluster",
        {"cluster": {"backend": "none"}},
        stacks={"dt-Cluster dropped", "dt-Observability dropped"},
        safe_way="copy /home off the head node, destroy the Cluster stack first, lock, then edit",
    ),
    edit(
        "queue max count 2 -> 4",
        "pcluster",
        {f"{PC}.queues.0.compute_resources.0.max_count": 4},
        deploy="rollback_stop",
    ),
    edit(
        "queue instance type p5 -> p4de",
        "pcluster",
        {f"{PC}.queues.0.compute_resources.0.instance_type": "p4de.24xlarge"},
        note=PC_FLEET_STOP,
        deploy="fleet_stop",
    ),
    edit(
        "queue min count 2 -> 1",
        "pcluster",
        {f"{PC}.queues.0.compute_resources.0.min_count": 1},
        note="ParallelCluster policy RESIZE_UPDATE_STRATEGY_ON_REMOVE: fewer static nodes only with the fleet "
        "stopped (or QueueUpdateStrategy TERMINATE)",
        deploy="fleet_stop",
    ),
    edit(
        "Slurm scaledown idle time 10 -> 30 min",
        "pcluster",
        {f"{PC}.slurm.scaledown_idle_minutes": 30},
        note=PC_FLEET_STOP,
        deploy="fleet_stop",
    ),
    edit(
        "detailed monitoring on",
        "pcluster",
        {f"{PC}.monitoring.detailed_monitoring": True},
        note=PC_FLEET_STOP,
        deploy="fleet_stop",
    ),
    edit(
        "operating system alinux2023 -> ubuntu2204",
        "pcluster",
        {f"{PC}.os": "ubuntu2204"},
        deploy="refused",
        safe_way="ParallelCluster policy UNSUPPORTED: a new cluster (a second environment)",
    ),
    edit(
        "queue added",
        "pcluster",
        {
            f"{PC}.queues.1": {
                "name": "infer",
                "compute_resources": [{"name": "g5", "instance_type": "g5.12xlarge", "max_count": 4}],
            }
        },
        deploy="rollback_stop",
    ),
    edit(
        "head node instance type",
        "pcluster",
        {f"{PC}.head_node.instance_type": "m5.4xlarge"},
        deploy="refused",
        safe_way="ParallelCluster policy UNSUPPORTED: a new cluster (a second environment, or destroy the Cluster "
        "stack first)",
    ),
    edit(
        "login nodes added",
        "pcluster",
        {f"{PC}.login_nodes": {"instance_type": "m5.2xlarge", "count": 1}},
        note="ParallelCluster policy LOGIN_NODES_STOP: applied with the login pools stopped",
    ),
    edit(
        "ParallelCluster version",
        "pcluster",
        {f"{PC}.version": "3.15.0"},
        deploy="refused",
        safe_way="the provider would move, the cluster stay: ParallelCluster does not upgrade clusters; a new "
        "cluster (a second environment, or destroy the Cluster stack first)",
    ),
    edit(
        "ParallelCluster cluster name",
        "pcluster",
        {"cluster.name": "dt-train2"},
        refused={PCLUSTER_CLUSTER},
        # The node roles' permissions boundary is named after the cluster.
        also_replaced={"Cluster/NodeRoleBoundary/Resource"},
        safe_way="ParallelCluster's provider refuses a rename (an allowance does not help): drain the queues, copy "
        "what is on the head node, destroy the Cluster stack (then pcluster delete-cluster where retained), lock, "
        "deploy the new name",
    ),
    # -- HyperPod -------------------------------------------------------------------
    edit("HyperPod worker count 2 -> 4", "hyperpod", {f"{HP}.workers.0.instance_count": 4}),
    edit(
        "HyperPod worker group added",
        "hyperpod",
        {f"{HP}.workers.2": {"instance_group_name": "gpu-c", "instance_type": "ml.p5.48xlarge", "instance_count": 1}},
    ),
    edit("HyperPod worker group removed", "hyperpod", {f"{HP}.workers.1": _DELETE}),
    edit(
        "HyperPod worker instance type",
        "hyperpod",
        {f"{HP}.workers.1.instance_type": "ml.p4d.24xlarge"},
        refused={HYPERPOD_CLUSTER},
        safe_way="add a new group with the new type, move work, remove the old group",
    ),
    edit("HyperPod user added", "hyperpod", {f"{HP}.lifecycle.users.1": {"name": "bob", "uid": 2002}}),
    edit("HyperPod node recovery Automatic -> None", "hyperpod", {f"{HP}.node_recovery": "None"}),
    edit(
        "HyperPod cluster name",
        "hyperpod",
        {"cluster.name": "dt-hp2"},
        refused={HYPERPOD_CLUSTER},
        safe_way="drain the partitions, then allow",
    ),
    edit(
        "HyperPod controller group renamed",
        "hyperpod",
        {f"{HP}.controller.instance_group_name": "controller-2"},
        refused={HYPERPOD_CLUSTER},
        safe_way="a new controller without the old one's /opt/sagemaker (slurmctld's state, a local accounting "
        "database): keep the name, or create the cluster again (a new cluster.name, allowed)",
    ),
    # -- the managed Slurm accounting database (issue 30) -------------------------
    edit(
        "HyperPod managed accounting database added (a second zone)",
        "hyperpod",
        {
            "network.extra_zones": [{"availability_zone_id": "usw2-az1"}],
            "storage.accounting": {},
            f"{HP}.lifecycle.accounting": {"mode": "managed"},
        },
        deploy="refused",
        safe_way="the kept controller group gains an OverrideVpcConfig (the database's client group), which "
        "UpdateCluster does not change on an existing group: create the cluster again (a new cluster.name, "
        "allowed), moving a local database first (design notes, 'Moving a local HyperPod accounting database')",
    ),
    edit(
        "HyperPod worker group moved to a second zone",
        "hyperpod",
        {"network.extra_zones": [{"availability_zone_id": "usw2-az1"}], f"{HP}.workers.1.zones": ["usw2-az1"]},
        deploy="refused",
        safe_way="a kept group's OverrideVpcConfig: add a group of a new name in that zone, move work, remove the old",
    ),
    edit(
        "HyperPod second zone's subnet made again while a worker group runs in it",
        "hyperpod-zones",
        {"network.extra_zones.0.private_subnet_cidr": "10.0.200.0/24"},
        also_replaced={"Network/Network/Private2Subnet", "Network/Network/Private2RouteTableAssociation"},
        deploy="refused",
        safe_way="the cluster's template is unchanged, but the kept group gpu-b's OverrideVpcConfig reads the new "
        "subnet from the Network stack: first move its work to a group of a new name outside that zone and remove "
        "it (a deploy of its own), or create the cluster again (a new cluster.name, allowed)",
    ),
    edit(
        "ParallelCluster managed accounting database added (a second zone)",
        "pcluster",
        {"network.extra_zones": [{"availability_zone": "us-east-2b"}], "storage.accounting": {}},
        note="SlurmSettings.Database is ParallelCluster policy COMPUTE_FLEET_STOP (the head node's added security "
        "group and policy are SUPPORTED); slurmdbd starts an empty history: move an existing database's first",
        deploy="fleet_stop",
    ),
    edit(
        "ParallelCluster accounting database name slurm_acct_db -> train_history",
        "pcluster-accounting",
        {"storage.accounting.database_name": "train_history"},
        note="slurmdbd starts an empty history in the new database; the old one stays (slurmdbd's user keeps its "
        "grant on it)",
    ),
    edit(
        "ParallelCluster accounting database removed",
        "pcluster-accounting",
        {"storage.accounting": _DELETE},
        refused={
            ACCOUNTING_DB,
            "Storage/AccountingDatabase/SlurmdbdUser/Logs/Resource",
            "Storage/AccountingDatabase/SlurmdbdUser/ProviderLogs/Resource",
        },
        safe_way="mysqldump it first, then allow: the final snapshot, the retained secrets and the user function's "
        "log groups stay and bill until deleted by hand",
        deploy="fleet_stop",
    ),
    edit(
        "accounting database max capacity 2 -> 8 ACUs",
        "hyperpod-accounting",
        {"storage.accounting.max_capacity_acu": 8},
    ),
    edit(
        "accounting database min capacity 0 -> 0.5 ACUs",
        "hyperpod-accounting",
        {"storage.accounting.min_capacity_acu": 0.5},
        note="the database no longer pauses: its ACUs bill every hour",
    ),
    edit(
        "accounting database backups 35 -> 7 days",
        "hyperpod-accounting",
        {"storage.accounting.backup_retention_days": 7},
        refused={ACCOUNTING_DB},
        safe_way="take a manual snapshot (aws rds create-db-cluster-snapshot), then allow",
    ),
    edit(
        "accounting database secret rotation 30 -> 90 days",
        "hyperpod-accounting",
        {"storage.accounting.rotation_days": 90},
    ),
    edit(
        "accounting database removed (back to local)",
        "hyperpod-accounting",
        {"storage.accounting": _DELETE, f"{HP}.lifecycle.accounting": {"mode": "local"}},
        refused={ACCOUNTING_DB},
        deploy="refused",
        safe_way="mysqldump it first, then allow: the final snapshot and the retained secret stay and bill until "
        "deleted by hand; the kept controller group loses the client group's OverrideVpcConfig, so create the "
        "cluster again (a new cluster.name, allowed) in the same deploy",
    ),
]


def apply(base: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``base`` with each dotted key path set to its value (list indices as numbers; ``_DELETE`` removes)."""
    data = copy.deepcopy(base)
    for dotted, value in settings.items():
        *parents, last = dotted.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            index = int(last)
            if value is _DELETE:
                del node[index]
            elif index == len(node):
                node.append(value)
            else:
                node[index] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return data


def synthesize(folder: Path, data: dict[str, Any], *, template_checks: bool = False) -> Snapshot:
    """One app with one environment called ``dt``, reduced to a snapshot.

    The table compares templates only: cdk-nag and CloudFormation validation
    judge nothing a snapshot holds (``test_checks_change_no_snapshot`` shows
    it on each baseline), and they run on every example in ``test_examples``.
    """
    write_env(folder / "envs", STAGE, data)
    with pytest.MonkeyPatch.context() as patch:
        if not template_checks:
            # Nor are the assets copied into the assembly (the awscli layer alone is 21 MB): a
            # snapshot holds their hashes, which staging does not change (the same test shows it).
            context = {**project_context(), "aws:cdk:disable-asset-staging": True}
            patch.setattr(mlcluster.app, "project_context", lambda: context)
        app, _ = build_app(folder / "envs", outdir=str(folder / "out"), template_checks=template_checks)
    app.synth()
    return snapshot_from_assembly(folder / "out", STAGE)


@pytest.fixture(scope="module")
def baselines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("day-two-baselines")


@pytest.fixture(scope="module")
def baselines(baselines_dir: Path) -> dict[str, Snapshot]:
    """Each baseline synthesized once, without the template checks (as every edit is)."""
    return {name: synthesize(baselines_dir / name, data) for name, data in BASES.items()}


def acknowledged(outdir: Path) -> list[str]:
    """Every cdk-nag acknowledgement (assembly metadata) and checkov skip (resource metadata) in an assembly."""
    found: list[str] = []
    for path in outdir.glob("assembly-*/*.metadata.json"):
        for entries in json.loads(path.read_text(encoding="utf-8")).values():
            found += [
                rule for entry in entries if entry["type"] == "aws:cdk:acknowledged-rules" for rule in entry["data"]
            ]
    for path in outdir.glob("assembly-*/*.template.json"):
        for resource in json.loads(path.read_text(encoding="utf-8")).get("Resources", {}).values():
            found += [skip["id"] for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])]
    return found


@pytest.mark.parametrize("base", BASES)
def test_checks_change_no_snapshot(
    base: str, baselines: dict[str, Snapshot], baselines_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With cdk-nag and CloudFormation validation on (and assets staged), each baseline reduces to the same snapshot.

    Without them no validation plugin runs (no report is written); with them the
    AwsSolutions pack judges the stage, and CloudFormation validation reports the
    acknowledged W3010 (a zone by name) on the ParallelCluster baselines.
    """
    packs: list[str] = []
    judge = StageScopedPack.validate

    def spied(pack: StageScopedPack, context: Any) -> Any:
        packs.append(pack.name)
        return judge(pack, context)

    monkeypatch.setattr(StageScopedPack, "validate", spied)
    checked = synthesize(tmp_path, BASES[base], template_checks=True)
    assert packs == ["AwsSolutions"]
    assert not (baselines_dir / base / "out" / "validation-report.json").exists()
    report = json.loads((tmp_path / "out" / "validation-report.json").read_text(encoding="utf-8"))
    reported = [plugin["pluginName"] for plugin in report["pluginReports"]]
    assert reported == ([] if base.startswith("hyperpod") else ["CloudFormation Validate"])
    # The acknowledgements (and checkov's skips) are written for the checks.
    written = acknowledged(tmp_path / "out")
    assert any("AwsSolutions-" in rule for rule in written)
    assert any(rule.startswith("CKV_AWS_") for rule in written)
    # Unchecked, only what is acknowledged while the tree is validated (after the stages are built) is
    # left: the script upload function's read of the CDK assets bucket.
    unchecked = acknowledged(baselines_dir / base / "out")
    assert all("cdk-hnb659fds-assets" in rule for rule in unchecked)
    assert len(unchecked) <= 1 < len(written)
    assert compare(baselines[base], checked) == []
    assert checked == baselines[base]


@dataclasses.dataclass(frozen=True)
class Result:
    changes: list[Change]
    refused: frozenset[str]
    #: ``<stack> dropped`` or ``<stack> unprotected``: what ``stack_refusals`` refuses.
    stacks: frozenset[str]
    #: What synth prints about what the accepted edit leaves running.
    notes: list[str]
    #: The deploy outcome the guard finds (``refused``, ``fleet_stop``, ``in_place``).
    deploy: str


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, baselines: dict[str, Snapshot]) -> dict[str, Result]:
    """Every edit synthesized once against a shared baseline per backend."""
    tmp = tmp_path_factory.mktemp("day-two")
    started = time.perf_counter()
    out: dict[str, Result] = {}
    for index, item in enumerate(EDITS):
        data = apply(BASES[item.base], item.settings)
        after = synthesize(tmp / f"edit{index}", data)
        before = baselines[item.base]
        changes = compare(before, after)
        env = load_environment(tmp / f"edit{index}" / "envs" / f"{STAGE}.yaml")
        dropped = set(before) - set(after)
        refused = frozenset(c.path for c in changes if c.dangerous and c.stack not in dropped)
        stacks = frozenset(
            [f"{stack} dropped" for stack in dropped] + [f"{stack} unprotected" for stack in unprotected(before, after)]
        )
        # The guard's own rules say the same (no allowance in the edits).
        assert len(refusals(env, changes, dropped=dropped)) == len(refused)
        assert len(stack_refusals(env, before, after)) == len(stacks)
        problems, outcome_notes = outcome_checks(env, before, after)
        fleet = [note for note in outcome_notes if "compute fleet stopped" in note]
        back = [note for note in outcome_notes if "rollback's changes back only with the fleet stopped" in note]
        deploy = "refused" if problems else "fleet_stop" if fleet else "rollback_stop" if back else "in_place"
        out[item.name] = Result(changes, refused, stacks, notices(env, before, after, changes), deploy)
    print(f"day-two table: {len(EDITS)} edits + {len(BASES)} baselines in {time.perf_counter() - started:.1f} s")
    return out


@pytest.mark.parametrize("item", EDITS, ids=[e.name for e in EDITS])
def test_edit_replaces_what_the_table_says(item: Edit, results: dict[str, Result]) -> None:
    result = results[item.name]
    replaced = {c.path for c in result.changes if c.action == "replace"} - result.refused
    assert result.refused == item.refused, sorted(c.describe() for c in result.changes if c.dangerous)
    assert result.stacks == item.stacks
    wildcards = {entry.removesuffix("*") for entry in item.also_replaced if entry.endswith("/*")}
    exact = {path for path in replaced if not any(path.startswith(prefix) for prefix in wildcards)}
    assert exact == item.also_replaced - {f"{prefix}*" for prefix in wildcards}, [c.describe() for c in result.changes]
    assert all(any(path.startswith(prefix) for path in replaced) for prefix in wildcards)


@pytest.mark.parametrize("item", EDITS, ids=[e.name for e in EDITS])
def test_edit_deploys_as_the_table_says(item: Edit, results: dict[str, Result]) -> None:
    """The deploy outcome: refused at synth (a deploy that would fail), needs the fleet stopped, or in place."""
    assert results[item.name].deploy == item.deploy


def test_storage_replacement_changes_the_cluster_stack(results: dict[str, Result]) -> None:
    """No stale reads (issue 25, finding 4). With weak references no stack imports another's export, so
    CloudFormation has no "export in use" to refuse; but a consumer is re-read only when its stack is updated,
    and ``cdk deploy`` skips an unchanged template. A new file system therefore changes the cluster stack's
    (and the DataRepository stack's) ``ProducerValues`` parameter, in place and nothing else, while an edit of
    the cluster alone leaves it as it was."""
    changes = results["Lustre deployment type PERSISTENT_2 -> PERSISTENT_1"].changes
    cluster = [(c.path, c.action) for c in changes if c.stack == f"{STAGE}-Cluster"]
    assert cluster == [("Cluster/ProducerValues", "update")]
    assert ("DataRepository/ProducerValues", "update") in [(c.path, c.action) for c in changes]
    for edit_name in ("queue max count 2 -> 4", "HyperPod worker count 2 -> 4"):
        assert not [c for c in results[edit_name].changes if c.path.endswith("/ProducerValues")], edit_name


def _summary(paths: set[str]) -> str:
    """Paths, or ``Stack: N resources`` for a stack with more than three."""
    by_stack: dict[str, list[str]] = {}
    for path in sorted(paths):
        by_stack.setdefault(path.split("/", 1)[0], []).append(path)
    parts = [
        ", ".join(f"`{p}`" for p in items) if len(items) <= 3 else f"{stack}: {len(items)} resources"
        for stack, items in by_stack.items()
    ]
    return "; ".join(parts)


def test_a_removed_retained_dra_is_reported_as_still_running(results: dict[str, Result]) -> None:
    (note,) = results["remove a DRA"].notes
    assert "DataRepository/Lustre/AssociationCkpt" in note and "keeps it running outside the stack" in note
    assert "--no-delete-data-in-file-system" in note
    # A new file_system_path is a new DRA (its construct id names the path): the old one is removed and retained
    # too, and that edit is refused at synth (the new one would overlap it).
    moved = "change a DRA's file system path"
    assert results[moved].deploy == "refused" and "AssociationCkpt" in results[moved].notes[0]
    # The accounting database removed (allowed): its retained secret stays outside the stack, and synth says so.
    dropped_db = "accounting database removed (back to local)"
    (secret_note,) = results[dropped_db].notes
    assert "AccountingDatabase/Cluster/Secret/Resource" in secret_note and "leaves the template" in secret_note
    # ParallelCluster's: both retained secrets (the master's and slurmdbd's bare password) stay outside the stack.
    dropped_pc = "ParallelCluster accounting database removed"
    notes = results[dropped_pc].notes
    assert len(notes) == 2 and all("leaves the template" in note for note in notes)
    assert "AccountingDatabase/Cluster/Secret/Resource" in notes[0] + notes[1]
    assert "AccountingDatabase/SlurmdbdUser/Secret/Resource" in notes[0] + notes[1]
    skipped = ("remove a DRA", moved, dropped_db, dropped_pc)
    noted = {e.name: results[e.name].notes for e in EDITS if e.name not in skipped}
    assert {name: notes for name, notes in noted.items() if notes} == {}


@dataclasses.dataclass(frozen=True)
class Rename:
    """The guard on a renamed environment file: the old lock orphaned, the new name without a lock."""

    orphaned: str
    missing: str


@pytest.fixture(scope="module")
def rename(tmp_path_factory: pytest.TempPathFactory, baselines: dict[str, Snapshot]) -> Rename:
    """``dt.yaml`` deployed and locked, then renamed ``dt2.yaml``: what the synth of the folder says."""
    envs = tmp_path_factory.mktemp("rename")
    old = load_environment(write_env(envs, STAGE, PCLUSTER))
    write_lock(old, Lock(baselines["pcluster"], "templates"))
    new = load_environment(write_env(envs, f"{STAGE}2", PCLUSTER))
    (envs / f"{STAGE}.yaml").unlink()
    (orphaned,) = orphan_locks(envs)
    return Rename(str(orphaned), missing_lock(new).render())


def test_a_renamed_file_is_refused_with_the_way(rename: Rename) -> None:
    assert "records deployed stacks (dt-Cluster, dt-DataRepository, dt-Network, dt-Observability" in rename.orphaned
    assert "To rename: keep dt.yaml" in rename.orphaned
    assert "dt2.lock.json is missing" in rename.missing


def render_table(results: dict[str, Result], rename: Rename | None = None) -> str:
    """The day-two table (docs/reference/edits.md), rendered from the results (and the rename's refusals)."""
    rows = [
        "| edit (baseline) | refused at synth: data-bearing resources replaced, deleted or kept less well; stacks "
        "dropped or unprotected | other resources replaced | updated in place | safe way, or what the service does "
        "| what `mlcluster update` does |",
        "|---|---|---|---|---|---|",
    ]
    for item in EDITS:
        result = results[item.name]
        replaced = {c.path for c in result.changes if c.action == "replace"} - result.refused
        updated = {c.path for c in result.changes if c.action in ("update", "add", "remove")} - result.refused
        refused = "; ".join(
            part
            for part in (
                _summary(set(result.refused)),
                ", ".join("stack `{}` {}".format(*entry.split(" ")) for entry in sorted(result.stacks)),
            )
            if part
        )
        blocked = refused or result.deploy == "refused"
        does = UPDATE_DOES["refused"] if blocked else UPDATE_DOES[result.deploy]
        rows.append(
            f"| {item.name} ({item.base}) | {refused or 'no'} | {_summary(replaced) or '-'} | "
            f"{len(updated)} | {item.safe_way or item.note or '-'} | {does} |"
        )
    if rename is not None:
        rows.append(
            f"| environment file renamed {STAGE}.yaml -> {STAGE}2.yaml (pcluster) | `{STAGE}.lock.json` records "
            f"deployed stacks without its file; `{STAGE}2` has no lock | - | 0 | keep {STAGE}.yaml; to rename: "
            "deploy the new file, copy the data, destroy the old stacks, lock the old name (nothing deployed), then "
            f"delete its file and lock | {UPDATE_DOES['refused']} |"
        )
    return "\n".join(rows) + "\n"


def test_docs_table_matches(results: dict[str, Result], rename: Rename) -> None:
    page = (ROOT / "docs/reference/edits.md").read_text(encoding="utf-8")
    table = render_table(results, rename)
    assert table in page, "docs/reference/edits.md day-two table is stale; expected:\n" + table


def test_the_entry_points_keep_the_template_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``app.py`` (``main``) and ``mlcluster diff``'s synthesis call ``build_app`` with its default: checks on."""
    from mlcluster.cli import diff

    calls: list[dict[str, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(mlcluster.app, "build_app", spy)
    with pytest.raises(SystemExit):
        mlcluster.app.main()
    assert calls == [{}]
    assert "build_app(" in diff._SYNTH and "template_checks" not in diff._SYNTH
    assert inspect.signature(build_app).parameters["template_checks"].default is True
