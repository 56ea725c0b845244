"""Issue 33: the guard covers every decision over a resource's fate, not only replacements.

The guard (``mlcluster.lockfile.guard``) is given a lock and a snapshot edited the way a synth of
the edit produces it: deletion and replace policies, retention settings, termination protection,
backups, stacks dropped from the app, allowances that name several resources or outlived their
deploy, a missing lock and a renamed environment file. The real synthesis of the same edits is in
``tests/test_day_two.py`` (the table of docs/reference/edits.md) and ``tests/test_day_two_guard.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import ConfigError, Environment, load_environment, load_environments
from mlcluster.lockfile import Lock, guard, in_flight_path, lock_path, orphan_locks, read_lock_file, write_lock
from mlcluster.replacement import ResourceState, Snapshot, StackState, stack_state
from tests.support import MINIMAL, write_env

NAME = "p5"


def resource(kind: str, path: str, policy: str = "Retain", **fate: Any) -> ResourceState:
    return ResourceState(
        type=kind,
        path=path,
        create_only={},
        digest="d0",
        deletion_policy=policy,
        update_replace_policy=policy,
        fate={key.replace("__", "/"): value for key, value in fate.items()},
    )


def deployed() -> Snapshot:
    """A small environment as deployed: protected data stacks, retained data, an unprotected cluster."""
    return {
        f"{NAME}-Network": StackState(
            {"Key": resource("AWS::KMS::Key", "Network/EnvironmentKey/Resource/Resource", PendingWindowInDays=30)},
            {},
            termination_protection=True,
        ),
        f"{NAME}-Storage": StackState(
            {
                "Lustre": resource(
                    "AWS::FSx::FileSystem",
                    "Storage/Lustre/Resource",
                    LustreConfiguration__AutomaticBackupRetentionDays=7,
                ),
                "LustreLogs": resource("AWS::Logs::LogGroup", "Storage/Lustre/LogGroup/Resource", RetentionInDays=365),
                "Bucket": resource(
                    "AWS::S3::Bucket", "Storage/DataBucket/Resource/Resource", VersioningConfiguration__Status="Enabled"
                ),
                "Vault": resource("AWS::Backup::BackupVault", "Storage/DataBucketBackup/Vault/Resource"),
                "Plan": resource("AWS::Backup::BackupPlan", "Storage/DataBucketBackup/Plan/Resource", "Delete"),
                "Selection": resource(
                    "AWS::Backup::BackupSelection", "Storage/DataBucketBackup/Plan/DataBucket/Resource", "Delete"
                ),
                "Ingress": resource("AWS::EC2::SecurityGroupIngress", "Storage/Lustre/Ingress", "Delete"),
            },
            {},
            termination_protection=True,
        ),
        f"{NAME}-DataRepository": StackState(
            {
                "Data": resource("AWS::FSx::DataRepositoryAssociation", "DataRepository/Lustre/AssociationData"),
                "Ckpt": resource("AWS::FSx::DataRepositoryAssociation", "DataRepository/Lustre/AssociationCkpt"),
            },
            {},
            termination_protection=True,
        ),
        f"{NAME}-Observability": StackState(
            {
                "Prometheus": resource("AWS::APS::Workspace", "Observability/Prometheus/Resource"),
                "Grafana": resource("AWS::Grafana::Workspace", "Observability/Grafana/Resource"),
                "TopicKey": resource("AWS::KMS::Key", "Observability/AlarmTopicKey/Resource"),
            },
            {},
        ),
        f"{NAME}-Cluster": StackState(
            {"Cluster": resource("Custom::PclusterCluster", "Cluster/Cluster/Resource", "Delete")}, {}
        ),
    }


def environment(tmp_path: Path, *, allow: tuple[str, ...] = (), used: tuple[str, ...] = ()) -> Environment:
    data: dict[str, Any] = {**MINIMAL, "retention": {"allow_replacement": list(allow)}}
    env = load_environment(write_env(tmp_path, NAME, data))
    write_lock(env, Lock(deployed(), "deployed", allowances_used=used))
    return env


def edit(snapshot: Snapshot, stack: str, lid: str, **changes: Any) -> Snapshot:
    state = snapshot[f"{NAME}-{stack}"]
    state.resources[lid] = dataclasses.replace(state.resources[lid], **changes)
    return snapshot


def refusal(env: Environment, snapshot: Snapshot) -> str:
    with pytest.raises(ConfigError) as raised:
        guard(env, snapshot)
    return str(raised.value)


def destroy_everything(snapshot: Snapshot) -> Snapshot:
    """What ``retention.on_delete: destroy`` synthesizes: Delete policies, no termination protection."""
    return {
        name: StackState(
            {
                lid: dataclasses.replace(r, deletion_policy="Delete", update_replace_policy="Delete")
                for lid, r in state.resources.items()
            },
            state.outputs,
            termination_protection=False,
        )
        for name, state in snapshot.items()
    }


# -- finding 1: policies, retention, protection, backups --------------------------------------------


def test_on_delete_destroy_is_refused_with_the_safe_way(tmp_path: Path) -> None:
    text = refusal(environment(tmp_path), destroy_everything(deployed()))
    assert "retention.on_delete: this edit weakens p5-Storage/Storage/Lustre/Resource" in text
    assert "DeletionPolicy Retain -> Delete; UpdateReplacePolicy Retain -> Delete" in text
    for path in ("Storage/DataBucket/Resource/Resource", "Network/EnvironmentKey/Resource/Resource"):
        assert f"weakens p5-{path.split('/')[0]}/{path}" in text
    assert "turns termination protection of p5-Storage off" in text
    assert "keep retention.on_delete: retain" in text and "user-initiated FSx backup" in text
    # Nothing retained before, nothing weakened: the backup plan had Delete already.
    assert "Storage/DataBucketBackup/Plan/Resource" not in text.split("termination protection of p5-Storage")[0]


def test_on_delete_destroy_passes_only_with_each_resource_named(tmp_path: Path) -> None:
    snapshot = destroy_everything(deployed())
    every = [
        "Network/EnvironmentKey",
        "Storage/Lustre",
        "Storage/Lustre/LogGroup",
        "Storage/DataBucket",
        "Storage/DataBucketBackup/Vault",
        # Deleted with the stack once it is unprotected (their policy was Delete already).
        "Storage/DataBucketBackup/Plan",
        "Storage/DataBucketBackup/Plan/DataBucket",
        "DataRepository/Lustre/AssociationData",
        "DataRepository/Lustre/AssociationCkpt",
        "Observability/Prometheus",
        "Observability/Grafana",
        "Observability/AlarmTopicKey",
    ]
    # The edge: one resource short is still refused, naming exactly that one.
    text = refusal(environment(tmp_path / "short", allow=tuple(every[1:])), snapshot)
    assert "Network/EnvironmentKey/Resource/Resource" in text and "Storage/Lustre/Resource" not in text
    changes, _ = guard(environment(tmp_path / "all", allow=tuple(every)), snapshot)
    assert {c.action for c in changes} == {"weaken"}


@pytest.mark.parametrize(
    ("lid", "stack", "fate", "shown"),
    [
        ("LustreLogs", "Storage", {"RetentionInDays": 90}, "RetentionInDays 365 -> 90"),
        ("LustreLogs", "Storage", {}, None),  # no retention: logs never expire, more than before
        (
            "Lustre",
            "Storage",
            {"LustreConfiguration/AutomaticBackupRetentionDays": 0},
            "LustreConfiguration.AutomaticBackupRetentionDays 7 -> 0",
        ),
        ("Bucket", "Storage", {"VersioningConfiguration/Status": "Suspended"}, 'Status "Enabled" -> "Suspended"'),
        ("Key", "Network", {"PendingWindowInDays": 7}, "PendingWindowInDays 30 -> 7"),
    ],
)
def test_shorter_retention_or_a_copy_switched_off_is_refused(
    tmp_path: Path, lid: str, stack: str, fate: dict[str, Any], shown: str | None
) -> None:
    env = environment(tmp_path)
    snapshot = edit(deployed(), stack, lid, fate=fate)
    if shown is None:
        guard(env, snapshot)
        return
    assert shown in refusal(env, snapshot)


def test_longer_retention_passes(tmp_path: Path) -> None:
    snapshot = edit(deployed(), "Storage", "LustreLogs", fate={"RetentionInDays": 3653})
    changes, _ = guard(environment(tmp_path), snapshot)
    assert changes == []  # the digest is what marks an update; the fate alone changed for the better


def test_removing_the_data_bucket_backup_is_refused(tmp_path: Path) -> None:
    snapshot = deployed()
    for lid in ("Vault", "Plan", "Selection"):
        del snapshot[f"{NAME}-Storage"].resources[lid]
    text = refusal(environment(tmp_path), snapshot)
    assert "storage.data_bucket.backup: this edit deletes p5-Storage/Storage/DataBucketBackup/Plan/Resource" in text
    assert "no second copy from then on" in text
    assert "recovery points" in text


# -- finding 9: allowances --------------------------------------------------------------------------


def test_a_whole_stack_allowance_is_refused_with_what_it_covers(tmp_path: Path) -> None:
    snapshot = edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"})
    text = refusal(environment(tmp_path, allow=("Storage",)), snapshot)
    assert "retention.allow_replacement: 'Storage' names 6 data-bearing resources" in text
    assert "'Storage/DataBucket', 'Storage/DataBucketBackup/Plan'" in text
    # The edge: the one resource by name passes.
    guard(environment(tmp_path / "one", allow=("Storage/Lustre",)), snapshot)


def test_an_allowance_outliving_its_deploy_is_refused(tmp_path: Path) -> None:
    text = refusal(environment(tmp_path, allow=("Storage/Lustre",), used=("Storage/Lustre",)), deployed())
    assert "'Storage/Lustre' was used: the lock records the deploy that changed Storage/Lustre/Resource" in text
    assert "Remove it from the file" in text
    text = refusal(environment(tmp_path / "never", allow=("Storage/Lustre",)), deployed())
    assert "'Storage/Lustre' allows nothing" in text and "recorded in the lock" not in text


def test_dropping_observability_says_to_unlink_the_cluster_and_destroy_exclusively(tmp_path: Path) -> None:
    snapshot = deployed()
    del snapshot[f"{NAME}-Observability"]
    text = refusal(environment(tmp_path), snapshot)
    assert "first deploy with observability.prometheus.enabled: false so the Cluster stack stops referencing it" in text
    assert "npx cdk destroy --exclusively 'p5/Observability'" in text
    assert "npx cdk destroy 'p5/Observability'" not in text


def test_a_used_allowance_never_lets_a_new_change_through(tmp_path: Path) -> None:
    """The lock records the allowance used: a second edit of the same resource is refused, not allowed."""
    snapshot = edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"})
    text = refusal(environment(tmp_path, allow=("Storage/Lustre",), used=("Storage/Lustre",)), snapshot)
    assert "'Storage/Lustre' was used" in text and "Remove it from the file" in text
    # The edge: an allowance the lock has not used yet lets the change through.
    guard(environment(tmp_path / "fresh", allow=("Storage/Lustre",), used=("Storage/DataBucket",)), snapshot)


@pytest.mark.parametrize(("before", "after"), [("Retain", "Delete"), ("Retain", None)])
def test_a_parallelcluster_cluster_no_longer_retained_is_refused(
    tmp_path: Path, before: str, after: str | None
) -> None:
    """The custom resource's own DeletionPolicy property decides whether the cluster outlives the resource."""
    env = environment(tmp_path)
    locked = edit(deployed(), "Cluster", "Cluster", fate={"DeletionPolicy": before})
    write_lock(env, Lock(locked, "deployed"))
    text = refusal(env, edit(deployed(), "Cluster", "Cluster", fate={} if after is None else {"DeletionPolicy": after}))
    assert "weakens p5-Cluster/Cluster/Cluster/Resource (Custom::PclusterCluster" in text
    assert f"DeletionPolicy Retain -> {after or 'Delete'}" in text
    # The edge: Delete -> Retain keeps more, and passes.
    write_lock(env, Lock(edit(deployed(), "Cluster", "Cluster", fate={"DeletionPolicy": "Delete"}), "deployed"))
    guard(env, edit(deployed(), "Cluster", "Cluster", fate={"DeletionPolicy": "Retain"}))


def test_the_parallelcluster_deletion_policy_is_read_from_the_template() -> None:
    cluster = {"Type": "Custom::PclusterCluster", "Properties": {"ClusterName": "c", "DeletionPolicy": "Retain"}}
    state = stack_state({"Resources": {"Cluster": cluster}}, {"Cluster": "Cluster/Cluster/Resource"})
    assert state.resources["Cluster"].fate == {
        "DeletionPolicy": "Retain",
        "ClusterConfiguration/SharedStorage": {},
        "ClusterConfiguration/SharedStorage/DeletionPolicy": {},
    }


# -- /home: shared storage added to a running ParallelCluster cluster ------------------------------------

LUSTRE_MOUNT = {"Name": "fsx", "MountDir": "/fsx", "StorageType": "FsxLustre", "FsxLustreSettings": {}}
HOME_EBS = {"Name": "home", "MountDir": "/home", "StorageType": "Ebs", "EbsSettings": {"Size": 100}}


def cluster_with(*storage: dict[str, Any]) -> Snapshot:
    """``deployed()`` with its cluster's fate read from a template whose ClusterConfiguration has ``storage``."""
    template = {
        "Resources": {
            "Cluster": {
                "Type": "Custom::PclusterCluster",
                "Properties": {
                    "ClusterName": "p5-train",
                    "DeletionPolicy": "Retain",
                    "ClusterConfiguration": {"SharedStorage": list(storage)},
                },
            }
        }
    }
    read = stack_state(template, {"Cluster": "Cluster/Cluster/Resource"}).resources["Cluster"]
    return edit(deployed(), "Cluster", "Cluster", fate=read.fate)


def test_the_lock_records_the_clusters_mounts() -> None:
    fate = cluster_with(LUSTRE_MOUNT, HOME_EBS)[f"{NAME}-Cluster"].resources["Cluster"].fate
    assert fate["ClusterConfiguration/SharedStorage"] == {"/fsx": "FsxLustre", "/home": "Ebs"}


def relock(env: Environment, lock: Lock) -> None:
    """What ``mlcluster lock`` does: write the lock and remove the record of allowances in flight."""
    write_lock(env, lock)
    in_flight_path(env).unlink(missing_ok=True)


def test_home_volume_added_to_a_deployed_cluster_is_refused_with_the_safe_way(tmp_path: Path) -> None:
    """A lock recorded without /home (the cluster as deployed before the default) and the new default."""
    env = environment(tmp_path)
    write_lock(env, Lock(cluster_with(LUSTRE_MOUNT), "deployed"))
    text = refusal(env, cluster_with(LUSTRE_MOUNT, HOME_EBS))
    assert "cluster.pcluster.shared_storage.home_volume: this edit weakens p5-Cluster/Cluster/Cluster/Resource" in text
    assert "SharedStorage MountDir /home: head node -> Ebs" in text
    assert "every user's home is hidden under an empty volume" in text
    assert "sudo rsync -aHAX /home/ /fsx/home-copy/" in text
    assert "home_volume.enabled: false" in text and "README's upgrade note" in text
    assert "add 'Cluster/Cluster' to retention.allow_replacement" in text
    # The single-resource allowance lets it through; a mount elsewhere (/apps) is no change of an existing path.
    guard(environment(tmp_path, allow=("Cluster/Cluster",)), cluster_with(LUSTRE_MOUNT, HOME_EBS))
    relock(env, Lock(cluster_with(LUSTRE_MOUNT), "deployed"))
    guard(env, cluster_with(LUSTRE_MOUNT, {"Name": "apps", "MountDir": "/apps", "StorageType": "Ebs"}))


@pytest.mark.parametrize(
    ("before", "after", "told"),
    [
        ((HOME_EBS,), (), "/home: Ebs -> head node"),
        ((HOME_EBS,), ({**HOME_EBS, "StorageType": "Efs"},), "/home: Ebs -> Efs"),
        ((), ({"Name": "o", "MountDir": "/opt", "StorageType": "Efs"},), "/opt: head node -> Efs"),
    ],
)
def test_a_mount_over_an_existing_path_changed_is_refused(
    tmp_path: Path, before: tuple[dict[str, Any], ...], after: tuple[dict[str, Any], ...], told: str
) -> None:
    env = environment(tmp_path)
    write_lock(env, Lock(cluster_with(LUSTRE_MOUNT, *before), "deployed"))
    assert f"SharedStorage MountDir {told}" in refusal(env, cluster_with(LUSTRE_MOUNT, *after))
    # The edge: the same /home mount kept passes.
    guard(env, cluster_with(LUSTRE_MOUNT, *before))


def test_a_lock_that_predates_the_mount_record_refuses_a_home_mount_with_a_hint(tmp_path: Path) -> None:
    """``deployed()``'s cluster fate has no mounts key, as every lock written before it."""
    text = refusal(environment(tmp_path), cluster_with(LUSTRE_MOUNT, HOME_EBS))
    assert "/home: head node -> Ebs (this lock does not record the cluster's mounts" in text
    guard(environment(tmp_path), cluster_with(LUSTRE_MOUNT))


def test_an_allowance_naming_nothing_is_refused(tmp_path: Path) -> None:
    assert "'Storage/Nothing' names no data-bearing resource" in refusal(
        environment(tmp_path, allow=("Storage/Nothing",)), deployed()
    )


# -- finding 4: stacks dropped from the app ------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "key", "told"),
    [
        ("Cluster", "cluster.backend", "the cluster keeps running and billing"),
        ("DataRepository", "storage.lustre.data_repository_associations", "--no-delete-data-in-file-system"),
        ("Observability", "observability", "Prometheus and Grafana workspaces"),
    ],
)
def test_a_stack_dropped_from_the_app_is_refused_with_the_way(tmp_path: Path, stack: str, key: str, told: str) -> None:
    snapshot = deployed()
    del snapshot[f"{NAME}-{stack}"]
    text = refusal(environment(tmp_path), snapshot)
    assert f"{key}: this edit drops stack p5-{stack} from the app" in text
    assert told in text
    assert f"npx cdk destroy --exclusively 'p5/{stack}'" in text
    protected = stack == "DataRepository"
    assert ("update-termination-protection" in text) is protected
    # One refusal for the stack, not one more per resource in it.
    assert "this edit deletes" not in text


def test_a_retained_dra_leaving_a_kept_stack_is_reported_as_still_running(tmp_path: Path) -> None:
    snapshot = deployed()
    del snapshot[f"{NAME}-DataRepository"].resources["Ckpt"]
    _, notes = guard(environment(tmp_path), snapshot)
    (note,) = notes
    assert "DataRepository/Lustre/AssociationCkpt" in note
    assert "keeps it running outside the stack" in note and "exporting to the bucket (deletions too)" in note


# -- findings 2 and 3: no lock, renamed files ---------------------------------------------------------------


def test_no_lock_is_refused_and_an_explicit_first_lock_passes(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path, NAME, MINIMAL))
    text = refusal(env, deployed())
    assert "(lock file): " in text and "is missing" in text
    assert f"'mlcluster lock {NAME} --new'" in text
    write_lock(env, Lock({}, "new"))
    changes, _ = guard(env, deployed())
    assert {c.action for c in changes} == {"add"}


def test_a_lock_whose_environment_file_is_gone_is_refused(tmp_path: Path) -> None:
    env = environment(tmp_path)
    lock_path(env).rename(tmp_path / "old.lock.json")
    (error,) = orphan_locks(tmp_path)
    text = str(error)
    assert text.startswith(f"{tmp_path / 'old.lock.json'}: (environment file): records deployed stacks")
    assert "environments/old.yaml is gone" in text and "To rename: keep old.yaml" in text
    # A lock recording nothing deployed, or one with its file, is no orphan.
    write_env(tmp_path, "old", MINIMAL)
    assert orphan_locks(tmp_path) == []
    (tmp_path / "old.yaml").unlink()
    (tmp_path / "old.lock.json").write_text(
        json.dumps({"format": 2, "source": "new", "allowances_used": [], "accepted": [], "stacks": {}})
    )
    assert orphan_locks(tmp_path) == []


def test_a_lock_copied_from_another_environment_is_refused_naming_the_file_key_values_and_way(tmp_path: Path) -> None:
    """A lock records its environment's name: one copied from (or renamed with) another environment is refused."""
    env = environment(tmp_path)
    path = lock_path(env)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["environment"] == NAME
    # The edge: the environment's own lock, and an edit that changes nothing, pass.
    assert guard(env, deployed())[0] == []
    path.write_text(json.dumps(data | {"environment": "dev"}), encoding="utf-8")
    text = refusal(env, deployed())
    assert text.startswith(f"{path}: environment: 'dev' is not valid; p5.lock.json is read as the lock of ")
    assert "environment 'p5' (p5.yaml beside it), so it must record 'environment': 'p5'" in text
    # Review i33 finding 5: the environment's own lock from version control first; a first lock only without one.
    assert "copied from another environment over p5's own lock: restore p5.lock.json from version control first" in (
        text
    )
    assert "only if p5 never had one, run 'mlcluster lock p5' with credentials for its account" in text
    assert "a first lock has none of p5's earlier allowances_used and accepted records" in text
    assert "If dev.yaml and its lock were renamed to p5" in text and "the stacks of dev keep running" in text
    # A lock without the key records no environment: refused the same way.
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "environment"}), encoding="utf-8")
    text = refusal(env, deployed())
    assert f"{path}: environment: no value (empty or missing); p5.lock.json is read as the lock of" in text
    assert "'mlcluster lock p5'" in text
    # Only the environment's name passes: the same name in another case does not.
    path.write_text(json.dumps(data | {"environment": "P5"}), encoding="utf-8")
    assert "environment: 'P5' is not valid" in refusal(env, deployed())


def test_a_renamed_environments_lock_is_still_reported_as_an_orphan(tmp_path: Path) -> None:
    """The rename path reads a lock whose environment file is gone whatever environment it records: the orphan
    report (the way to rename) is what the operator needs, not the name check, which needs an environment file."""
    env = environment(tmp_path)
    write_env(tmp_path, "renamed", MINIMAL)  # p5.yaml renamed: only its lock is left under the old name
    Path(env.source).unlink()
    (error,) = orphan_locks(tmp_path)
    assert str(error).startswith(f"{lock_path(env)}: (environment file): records deployed stacks (p5-")
    # Both files renamed: the new name's lock records the old environment, and reading it for the new one refuses.
    lock_path(env).rename(tmp_path / "renamed.lock.json")
    assert orphan_locks(tmp_path) == []
    with pytest.raises(ConfigError, match=r"environment: 'p5' is not valid.*If p5.yaml and its lock were renamed"):
        guard(load_environment(tmp_path / "renamed.yaml"), deployed())


def test_a_lock_that_is_not_a_json_object_is_refused_naming_the_way(tmp_path: Path) -> None:
    (tmp_path / "x.lock.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"x.lock.json: \(lock file\): cannot be read .*'mlcluster lock x'"):
        read_lock_file(tmp_path / "x.lock.json", "x")


def test_an_unreadable_lock_names_git_from_the_project_folder(tmp_path: Path) -> None:
    """Review i30l findings 3 and 4: the path git finds from the project's folder, and the way that works
    (`mlcluster lock x` refuses to overwrite an unreadable lock, so it is not named as a rewrite)."""
    (tmp_path / "cdk.json").write_text("{}")
    (tmp_path / "environments").mkdir()
    path = tmp_path / "environments" / "x.lock.json"
    path.write_text('"x"')
    with pytest.raises(ConfigError) as raised:
        read_lock_file(path, "x")
    text = str(raised.value)
    assert "restore it from git (git log -- environments/x.lock.json); if there is no good copy, move the file " in (
        text
    )
    assert "aside and run 'mlcluster lock x', which reads the deployed stacks" in text
    assert "rewrite it with" not in text
    # No project folder above it: the absolute path, which git finds from anywhere in the repository.
    (tmp_path / "cdk.json").unlink()
    with pytest.raises(ConfigError, match=re.escape(f"(git log -- {path.resolve()})")):
        read_lock_file(path, "x")


def test_a_foreign_lock_names_git_from_the_project_folder(tmp_path: Path) -> None:
    """Review i30l finding 3: `git log -- p5.lock.json` run from the project's folder finds nothing."""
    (tmp_path / "cdk.json").write_text("{}")
    env = environment(tmp_path / "environments")
    path = lock_path(env)
    path.write_text(json.dumps(json.loads(path.read_text(encoding="utf-8")) | {"environment": "dev"}))
    assert "(git log -- environments/p5.lock.json); only if p5 never had one" in refusal(env, deployed())


def test_a_format_1_lock_is_refused_naming_the_way(tmp_path: Path) -> None:
    (tmp_path / "x.lock.json").write_text('{"format": 1, "stacks": {}}')
    with pytest.raises(ConfigError, match=r"format 1, expected 2.*'mlcluster lock x', which reads the deployed"):
        read_lock_file(tmp_path / "x.lock.json", "x")


def test_the_lock_records_policies_and_protection_from_a_template() -> None:
    template = {
        "Resources": {
            "Fs": {
                "Type": "AWS::FSx::FileSystem",
                "DeletionPolicy": "RetainExceptOnCreate",
                "Properties": {"LustreConfiguration": {"AutomaticBackupRetentionDays": 7}},
            },
            "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 365}},
        }
    }
    state = stack_state(template, {}, termination_protection=True)
    assert state.termination_protection
    assert state.resources["Fs"].deletion_policy == "RetainExceptOnCreate"
    assert state.resources["Fs"].update_replace_policy == "Delete"
    assert state.resources["Fs"].fate == {"LustreConfiguration/AutomaticBackupRetentionDays": 7}
    assert state.resources["Logs"].fate == {"RetentionInDays": 365}


# -- finding 9: name collisions across every file -------------------------------------------------------------


def test_names_collide_with_files_not_selected(tmp_path: Path) -> None:
    bucket = {"storage": {"data_bucket": {"name": "team-data-123"}}}
    write_env(tmp_path, "a", {**MINIMAL, **bucket})
    write_env(tmp_path, "b", {**MINIMAL, **bucket})
    with pytest.raises(ConfigError, match=r"S3 bucket name 'team-data-123' is also taken by .*a\.yaml"):
        load_environments(tmp_path, ["b"])
    # The edge: a broken file that is not selected is its own synth's problem, not b's.
    (tmp_path / "a.yaml").write_text("network: [")
    assert [e.name for e in load_environments(tmp_path, ["b"])] == ["b"]


# -- issue 33 follow-up: the patch backup bucket holds data ------------------------------------------


def with_patch_backups(snapshot: Snapshot) -> Snapshot:
    """A HyperPod cluster stack's patch backup bucket, its access logs and a lifecycle bucket (scripts)."""
    snapshot[f"{NAME}-Cluster"].resources.update(
        {
            "Backups": resource(
                "AWS::S3::Bucket",
                "Cluster/PatchBackups/Resource/Resource/Resource",
                VersioningConfiguration__Status="Enabled",
            ),
            "BackupLogs": resource("AWS::S3::Bucket", "Cluster/PatchBackups/Resource/AccessLogs/Resource"),
            "Scripts": resource("AWS::S3::Bucket", "Cluster/Lifecycle/Resource/Resource/Resource/Resource", "Delete"),
        }
    )
    return snapshot


@pytest.mark.parametrize(
    ("lid", "change", "told"),
    [
        ("Backups", {"create_only": {"BucketName": "new"}}, "Cluster/PatchBackups/Resource/Resource/Resource"),
        ("Backups", {"deletion_policy": "Delete"}, "DeletionPolicy Retain -> Delete"),
        ("BackupLogs", {"update_replace_policy": "Delete"}, "UpdateReplacePolicy Retain -> Delete"),
        (
            "Backups",
            {"fate": {"VersioningConfiguration/Status": "Suspended"}},
            'VersioningConfiguration.Status "Enabled" -> "Suspended"',
        ),
    ],
)
def test_the_patch_backup_bucket_is_data_bearing(tmp_path: Path, lid: str, change: dict[str, Any], told: str) -> None:
    data: dict[str, Any] = {**MINIMAL, "retention": {"allow_replacement": []}}
    env = load_environment(write_env(tmp_path, NAME, data))
    write_lock(env, Lock(with_patch_backups(deployed()), "deployed"))
    text = refusal(env, edit(with_patch_backups(deployed()), "Cluster", lid, **change))
    assert told in text


def test_a_lifecycle_bucket_change_is_not_refused(tmp_path: Path) -> None:
    """The edge: the lifecycle bucket holds scripts every deploy uploads again; replacing it passes."""
    data: dict[str, Any] = {**MINIMAL, "retention": {"allow_replacement": []}}
    env = load_environment(write_env(tmp_path, NAME, data))
    write_lock(env, Lock(with_patch_backups(deployed()), "deployed"))
    guard(env, edit(with_patch_backups(deployed()), "Cluster", "Scripts", create_only={"BucketName": "new"}))


# -- review finding 2: a ParallelCluster cluster kept by its custom resource's DeletionPolicy property --------


def kept_cluster(policy: str, name: str = "p5-train") -> Snapshot:
    """``deployed()`` whose cluster is kept or deleted by the custom resource's property (attribute Delete)."""
    return edit(deployed(), "Cluster", "Cluster", create_only={"ClusterName": name}, fate={"DeletionPolicy": policy})


def test_a_retained_parallelcluster_cluster_removed_is_reported_as_still_billing(tmp_path: Path) -> None:
    env = environment(tmp_path, allow=("Cluster/Cluster",))
    write_lock(env, Lock(kept_cluster("Retain"), "deployed"))
    after = kept_cluster("Retain")
    del after[f"{NAME}-Cluster"].resources["Cluster"]
    _, notes = guard(env, after)
    (note,) = notes
    assert (
        "p5-Cluster/Cluster/Cluster/Resource (Custom::PclusterCluster) leaves the template but its DeletionPolicy "
        "property" in note
    )
    assert "cluster p5-train (head node, static nodes) keeps running and billing" in note
    assert "'pcluster delete-cluster -n p5-train --region <region>'" in note
    # The edge: with the property Delete, ParallelCluster deletes the cluster: nothing is left to report.
    relock(env, Lock(kept_cluster("Delete"), "deployed"))
    assert guard(env, after)[1] == []


@pytest.mark.parametrize("allow", [(), ("Cluster/Cluster",), ("Cluster/Cluster/Resource",)])
@pytest.mark.parametrize("policy", ["Retain", "Delete"])
def test_a_parallelcluster_cluster_rename_is_refused_even_with_the_allowance(
    tmp_path: Path, allow: tuple[str, ...], policy: str
) -> None:
    """r3 finding 5: ParallelCluster's provider refuses a new ClusterName, so the deploy would only roll back.

    Before, the allowance let it through with a notice to 'pcluster delete-cluster' the old name, which
    after the rollback is the live cluster.
    """
    env = environment(tmp_path, allow=allow)
    write_lock(env, Lock(kept_cluster(policy), "deployed"))
    text = refusal(env, kept_cluster(policy, "p5-train2"))
    assert "cluster.name: this edit replaces p5-Cluster/Cluster/Cluster/Resource" in text
    assert "'Cannot update the ClusterName in the properties.'" in text
    assert "the deploy fails and CloudFormation rolls the stack back, with retention.allow_replacement too" in text
    assert "npx cdk destroy --exclusively 'p5/Cluster'" in text
    assert (
        "'pcluster delete-cluster -n <old cluster name> --region <region>' (only once its stack is destroyed)" in text
    )
    assert "run 'mlcluster lock p5'; (4) set the new name and deploy" in text
    assert "To allow it, add" not in text
    # The edge: the same name with the allowance left out of the file is no change at all.
    env = environment(tmp_path / "same")
    write_lock(env, Lock(kept_cluster(policy), "deployed"))
    assert guard(env, kept_cluster(policy)) == ([], [])


def test_the_cluster_safe_way_says_a_retained_cluster_keeps_billing(tmp_path: Path) -> None:
    env = environment(tmp_path)
    write_lock(env, Lock(kept_cluster("Retain"), "deployed"))
    removed = kept_cluster("Retain")
    del removed[f"{NAME}-Cluster"].resources["Cluster"]
    text = refusal(env, removed)
    assert "deletes p5-Cluster/Cluster/Cluster/Resource" in text
    assert "keeps the cluster running and billing" in text and "pcluster delete-cluster -n <cluster name>" in text
    # A dropped Cluster stack names the cluster among what its deletion keeps.
    snapshot = deployed()
    del snapshot[f"{NAME}-Cluster"]
    assert "kept when the stack is deleted (Retain): Cluster/Cluster/Resource (Custom::PclusterCluster)" in refusal(
        env, snapshot
    )


# -- review finding 3: a shared volume's own DeletionPolicy (ParallelCluster's EbsSettings) -------------------


def home_volume(policy: str | None) -> dict[str, Any]:
    settings: dict[str, Any] = {"Size": 100} | ({} if policy is None else {"DeletionPolicy": policy})
    return {**HOME_EBS, "EbsSettings": settings}


def test_the_lock_records_each_created_volumes_deletion_policy() -> None:
    existing = {
        "Name": "old",
        "MountDir": "/data",
        "StorageType": "Ebs",
        "EbsSettings": {"VolumeId": "vol-0123456789abcdef0"},
    }
    efs = {"Name": "e", "MountDir": "/efs", "StorageType": "Efs", "EfsSettings": {"DeletionPolicy": "Retain"}}
    fate = (
        cluster_with(LUSTRE_MOUNT, home_volume("Snapshot"), existing, efs)[f"{NAME}-Cluster"].resources["Cluster"].fate
    )
    # ParallelCluster's default for storage it creates is Delete; an existing volume is never deleted (not recorded).
    assert fate["ClusterConfiguration/SharedStorage/DeletionPolicy"] == {
        "/fsx": "Delete",
        "/home": "Snapshot",
        "/efs": "Retain",
    }


@pytest.mark.parametrize(("before", "after"), [("Retain", "Delete"), ("Snapshot", "Delete"), ("Retain", None)])
def test_a_home_volume_no_longer_kept_is_refused(tmp_path: Path, before: str, after: str | None) -> None:
    env = environment(tmp_path)
    write_lock(env, Lock(cluster_with(LUSTRE_MOUNT, home_volume(before)), "deployed"))
    text = refusal(env, cluster_with(LUSTRE_MOUNT, home_volume(after)))
    assert (
        "cluster.pcluster.shared_storage.home_volume.deletion_policy: this edit weakens p5-Cluster/Cluster/Cluster"
        in (text)
    )
    assert f"SharedStorage DeletionPolicy /home: {before} -> Delete" in text
    assert "ParallelCluster deletes a volume whose DeletionPolicy is Delete" in text
    assert "add 'Cluster/Cluster' to retention.allow_replacement" in text
    # The edges: allowed by name it passes; Retain -> Snapshot, or Delete -> Retain, keeps the volume and passes.
    guard(environment(tmp_path / "allowed", allow=("Cluster/Cluster",)), cluster_with(LUSTRE_MOUNT, home_volume(after)))
    guard(env, cluster_with(LUSTRE_MOUNT, home_volume("Snapshot" if before == "Retain" else "Retain")))
    write_lock(env, Lock(cluster_with(LUSTRE_MOUNT, home_volume("Delete")), "deployed"))
    guard(env, cluster_with(LUSTRE_MOUNT, home_volume("Retain")))


#: The Lustre file system as the render mounts it: an existing one (ParallelCluster never deletes it).
EXISTING_LUSTRE = {**LUSTRE_MOUNT, "FsxLustreSettings": {"FileSystemId": "fs-0123456789abcdef0"}}


def predating(*storage: dict[str, Any], configuration: bool, mounts: bool = True, policy: str = "Retain") -> Snapshot:
    """A lock of ``cluster_with(*storage)`` written before the volume policies were recorded.

    ``configuration``: it has the whole ClusterConfiguration (issue 29's record); ``mounts``: the mounts
    record; ``policy``: the custom resource's DeletionPolicy property (Retain with on_delete: retain).
    """
    locked = cluster_with(*storage)
    cluster = locked[f"{NAME}-Cluster"].resources["Cluster"]
    fate = {k: v for k, v in cluster.fate.items() if k != "ClusterConfiguration/SharedStorage/DeletionPolicy"}
    if not mounts:
        del fate["ClusterConfiguration/SharedStorage"]
    fate["DeletionPolicy"] = policy
    settings = {"ClusterConfiguration": {"SharedStorage": list(storage)}} if configuration else {}
    locked[f"{NAME}-Cluster"].resources["Cluster"] = dataclasses.replace(cluster, fate=fate, settings=settings)
    return locked


@pytest.mark.parametrize("configuration", [True, False])
def test_a_lock_that_predates_the_volume_policy_record_reads_them_from_what_the_render_did(
    tmp_path: Path, configuration: bool
) -> None:
    """r3 finding 4: before the record, /home was Retain with on_delete: retain (the custom resource's property).

    With the configuration recorded the policies are read from it; without, reconstructed from the property.
    """
    env = environment(tmp_path)
    locked = predating(EXISTING_LUSTRE, home_volume("Retain"), configuration=configuration)
    write_lock(env, Lock(locked, "deployed"))
    text = refusal(env, cluster_with(EXISTING_LUSTRE, home_volume("Delete")))
    assert "SharedStorage DeletionPolicy /home: Retain -> Delete" in text
    assert "DeletionPolicy /fsx" not in text  # an existing file system: ParallelCluster never deletes it
    # The edge: still kept (Snapshot) passes.
    guard(env, cluster_with(EXISTING_LUSTRE, home_volume("Snapshot")))


def test_a_predating_lock_read_from_its_configuration_knows_a_volume_was_delete(tmp_path: Path) -> None:
    """The recorded configuration says Delete although the property was Retain (home_volume.deletion_policy set)."""
    env = environment(tmp_path)
    write_lock(env, Lock(predating(EXISTING_LUSTRE, home_volume("Delete"), configuration=True), "deployed"))
    guard(env, cluster_with(EXISTING_LUSTRE, home_volume("Delete")))


def test_a_predating_lock_without_the_mounts_record_still_compares_the_volume_policy(tmp_path: Path) -> None:
    env = environment(tmp_path)
    write_lock(
        env, Lock(predating(EXISTING_LUSTRE, home_volume("Retain"), configuration=False, mounts=False), "deployed")
    )
    assert "SharedStorage DeletionPolicy /home: Retain -> Delete" in refusal(
        env, cluster_with(EXISTING_LUSTRE, home_volume("Delete"))
    )


def test_a_lock_that_predates_the_volume_policy_record_with_an_unkept_cluster_reads_delete(tmp_path: Path) -> None:
    """With on_delete: destroy the property was Delete and so was the /home volume: Delete -> Delete is no change."""
    env = environment(tmp_path)
    locked = predating(EXISTING_LUSTRE, home_volume("Delete"), configuration=False, policy="Delete")
    write_lock(env, Lock(locked, "deployed"))
    guard(env, cluster_with(EXISTING_LUSTRE, home_volume("Delete")))


def test_a_volume_added_since_a_lock_that_predates_the_record_is_not_a_weakening(tmp_path: Path) -> None:
    """The mounts record says /home was not there: a new /home volume with Delete weakens nothing."""
    env = environment(tmp_path)
    write_lock(env, Lock(predating(EXISTING_LUSTRE, configuration=False), "deployed"))
    text = refusal(env, cluster_with(EXISTING_LUSTRE, home_volume("Delete")))
    assert "SharedStorage MountDir /home: head node -> Ebs" in text  # the mount over the homes, refused apart
    assert "SharedStorage DeletionPolicy" not in text


# -- review finding 4: an allowance expires with the deploy that used it, lock or no lock yet ---------------


def test_an_allowance_used_by_a_synth_allows_only_that_form_until_the_next_lock(tmp_path: Path) -> None:
    """Deployed with the allowance but not locked yet: a second edit of the same resource is refused."""

    env = environment(tmp_path, allow=("Storage/Lustre",))
    first = edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"})
    guard(env, first)
    record = json.loads(in_flight_path(env).read_text(encoding="utf-8"))
    assert record["resources"]["Storage/Lustre/Resource"]["allowance"] == "Storage/Lustre"
    # The edges: the same form again (cdk deploy synthesizes again), or an in-place update of it, passes.
    guard(env, edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"}))
    guard(env, edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"}, digest="d1"))
    second = edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "SCRATCH_2"})
    text = refusal(env, second)
    assert (
        "retention.allow_replacement: an earlier synth since the lock was written let Storage/Lustre/Resource "
        "through ('Storage/Lustre'" in text
    )
    assert f"'mlcluster lock {NAME}' with credentials" in text
    # Weakening it instead (a policy) is another form too.
    assert "an earlier synth since the lock was written let" in refusal(
        env,
        edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"}, deletion_policy="Delete"),
    )
    # Issue 30 item 5: the lock file's bytes changed without 'mlcluster lock' (a merge, a checkout, line endings):
    # the record is not dropped, every synth is refused with the way, the record kept.
    kept = in_flight_path(env).read_text(encoding="utf-8")
    write_lock(env, Lock(deployed(), "deployed", accepted=("elsewhere",)))
    for later in (second, first, deployed()):
        text = refusal(env, later)
        assert "(allowances in flight): was written over another version of" in text
        assert f"Run 'mlcluster lock {NAME}' with credentials: it reads what is deployed and removes this file" in text
    assert in_flight_path(env).read_text(encoding="utf-8") == kept
    # The edge: once 'mlcluster lock' rewrote the lock and removed the record, the edit passes.
    in_flight_path(env).unlink()
    guard(env, second)
    # A record nobody can read is refused with the way, never ignored.
    in_flight_path(env).write_text("{", encoding="utf-8")
    assert "(allowances in flight): cannot be read" in refusal(env, second)


@pytest.mark.parametrize(
    ("later_allow", "later"),
    [
        # Review r3 finding 2: the same resource through another spelling of the entry, in another form.
        (("Storage/Lustre/Resource",), {"create_only": {"DeploymentType": "SCRATCH_2"}}),
        # The edit reverted and the allowance removed: the deployed file system is the replaced one, so the locked
        # form would replace it again.
        ((), {}),
        # The allowance removed, the resource weakened instead.
        ((), {"create_only": {"DeploymentType": "PERSISTENT_1"}, "deletion_policy": "Delete"}),
    ],
)
def test_a_recorded_resource_in_another_form_is_refused_however_the_file_names_it(
    tmp_path: Path, later_allow: tuple[str, ...], later: dict[str, Any]
) -> None:

    env = environment(tmp_path, allow=("Storage/Lustre",))
    guard(env, edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"}))
    env = load_environment(
        write_env(tmp_path, NAME, {**MINIMAL, "retention": {"allow_replacement": list(later_allow)}})
    )
    snapshot = edit(deployed(), "Storage", "Lustre", **later) if later else deployed()
    text = refusal(env, snapshot)
    assert "an earlier synth since the lock was written let Storage/Lustre/Resource through ('Storage/Lustre'" in text
    assert f"Run 'mlcluster lock {NAME}' with credentials" in text
    # The edges: the recorded form itself passes, through either spelling (cdk deploy synthesizes again), and
    # after 'mlcluster lock' removed the record the reverted file passes (the lock then says what is deployed).
    for spelling in ("Storage/Lustre", "Storage/Lustre/Resource"):
        again = load_environment(write_env(tmp_path, NAME, {**MINIMAL, "retention": {"allow_replacement": [spelling]}}))
        guard(again, edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"}))
    in_flight_path(env).unlink()
    guard(load_environment(write_env(tmp_path, NAME, MINIMAL)), deployed())


def test_a_record_of_the_earlier_format_is_read_by_the_resource_it_names(tmp_path: Path) -> None:
    import hashlib

    from mlcluster.lockfile import _form

    env = environment(tmp_path, allow=("Storage/Lustre",))
    recorded = edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "PERSISTENT_1"})
    form = _form(recorded[f"{NAME}-Storage"].resources["Lustre"])
    digest = hashlib.sha256(lock_path(env).read_bytes()).hexdigest()
    earlier = {"lock": digest, "allowances": {"Storage/Lustre": {"resource": "Storage/Lustre/Resource", "form": form}}}
    in_flight_path(env).write_text(json.dumps(earlier), encoding="utf-8")
    assert "let Storage/Lustre/Resource through ('Storage/Lustre'" in refusal(
        env, edit(deployed(), "Storage", "Lustre", create_only={"DeploymentType": "SCRATCH_2"})
    )
    guard(env, recorded)


def test_a_synth_without_an_allowance_records_nothing(tmp_path: Path) -> None:

    env = environment(tmp_path)
    guard(env, deployed())
    assert not in_flight_path(env).exists()


def test_the_rendered_home_volume_policy_reaches_the_guard(tmp_path: Path) -> None:
    """The same edit through ParallelCluster's rendered configuration (render.py), not a hand-made one."""
    from mlcluster.pcluster.render import render_cluster_config
    from tests.pcluster.pcluster_support import inputs, pcluster

    def cluster(home: dict[str, Any]) -> Snapshot:
        section = {
            "queues": [{"name": "train", "compute_resources": [{"name": "gpu", "instance_type": "p5.48xlarge"}]}],
            "shared_storage": {"home_volume": home},
        }
        config = render_cluster_config(pcluster(section), inputs())
        template = {
            "Resources": {
                "Cluster": {
                    "Type": "Custom::PclusterCluster",
                    "Properties": {
                        "ClusterName": "p5-train",
                        "DeletionPolicy": "Retain",
                        "ClusterConfiguration": config,
                    },
                }
            }
        }
        read = stack_state(template, {"Cluster": "Cluster/Cluster/Resource"}).resources["Cluster"]
        return edit(deployed(), "Cluster", "Cluster", create_only=read.create_only, fate=read.fate)

    env = environment(tmp_path)
    write_lock(env, Lock(cluster({}), "deployed"))  # unset: Retain in an environment that retains
    assert "SharedStorage DeletionPolicy /home: Retain -> Delete" in refusal(
        env, cluster({"deletion_policy": "Delete"})
    )
    guard(env, cluster({"deletion_policy": "Snapshot"}))
