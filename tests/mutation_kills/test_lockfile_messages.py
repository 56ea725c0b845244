"""The lock file's refusals and records: behaviour the second `make mutation MODULE=lockfile` run showed no test
asserted (survivors of the run with the ordering and tests/mutation_kills/test_lockfile.py).

Each test names the mutants it kills; each asserts what an operator reads or what the next command reads back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import Environment, load_environment
from mlcluster.lockfile import (
    HOME_MOUNT,
    VOLUME_POLICY,
    WEAKER,
    ForeignLockError,
    Lock,
    _retained,
    allowance_problems,
    allowed,
    cluster_rename_refusal,
    in_flight_path,
    notices,
    read_lock_file,
    record_in_flight,
    refusals,
    resource_name,
    stack_refusals,
    training_plan_refusal,
    write_lock,
)
from mlcluster.replacement import HYPERPOD_TYPE, PCLUSTER_TYPE, Change, ResourceState, Snapshot, StackState
from tests.support import ENVIRONMENTS


def dev(tmp_path: Path, allow: str | None = None) -> Environment:
    text = (ENVIRONMENTS / "dev.yaml").read_text()
    if allow is not None:
        text = text.replace("retention:\n", f"retention:\n  allow_replacement: [{allow}]\n", 1)
    (tmp_path / "dev.yaml").write_text(text)
    return load_environment(tmp_path / "dev.yaml")


@pytest.mark.parametrize("recorded", [None, 7, "delete-key"])
def test_a_lock_of_no_named_environment_is_refused_with_a_placeholder(tmp_path: Path, recorded: Any) -> None:
    """ForeignLockError mutants 3-5, 19-22: a missing or non-text environment key reads "<the other environment>",
    the message ends with where renaming is explained, and the error carries the value and the parsed lock."""
    path = write_lock(dev(tmp_path), Lock({}, "templates"))
    data = json.loads(path.read_text())
    if recorded == "delete-key":
        del data["environment"]
    else:
        data["environment"] = recorded
    path.write_text(json.dumps(data))
    with pytest.raises(ForeignLockError) as raised:
        read_lock_file(path, "dev")
    assert raised.value.recorded == (None if recorded == "delete-key" else recorded)
    assert raised.value.lock == Lock({}, "templates")
    text = str(raised.value)
    assert (
        "If <the other environment>.yaml and its lock were renamed to dev: a renamed file is a new environment" in text
    )
    assert "while the stacks of <the other environment> keep running;" in text
    assert text.endswith(
        "give both files their old names back (to rename, see the refusal of a lock whose environment file is gone)"
    )


def test_a_lock_of_another_environment_names_it(tmp_path: Path) -> None:
    """ForeignLockError mutant 3: a recorded name (text) is shown as it is."""
    path = write_lock(dev(tmp_path), Lock({}, "templates"))
    path.write_text(path.read_text().replace('"environment": "dev"', '"environment": "prod"'))
    with pytest.raises(ForeignLockError) as raised:
        read_lock_file(path, "dev")
    assert raised.value.recorded == "prod"
    assert "If prod.yaml and its lock were renamed to dev" in str(raised.value)


def test_the_training_plan_refusal_names_the_allowance_the_guard_accepts_on_any_path(tmp_path: Path) -> None:
    """training_plan_refusal mutant 7 (rsplit): the entry it tells to add is the resource's name as `allowed`
    reads it (above the first "/Resource"), also when a construct id below starts with "Resource"."""
    environment = dev(tmp_path)
    path = "Cluster/HyperPod/Resource/ResourceGroup"
    change = Change("dev-Cluster", "HyperPod1234", HYPERPOD_TYPE, path, "replace", ("X: a -> b",))
    text = training_plan_refusal(environment, change, [("gpu", 1, "arn:plan/a")]).render()
    assert resource_name(path) == "Cluster/HyperPod"
    assert "add 'Cluster/HyperPod' to retention.allow_replacement" in text
    assert allowed(change, ["Cluster/HyperPod"])


def test_the_cluster_rename_refusal_reads_in_full(tmp_path: Path) -> None:
    """cluster_rename_refusal mutants 16-25: the way to rename, word for word."""
    environment = dev(tmp_path)
    change = Change("dev-Cluster", "Cluster1", PCLUSTER_TYPE, "Cluster/PCluster/Resource", "replace", ("N: a -> b",))
    region = environment.config.region or "<region>"
    assert cluster_rename_refusal(environment, change).render() == (
        "cluster.name: this edit replaces dev-Cluster/Cluster/PCluster/Resource (Custom::PclusterCluster, logical id "
        "Cluster1): N: a -> b. ParallelCluster's provider refuses a new ClusterName on a running cluster ('Cannot "
        "update the ClusterName in the properties.'): the deploy fails and CloudFormation rolls the stack back, with "
        "retention.allow_replacement too. To rename the cluster: (1) drain the queues (no running jobs) and copy "
        "what lives on the head node (/home unless it is on OpenZFS); (2) keep the old name in this file and "
        "destroy the cluster stack (npx cdk destroy --exclusively 'dev/Cluster'; the storage stacks keep the "
        "data); where the custom resource's DeletionPolicy property is Retain (retention.on_delete: retain) "
        "ParallelCluster keeps the cluster, so delete it then with 'pcluster delete-cluster -n <old cluster name> "
        f"--region {region}' (only once its stack is destroyed); (3) run 'mlcluster lock dev'; (4) set the new "
        "name and deploy."
    )


def state(kind: str, path: str, policy: str = "Retain", **create_only: Any) -> ResourceState:
    return ResourceState(kind, path, dict(create_only), "digest", deletion_policy=policy)


def test_the_retained_list_names_each_kept_resource_or_none() -> None:
    """_retained mutants 3, 6, 7: the dropped-stack refusal's "kept when the stack is deleted" list."""
    kept = [
        state("AWS::FSx::FileSystem", "Storage/Lustre/Resource"),
        state("AWS::Logs::LogGroup", "Storage/Logs/Resource", "Delete"),
        state("AWS::S3::Bucket", "Storage/Data/Resource", "RetainExceptOnCreate"),
    ]
    assert _retained(kept) == (
        "Storage/Lustre/Resource (AWS::FSx::FileSystem), Storage/Data/Resource (AWS::S3::Bucket)"
    )
    assert _retained([state("AWS::Logs::LogGroup", "Storage/Logs/Resource", "Delete")]) == "none"


@pytest.mark.parametrize(("create_only", "name"), [({}, "<cluster name>"), ({"ClusterName": "ml-old"}, "ml-old")])
def test_a_kept_parallelcluster_cluster_is_named_with_the_way_to_delete_it(
    tmp_path: Path, create_only: dict[str, str], name: str
) -> None:
    """_left_running mutants 15-28: the cluster's name (or a placeholder when the lock has none) and the command."""
    environment = dev(tmp_path, allow="Cluster/PCluster")
    old = state(PCLUSTER_TYPE, "Cluster/PCluster/Resource", **create_only)
    locked = {"dev-Cluster": StackState({"PCluster": old}, {})}
    change = Change("dev-Cluster", "PCluster", PCLUSTER_TYPE, old.path, "remove")
    (found,) = notices(environment, locked, {"dev-Cluster": StackState({}, {})}, [change])
    region = environment.config.region or "<region>"
    assert found.endswith(
        f"keeps it running outside the stack: cluster {name} (head node, static nodes) keeps running and billing. "
        "Once its jobs are done and what lives on its head node is copied, delete it with ParallelCluster's CLI: "
        f"'pcluster delete-cluster -n {name} --region {region}' (or delete its own CloudFormation stack, {name})"
    )


def test_the_in_flight_record_is_one_key_a_line_sorted(tmp_path: Path) -> None:
    """record_in_flight mutants 22, 23, 25: the record diffs line by line and reads back the same."""
    environment = dev(tmp_path)
    record_in_flight(
        environment, "digest-1", {"Storage/Lustre/Resource": {"form": "f1", "allowance": "Storage/Lustre"}}
    )
    assert in_flight_path(environment).read_text(encoding="utf-8") == (
        '{\n "lock": "digest-1",\n "resources": {\n  "Storage/Lustre/Resource": {\n   "allowance": "Storage/Lustre",\n'
        '   "form": "f1"\n  }\n }\n}\n'
    )
    shutil.copy(in_flight_path(environment), tmp_path / "copy.json")
    record_in_flight(
        environment, "digest-1", {"Storage/Lustre/Resource": {"form": "f1", "allowance": "Storage/Lustre"}}
    )
    assert in_flight_path(environment).read_bytes() == (tmp_path / "copy.json").read_bytes()


# Survivors of the seeded sample (`make mutation MODULE=lockfile SAMPLE=200 SEED=1`): the refusals as the operator
# reads them, and the key each names.


def bearing(allow: str, tmp_path: Path) -> tuple[Environment, Snapshot]:
    """dev with ``allow``, and a storage stack holding a file system and a bucket (both data-bearing)."""
    resources = {
        "Lustre": state("AWS::FSx::FileSystem", "Storage/Lustre/Resource"),
        "Bucket": state("AWS::S3::Bucket", "Storage/DataBucket/Resource"),
    }
    return dev(tmp_path, allow=allow), {"dev-Storage": StackState(resources, {})}


def test_an_allowance_naming_a_stack_lists_what_it_would_let_through(tmp_path: Path) -> None:
    """allowance_problems: a stack's folder names every data-bearing resource below it; the refusal is at
    retention.allow_replacement (the key to edit) and lists them."""
    environment, snapshot = bearing("Storage", tmp_path)
    (problem,) = allowance_problems(environment, Lock(snapshot, "templates"), snapshot, [])
    assert problem.render() == (
        "retention.allow_replacement: 'Storage' names 2 data-bearing resources ('Storage/DataBucket', "
        "'Storage/Lustre'); an allowance names one resource, for the one deploy that changes it: list only the ones "
        "this edit must replace or delete"
    )


def test_an_allowance_naming_nothing_is_refused_at_its_key(tmp_path: Path) -> None:
    """allowance_problems mutant 50: an entry naming no data-bearing resource (a typo, a resource gone) is refused
    at retention.allow_replacement, the key to edit, not at the file's top level."""
    environment, snapshot = bearing("Storage/Lustr", tmp_path)
    (problem,) = allowance_problems(environment, Lock(snapshot, "templates"), snapshot, [])
    assert problem.path == "retention.allow_replacement"
    assert problem.render() == (
        "retention.allow_replacement: 'Storage/Lustr' names no data-bearing resource of this environment (in its "
        "lock or its new templates); remove it"
    )


def test_every_allowance_after_a_used_one_is_still_checked(tmp_path: Path) -> None:
    """allowance_problems mutant 73: an entry the lock records as used does not end the check of the entries
    after it: one that allows nothing is refused too."""
    environment, snapshot = bearing("Storage/Lustre, Storage/DataBucket", tmp_path)
    lock = Lock(snapshot, "templates", allowances_used=("Storage/Lustre",))
    problems = allowance_problems(environment, lock, snapshot, [])
    assert [p.render().split(":", 2)[1].strip() for p in problems] == [
        "'Storage/Lustre' was used",
        "'Storage/DataBucket' allows nothing",
    ]


def test_a_rename_refusal_does_not_hide_the_changes_after_it(tmp_path: Path) -> None:
    """refusals mutant 38: a ParallelCluster rename is refused, and so is the file system replaced in the same
    edit (listed after it): the operator sees both before the first deploy attempt."""
    environment = dev(tmp_path)
    rename = Change("dev-Cluster", "PCluster", PCLUSTER_TYPE, "Cluster/PCluster/Resource", "replace", ("N: a -> b",))
    lustre = Change("dev-Storage", "Lustre", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "replace", ("X",))
    assert [p.path for p in refusals(environment, [rename, lustre])] == ["cluster.name", "storage.lustre"]


def test_a_volume_over_the_homes_is_refused_with_its_own_way_alone(tmp_path: Path) -> None:
    """refusals mutant 65: a change whose only reasons are mounts over /home gets the homes' safe way only; the
    weaker-policy text ("a 'cdk destroy' ... deletes it for good") would describe another danger."""
    environment = dev(tmp_path)
    reason = "SharedStorage MountDir /home: head node -> Ebs"
    change = Change("dev-Cluster", "PCluster", PCLUSTER_TYPE, "Cluster/PCluster/Resource", "weaken", (reason,))
    (problem,) = refusals(environment, [change])
    assert problem.render() == (
        "cluster.pcluster.shared_storage.home_volume: this edit weakens dev-Cluster/Cluster/PCluster/Resource "
        f"(Custom::PclusterCluster, logical id PCluster): {reason}. {HOME_MOUNT}. To allow it, add 'Cluster/PCluster' "
        "to retention.allow_replacement in this file for this one deploy (remove it after the deploy, when "
        "'mlcluster lock dev' has recorded it). 'mlcluster lock' records what is deployed: it does not clear this "
        "refusal."
    )


def test_a_weakened_volume_or_log_group_is_refused_at_the_key_that_sets_it(tmp_path: Path) -> None:
    """config_key mutants 40, 48: a shared volume at a mount mlcluster has no key of its own for names the shared
    storage section; a log group kept for less time names retention.log_retention_days, not its stack's section."""
    environment = dev(tmp_path)
    volume_reason = "SharedStorage DeletionPolicy /scratch: Retain -> Delete"
    volume = Change("dev-Cluster", "PCluster", PCLUSTER_TYPE, "Cluster/PCluster/Resource", "weaken", (volume_reason,))
    logs_path = "Observability/Logs/Resource"
    logs = Change("dev-Observability", "Logs", "AWS::Logs::LogGroup", logs_path, "weaken", ("RetentionInDays 30 -> 7",))
    assert [p.path for p in refusals(environment, [volume, logs])] == [
        "cluster.pcluster.shared_storage",
        "retention.log_retention_days",
    ]


def test_a_dropped_stack_without_a_key_of_its_own_is_refused_for_the_whole_file(tmp_path: Path) -> None:
    """stack_refusals mutant 62: the storage stack has no key that drops it (STACK_KEYS), so the refusal is for
    the file, "(file)" like the other whole-file keys ("(lock file)", "(environment file)")."""
    environment = dev(tmp_path)
    locked = {"dev-Storage": StackState({"Lustre": state("AWS::FSx::FileSystem", "Storage/Lustre/Resource")}, {})}
    (problem,) = stack_refusals(environment, locked, {})
    assert problem.render().startswith(
        "(file): this edit drops stack dev-Storage from the app, while the lock records it as deployed. CDK never "
        "deletes a stack dropped from an app (aws/aws-cdk-cli#787): it keeps running and billing, and no mlcluster "
        "command reaches it any more. Data-bearing resources in it: Storage/Lustre/Resource; kept when the stack is "
        "deleted (Retain): Storage/Lustre/Resource (AWS::FSx::FileSystem). Safe way: undo this edit"
    )


def test_a_resource_left_with_its_final_snapshot_is_noted_with_the_way_to_delete_it(tmp_path: Path) -> None:
    """_snapshot_left mutant 13: a file system removed under DeletionPolicy Snapshot (an allowed edit) leaves a
    billed snapshot; the notice says to delete it by hand (the RDS commands are for the database only)."""
    environment = dev(tmp_path, allow="Storage/OpenZfs")
    old = state("AWS::FSx::FileSystem", "Storage/OpenZfs/Resource", "Snapshot")
    locked = {"dev-Storage": StackState({"OpenZfs": old}, {})}
    change = Change("dev-Storage", "OpenZfs", old.type, old.path, "remove")
    assert notices(environment, locked, {"dev-Storage": StackState({}, {})}, [change]) == [
        f"{environment.source}: storage.openzfs: dev-Storage/Storage/OpenZfs/Resource (AWS::FSx::FileSystem) leaves the "
        "template, and CloudFormation deletes it, keeping a final snapshot (DeletionPolicy Snapshot): the snapshot "
        "holds its data and bills for its storage until it is deleted (delete it by hand when it is no longer "
        "needed); restoring it makes a new resource"
    ]


# Survivors of the seeded sample `make mutation MODULE=lockfile SEED=3`: the refusals word for word as the operator
# reads them, and the key each names.


def test_an_allowance_left_after_its_deploy_tells_how_to_use_it_again(tmp_path: Path) -> None:
    """allowance_problems mutant 71: the used allowance's refusal ends with the way to change that resource again
    (lock without it, then add it back for that deploy), the step an operator follows."""
    environment, snapshot = bearing("Storage/Lustre", tmp_path)
    lock = Lock(snapshot, "templates", allowances_used=("Storage/Lustre",))
    (problem,) = allowance_problems(environment, lock, snapshot, [])
    assert problem.render() == (
        "retention.allow_replacement: 'Storage/Lustre' was used: the lock records the deploy that changed "
        "Storage/Lustre/Resource with it. Remove it from the file: left there it lets the next edit of that resource "
        "through unseen. For a new change of it, run 'mlcluster lock dev' without it first (the lock then forgets the "
        "used allowance), then add it again for that deploy"
    )


def test_a_volume_policy_weakened_with_a_home_mount_gives_both_ways(tmp_path: Path) -> None:
    """refusals mutant 74: one edit both mounts a volume over /home and makes ParallelCluster delete the /scratch
    volume with the cluster: the refusal keeps each danger's safe way (the homes', then the volume's), not only
    the last one found."""
    environment = dev(tmp_path)
    mount = "SharedStorage MountDir /home: head node -> Ebs"
    volume = "SharedStorage DeletionPolicy /scratch: Retain -> Delete"
    change = Change("dev-Cluster", "PCluster", PCLUSTER_TYPE, "Cluster/PCluster/Resource", "weaken", (mount, volume))
    (problem,) = refusals(environment, [change])
    assert problem.render() == (
        "cluster.pcluster.shared_storage.home_volume: this edit weakens dev-Cluster/Cluster/PCluster/Resource "
        f"(Custom::PclusterCluster, logical id PCluster): {mount}; {volume}. {WEAKER}. {HOME_MOUNT}. {VOLUME_POLICY}. "
        "To allow it, add 'Cluster/PCluster' to retention.allow_replacement in this file for this one deploy (remove "
        "it after the deploy, when 'mlcluster lock dev' has recorded it). 'mlcluster lock' records what is deployed: "
        "it does not clear this refusal."
    )


def test_a_dropped_stack_without_data_or_protection_reads_in_full(tmp_path: Path) -> None:
    """stack_refusals mutants 24, 31, 65, 66: a dropped stack holding no data-bearing resource says "none", a stack
    without termination protection gets no command to turn it off, and the way ends with the steps after the
    destroy (keep or delete what it retained, accept the stack in the lock, then the edit)."""
    environment = dev(tmp_path)
    dashboard = state("AWS::CloudWatch::Dashboard", "Observability/Dashboard/Resource", "Delete")
    locked = {"dev-Observability": StackState({"Dashboard": dashboard}, {}, termination_protection=False)}
    (problem,) = stack_refusals(environment, locked, {})
    assert problem.render() == (
        "observability: this edit drops stack dev-Observability from the app, while the lock records it as deployed. "
        "CDK never deletes a stack dropped from an app (aws/aws-cdk-cli#787): its retained resources stay and bill "
        "(Prometheus and Grafana workspaces, log groups, the alarm topic's key): delete them by hand once their "
        "history is no longer needed ('mlcluster status' lists them), and no mlcluster command reaches it any more. "
        "Data-bearing resources in it: none; kept when the stack is deleted "
        "(Retain): none. Safe way: undo this edit, take what you need from the stack, destroy it while the app still "
        "has it (first deploy with observability.prometheus.enabled: false so the Cluster stack stops referencing it, "
        "then npx cdk destroy --exclusively 'dev/Observability': without --exclusively 'cdk destroy' also destroys "
        "the stacks that depend on it), delete or keep its retained resources, run 'mlcluster lock dev --accept "
        "dev-Observability' (it then records the stack gone), and make this edit."
    )


def test_termination_protection_turned_off_names_each_exposed_resource(tmp_path: Path) -> None:
    """stack_refusals mutants 80, 89, 91: the refusal is at retention.on_delete (the key whose retain keeps the
    protection), lists each data-bearing resource the stack's deletion would delete, and says how to give it up."""
    environment = dev(tmp_path)
    resources = {
        "Lustre": state("AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Delete"),
        "Bucket": state("AWS::S3::Bucket", "Storage/DataBucket/Resource", "Delete"),
    }
    locked = {"dev-Storage": StackState(resources, {}, termination_protection=True)}
    snapshot = {"dev-Storage": StackState(resources, {}, termination_protection=False)}
    (problem,) = stack_refusals(environment, locked, snapshot)
    assert problem.path == "retention.on_delete"
    assert problem.render() == (
        "retention.on_delete: this edit turns termination protection of dev-Storage off ('cdk deploy' sets it to "
        "what the app says), so 'cdk destroy' can delete the stack and with it every resource it does not retain: "
        "Storage/DataBucket/Resource, Storage/Lustre/Resource. Safe way: keep retention.on_delete: retain. To give "
        "the stack up deliberately, take the second copy of its data first and allow each of those resources by name "
        "in retention.allow_replacement."
    )
