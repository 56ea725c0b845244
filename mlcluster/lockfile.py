"""The lock file next to an environment, and the synth-time guard that reads it.

``environments/<name>.lock.json`` records, for every stack of the
environment as deployed, its termination protection, and for every resource
its type, construct path, create-only property values, deletion and replace
policies, the settings that decide how long its data lives (retention,
backups, versioning) and a digest of its properties
(``mlcluster.replacement``). ``mlcluster lock <name>`` writes it from the
deployed templates (CloudFormation ``GetTemplate``); it is committed with the
environment file.

At synth, the app compares the new templates with the lock and fails, naming
the resource, the reason, the environment key and the safe way, when a
data-bearing resource (file system, DRA, bucket, KMS key, backup vault or
plan, Prometheus or Grafana workspace, log group, cluster) would be replaced,
deleted, or kept less well (a policy that no longer retains it, shorter
retention, backups or versioning off); when a running ParallelCluster
cluster would get or lose shared storage at a head-node path that holds
files (``/home``: the homes would be hidden under an empty volume, as
ParallelCluster copies them only at create); when a stack the lock records would
leave the app (CDK never deletes it: it keeps running unseen); and when a
stack holding data loses termination protection. ``retention.allow_replacement``
lets one named resource through, for the one deploy that makes the change:
an entry that names several resources, or that allows nothing any more (its
deploy is in the lock), is refused too. Until ``mlcluster lock`` records that
deploy, ``<name>.allowances.json`` beside the lock remembers, by construct
path, the form each allowance let a resource through with, and any synth
giving that resource another form is refused, whether the allowance is still
in the file, spelled another way or gone (the first may be deployed already). An environment without a lock file
is refused (``mlcluster lock`` records what is deployed, nothing for a new
one), and so is a lock file whose environment file is gone (a rename), and a
lock whose ``environment`` key names another environment than the file it is
read for (copied, or renamed with its environment file: :class:`ForeignLockError`).

The same synth also refuses an edit whose deploy would fail and roll back
(``mlcluster.deploy_outcomes``): a change ParallelCluster refuses on the
running cluster (its update policies, read from its package), a new
ParallelCluster release for a kept cluster, a file system made smaller, a
Lustre throughput change, a DRA replaced over its own retained paths, a kept
HyperPod instance group's ``OverrideVpcConfig`` changed; and it
notes the changes ``mlcluster update ENV`` must deploy (the compute fleet
stopped). The lock records what those rules compare (``ResourceState.settings``).

A HyperPod cluster whose groups draw instances from a training plan is
refused even with the allowance when it would be replaced (issue 10, path
7): CloudFormation creates the new cluster before it deletes the old one,
and the plan holds the instances the old cluster runs on. The plans are
read from the environment file as edited (the lock records create-only
values, and a group's plan is not one); the deploy-time pre-flight checks
the old cluster's plans as well.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

from mlcluster.config import ConfigError, Environment, Problem
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.deploy_outcomes import outcome_checks
from mlcluster.replacement import (
    CONTROLLER_KEY,
    HYPERPOD_TYPE,
    KEEPING_POLICIES,
    MOUNT_REASON,
    PCLUSTER_TYPE,
    VOLUME_POLICY_REASON,
    Change,
    ResourceState,
    Snapshot,
    compare,
    is_data_bearing,
    keeping,
    snapshot_from_assembly,
    snapshot_from_json,
    snapshot_to_json,
)

#: Format 2 adds policies, retention settings, termination protection, the source and the allowances used.
LOCK_FORMAT = 2
#: Where a lock's snapshot came from: the deployed stacks (``mlcluster lock`` with credentials), the
#: synthesized working tree declared deployed (``--from-templates``: the examples, tests), or nothing
#: deployed (``--new``).
LockSource = Literal["deployed", "templates", "new"]
LOCK_SOURCES: tuple[LockSource, ...] = ("deployed", "templates", "new")


@dataclasses.dataclass(frozen=True)
class Lock:
    """One lock file: what is deployed, where that was read, and which allowances its deploy used."""

    snapshot: Snapshot
    source: LockSource
    #: ``retention.allow_replacement`` entries whose change this lock records as deployed: left in the
    #: file afterwards they would allow a later change unseen, so the guard refuses them.
    allowances_used: tuple[str, ...] = ()
    #: Changes ``mlcluster lock --accept`` recorded although nothing in the file allowed them (every lock
    #: written since carries them forward).
    accepted: tuple[str, ...] = ()
    #: The AWS account and region the lock was read in (``deployed`` and ``new``; None for ``templates``):
    #: a later ``mlcluster lock`` elsewhere would see nothing deployed and record that.
    account: str | None = None
    region: str | None = None


#: The environment key behind each construct path prefix, for messages (the first that matches).
CONFIG_KEYS = (
    ("Storage/Lustre", "storage.lustre"),
    ("Storage/OpenZfs", "storage.openzfs"),
    ("Storage/DataBucketBackup", "storage.data_bucket.backup"),
    ("Storage/DataBucket", "storage.data_bucket"),
    ("DataRepository/", "storage.lustre.data_repository_associations"),
    ("Cluster/", "cluster"),
    ("Network/", "network"),
    ("Observability/", "observability"),
)
#: The key that decides whether each stack exists, for a stack the edit drops.
STACK_KEYS = {
    "Cluster": "cluster.backend",
    "DataRepository": "storage.lustre.data_repository_associations",
    "Observability": "observability",
}
#: What keeps running, or stays, when a stack is dropped from the app, and how to end it.
DROPPED_STACK_ADVICE = {
    "Cluster": (
        "the cluster keeps running and billing (ParallelCluster: head node and min_count nodes; HyperPod: every "
        "instance group), and a ParallelCluster head node holds /home unless it is on OpenZFS: copy /home first"
    ),
    "DataRepository": (
        "its DRAs are retained (DeletionPolicy Retain) and keep importing from and exporting to the bucket, "
        "deletions included, after the stack is gone: delete each with 'aws fsx delete-data-repository-association "
        "--association-id ID --no-delete-data-in-file-system' (files and objects stay)"
    ),
    "Observability": (
        "its retained resources stay and bill (Prometheus and Grafana workspaces, log groups, the alarm topic's "
        "key): delete them by hand once their history is no longer needed ('mlcluster status' lists them)"
    ),
}


#: The new controller of a cluster created again runs beside the old one (CloudFormation creates, then deletes):
#: where the controller keeps its data on FSx (no ``/opt/sagemaker`` volume: ``controller_data_dir`` in
#: lifecycle/hyperpod/lib.sh), it would start slurmctld and MariaDB on the old one's live folders.
FSX_CONTROLLER = (
    "Where the controller has no /opt/sagemaker volume, its state and local accounting database are on FSx "
    "(/fsx/.mlcluster/controller) and the new controller, created while the old one still runs, starts on those "
    "live folders: stop the old controller's daemons first ('sudo systemctl stop slurmctld slurmdbd mariadb'; "
    "docs/contributing/design.md)"
)

#: How to make each kind of replacement without losing data.
SAFE_WAYS = {
    "AWS::FSx::FileSystem": (
        "A replacement is a new, empty file system (the old one is retained or deleted with the stack's policy). "
        "Safe way: export what is not yet in S3 (an export data repository task per DRA path; FSx cannot back up "
        "a Lustre file system linked to a data repository, so the bucket is its only copy), copy files outside "
        "the DRA paths to S3 (or, for a file system without DRAs, take a backup), deploy with the allowance, then "
        "let the DRAs re-import and remount on the cluster nodes"
    ),
    "AWS::FSx::DataRepositoryAssociation": (
        "A replaced DRA is deleted and created again: files not exported yet stay only on the file system and the "
        "bucket's metadata is imported again (hours for large buckets). Safe way: run a data repository export "
        "task for the path first, then deploy with the allowance"
    ),
    "AWS::S3::Bucket": (
        "A new bucket name is a new, empty bucket; the old one and its objects are not moved. Safe way: keep the "
        "name; or create the new bucket, copy the objects (S3 Batch Operations or 'aws s3 sync'), then deploy "
        "with the allowance"
    ),
    "AWS::KMS::Key": (
        "Data encrypted under the old key needs that key: keep it enabled until everything is re-encrypted, "
        "then deploy with the allowance"
    ),
    "AWS::RDS::DBCluster": (
        "A replaced accounting database is a new, empty one: every cluster's job history, fair-share usage and "
        "associations stay in the old one (or its final snapshot). Safe way: take a manual snapshot ('aws rds "
        "create-db-cluster-snapshot'), or move the history with mysqldump as the docs' accounting section "
        "(docs/contributing/design.md) shows, then deploy with the allowance; a kept cluster's slurmdbd moves with "
        "it, stopped from before the dump until the load (a HyperPod controller keeps the old host): the order is "
        "in 'A replaced accounting database under a kept cluster' there. To delete the database for good in "
        "an environment that keeps "
        "data: remove storage.accounting with the allowance and deploy (CloudFormation takes a final snapshot, "
        "then deletes the cluster), then delete that snapshot ('aws rds delete-db-cluster-snapshot "
        "--db-cluster-snapshot-identifier ID'; 'aws rds describe-db-cluster-snapshots --snapshot-type manual' "
        "lists it) and the retained master secret ('aws secretsmanager delete-secret --secret-id ARN')"
    ),
    "Custom::PclusterCluster": (
        "Deleting the cluster deletes its head node and, with it, what lives there (/home unless it is on "
        "OpenZFS, the scheduler's local state); where the custom resource's DeletionPolicy property is Retain "
        "(retention.on_delete: retain) ParallelCluster keeps the cluster running and billing until 'pcluster "
        "delete-cluster -n <cluster name> --region <region>'. A rename is refused apart: ParallelCluster cannot "
        "rename a cluster. Safe way: drain the queues (no running jobs), copy what lives on the head node, then "
        "deploy with the allowance"
    ),
    "AWS::SageMaker::Cluster": (
        "A new HyperPod cluster replaces the old one: running jobs are lost. Safe way: drain the "
        "partitions, or add a new instance group instead of changing one in place, then deploy with the allowance. "
        + FSX_CONTROLLER
    ),
    "AWS::Backup::BackupVault": (
        "The vault holds the bucket's recovery points (the only copy after a deletion in the bucket). Safe way: keep "
        "storage.data_bucket.backup; to retire it, copy the recovery points you need to another vault first "
        "(AWS Backup copy job), then deploy with the allowance"
    ),
    "AWS::Backup::BackupPlan": (
        "Without the plan no new recovery points are taken: the bucket has no second copy from then on. Safe way: "
        "keep storage.data_bucket.backup; to retire it knowingly, deploy with the allowance"
    ),
    "AWS::Backup::BackupSelection": (
        "Without the selection the plan backs up nothing: the bucket has no second copy from then on. Safe way: keep "
        "storage.data_bucket.backup; to retire it knowingly, deploy with the allowance"
    ),
    "AWS::APS::Workspace": (
        "The workspace holds the metrics history (a new one starts empty). Safe way: keep it, or export the "
        "series you need (query API) first, then deploy with the allowance"
    ),
    "AWS::Grafana::Workspace": (
        "The workspace holds dashboards, users' settings and alert rules (a new one starts empty). Safe way: export "
        "the dashboards (Grafana HTTP API) first, then deploy with the allowance"
    ),
    "AWS::Logs::LogGroup": (
        "The log group holds the logs (a new one starts empty). Safe way: export what you need first "
        "('aws logs create-export-task' to S3), then deploy with the allowance"
    ),
}

#: Why a weaker policy or retention loses data, and the safe way.
WEAKER = (
    "After this, a 'cdk destroy', a stack deletion or the resource leaving the file deletes it for good, or it "
    "keeps its data or copies for less time: a file system with its automatic backups, a bucket with every object "
    "version, a key scheduled for deletion (everything encrypted under it, retained backups included, becomes "
    "unreadable), logs older than the new period. Safe way: keep retention.on_delete: retain and the retention "
    "settings. To tear an environment down, keep retain and run 'cdk destroy' (the stacks go, the data stays), "
    "copy what you need, then delete the retained resources by hand ('mlcluster status' lists them). To weaken "
    "this resource deliberately, take its second copy first (for a Lustre file system with DRAs an export "
    "data repository task, FSx backs up only file systems not linked to a data repository; otherwise a "
    "user-initiated FSx backup, kept after the file system; an S3 copy; a log export) and allow it"
)


#: Why shared storage added to or taken from a running cluster at /home loses homes, and the safe way.
HOME_MOUNT = (
    "ParallelCluster adds or removes shared storage on a running cluster (under its QueueUpdateStrategy) but "
    "copies what is at the mount dir only when a cluster is created: a volume added at /home is mounted over the "
    "head node's /home, so every user's home is hidden under an empty volume (a volume taken away leaves them on "
    "it, out of sight). Safe way: to keep /home on the head node, set "
    "cluster.pcluster.shared_storage.home_volume.enabled: false (synth then warns that /home lives on the head "
    "node). To move /home onto its own volume, copy the homes first: on the head node, with no jobs running and "
    "users logged out, 'sudo rsync -aHAX /home/ /fsx/home-copy/' (outside the DRA paths), deploy with the "
    "allowance, then 'sudo rsync -aHAX /fsx/home-copy/ /home/' onto the new volume and check it (the old copies "
    "stay on the root volume under the mount); the README's upgrade note for /home explains it"
)


#: The environment key of each shared volume mlcluster gives a ParallelCluster cluster, by mount dir.
VOLUME_KEYS = {
    "/home": "cluster.pcluster.shared_storage.home_volume.deletion_policy",
    "/apps": "cluster.pcluster.shared_storage.apps.deletion_policy",
}

#: Why a shared volume that ParallelCluster no longer keeps loses data, and the safe way.
VOLUME_POLICY = (
    "ParallelCluster deletes a volume whose DeletionPolicy is Delete when the cluster is deleted (a 'cdk destroy' "
    "of the Cluster stack, a new cluster name) or the volume leaves SharedStorage: every file on it goes, with no "
    "snapshot (for /home: every user's home). The change itself is made in place, so nothing else refuses it. "
    "Safe way: keep deletion_policy Retain or Snapshot (unset, it follows retention.on_delete). To give the volume "
    "up deliberately, copy its files first (for /home: 'sudo rsync -aHAX /home/ /fsx/home-copy/' on the head node, "
    "outside the DRA paths, or to S3) and allow it"
)


def lock_path(environment: Environment) -> Path:
    """``environments/<name>.lock.json`` beside ``environments/<name>.yaml``."""
    return Path(environment.source).with_suffix(".lock.json")


def lock_document(environment: Environment, lock: Lock) -> dict[str, Any]:
    """The lock file's content for ``lock``."""
    return (
        {
            "format": LOCK_FORMAT,
            "environment": environment.name,
            "source": lock.source,
            "allowances_used": sorted(lock.allowances_used),
            "accepted": sorted(lock.accepted),
            "stacks": snapshot_to_json(lock.snapshot),
        }
        | ({"account": lock.account} if lock.account else {})
        | ({"region": lock.region} if lock.region else {})
    )


def write_lock(environment: Environment, lock: Lock) -> Path:
    """Write (or refresh) the environment's lock file; returns its path."""
    path = lock_path(environment)
    text = json.dumps(lock_document(environment, lock), indent=1, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


#: Files that mark the project's folder (where git is run from): the CDK app's, or the repository's root.
PROJECT_MARKERS = ("cdk.json", ".git")


def git_path(path: Path) -> str:
    """``path`` as ``git log -- PATH`` finds it from the project's folder (the nearest folder above it holding
    ``cdk.json`` or ``.git``): ``environments/team.lock.json``; the absolute path when no such folder is found."""
    absolute = path.resolve()
    for folder in absolute.parents:
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return absolute.relative_to(folder).as_posix()
    return str(absolute)


class UnreadableLockError(ConfigError):
    """A lock file that cannot be read as a lock (not JSON, not an object, a key missing or of the wrong kind).

    ``why`` says what is wrong; ``earlier_format`` is a lock of format 1 (before policies were recorded), which
    ``mlcluster lock ENV`` replaces. Any other unreadable lock is never overwritten: it may be the only record
    of the deployed stacks and of the allowances and acceptances used.
    """

    def __init__(self, path: Path, name: str, why: str, *, earlier_format: bool) -> None:
        if earlier_format:
            way = f"rewrite it with 'mlcluster lock {name}', which reads the deployed stacks"
        else:
            way = (
                f"restore it from git (git log -- {git_path(path)}); if there is no good copy, move the file aside "
                f"and run 'mlcluster lock {name}', which reads the deployed stacks (a first lock has none of the "
                "earlier allowances_used and accepted records: take out of retention.allow_replacement every entry "
                "the set-aside copy lists as used)"
            )
        super().__init__(str(path), [Problem("(lock file)", NOT_A_VALUE, f"cannot be read ({why}); {way}")])
        self.path = path
        self.why = why
        self.earlier_format = earlier_format


class ForeignLockError(ConfigError):
    """A readable lock file whose ``environment`` key is not the environment it is read for.

    ``recorded`` is the key's value as written (``None`` when it is missing), ``lock`` the file as parsed.
    ``mlcluster lock ENV`` replaces such a lock with ENV's deployed stacks (it compares nothing with it) when
    it is a copy: it records no stack, or ``<recorded>.lock.json`` beside it still records them. Every other
    reader refuses it.
    """

    def __init__(self, path: Path, name: str, recorded: Any, lock: Lock) -> None:
        shown = recorded if isinstance(recorded, str) else "<the other environment>"
        super().__init__(
            str(path),
            [
                Problem(
                    "environment",
                    recorded,
                    f"{path.name} is read as the lock of environment '{name}' ({name}.yaml beside it), so it must "
                    f"record 'environment': '{name}'. A lock of another environment records that environment's "
                    f"stacks, and the guard would compare {name}'s changes with them. If the file was copied from "
                    f"another environment over {name}'s own lock: restore {path.name} from version control first "
                    f"(git log -- {git_path(path)}); only if {name} never had one, run 'mlcluster lock {name}' with "
                    f"credentials for its account (it reads {name}'s deployed stacks and replaces the file; a first "
                    f"lock has none of {name}'s earlier allowances_used and accepted records). If {shown}.yaml and "
                    f"its lock were renamed to {name}: a renamed file is a new environment while the stacks of "
                    f"{shown} keep running; give both files their old names back (to rename, see the refusal of a "
                    "lock whose environment file is gone)",
                )
            ],
        )
        self.recorded = recorded
        self.lock = lock


def read_lock_file(path: Path, name: str, *, of_environment: bool = True) -> Lock:
    """The lock at ``path``; a ``ConfigError`` naming the file when it cannot be read.

    With ``of_environment`` (the default) the lock is read for environment ``name`` (``<name>.yaml`` beside
    ``<name>.lock.json``), and a lock whose ``environment`` key is not ``name`` (copied from another
    environment, or missing) is a :class:`ForeignLockError`. :func:`orphan_locks` reads without it: a lock
    whose environment file is gone belongs to no environment file, and what it records is reported whatever
    its name.
    """
    data: Any = None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {LOCK_FORMAT}")
        if data.get("source") not in LOCK_SOURCES:
            raise ValueError(f"source {data.get('source')!r}, expected one of {', '.join(LOCK_SOURCES)}")
        lock = Lock(
            snapshot=snapshot_from_json(data["stacks"]),
            source=data["source"],
            allowances_used=tuple(str(a) for a in data["allowances_used"]),
            accepted=tuple(str(a) for a in data["accepted"]),
            account=None if data.get("account") is None else str(data["account"]),
            region=None if data.get("region") is None else str(data["region"]),
        )
    except (ValueError, KeyError, TypeError, OSError, AttributeError) as error:
        earlier = isinstance(data, dict) and data.get("format") == 1
        raise UnreadableLockError(path, name, str(error), earlier_format=earlier) from None
    if of_environment and data.get("environment") != name:
        raise ForeignLockError(path, name, data.get("environment"), lock)
    return lock


def load_lock(environment: Environment) -> Lock | None:
    """The environment's lock, or None when it has no lock file."""
    path = lock_path(environment)
    return read_lock_file(path, environment.name) if path.is_file() else None


def read_lock(environment: Environment) -> Snapshot | None:
    """The locked snapshot, or None when the environment has no lock file yet."""
    lock = load_lock(environment)
    return None if lock is None else lock.snapshot


def config_key(change: Change) -> str:
    """The environment key whose edit most likely caused ``change``."""
    if change.action == "weaken" and any(
        r.startswith(("DeletionPolicy", "UpdateReplacePolicy")) for r in change.reasons
    ):
        return "retention.on_delete"
    if any(r.startswith(MOUNT_REASON) for r in change.reasons):
        return "cluster.pcluster.shared_storage.home_volume"
    if change.reasons and all(r.startswith(CONTROLLER_KEY) for r in change.reasons):
        return "cluster.hyperpod.controller.instance_group_name"
    for reason in change.reasons:
        if reason.startswith(VOLUME_POLICY_REASON):
            mount = reason.removeprefix(VOLUME_POLICY_REASON).split(":", 1)[0].strip()
            return VOLUME_KEYS.get(mount, "cluster.pcluster.shared_storage")
    if change.action == "weaken" and change.type == "AWS::Logs::LogGroup":
        return "retention.log_retention_days"
    for prefix, key in CONFIG_KEYS:
        if change.path.startswith(prefix):
            return key
    return "(see the reasons)"


def resource_name(path: str) -> str:
    """The name an allowance gives a resource: its construct path above the first ``/Resource``."""
    return path.split("/Resource", 1)[0]


def allowed(change: Change, allowances: Sequence[str]) -> bool:
    """Whether an ``allow_replacement`` entry names exactly this resource (its path, or its name)."""
    return any(entry in (change.path, resource_name(change.path)) for entry in allowances)


def allowance_problems(
    environment: Environment, lock: Lock, snapshot: Snapshot, changes: Sequence[Change]
) -> list[Problem]:
    """Each ``allow_replacement`` entry that names more than one resource, none, or a change already deployed.

    An allowance is for one resource and one deploy: an entry naming a stack or a folder would let
    every resource below it through, and one left in the file after its deploy would let the next
    edit of that resource through unseen.
    """
    bearing = sorted(
        {
            resource.path
            for state in [*lock.snapshot.values(), *snapshot.values()]
            for resource in state.resources.values()
            if is_data_bearing(resource.type, resource.path)
        }
    )
    pending = {change.path for change in changes if change.dangerous}
    pending |= {path for exposed in unprotected(lock.snapshot, snapshot).values() for path in exposed}
    problems: list[Problem] = []
    for entry in environment.config.retention.allow_replacement:
        named = [path for path in bearing if entry in (path, resource_name(path))]
        below = [resource_name(path) for path in bearing if path.startswith(entry.rstrip("/") + "/")]
        key = "retention.allow_replacement"
        if len(named) != 1:
            if below and not named:
                listed = ", ".join(f"'{name}'" for name in sorted(set(below)))
                problems.append(
                    Problem(
                        key,
                        NOT_A_VALUE,
                        f"'{entry}' names {len(set(below))} data-bearing resources ({listed}); an allowance names "
                        "one resource, for the one deploy that changes it: list only the ones this edit must "
                        "replace or delete",
                    )
                )
            else:
                problems.append(
                    Problem(
                        key,
                        NOT_A_VALUE,
                        f"'{entry}' names no data-bearing resource of this environment (in its lock or its new "
                        "templates); remove it",
                    )
                )
            continue
        if entry in lock.allowances_used:
            problems.append(
                Problem(
                    key,
                    NOT_A_VALUE,
                    f"'{entry}' was used: the lock records the deploy that changed {named[0]} with it. Remove it from "
                    "the file: left there it lets the next edit of that resource through unseen. For a new change "
                    f"of it, run 'mlcluster lock {environment.name}' without it first (the lock then forgets the "
                    "used allowance), then add it again for that deploy",
                )
            )
            continue
        if named[0] not in pending:
            problems.append(
                Problem(
                    key,
                    NOT_A_VALUE,
                    f"'{entry}' allows nothing: {named[0]} is neither replaced, deleted nor weakened by this edit"
                    ". Remove it: an allowance left in the file would let a later edit of that resource through "
                    "unseen",
                )
            )
    return problems


def training_plan_groups(environment: Environment) -> list[tuple[str, int, str]]:
    """``(group, instance count, training plan ARN)`` of every HyperPod group that asks a plan for instances."""
    hyperpod = environment.config.cluster.hyperpod
    if environment.config.cluster.backend != "hyperpod" or hyperpod is None:
        return []
    return [
        (group.instance_group_name, group.instance_count, group.training_plan_arn)
        for _, group in hyperpod.groups()
        if group.training_plan_arn and group.instance_count > 0
    ]


def _what(change: Change) -> str:
    verb = {"remove": "deletes", "weaken": "weakens"}.get(change.action, "replaces")
    return f"this edit {verb} {change.stack}/{change.path} ({change.type}, logical id {change.logical_id})" + (
        f": {'; '.join(change.reasons)}" if change.reasons else ""
    )


#: What ParallelCluster's custom resource provider answers an update that changes ``ClusterName``
#: (its ``cloudformation/custom_resource`` handler; aws-parallelcluster's integration tests assert it).
RENAME_REFUSED = "Cannot update the ClusterName in the properties."


def cluster_rename_refusal(environment: Environment, change: Change) -> Problem:
    """Why a ParallelCluster cluster cannot be renamed by a deploy, with or without an allowance, and the way.

    ParallelCluster's provider fails the update of a new ``ClusterName`` (it never creates a second
    cluster), so the deploy fails and CloudFormation rolls the stack back: an allowance would only let
    a deploy through that cannot succeed.
    """
    name = environment.name
    region = environment.config.region or "<region>"
    return Problem(
        "cluster.name",
        NOT_A_VALUE,
        f"{_what(change)}. ParallelCluster's provider refuses a new ClusterName on a running cluster "
        f"('{RENAME_REFUSED}'): the deploy fails and CloudFormation rolls the stack back, with "
        "retention.allow_replacement too. To rename the cluster: (1) drain the queues (no running jobs) and copy "
        "what lives on the head node (/home unless it is on OpenZFS); (2) keep the old name in this file and "
        f"destroy the cluster stack (npx cdk destroy --exclusively '{name}/Cluster'; the storage stacks keep the "
        "data); where the custom resource's DeletionPolicy property is Retain (retention.on_delete: retain) "
        "ParallelCluster keeps the cluster, so delete it then with 'pcluster delete-cluster -n <old cluster name> "
        f"--region {region}' (only once its stack is destroyed); (3) run 'mlcluster lock {name}'; (4) set the new "
        "name and deploy.",
    )


def training_plan_refusal(environment: Environment, change: Change, groups: Sequence[tuple[str, int, str]]) -> Problem:
    """Why a HyperPod cluster on a training plan cannot be replaced by CloudFormation, and the safe way."""
    name = environment.name
    head = change.path.split("/Resource", 1)[0]
    plans = ", ".join(sorted({plan for _, _, plan in groups}))
    on_plan = ", ".join(f"{group} ({count} instance{'' if count == 1 else 's'})" for group, count, _ in groups)
    names = ", ".join(group for group, _, _ in groups)
    return Problem(
        config_key(change),
        NOT_A_VALUE,
        f"{_what(change)}. Groups {on_plan} draw on training plan {plans}. CloudFormation creates the new cluster "
        "before it deletes the old one, and a training plan holds the instances the old cluster runs on, so the new "
        "cluster cannot get its nodes: its creation fails and the stack rolls back (retention.allow_replacement "
        f"does not help here). Safe way: (1) set instance_count: 0 on {names} and deploy (the old cluster gives the "
        f"plan's instances back), then run 'mlcluster lock {name}'; (2) make this edit with those counts still 0, "
        f"add '{head}' to retention.allow_replacement, deploy, and run 'mlcluster lock {name}'; (3) remove the "
        "allowance, set the counts back and deploy. Or, when a group cannot go to 0 (the controller), destroy the "
        f"cluster stack first (npx cdk destroy '{name}/Cluster'; the storage stacks keep the data), make the edit, "
        f"run 'mlcluster lock {name}', then deploy.",
    )


def stack_part(environment: Environment, stack: str) -> str:
    """``Storage`` for ``p5-Storage``."""
    return stack.removeprefix(f"{environment.name}-")


def refusals(environment: Environment, changes: Sequence[Change], *, dropped: Collection[str] = ()) -> list[Problem]:
    """One problem per dangerous change the environment does not allow.

    A HyperPod cluster replaced while groups ask a training plan for instances, and a ParallelCluster
    cluster renamed, are refused whatever the allowances say (:func:`training_plan_refusal`,
    :func:`cluster_rename_refusal`). Changes in the ``dropped`` stacks are
    refused once per stack by :func:`stack_refusals`.
    """
    allowances = environment.config.retention.allow_replacement
    plan_groups = training_plan_groups(environment)
    problems: list[Problem] = []
    for change in changes:
        if change.stack in dropped:
            continue
        controller_only = bool(change.reasons) and all(r.startswith(CONTROLLER_KEY) for r in change.reasons)
        if change.type == HYPERPOD_TYPE and change.action == "replace" and plan_groups and not controller_only:
            problems.append(training_plan_refusal(environment, change, plan_groups))
            continue
        if change.type == PCLUSTER_TYPE and change.action == "replace":
            # Its one create-only value is ClusterName (replacement.CUSTOM_CREATE_ONLY): a rename.
            problems.append(cluster_rename_refusal(environment, change))
            continue
        if not change.dangerous or allowed(change, allowances):
            continue
        why = WEAKER if change.action == "weaken" else SAFE_WAYS.get(change.type, "Data in it is lost")
        if any(r.startswith(MOUNT_REASON) for r in change.reasons):
            # A mount over the homes: its own safe way (the weaker-policy text would not fit).
            only_mounts = all(r.startswith(MOUNT_REASON) for r in change.reasons)
            why = HOME_MOUNT if only_mounts else f"{why}. {HOME_MOUNT}"
        if any(r.startswith(VOLUME_POLICY_REASON) for r in change.reasons):
            only_volumes = all(r.startswith(VOLUME_POLICY_REASON) for r in change.reasons)
            why = VOLUME_POLICY if only_volumes else f"{why}. {VOLUME_POLICY}"
        if any(r.startswith(CONTROLLER_KEY) for r in change.reasons):
            why = NEW_CONTROLLER if controller_only else f"{why}. {NEW_CONTROLLER}"
        problems.append(
            Problem(
                config_key(change),
                NOT_A_VALUE,
                _what(change) + f". {why}. To allow it, add '{resource_name(change.path)}' to "
                "retention.allow_replacement in this file for this one deploy (remove it after the deploy, when "
                f"'mlcluster lock {environment.name}' has recorded it). 'mlcluster lock' records what is deployed: "
                "it does not clear this refusal.",
            )
        )
    return problems


#: Why a new Slurm controller group (:data:`~mlcluster.replacement.CONTROLLER_KEY`) is refused, and the way.
NEW_CONTROLLER = (
    "A new controller group name makes SageMaker's UpdateCluster delete the locked controller group and create "
    "another: the old controller's /opt/sagemaker goes with it (slurmctld's state: queued jobs, job ids, "
    "reservations; with accounting.mode local also the MariaDB accounting database), and the new controller "
    "starts empty. Safe way: keep the controller's instance_group_name; to change it, create the cluster again: "
    "drain the partitions, copy what the controller holds ('mlcluster patch' takes a copy; see docs/reference/"
    "data.md), set a new cluster.name with the new group name. " + FSX_CONTROLLER
)


def _retained(resources: Collection[ResourceState]) -> str:
    """The resources kept when their stack is deleted (a keeping policy, or a ParallelCluster cluster's property)."""
    return ", ".join(f"{r.path} ({r.type})" for r in resources if keeping(r) is not None) or "none"


def unprotected(locked: Snapshot, snapshot: Snapshot) -> dict[str, list[str]]:
    """Stacks that lose termination protection, each with the data-bearing resources its deletion would delete."""
    found: dict[str, list[str]] = {}
    for stack in sorted(set(locked) & set(snapshot)):
        if not locked[stack].termination_protection or snapshot[stack].termination_protection:
            continue
        exposed = sorted(
            r.path
            for r in snapshot[stack].resources.values()
            if is_data_bearing(r.type, r.path) and r.deletion_policy not in KEEPING_POLICIES
        )
        if exposed:
            found[stack] = exposed
    return found


def stack_refusals(environment: Environment, locked: Snapshot, snapshot: Snapshot) -> list[Problem]:
    """A stack the lock records that the app drops, and a stack holding data that loses termination protection.

    CDK never deletes a stack dropped from the app: it keeps running and billing, and no command of
    ours sees it again. The safe way is to destroy it while the app still has it. Termination
    protection may go off only when every data-bearing resource of the stack is allowed one by one.
    """
    name = environment.name
    allowances = environment.config.retention.allow_replacement
    problems: list[Problem] = []
    for stack in sorted(set(locked) - set(snapshot)):
        part = stack_part(environment, stack)
        resources = list(locked[stack].resources.values())
        holding = ", ".join(sorted(r.path for r in resources if is_data_bearing(r.type, r.path))) or "none"
        unprotect = (
            "aws cloudformation update-termination-protection --no-enable-termination-protection "
            f"--stack-name {stack}; "
            if locked[stack].termination_protection
            else ""
        )
        advice = DROPPED_STACK_ADVICE.get(part, "it keeps running and billing")
        # The cluster stack reads the Prometheus workspace: it must stop first, or the destroy fails on the export.
        first = (
            "first deploy with observability.prometheus.enabled: false so the Cluster stack stops referencing it, then "
            if part == "Observability"
            else ""
        )
        problems.append(
            Problem(
                STACK_KEYS.get(part, "(file)"),
                NOT_A_VALUE,
                f"this edit drops stack {stack} from the app, while the lock records it as deployed. CDK never "
                f"deletes a stack dropped from an app (aws/aws-cdk-cli#787): {advice}, and no mlcluster command "
                f"reaches it any more. Data-bearing resources in it: {holding}; kept when "
                f"the stack is deleted (Retain): {_retained(resources)}. Safe way: undo this edit, take what you need "
                f"from the stack, destroy it while the app still has it ({first}{unprotect}npx cdk destroy "
                f"--exclusively '{name}/{part}': without --exclusively 'cdk destroy' also destroys the stacks that "
                "depend on it), "
                f"delete or keep its retained resources, run 'mlcluster lock {name} --accept {stack}' (it then "
                "records the stack gone), and make this edit.",
            )
        )
    for stack, exposed in unprotected(locked, snapshot).items():
        missing = [path for path in exposed if not any(entry in (path, resource_name(path)) for entry in allowances)]
        if not missing:
            continue
        problems.append(
            Problem(
                "retention.on_delete",
                NOT_A_VALUE,
                f"this edit turns termination protection of {stack} off ('cdk deploy' sets it to what the app says), "
                f"so 'cdk destroy' can delete the stack and with it every resource it does not retain: "
                f"{', '.join(missing)}. Safe way: keep retention.on_delete: retain. To give the stack up "
                "deliberately, take the second copy of its data first and allow each of those resources by name in "
                "retention.allow_replacement.",
            )
        )
    return problems


def _left_running(environment: Environment, change: Change, old: ResourceState) -> str:
    """How to end a resource kept outside its stack (see :func:`notices`)."""
    if change.type == "AWS::FSx::DataRepositoryAssociation":
        return (
            ": it keeps importing from and exporting to the bucket (deletions too), and the path cannot be "
            "associated again until it is gone; delete it with 'aws fsx delete-data-repository-association "
            "--association-id ID --no-delete-data-in-file-system' (files and objects stay)"
        )
    if change.type == PCLUSTER_TYPE:
        name = old.create_only.get("ClusterName", "<cluster name>")
        region = environment.config.region or "<region>"
        return (
            f": cluster {name} (head node, static nodes) keeps running and billing. Once its jobs are done and "
            "what lives on its head node is copied, delete it with ParallelCluster's CLI: 'pcluster "
            f"delete-cluster -n {name} --region {region}' (or delete its own CloudFormation stack, {name})"
        )
    return ": delete it by hand when it is no longer needed ('mlcluster status' lists it)"


def _snapshot_left(environment: Environment, change: Change) -> str:
    """What ``DeletionPolicy: Snapshot`` leaves of a resource that leaves its template: CloudFormation deletes
    the resource and keeps a final snapshot of it, which bills for its storage until it is deleted."""
    how = (
        "'aws rds describe-db-cluster-snapshots --snapshot-type manual' lists it, 'aws rds "
        "delete-db-cluster-snapshot --db-cluster-snapshot-identifier ID' deletes it"
        if change.type == "AWS::RDS::DBCluster"
        else "delete it by hand when it is no longer needed"
    )
    return (
        f"{environment.source}: {config_key(change)}: {change.stack}/{change.path} ({change.type}) leaves the "
        "template, and CloudFormation deletes it, keeping a final snapshot (DeletionPolicy Snapshot): the snapshot "
        f"holds its data and bills for its storage until it is deleted ({how}); restoring it makes a new resource"
    )


def notices(environment: Environment, locked: Snapshot, snapshot: Snapshot, changes: Sequence[Change]) -> list[str]:
    """What an accepted edit leaves running: kept resources removed from a stack that stays, or replaced.

    CloudFormation does not delete a resource with ``DeletionPolicy: Retain`` that leaves the template:
    it keeps running (and billing, and a DRA keeps importing and exporting) outside any stack. One with
    ``DeletionPolicy: Snapshot`` is deleted, and its final snapshot kept (and billed) instead. A
    ParallelCluster cluster whose custom resource has the ``DeletionPolicy`` *property* ``Retain`` is
    kept by ParallelCluster when the resource is deleted (:func:`~mlcluster.replacement.keeping`).
    """
    found: list[str] = []
    for change in changes:
        # A replaced cluster (a rename) is refused (cluster_rename_refusal): only removals are left to note.
        if change.action != "remove" or change.stack not in snapshot:
            continue
        old = locked[change.stack].resources[change.logical_id]
        kept = keeping(old)
        if kept is None or (change.dangerous and not allowed(change, environment.config.retention.allow_replacement)):
            continue
        if old.deletion_policy == "Snapshot":
            found.append(_snapshot_left(environment, change))
            continue
        found.append(
            f"{environment.source}: {config_key(change)}: {change.stack}/{change.path} ({change.type}) "
            f"leaves the template but {kept} keeps it running outside the stack"
            + _left_running(environment, change, old)
        )
    return found


def missing_lock(environment: Environment) -> Problem:
    """Why an environment without a lock file is refused, and the first-lock step."""
    name = environment.name
    return Problem(
        "(lock file)",
        NOT_A_VALUE,
        f"{lock_path(environment)} is missing, so nothing tells the guard what is deployed (stacks of {name} may "
        f"exist: a file renamed back, a clone without the lock). Run 'mlcluster lock {name}' with credentials for "
        f"its account (it records the deployed stacks, none for a new environment), or 'mlcluster lock {name} "
        "--new' to declare that nothing of it is deployed, and commit the lock file.",
    )


def orphan_locks(directory: Path) -> list[ConfigError]:
    """Lock files in ``directory`` that record deployed stacks of an environment file no longer there (a rename)."""
    from mlcluster.config.environment import SUFFIXES

    errors: list[ConfigError] = []
    for path in sorted(directory.glob("*.lock.json")):
        name = path.name.removesuffix(".lock.json")
        if any(path.with_name(f"{name}{suffix}").exists() for suffix in SUFFIXES):
            continue
        lock = read_lock_file(path, name, of_environment=False)
        if not lock.snapshot:
            continue
        stacks = ", ".join(sorted(lock.snapshot))
        errors.append(
            ConfigError(
                str(path),
                [
                    Problem(
                        "(environment file)",
                        NOT_A_VALUE,
                        f"records deployed stacks ({stacks}) but environments/{name}.yaml is gone. A renamed file is "
                        "a new environment (a second network, file systems, bucket and cluster) while these stacks "
                        "keep running and billing, retained and termination-protected, out of every mlcluster "
                        f"command's reach. Safe way: restore {name}.yaml. To rename: keep {name}.yaml, add the new "
                        f"file and deploy it, copy the data across, destroy the old stacks "
                        f"(npx cdk destroy '{name}/*' after turning their termination protection off), delete the "
                        f"retained resources you no longer need ('mlcluster status {name}' lists them), run "
                        f"'mlcluster lock {name}' with --accept for each of those stacks (it then records nothing "
                        "deployed) and only then delete "
                        f"{name}.yaml and {path.name}. Deleting {path.name} says that you leave those stacks running "
                        "outside mlcluster.",
                    )
                ],
            )
        )
    return errors


def in_flight_path(environment: Environment) -> Path:
    """``environments/<name>.allowances.json``: the allowances a synth used since the lock was written."""
    return Path(environment.source).with_suffix(".allowances.json")


def _form(resource: ResourceState) -> str:
    """A digest of what decides ``resource``'s fate: type, create-only values, policies, retention settings.

    The rest of its properties is left out, so an in-place update of an allowed resource keeps its form.
    """
    state = resource.to_json()
    return _digest(
        {key: state[key] for key in ("type", "create_only", "deletion_policy", "update_replace_policy", "fate")}
    )


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _forms(snapshot: Snapshot) -> dict[str, str]:
    """The form (:func:`_form`) of every resource of ``snapshot``, by construct path."""
    return {r.path: _form(r) for state in snapshot.values() for r in state.resources.values()}


def allowances_in_flight(
    environment: Environment, lock: Lock, snapshot: Snapshot, changes: Sequence[Change]
) -> dict[str, dict[str, str]]:
    """``{path: {"form": digest, "allowance": entry}}`` for each resource an allowance of this synth lets through.

    Keyed by the resource's construct path, not by the entry: ``Storage/Lustre`` and
    ``Storage/Lustre/Resource`` name the same resource, and the record must not tell them apart.
    """
    pending = {change.path for change in changes if change.dangerous}
    pending |= {path for exposed in unprotected(lock.snapshot, snapshot).values() for path in exposed}
    forms = _forms(snapshot)
    found: dict[str, dict[str, str]] = {}
    for entry in environment.config.retention.allow_replacement:
        for path in sorted(pending):
            if entry in (path, resource_name(path)):
                # A removed resource has no form: "absent" is the form its allowance allows.
                found[path] = {"form": forms.get(path, "absent"), "allowance": entry}
    return found


def _read_in_flight(environment: Environment, lock_digest: str) -> dict[str, dict[str, str]]:
    """The record's resources; the record must have been written over this very lock file.

    ``mlcluster lock`` removes the record when it rewrites the lock, and ``--from-templates`` refuses while
    it exists, so a record that names another lock file's digest means the lock file's bytes changed some
    other way (a merge, a checkout, line endings): the replacements it records may still be deployed, so it
    is refused with the way, never dropped. A record of the earlier format (keyed by the allowance entry) is
    read by the resource it names.
    """
    path = in_flight_path(environment)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        recorded_digest = str(data["lock"])
        if recorded_digest != lock_digest:
            raise ConfigError(
                str(path),
                [
                    Problem(
                        "(allowances in flight)",
                        NOT_A_VALUE,
                        f"was written over another version of {lock_path(environment).name} (SHA-256 "
                        f"{recorded_digest[:16]}..., now {lock_digest[:16]}...): the lock file changed since "
                        "without 'mlcluster lock' (a merge, a "
                        "checkout, line endings), while the replacements this file records may be deployed. Run "
                        f"'mlcluster lock {environment.name}' with credentials: it reads what is deployed and "
                        "removes this file",
                    )
                ],
            )
        if "resources" in data:
            return {
                str(k): {"form": str(v["form"]), "allowance": str(v["allowance"])} for k, v in data["resources"].items()
            }
        return {
            str(v["resource"]): {"form": str(v["form"]), "allowance": str(k)} for k, v in data["allowances"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            str(path),
            [
                Problem(
                    "(allowances in flight)",
                    NOT_A_VALUE,
                    f"cannot be read ({error}); run 'mlcluster lock {environment.name}' with credentials, which "
                    "records what is deployed and removes this file",
                )
            ],
        ) from None


def stale_allowances(
    environment: Environment, recorded: dict[str, dict[str, str]], snapshot: Snapshot
) -> list[Problem]:
    """Each resource an earlier synth let through in another form than this synth gives it.

    That synth may have been deployed: the resource is then at the recorded form, and this edit would
    replace or weaken it again unseen, whether it asks the allowance again, spells it another way,
    removes it or reverts the file to the locked form (the deployed resource is no longer there). Only
    ``mlcluster lock`` (which reads what is deployed) tells, and it removes the record.
    """
    name = environment.name
    forms = _forms(snapshot)
    problems: list[Problem] = []
    for path, before in sorted(recorded.items()):
        if forms.get(path, "absent") == before["form"]:
            continue
        problems.append(
            Problem(
                "retention.allow_replacement",
                NOT_A_VALUE,
                f"an earlier synth since the lock was written let {path} through ('{before['allowance']}', recorded "
                f"in {in_flight_path(environment).name}) in another form than this edit gives it. If that synth "
                "was deployed, this edit would replace, delete or weaken the resource again unseen (reverting the "
                "edit or removing the allowance too: the deployed resource is the changed one). Run "
                f"'mlcluster lock {name}' with credentials: it reads what is deployed (if the earlier change was "
                "deployed, the lock records it and the next change needs an allowance again; if not, the lock is "
                "unchanged) and removes the record",
            )
        )
    return problems


def record_in_flight(environment: Environment, lock_digest: str, in_flight: dict[str, dict[str, str]]) -> None:
    """Add this synth's resources to the record kept until the next ``mlcluster lock`` (never drop one)."""
    if not in_flight:
        return
    recorded = _read_in_flight(environment, lock_digest)
    document = {"lock": lock_digest, "resources": dict(sorted((recorded | in_flight).items()))}
    in_flight_path(environment).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def guard_assembly(assembly_dir: Path, environments: Sequence[Environment]) -> list[str]:
    """Run :func:`guard` on each environment's stage of the synthesized ``assembly_dir``; return the notices.

    The one check between a synthesized assembly and a deploy of it: ``cdk synth``
    (``mlcluster.app.synth_guarded``) and ``mlcluster update`` both call it, so neither can deploy a
    change the lock files refuse. Raises ``ConfigError`` naming every refused change of every
    environment, and every lock file in the environments' folders whose environment file is gone.
    """
    refused: list[ConfigError] = []
    for directory in sorted({Path(environment.source).parent for environment in environments}):
        refused += orphan_locks(directory)
    notes: list[str] = []
    for environment in environments:
        try:
            _, found = guard(environment, snapshot_from_assembly(assembly_dir, environment.name))
        except ConfigError as error:
            refused.append(error)
            continue
        notes += found
    if refused:
        raise ConfigError.combine(refused)
    return notes


def guard(environment: Environment, snapshot: Snapshot) -> tuple[list[Change], list[str]]:
    """Compare ``snapshot`` with the lock; raise ``ConfigError`` on a change it does not allow.

    A resource an allowance of this synth lets through is recorded beside the lock (:func:`in_flight_path`)
    with its form, until ``mlcluster lock`` rewrites the lock: a later synth that gives it another form is
    refused (:func:`stale_allowances`), allowance or not, as the first may be deployed.
    Returns the changes and the notices (:func:`notices`) for the edit.
    """
    lock = load_lock(environment)
    if lock is None:
        raise ConfigError(environment.source, [missing_lock(environment)])
    lock_digest = hashlib.sha256(lock_path(environment).read_bytes()).hexdigest()
    changes = compare(lock.snapshot, snapshot)
    dropped = set(lock.snapshot) - set(snapshot)
    in_flight = allowances_in_flight(environment, lock, snapshot, changes)
    outcome_problems, outcome_notes = outcome_checks(environment, lock.snapshot, snapshot)
    problems = (
        stack_refusals(environment, lock.snapshot, snapshot)
        + refusals(environment, changes, dropped=dropped)
        + allowance_problems(environment, lock, snapshot, changes)
        + stale_allowances(environment, _read_in_flight(environment, lock_digest), snapshot)
        + outcome_problems
    )
    if problems:
        raise ConfigError(environment.source, problems)
    record_in_flight(environment, lock_digest, in_flight)
    return changes, notices(environment, lock.snapshot, snapshot, changes) + outcome_notes
