"""The lock file next to an environment, and the synth-time guard that reads it.

``environments/<name>.lock.json`` records, for every resource of every stack
of the environment as last deployed, its type, construct path, create-only
property values and a digest of its properties (``mlcluster.replacement``).
It is committed with the environment file and refreshed with
``mlcluster lock <name>`` after each deploy.

At synth, the app compares the new templates with the lock. A data-bearing
resource (file system, DRA, data bucket, KMS key, cluster) that would be
replaced, or deleted, fails the synth with the resource, the reason, the
environment key and the safe way, unless ``retention.allow_replacement``
in the environment file names it. Without a lock file (an environment never
deployed) nothing is compared.

A HyperPod cluster whose groups draw instances from a training plan is
refused even with the allowance when it would be replaced (issue 10, path
7): CloudFormation creates the new cluster before it deletes the old one,
and the plan holds the instances the old cluster runs on. The plans are
read from the environment file as edited (the lock records create-only
values, and a group's plan is not one); the deploy-time pre-flight checks
the old cluster's plans as well.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlcluster.config import ConfigError, Environment, Problem
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.replacement import HYPERPOD_TYPE, Change, Snapshot, compare, snapshot_from_json, snapshot_to_json

LOCK_FORMAT = 1

#: The environment key behind each construct path prefix, for messages.
CONFIG_KEYS = (
    ("Storage/Lustre", "storage.lustre"),
    ("Storage/OpenZfs", "storage.openzfs"),
    ("Storage/DataBucket", "storage.data_bucket"),
    ("DataRepository/", "storage.lustre.data_repository_associations"),
    ("Cluster/", "cluster"),
    ("Network/", "network"),
)

#: How to make each kind of replacement without losing data.
SAFE_WAYS = {
    "AWS::FSx::FileSystem": (
        "A replacement is a new, empty file system (the old one is retained or deleted with the stack's policy). "
        "Safe way: export what is not yet in S3 (a data repository export task, or the DRA's auto-export), take a "
        "backup, deploy with the allowance, then let the DRAs re-import (or restore from the backup) and remount "
        "on the cluster nodes"
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
    "Custom::PclusterCluster": (
        "A new cluster name is a new cluster: running jobs and the head node's local state are lost. Safe way: "
        "drain the queues (no running jobs), then deploy with the allowance"
    ),
    "AWS::SageMaker::Cluster": (
        "A new HyperPod cluster replaces the old one: running jobs are lost. Safe way: drain the "
        "partitions, or add a new instance group instead of changing one in place, then deploy with the allowance"
    ),
}


def lock_path(environment: Environment) -> Path:
    """``environments/<name>.lock.json`` beside ``environments/<name>.yaml``."""
    return Path(environment.source).with_suffix(".lock.json")


def lock_document(environment: Environment, snapshot: Snapshot) -> dict[str, Any]:
    """The lock file's content for ``snapshot``."""
    return {"format": LOCK_FORMAT, "environment": environment.name, "stacks": snapshot_to_json(snapshot)}


def write_lock(environment: Environment, snapshot: Snapshot) -> Path:
    """Write (or refresh) the environment's lock file; returns its path."""
    path = lock_path(environment)
    text = json.dumps(lock_document(environment, snapshot), indent=1, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def read_lock(environment: Environment) -> Snapshot | None:
    """The locked snapshot, or None when the environment has no lock file yet."""
    path = lock_path(environment)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {LOCK_FORMAT}")
        return snapshot_from_json(data["stacks"])
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            str(path),
            [
                Problem(
                    "(lock file)",
                    NOT_A_VALUE,
                    f"cannot be read ({error}); restore it from git or rewrite it "
                    f"with 'mlcluster lock {environment.name}' against the deployed environment",
                )
            ],
        ) from None


def config_key(change: Change) -> str:
    """The environment key whose edit most likely caused ``change``."""
    for prefix, key in CONFIG_KEYS:
        if change.path.startswith(prefix):
            return key
    return "(see the reasons)"


def allowed(change: Change, allowances: Sequence[str]) -> bool:
    """Whether an ``allow_replacement`` entry names the resource or a construct above it."""
    return any(change.path == entry or change.path.startswith(entry.rstrip("/") + "/") for entry in allowances)


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
    return (
        f"this edit {'deletes' if change.action == 'remove' else 'replaces'} {change.stack}/{change.path} "
        f"({change.type}, logical id {change.logical_id})"
        + (f": {'; '.join(change.reasons)}" if change.reasons else "")
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


def refusals(environment: Environment, changes: Sequence[Change]) -> list[Problem]:
    """One problem per dangerous change the environment does not allow.

    A HyperPod cluster replaced while groups ask a training plan for instances is refused whatever
    the allowances say (:func:`training_plan_refusal`).
    """
    allowances = environment.config.retention.allow_replacement
    plan_groups = training_plan_groups(environment)
    problems: list[Problem] = []
    for change in changes:
        if change.type == HYPERPOD_TYPE and change.action == "replace" and plan_groups:
            problems.append(training_plan_refusal(environment, change, plan_groups))
            continue
        if not change.dangerous or allowed(change, allowances):
            continue
        head = change.path.split("/Resource", 1)[0]
        problems.append(
            Problem(
                config_key(change),
                NOT_A_VALUE,
                _what(change) + f". {SAFE_WAYS.get(change.type, 'Data in it is lost')}. "
                f"To allow it, add '{head}' to retention.allow_replacement in this file (and remove it, "
                f"then run 'mlcluster lock {environment.name}', after the deploy). If the environment is not "
                f"deployed, or runs these templates already, refresh the lock: 'mlcluster lock {environment.name}'.",
            )
        )
    return problems


def guard(environment: Environment, snapshot: Snapshot) -> list[Change]:
    """Compare ``snapshot`` with the lock; raise ``ConfigError`` on a replacement not allowed.

    Returns the changes (empty without a lock file).
    """
    locked = read_lock(environment)
    if locked is None:
        return []
    changes = compare(locked, snapshot)
    problems = refusals(environment, changes)
    if problems:
        raise ConfigError(environment.source, problems)
    return changes
