"""What an edit replaces, told from the synthesized templates before anything is deployed.

CloudFormation replaces a resource (a new physical resource, the old one
deleted or, with ``Retain``, orphaned) when a *create-only* property
changes. This module reads those properties from the resource schemas
bundled with cfn-lint (``createOnlyProperties``, the registry's own
schemas), adds the few the bundled schema of a legacy type omits, and
applies our custom resources' documented rules:

- ``Custom::PclusterCluster``: ParallelCluster cannot rename a cluster, so a
  new ``ClusterName`` counts as a replacement (which its provider refuses:
  the guard refuses the rename, ``mlcluster.lockfile.cluster_rename_refusal``).
- ``AWS::SageMaker::Cluster`` (HyperPod): besides the schema's
  ``ClusterName``, ``VpcConfig`` and ``Orchestrator``, an instance group's
  ``InstanceType``, ``ExecutionRole`` and ``ThreadsPerCore`` are fixed when
  the group is created (SageMaker's UpdateCluster cannot change them), so a
  change to one, for a group kept in both templates, counts as a
  replacement; adding or removing a whole group does not.

A resource is also replaced when a create-only property refers (``Ref``,
``Fn::GetAtt``, or ``Fn::GetStackOutput`` across stacks) to a resource that
is replaced. Templates are reduced to a :class:`Snapshot`, the same shape the
lock file (``environments/<name>.lock.json``) stores, so the edit table,
the synth-time guard and the lock file compare like with like.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.resources
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

#: Types whose replacement or deletion loses data or history (or a cluster with running jobs), or
#: stops the second copy of data (a backup plan or selection): backup vaults hold the backups,
#: Prometheus and Grafana workspaces the metrics and dashboards, log groups the logs, and a KMS
#: key every object and backup encrypted under it.
DATA_BEARING_TYPES = frozenset(
    {
        "AWS::FSx::FileSystem",
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::KMS::Key",
        "Custom::PclusterCluster",
        "AWS::SageMaker::Cluster",
        "AWS::Backup::BackupVault",
        "AWS::Backup::BackupPlan",
        "AWS::Backup::BackupSelection",
        "AWS::APS::Workspace",
        "AWS::Grafana::Workspace",
        "AWS::Logs::LogGroup",
        # The Slurm accounting database (storage.accounting): job history, fair-share usage, associations.
        "AWS::RDS::DBCluster",
    }
)
#: Deletion and replace policies that keep the resource when CloudFormation deletes it from an
#: existing stack (``RetainExceptOnCreate`` deletes it only when the create that made it rolls back).
KEEPING_POLICIES = frozenset({"Retain", "RetainExceptOnCreate", "Snapshot"})
#: Settings that decide how long data or its copies live, by type: ``(property pointer below
#: /properties, what an absent value means in days, 0 for "no such copy")``. A shorter
#: period, or a copy switched off, is a weakening the guard refuses on a data-bearing resource.
#: Values from the CloudFormation template reference: a log group without ``RetentionInDays``
#: never expires; a KMS key's ``PendingWindowInDays`` defaults to 30; an AMP workspace keeps
#: samples 150 days; an FSx file system
#: without ``AutomaticBackupRetentionDays`` is treated as keeping none; a lifecycle rule
#: absent expires nothing.
NEVER = 1_000_000
FATE_DAYS: dict[str, tuple[tuple[str, int], ...]] = {
    "AWS::Logs::LogGroup": (("RetentionInDays", NEVER),),
    "AWS::KMS::Key": (("PendingWindowInDays", 30),),
    "AWS::FSx::FileSystem": (
        ("LustreConfiguration/AutomaticBackupRetentionDays", 0),
        ("OpenZFSConfiguration/AutomaticBackupRetentionDays", 0),
    ),
    "AWS::S3::Bucket": (
        ("LifecycleConfiguration/Rules/*/NoncurrentVersionExpiration/NoncurrentDays", NEVER),
        ("LifecycleConfiguration/Rules/*/ExpirationInDays", NEVER),
    ),
    "AWS::Backup::BackupPlan": (("BackupPlan/BackupPlanRule/*/Lifecycle/DeleteAfterDays", NEVER),),
    # Amazon Managed Service for Prometheus keeps samples 150 days unless told otherwise.
    "AWS::APS::Workspace": (("WorkspaceConfiguration/RetentionPeriodInDays", 150),),
    # An Aurora cluster without BackupRetentionPeriod keeps automated backups 1 day.
    "AWS::RDS::DBCluster": (("BackupRetentionPeriod", 1),),
}
#: Settings whose value must stay as it was on a data-bearing resource (versioning keeps every
#: overwritten or deleted object).
FATE_FIXED: dict[str, tuple[str, ...]] = {"AWS::S3::Bucket": ("VersioningConfiguration/Status",)}
#: Settings that keep the resource's data when they hold one of the keeping values: ``(pointer below
#: /properties, keeping values, what an absent setting means)``. Leaving the keeping values is a
#: weakening; entering them is not. ParallelCluster's ``Custom::PclusterCluster`` deletes the cluster
#: (head node, its /home, Slurm accounting on it) when the resource goes unless ``DeletionPolicy`` is
#: ``Retain``; absent, it is ``Delete`` (the ParallelCluster CloudFormation custom resource reference).
#: An Aurora cluster's ``DeletionProtection`` is not one of them: the accounting database keeps it off (a
#: failed create must roll back) and its ``DeletionPolicy: Snapshot`` and backups are what the guard holds.
FATE_KEPT: dict[str, tuple[tuple[str, frozenset[str], str], ...]] = {
    "Custom::PclusterCluster": (("DeletionPolicy", frozenset({"Retain"}), "Delete"),),
}
#: ParallelCluster's custom resource type.
PCLUSTER_TYPE = "Custom::PclusterCluster"
#: Settings the lock records because they decide whether a deploy of an edit succeeds, not whether data is
#: replaced (``mlcluster.deploy_outcomes`` reads them): the whole ParallelCluster configuration (its update
#: policies), a file system's capacity and throughput (FSx cannot shrink; the resource specification replaces
#: on a throughput change) and a nested stack's template URL (ParallelCluster's provider names its release).
#: A HyperPod cluster also records each instance group's ``OverrideVpcConfig`` (:data:`GROUP_NETWORKS_KEY`).
OUTCOME_SETTINGS: dict[str, tuple[str, ...]] = {
    PCLUSTER_TYPE: ("ClusterConfiguration",),
    "AWS::FSx::FileSystem": (
        "StorageCapacity",
        "LustreConfiguration/PerUnitStorageThroughput",
        "LustreConfiguration/DeploymentType",
    ),
    "AWS::CloudFormation::Stack": ("TemplateURL",),
}
#: Where a ParallelCluster cluster's fate records its shared storage: ``{MountDir: StorageType}``. A lock
#: written before this was recorded has no such key (its mounts are unknown).
MOUNTS_KEY = "ClusterConfiguration/SharedStorage"
#: Head-node paths that hold files before ParallelCluster mounts anything there. ParallelCluster lets an
#: update add or remove shared storage (under ``QueueUpdateStrategy``) but copies what was at the path only
#: when the cluster is created (``mount_home``): storage added to a running cluster at ``/home`` hides every
#: user's home under an empty volume, and storage taken away leaves them on the volume, out of sight.
EXISTING_PATHS = frozenset(
    {"/home", "/opt", "/usr", "/var", "/etc", "/root", "/srv", "/tmp", "/boot", "/bin", "/sbin", "/lib", "/lib64"}
)
#: The reason prefix of a mount change over an existing path (:func:`mount_changes`).
MOUNT_REASON = "SharedStorage MountDir"
#: Where a ParallelCluster cluster's fate records what ParallelCluster does with each volume or file system
#: it made for the cluster when the cluster is deleted or the storage leaves it: ``{MountDir: DeletionPolicy}``.
#: A lock written before this was recorded has no such key (:func:`locked_volume_policies` reconstructs them).
VOLUME_POLICIES_KEY = "ClusterConfiguration/SharedStorage/DeletionPolicy"
#: ParallelCluster's storage types that it creates and may delete: ``StorageType -> (settings key, the key
#: naming an existing resource instead)``. ParallelCluster's schema (``cluster_schema.py``, ``cluster_config.py``
#: of aws-parallelcluster 3): ``DeletionPolicy`` defaults to ``Delete`` for storage it creates, has no effect on
#: an existing volume or file system (nothing of it is deleted), and changes in place (update policy SUPPORTED).
MANAGED_STORAGE: dict[str, tuple[str, str]] = {
    "Ebs": ("EbsSettings", "VolumeId"),
    "Efs": ("EfsSettings", "FileSystemId"),
    "FsxLustre": ("FsxLustreSettings", "FileSystemId"),
}
#: The reason prefix of a volume ParallelCluster no longer keeps (:func:`volume_policy_changes`).
VOLUME_POLICY_REASON = "SharedStorage DeletionPolicy"
#: S3 buckets are data-bearing in the storage stack (the data bucket and its access logs).
DATA_BUCKET_STACK = "Storage"
#: Other S3 buckets that hold data, by construct path prefix: HyperPod's patch backups (the
#: controller's Slurm state and accounting dump, and their access logs; ``PatchBackupBucket``).
DATA_BUCKET_PATHS = ("Cluster/PatchBackups/",)

#: Create-only properties the bundled schema of ``AWS::FSx::FileSystem`` (a
#: legacy, non-registry type) leaves out although the CloudFormation template
#: reference marks them "Update requires: Replacement"
#: (AWS::FSx::FileSystem, LustreConfiguration and OpenZFSConfiguration pages).
SCHEMA_SUPPLEMENT: dict[str, tuple[str, ...]] = {
    "AWS::FSx::FileSystem": (
        "/properties/StorageType",
        "/properties/LustreConfiguration/DeploymentType",
        "/properties/LustreConfiguration/DriveCacheType",
        "/properties/LustreConfiguration/EfaEnabled",
        "/properties/LustreConfiguration/ExportPath",
        "/properties/LustreConfiguration/ImportPath",
        "/properties/LustreConfiguration/ImportedFileChunkSize",
        "/properties/LustreConfiguration/CopyTagsToBackups",
        "/properties/OpenZFSConfiguration/DeploymentType",
        "/properties/OpenZFSConfiguration/PreferredSubnetId",
        "/properties/OpenZFSConfiguration/EndpointIpAddressRange",
        "/properties/OpenZFSConfiguration/CopyTagsToBackups",
        "/properties/OpenZFSConfiguration/CopyTagsToVolumes",
    ),
}
#: Our custom resources' create-only properties (see the module docstring).
CUSTOM_CREATE_ONLY: dict[str, tuple[str, ...]] = {"Custom::PclusterCluster": ("/properties/ClusterName",)}
HYPERPOD_TYPE = "AWS::SageMaker::Cluster"
#: Fields of a HyperPod instance group fixed at the group's creation.
HYPERPOD_GROUP_FIELDS = ("InstanceType", "ExecutionRole", "ThreadsPerCore")
#: Create-only keys of kept instance groups: ``InstanceGroups[<name>].<field>``.
GROUP_KEY = "InstanceGroups["
#: The create-only key naming a HyperPod cluster's Slurm controller group: the group whose ``SlurmConfig``
#: says ``NodeType: Controller``, or the first group without ``SlurmConfig`` (the construct renders the
#: controller first). Another name on a kept cluster removes the locked controller group, and with it
#: ``/opt/sagemaker`` (slurmctld's state in every accounting mode, the MariaDB database with ``local``):
#: compared as a replacement, so the cluster's allowance is needed (:func:`_controller_reasons`).
CONTROLLER_KEY = "ControllerInstanceGroupName"
#: Where a HyperPod cluster's settings record each instance group's ``OverrideVpcConfig``:
#: ``{InstanceGroupName: OverrideVpcConfig or None}`` (None: the group uses the cluster's ``VpcConfig``). A lock
#: written before this was recorded has no such key (``mlcluster.deploy_outcomes`` then notes it).
GROUP_NETWORKS_KEY = "InstanceGroups/*/OverrideVpcConfig"

#: ``weaken``: kept in place, but what happens to it on delete (its deletion or replace policy) or
#: how long it keeps data (retention, backups, versioning) is weaker than the lock records.
Action = Literal["add", "remove", "replace", "update", "weaken"]


@dataclasses.dataclass(frozen=True)
class ResourceState:
    """What matters of one resource for telling replacements from updates."""

    type: str
    #: Construct path below the stage (``Storage/Lustre/Resource``).
    path: str
    #: The create-only properties' values, by JSON pointer below ``/properties``.
    create_only: dict[str, Any]
    #: Digest of all properties: a change without a create-only change is an in-place update.
    digest: str
    #: The template's ``DeletionPolicy`` and ``UpdateReplacePolicy`` (``Delete`` when absent).
    deletion_policy: str = "Delete"
    update_replace_policy: str = "Delete"
    #: The values of the settings in ``FATE_DAYS`` and ``FATE_FIXED`` of its type, by pointer.
    fate: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The values of the settings in ``OUTCOME_SETTINGS`` of its type, by pointer: what decides whether a
    #: deploy of an edit can succeed (``mlcluster.deploy_outcomes``). Empty in a lock written before it.
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The lock file's form (``settings`` only when there are some: the other resources' entries stay as
        they were)."""
        out = dataclasses.asdict(self)
        if not self.settings:
            del out["settings"]
        return out


@dataclasses.dataclass(frozen=True)
class StackState:
    """One stack: its resources by logical id, and what each output refers to."""

    resources: dict[str, ResourceState]
    outputs: dict[str, list[str]]
    #: Whether the stack has termination protection (``cdk deploy`` sets it to what the app says).
    termination_protection: bool = False


#: Stacks by their CloudFormation name (``p5-Storage``).
Snapshot = dict[str, StackState]


@dataclasses.dataclass(frozen=True)
class Change:
    """What happens to one resource between two snapshots."""

    stack: str
    logical_id: str
    type: str
    path: str
    action: Action
    #: Why a replacement happens: ``Prop: old -> new`` or ``refers to replaced X``.
    reasons: tuple[str, ...] = ()

    @property
    def data_bearing(self) -> bool:
        """Whether losing this resource loses data (or a running cluster)."""
        return is_data_bearing(self.type, self.path)

    @property
    def dangerous(self) -> bool:
        """A data-bearing resource replaced, weakened, or deleted (DRAs aside: deleting one deletes no data)."""
        if not self.data_bearing:
            return False
        return self.action in ("replace", "weaken") or (
            self.action == "remove" and self.type != "AWS::FSx::DataRepositoryAssociation"
        )

    def describe(self) -> str:
        """``Storage/Lustre/Resource (AWS::FSx::FileSystem) replaced: ...``."""
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        verb = {
            "add": "added",
            "remove": "removed",
            "replace": "REPLACED",
            "update": "updated in place",
            "weaken": "WEAKENED",
        }
        return f"{self.path} ({self.type}) {verb[self.action]}{why}"


def keeping(resource: ResourceState) -> str | None:
    """What keeps ``resource`` running when it leaves its stack, or None when it goes.

    CloudFormation skips the delete under a keeping ``DeletionPolicy``. Otherwise it asks the resource
    to delete itself, and a setting of ``FATE_KEPT`` (the ParallelCluster custom resource's
    ``DeletionPolicy`` property) may still keep it: ParallelCluster then leaves the cluster, head node
    and static nodes running.
    """
    if resource.deletion_policy in KEEPING_POLICIES:
        return f"DeletionPolicy {resource.deletion_policy}"
    for pointer, values, default in FATE_KEPT.get(resource.type, ()):
        value = str(resource.fate.get(pointer, default))
        if value in values:
            return f"its {pointer.replace('/', '.')} property {value}"
    return None


def is_data_bearing(resource_type: str, path: str) -> bool:
    """Data-bearing types anywhere, plus S3 buckets of the storage stack and of :data:`DATA_BUCKET_PATHS`."""
    if resource_type in DATA_BEARING_TYPES:
        return True
    if resource_type != "AWS::S3::Bucket":
        return False
    return path.split("/", 1)[0] == DATA_BUCKET_STACK or path.startswith(DATA_BUCKET_PATHS)


@functools.cache
def _schema_index() -> tuple[Path, dict[str, str]]:
    folder = Path(str(importlib.resources.files("cfnlint.data.schemas")))
    index = json.loads((folder / "providers" / "us-east-1.json").read_text(encoding="utf-8"))
    return folder / "resources", index


@functools.cache
def create_only_paths(resource_type: str) -> tuple[str, ...]:
    """The create-only property pointers of ``resource_type`` (``/properties/...``)."""
    if resource_type in CUSTOM_CREATE_ONLY:
        return CUSTOM_CREATE_ONLY[resource_type]
    resources, index = _schema_index()
    paths: list[str] = []
    if resource_type in index:
        schema = json.loads((resources / f"{index[resource_type]}.json").read_text(encoding="utf-8"))
        paths = list(schema.get("createOnlyProperties", []))
    return tuple(dict.fromkeys([*paths, *SCHEMA_SUPPLEMENT.get(resource_type, ())]))


_ABSENT = object()


def _lookup(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if head == "*":
        if not isinstance(value, list):
            return _ABSENT
        found = [_lookup(item, rest) for item in value]
        return [f for f in found if f is not _ABSENT]
    if not isinstance(value, dict) or head not in value:
        return _ABSENT
    return _lookup(value[head], rest)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _create_only_values(resource_type: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pointer in create_only_paths(resource_type):
        found = _lookup(dict(properties), pointer.split("/")[2:])
        if found is not _ABSENT:
            values[pointer.removeprefix("/properties/")] = found
    if resource_type == HYPERPOD_TYPE:
        groups = [group for group in properties.get("InstanceGroups", []) if isinstance(group, dict)]
        for group in groups:
            for field in HYPERPOD_GROUP_FIELDS:
                if field in group:
                    values[f"{GROUP_KEY}{group.get('InstanceGroupName')}].{field}"] = group[field]
        typed = [g for g in groups if isinstance(g.get("SlurmConfig"), dict) and g["SlurmConfig"].get("NodeType")]
        controllers = [g for g in typed if g["SlurmConfig"]["NodeType"] == "Controller"] if typed else groups[:1]
        if controllers:
            values[CONTROLLER_KEY] = controllers[0].get("InstanceGroupName")
    return values


def _fate_values(resource_type: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``resource_type``'s settings in ``FATE_DAYS`` (the shortest, for a list), ``FATE_FIXED`` and
    ``FATE_KEPT``."""
    values: dict[str, Any] = {}
    for pointer, _ in FATE_DAYS.get(resource_type, ()):
        found = _lookup(dict(properties), pointer.split("/"))
        numbers = found if isinstance(found, list) else [] if found is _ABSENT else [found]
        if numbers:
            values[pointer] = min(numbers, key=lambda n: n if isinstance(n, int) else NEVER)
    for pointer in (*FATE_FIXED.get(resource_type, ()), *(kept[0] for kept in FATE_KEPT.get(resource_type, ()))):
        found = _lookup(dict(properties), pointer.split("/"))
        if found is not _ABSENT:
            values[pointer] = found
    if resource_type == PCLUSTER_TYPE:
        storage = _lookup(dict(properties), MOUNTS_KEY.split("/"))
        items = [item for item in (storage if isinstance(storage, list) else []) if isinstance(item, dict)]
        values[MOUNTS_KEY] = {
            str(item["MountDir"]): str(item.get("StorageType")) for item in items if "MountDir" in item
        }
        values[VOLUME_POLICIES_KEY] = volume_policies(items)
    return values


def volume_policies(storage: list[dict[str, Any]]) -> dict[str, str]:
    """``{MountDir: DeletionPolicy}`` of the shared storage ParallelCluster creates (``MANAGED_STORAGE``)."""
    policies: dict[str, str] = {}
    for item in storage:
        kind = MANAGED_STORAGE.get(str(item.get("StorageType")))
        if kind is None or "MountDir" not in item:
            continue
        found = item.get(kind[0])
        settings: dict[str, Any] = found if isinstance(found, dict) else {}
        if kind[1] not in settings:
            policies[str(item["MountDir"])] = str(settings.get("DeletionPolicy", "Delete"))
    return policies


def locked_volume_policies(old: ResourceState, after: Mapping[str, str]) -> dict[str, str]:
    """``{MountDir: DeletionPolicy}`` of the volumes ParallelCluster made for the cluster, as locked in ``old``.

    A lock written before :data:`VOLUME_POLICIES_KEY` was recorded does not say them. Its own record of
    the whole configuration (``OUTCOME_SETTINGS``), when it has one, does: they are read from it. Else
    they are reconstructed from what the render did then: a /home volume without its own
    ``deletion_policy`` followed ``retention.on_delete`` (Retain with ``retain``), which also set the
    custom resource's ``DeletionPolicy`` property to Retain. So each volume of ``after`` at a path the
    lock records a mount at (every one when the mounts are not recorded either) is taken as Retain
    when that property was Retain: a weakening is refused with the way, never let through unseen.
    """
    if VOLUME_POLICIES_KEY in old.fate:
        return dict(old.fate[VOLUME_POLICIES_KEY])
    configuration = old.settings.get("ClusterConfiguration")
    if isinstance(configuration, dict):
        storage = _lookup(configuration, MOUNTS_KEY.split("/")[1:])
        return volume_policies(
            [item for item in (storage if isinstance(storage, list) else []) if isinstance(item, dict)]
        )
    if str(old.fate.get("DeletionPolicy", "Delete")) != "Retain":
        return {}
    mounts = old.fate.get(MOUNTS_KEY)
    return {path: "Retain" for path in after if mounts is None or path in mounts}


def volume_policy_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Storage kept on both sides whose ParallelCluster ``DeletionPolicy`` no longer keeps it (Retain -> Delete).

    ``before`` comes from :func:`locked_volume_policies` (reconstructed for a lock that predates the record).
    """
    return [
        f"{VOLUME_POLICY_REASON} {path}: {before[path]} -> {after[path]}"
        for path in sorted(before.keys() & after.keys())
        if before[path] in KEEPING_POLICIES and after[path] not in KEEPING_POLICIES
    ]


def _outcome_settings(resource_type: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``resource_type``'s ``OUTCOME_SETTINGS`` present in ``properties`` (for a HyperPod cluster
    also each instance group's ``OverrideVpcConfig``, :data:`GROUP_NETWORKS_KEY`)."""
    values: dict[str, Any] = {}
    for pointer in OUTCOME_SETTINGS.get(resource_type, ()):
        found = _lookup(dict(properties), pointer.split("/"))
        if found is not _ABSENT:
            values[pointer] = found
    groups = properties.get("InstanceGroups") if resource_type == HYPERPOD_TYPE else None
    if isinstance(groups, list):
        values[GROUP_NETWORKS_KEY] = {
            str(group.get("InstanceGroupName")): group.get("OverrideVpcConfig")
            for group in groups
            if isinstance(group, dict)
        }
    return values


def mount_changes(before: Mapping[str, str] | None, after: Mapping[str, str]) -> list[str]:
    """Shared storage added, removed or changed at a head-node path that already holds files (``EXISTING_PATHS``).

    ``before`` is None for a lock that predates the record of mounts: read as no shared storage at those
    paths (the ParallelCluster default), with a hint to record the deployed mounts.
    """
    known = before if before is not None else {}
    hint = (
        " (this lock does not record the cluster's mounts: if the deployed cluster already has it, run "
        "'mlcluster lock' to read them from the deployed stacks)"
        if before is None
        else ""
    )
    return [
        f"{MOUNT_REASON} {path}: {known.get(path, 'head node')} -> {after.get(path, 'head node')}{hint}"
        for path in sorted((known.keys() | after.keys()) & EXISTING_PATHS)
        if known.get(path) != after.get(path)
    ]


def _refs(value: Any) -> Iterator[tuple[str | None, str]]:
    """``(stack name or None for this stack, logical id or output name)`` of every reference in ``value``."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not inner.startswith("AWS::"):
                yield None, inner
            elif key == "Fn::GetAtt":
                target = inner[0] if isinstance(inner, list) else str(inner).split(".", 1)[0]
                yield None, str(target)
            elif key == "Fn::GetStackOutput" and isinstance(inner, dict):
                yield str(inner.get("StackName")), str(inner.get("OutputName"))
            else:
                yield from _refs(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def stack_state(
    template: Mapping[str, Any], paths: Mapping[str, str], *, termination_protection: bool = False
) -> StackState:
    """Reduce one template; ``paths`` maps logical ids to construct paths below the stage."""
    resources = {
        logical_id: ResourceState(
            type=str(resource["Type"]),
            path=paths.get(logical_id, logical_id),
            create_only=_create_only_values(str(resource["Type"]), resource.get("Properties", {})),
            digest=_digest(resource.get("Properties", {})),
            deletion_policy=str(resource.get("DeletionPolicy", "Delete")),
            update_replace_policy=str(resource.get("UpdateReplacePolicy", "Delete")),
            fate=_fate_values(str(resource["Type"]), resource.get("Properties", {})),
            settings=_outcome_settings(str(resource["Type"]), resource.get("Properties", {})),
        )
        for logical_id, resource in template.get("Resources", {}).items()
    }
    outputs = {
        name: sorted({target for stack, target in _refs(output.get("Value")) if stack is None})
        for name, output in template.get("Outputs", {}).items()
    }
    return StackState(resources=resources, outputs=outputs, termination_protection=termination_protection)


def template_paths(template: Mapping[str, Any], stage: str) -> dict[str, str]:
    """Construct paths below the stage from each resource's ``aws:cdk:path`` metadata (a deployed template)."""
    paths: dict[str, str] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        path = resource.get("Metadata", {}).get("aws:cdk:path") if isinstance(resource, dict) else None
        if isinstance(path, str):
            paths[str(logical_id)] = path.removeprefix(f"{stage}/")
    return paths


def snapshot_from_assembly(assembly_dir: Path, stage: str) -> Snapshot:
    """Every stack of ``stage`` in a synthesized cloud assembly (``cdk.out``)."""
    nested = assembly_dir / f"assembly-{stage}"
    manifest = json.loads((nested / "manifest.json").read_text(encoding="utf-8"))
    snapshot: Snapshot = {}
    for artifact_id, artifact in manifest["artifacts"].items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        template = json.loads((nested / props["templateFile"]).read_text(encoding="utf-8"))
        paths: dict[str, str] = {}
        metadata_file = artifact.get("additionalMetadataFile")
        entries = (
            json.loads((nested / metadata_file).read_text(encoding="utf-8"))
            if metadata_file
            else artifact.get("metadata", {})
        )
        for path, items in entries.items():
            for item in items:
                if item.get("type") == "aws:cdk:logicalId":
                    paths[str(item["data"])] = path.removeprefix(f"/{stage}/")
        snapshot[str(props.get("stackName", artifact_id))] = stack_state(
            template, paths, termination_protection=bool(props.get("terminationProtection", False))
        )
    return snapshot


def snapshot_to_json(snapshot: Snapshot) -> dict[str, Any]:
    """The lock file's ``stacks`` object."""
    return {
        name: {
            "resources": {lid: r.to_json() for lid, r in sorted(state.resources.items())},
            "outputs": dict(sorted(state.outputs.items())),
            "termination_protection": state.termination_protection,
        }
        for name, state in sorted(snapshot.items())
    }


def snapshot_from_json(data: Mapping[str, Any]) -> Snapshot:
    """The inverse of :func:`snapshot_to_json`."""
    return {
        name: StackState(
            resources={lid: ResourceState(**r) for lid, r in stack["resources"].items()},
            outputs={k: list(v) for k, v in stack["outputs"].items()},
            termination_protection=bool(stack["termination_protection"]),
        )
        for name, stack in data.items()
    }


def _format(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _own_reasons(old: ResourceState, new: ResourceState) -> list[str]:
    if new.type != old.type:
        return [f"type {old.type} -> {new.type}"]
    keys = sorted(old.create_only.keys() | new.create_only.keys())
    # A group added or removed is not a replacement: compare the groups both sides keep. The controller group
    # is compared apart (:func:`_controller_reasons`).
    keys = [
        k
        for k in keys
        if k != CONTROLLER_KEY and (not k.startswith(GROUP_KEY) or (k in old.create_only and k in new.create_only))
    ]
    return [
        f"{key.replace('/', '.')} {_format(old.create_only.get(key))} -> {_format(new.create_only.get(key))}"
        for key in keys
        if old.create_only.get(key) != new.create_only.get(key)
    ] + _controller_reasons(old, new)


def _controller_reasons(old: ResourceState, new: ResourceState) -> list[str]:
    """The locked Slurm controller group of a HyperPod cluster gone (:data:`CONTROLLER_KEY`), as a reason.

    SageMaker's UpdateCluster deletes a group that leaves the request and creates a new one: another controller
    group name is a new controller without the old one's ``/opt/sagemaker``. A lock written before the key was
    recorded has none: then the new controller group counts as new when no locked group has its name.
    """
    after = new.create_only.get(CONTROLLER_KEY)
    if new.type != HYPERPOD_TYPE or after is None:
        return []
    before = old.create_only.get(CONTROLLER_KEY)
    if before is None:
        locked = {key[len(GROUP_KEY) :].split("]", 1)[0] for key in old.create_only if key.startswith(GROUP_KEY)}
        if not locked or after in locked:
            return []
        was = f"(one of {', '.join(sorted(locked))})"
    elif before == after:
        return []
    else:
        was = _format(before)
    return [f"{CONTROLLER_KEY} {was} -> {_format(after)} (a new Slurm controller: the locked one's group is removed)"]


def _days(value: Any, absent: int) -> int:
    """A period in days as recorded, or what an absent (or unreadable) setting means for its type."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return absent


def weakenings(old: ResourceState, new: ResourceState) -> list[str]:
    """How ``new`` keeps less than ``old``: a policy that no longer retains, a shorter period, a copy switched off."""
    found: list[str] = []
    for name, before, after in (
        ("DeletionPolicy", old.deletion_policy, new.deletion_policy),
        ("UpdateReplacePolicy", old.update_replace_policy, new.update_replace_policy),
    ):
        if before in KEEPING_POLICIES and after not in KEEPING_POLICIES:
            found.append(f"{name} {before} -> {after}")
    for pointer, absent in FATE_DAYS.get(new.type, ()):
        before_days, after_days = _days(old.fate.get(pointer), absent), _days(new.fate.get(pointer), absent)
        if after_days < before_days:
            show = {NEVER: "never expire"}
            before_text, after_text = show.get(before_days, before_days), show.get(after_days, after_days)
            found.append(f"{pointer.replace('/', '.')} {before_text} -> {after_text}")
    for pointer in FATE_FIXED.get(new.type, ()):
        if pointer in old.fate and old.fate.get(pointer) != new.fate.get(pointer):
            found.append(
                f"{pointer.replace('/', '.')} {_format(old.fate.get(pointer))} -> {_format(new.fate.get(pointer))}"
            )
    for pointer, keeping, default in FATE_KEPT.get(new.type, ()):
        was, now = str(old.fate.get(pointer, default)), str(new.fate.get(pointer, default))
        if was in keeping and now not in keeping:
            found.append(f"{pointer.replace('/', '.')} {was} -> {now}")
    if new.type == PCLUSTER_TYPE:
        found += mount_changes(old.fate.get(MOUNTS_KEY), new.fate.get(MOUNTS_KEY, {}))
        after = new.fate.get(VOLUME_POLICIES_KEY, {})
        found += volume_policy_changes(locked_volume_policies(old, after), after)
    return found


def compare(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every resource added, removed, replaced or updated in place, replacements cascaded along references."""
    changes: dict[tuple[str, str], Change] = {}
    for stack in sorted(before.keys() | after.keys()):
        old_res = before[stack].resources if stack in before else {}
        new_res = after[stack].resources if stack in after else {}
        for lid in sorted(old_res.keys() | new_res.keys()):
            old, new = old_res.get(lid), new_res.get(lid)
            if old is None and new is not None:
                changes[stack, lid] = Change(stack, lid, new.type, new.path, "add")
            elif new is None and old is not None:
                changes[stack, lid] = Change(stack, lid, old.type, old.path, "remove")
            elif old is not None and new is not None:
                reasons = _own_reasons(old, new)
                weaker = weakenings(old, new) if old.type == new.type else []
                if reasons:
                    changes[stack, lid] = Change(stack, lid, new.type, new.path, "replace", tuple(reasons + weaker))
                elif weaker:
                    changes[stack, lid] = Change(stack, lid, new.type, new.path, "weaken", tuple(weaker))
                elif old.digest != new.digest:
                    changes[stack, lid] = Change(stack, lid, new.type, new.path, "update")
    _cascade(after, changes)
    return sorted(
        changes.values(),
        key=lambda c: (
            not c.dangerous,
            c.action != "replace",
            c.reasons[0].startswith("refers to") if c.reasons else False,
            c.stack,
            c.path,
        ),
    )


def _cascade(after: Snapshot, changes: dict[tuple[str, str], Change]) -> None:
    """Mark replaced whatever names a replaced resource in a create-only property, until nothing moves."""
    moved = True
    while moved:
        moved = False
        replaced = {key for key, change in changes.items() if change.action == "replace"}
        for stack, state in after.items():
            for lid, resource in state.resources.items():
                current = changes.get((stack, lid))
                if current is not None and current.action in ("replace", "add"):
                    continue
                causes = sorted(
                    target
                    for target in _targets(after, stack, resource.create_only)
                    if target in replaced and target != (stack, lid)
                )
                if causes:
                    why = tuple(f"refers to replaced {after[s].resources[t].path}" for s, t in causes)
                    # A weakened resource that is also replaced keeps its weakening reasons.
                    weaker = current.reasons if current is not None and current.action == "weaken" else ()
                    changes[stack, lid] = Change(stack, lid, resource.type, resource.path, "replace", why + weaker)
                    moved = True


def _targets(after: Snapshot, stack: str, value: Any) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for other, name in _refs(value):
        if other is None:
            found.add((stack, name))
        elif other in after:
            found |= {(other, target) for target in after[other].outputs.get(name, [])}
    return found
