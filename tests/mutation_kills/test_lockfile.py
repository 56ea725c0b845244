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
    read_lock,
    read_lock_file,
    training_plan_refusal,
    write_lock,
)
from mlcluster.replacement import HYPERPOD_TYPE, Change
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
