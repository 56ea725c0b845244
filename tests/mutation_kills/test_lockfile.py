"""The day-two guard's lock file (mlcluster/lockfile.py): behaviour `make mutation` showed no test asserted.

Each test says which surviving mutant it kills; all of them assert what an operator reads or relies on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlcluster.config import Environment, load_environment
from mlcluster.config.schema import NOT_A_VALUE
from mlcluster.lockfile import (
    Lock,
    allowed,
    load_lock,
    missing_lock,
    notices,
    read_lock,
    read_lock_file,
    training_plan_refusal,
    write_lock,
)
from mlcluster.replacement import HYPERPOD_TYPE, Change, ResourceState, StackState
from tests.support import ENVIRONMENTS


def test_the_missing_lock_refusal_reads_as_a_sentence_not_as_an_empty_value(tmp_path: Path) -> None:
    """missing_lock: the problem carries no value, so it is not rendered as 'no value (empty or missing)'."""
    shutil.copy(ENVIRONMENTS / "dev.yaml", tmp_path / "dev.yaml")
    environment = load_environment(tmp_path / "dev.yaml")
    rendered = missing_lock(environment).render()
    assert rendered == (
        f"(lock file): {tmp_path / 'dev.lock.json'} is missing, so nothing tells the guard what is deployed (stacks "
        "of dev may exist: a file renamed back, a clone without the lock). Run 'mlcluster lock dev' with credentials "
        "for its account (it records the deployed stacks, none for a new environment), or 'mlcluster lock dev --new' "
        "to declare that nothing of it is deployed, and commit the lock file."
    )


def dev(tmp_path: Path) -> Environment:
    shutil.copy(ENVIRONMENTS / "dev.yaml", tmp_path / "dev.yaml")
    return load_environment(tmp_path / "dev.yaml")


def test_a_lock_reads_back_as_written_with_its_account_and_region(tmp_path: Path) -> None:
    """write_lock/lock_document: every field an operator's next `mlcluster lock` or the guard reads comes back."""
    environment = dev(tmp_path)
    lock = Lock({}, "deployed", ("Cluster/HyperPod",), ("a change",), "123456789012", "us-west-2")
    path = write_lock(environment, lock)
    assert read_lock_file(path, "dev") == lock
    assert json.loads(path.read_text())["environment"] == "dev"
    without = Lock({}, "templates")
    assert set(json.loads(write_lock(environment, without).read_text())) == {
        "format",
        "environment",
        "source",
        "allowances_used",
        "accepted",
        "stacks",
    }
    assert read_lock_file(path, "dev") == without


@pytest.mark.parametrize("name", ["dev", "prod", "p5"])
def test_rewriting_a_committed_lock_changes_no_byte(tmp_path: Path, name: str) -> None:
    """write_lock: one key per line, sorted, so a refreshed lock diffs only where the deployment changed."""
    shutil.copy(ENVIRONMENTS / f"{name}.yaml", tmp_path / f"{name}.yaml")
    environment = load_environment(tmp_path / f"{name}.yaml")
    committed = (ENVIRONMENTS / f"{name}.lock.json").read_text(encoding="utf-8")
    lock = read_lock_file(ENVIRONMENTS / f"{name}.lock.json", name)
    assert write_lock(environment, lock).read_text(encoding="utf-8") == committed


def test_the_training_plan_refusal_names_every_group_plan_and_the_allowance_the_guard_accepts(tmp_path: Path) -> None:
    """training_plan_refusal: the groups with their counts, each plan once, and an allowance `allowed` takes."""
    environment = dev(tmp_path)
    change = Change(
        "dev-Cluster", "HyperPod1234", HYPERPOD_TYPE, "Cluster/HyperPod/Resource", "replace", ("X: a -> b",)
    )
    groups = [("gpu", 1, "arn:plan/a"), ("big", 4, "arn:plan/b"), ("more", 2, "arn:plan/a")]
    problem = training_plan_refusal(environment, change, groups)
    assert problem.value is NOT_A_VALUE
    text = problem.render()
    assert text.startswith(
        "cluster: this edit replaces dev-Cluster/Cluster/HyperPod/Resource (AWS::SageMaker::Cluster, logical id "
        "HyperPod1234): X: a -> b. Groups gpu (1 instance), big (4 instances), more (2 instances) draw on training "
        "plan arn:plan/a, arn:plan/b. CloudFormation creates"
    )
    assert "(1) set instance_count: 0 on gpu, big, more and deploy" in text
    assert "add 'Cluster/HyperPod' to retention.allow_replacement" in text
    assert allowed(change, ["Cluster/HyperPod"])
    assert "(3) remove the allowance, set the counts back and deploy. Or, when a group cannot go to 0" in text
    assert text.endswith(
        "destroy the cluster stack first (npx cdk destroy 'dev/Cluster'; the storage stacks keep the data), make the "
        "edit, run 'mlcluster lock dev', then deploy."
    )


def test_an_environment_without_a_lock_file_has_no_locked_snapshot(tmp_path: Path) -> None:
    """read_lock: no lock file reads as None (the guard then refuses with missing_lock), not as an error."""
    environment = dev(tmp_path)
    assert load_lock(environment) is None
    assert read_lock(environment) is None
    write_lock(environment, Lock({}, "new"))
    assert read_lock(environment) == {}


def state(kind: str, path: str, policy: str) -> ResourceState:
    return ResourceState(kind, path, {}, "digest", deletion_policy=policy)


def test_notices_name_each_retained_resource_an_accepted_edit_leaves_running(tmp_path: Path) -> None:
    """notices: every removed resource whose policy keeps it, in a stack that stays, unless the guard refuses it.

    A skipped change (a dropped stack, a deleted resource) comes first, so a loop that stopped there would
    report nothing after it; the DRA gets its own way to delete it.
    """
    text = (ENVIRONMENTS / "dev.yaml").read_text()
    text = text.replace("retention:\n", "retention:\n  allow_replacement: [Storage/Allowed]\n", 1)
    (tmp_path / "dev.yaml").write_text(text)
    environment = load_environment(tmp_path / "dev.yaml")
    resources = {
        "Deleted": state("AWS::Logs::LogGroup", "Storage/Deleted/Resource", "Delete"),
        "Refused": state("AWS::FSx::FileSystem", "Storage/Refused/Resource", "Retain"),
        "Allowed": state("AWS::FSx::FileSystem", "Storage/Allowed/Resource", "Retain"),
        "Group": state("AWS::EC2::SecurityGroup", "Storage/Group/Resource", "RetainExceptOnCreate"),
        "Dra": state("AWS::FSx::DataRepositoryAssociation", "DataRepository/Dra/Resource", "Retain"),
    }
    locked = {"dev-Storage": StackState(resources, {}), "dev-Gone": StackState({}, {})}
    after = {"dev-Storage": StackState({}, {})}

    def removed(logical_id: str, stack: str = "dev-Storage") -> Change:
        old = resources.get(logical_id) or state("AWS::Logs::LogGroup", "Gone/X/Resource", "Retain")
        return Change(stack, logical_id, old.type, old.path, "remove")

    changes = [removed("X", "dev-Gone"), removed("Deleted"), removed("Refused")]
    changes += [removed("Allowed"), removed("Group"), removed("Dra")]
    found = notices(environment, locked, after, changes)
    source = environment.source
    keeps = "leaves the template but DeletionPolicy"
    assert found == [
        f"{source}: (see the reasons): dev-Storage/Storage/Allowed/Resource (AWS::FSx::FileSystem) {keeps} Retain keeps "
        "it running outside the stack: delete it by hand when it is no longer needed ('mlcluster status' lists it)",
        f"{source}: (see the reasons): dev-Storage/Storage/Group/Resource (AWS::EC2::SecurityGroup) {keeps} "
        "RetainExceptOnCreate keeps it running outside the stack: delete it by hand when it is no longer needed "
        "('mlcluster status' lists it)",
        f"{source}: storage.lustre.data_repository_associations: dev-Storage/DataRepository/Dra/Resource "
        f"(AWS::FSx::DataRepositoryAssociation) {keeps} Retain keeps it running outside the stack: it keeps "
        "importing from and exporting to the bucket (deletions too), and the path cannot be associated again until "
        "it is gone; delete it with 'aws fsx delete-data-repository-association --association-id ID "
        "--no-delete-data-in-file-system' (files and objects stay)",
    ]
