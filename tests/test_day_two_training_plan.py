"""Issue 10, path 7: a HyperPod cluster on a training plan that would be replaced is refused at synth.

CloudFormation replaces ``AWS::SageMaker::Cluster`` by creating the new cluster before it deletes
the old one; a training plan holds only the instances the old cluster uses, so the new cluster
cannot get its nodes. The guard (``mlcluster.lockfile.guard``) is given the example ``hyperpod``
environment's committed lock file and a snapshot edited the way a synth of the edit would produce
it (no synthesis needed: the guard compares snapshots).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.config import ConfigError, load_environment
from mlcluster.lockfile import guard, read_lock
from mlcluster.replacement import HYPERPOD_TYPE, Snapshot
from tests.support import ENVIRONMENTS, write_env

PLAN = "arn:aws:sagemaker:us-west-2:111111111111:training-plan/p5-two-nodes"


def environment(tmp_path: Path, *, plan: str | None, count: int = 2, allow: list[str] | None = None) -> Any:
    """The example ``hyperpod`` environment (with its lock) whose worker group draws on ``plan``."""
    data = yaml.safe_load((ENVIRONMENTS / "hyperpod.yaml").read_text(encoding="utf-8"))
    worker = data["cluster"]["hyperpod"]["workers"][0]
    worker["instance_count"] = count
    if plan is not None:
        worker["training_plan_arn"] = plan
    if allow is not None:
        data["retention"]["allow_replacement"] = allow
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ENVIRONMENTS / "hyperpod.lock.json", tmp_path / "hyperpod.lock.json")
    return load_environment(write_env(tmp_path, "hyperpod", data))


def edited(env: Any, **create_only: Any) -> tuple[Snapshot, str]:
    """The locked snapshot with the HyperPod cluster's create-only values changed (and its digest)."""
    snapshot = read_lock(env)
    assert snapshot is not None
    for state in snapshot.values():
        for lid, resource in state.resources.items():
            if resource.type == HYPERPOD_TYPE:
                state.resources[lid] = dataclasses.replace(
                    resource, create_only={**resource.create_only, **create_only}, digest="edited"
                )
                return snapshot, lid
    raise AssertionError("no HyperPod cluster in the lock")


def refusal(env: Any, snapshot: Snapshot) -> str:
    with pytest.raises(ConfigError) as raised:
        guard(env, snapshot)
    return str(raised.value)


def test_renaming_a_cluster_on_a_training_plan_is_refused_with_the_plan_and_the_safe_way(tmp_path: Path) -> None:
    env = environment(tmp_path, plan=PLAN)
    snapshot, lid = edited(env, ClusterName="ml-hyperpod-2")
    text = refusal(env, snapshot)
    assert f"{env.source}: cluster: " in text
    assert f"replaces hyperpod-Cluster/Cluster/Cluster/Resource ({HYPERPOD_TYPE}, logical id {lid})" in text
    assert 'ClusterName "ml-hyperpod" -> "ml-hyperpod-2"' in text
    # Why create-before-delete cannot work: the plan, and that it holds only the old cluster's instances.
    assert f"worker-group-1 (2 instances) draw on training plan {PLAN}" in text
    assert "creates the new cluster before it deletes the old one" in text
    assert "holds the instances the old cluster runs on" in text
    # The safe way, step by step.
    assert "set instance_count: 0 on worker-group-1 and deploy" in text
    assert "npx cdk destroy 'hyperpod/Cluster'" in text
    assert "mlcluster lock hyperpod" in text


def test_an_allowance_does_not_make_a_training_plan_replacement_possible(tmp_path: Path) -> None:
    env = environment(tmp_path, plan=PLAN, allow=["Cluster/Cluster"])
    snapshot, _ = edited(env, ClusterName="ml-hyperpod-2")
    text = refusal(env, snapshot)
    assert f"draw on training plan {PLAN}" in text
    assert "retention.allow_replacement does not help here" in text


def test_the_same_rename_without_a_training_plan_gets_the_generic_refusal(tmp_path: Path) -> None:
    env = environment(tmp_path, plan=None)
    snapshot, _ = edited(env, ClusterName="ml-hyperpod-2")
    text = refusal(env, snapshot)
    assert "A new HyperPod cluster replaces the old one: running jobs are lost" in text
    assert "(/fsx/.mlcluster/controller) and the new controller, created while the old one still runs" in text
    assert "training plan" not in text


def test_a_training_plan_without_a_replacement_is_accepted(tmp_path: Path) -> None:
    env = environment(tmp_path, plan=PLAN)
    snapshot, _ = edited(env)  # only the digest changes: an update in place (e.g. a new instance_count)
    changes, _ = guard(env, snapshot)
    assert [c.action for c in changes if c.type == HYPERPOD_TYPE] == ["update"]


def test_the_safe_ways_middle_step_no_instances_on_the_plan_is_allowed_like_any_replacement(tmp_path: Path) -> None:
    env = environment(tmp_path, plan=PLAN, count=0, allow=["Cluster/Cluster"])
    snapshot, _ = edited(env, ClusterName="ml-hyperpod-2")
    changes, _ = guard(env, snapshot)
    assert [c.action for c in changes if c.type == HYPERPOD_TYPE] == ["replace"]
    # Without the allowance it is the generic refusal (jobs are lost), not the training-plan one.
    env = environment(tmp_path / "no-allowance", plan=PLAN, count=0)
    text = refusal(env, edited(env, ClusterName="ml-hyperpod-2")[0])
    assert "A new HyperPod cluster replaces the old one" in text
    assert "draw on training plan" not in text


def test_a_new_controller_group_on_a_training_plan_is_the_data_guards_not_a_plan_refusal(tmp_path: Path) -> None:
    """Review i33 finding 2: a new controller group name keeps the cluster (UpdateCluster, no create-before-delete),
    so the training plan does not stand in the way: the generic refusal, which the cluster's allowance lets through.
    The committed lock records the controller group (locks without the record: tests/test_hyperpod_network_outcomes.py)."""
    env = environment(tmp_path / "refused", plan=PLAN)
    snapshot, _ = edited(env, ControllerInstanceGroupName="controller-2")
    text = refusal(env, snapshot)
    assert "cluster.hyperpod.controller.instance_group_name: this edit replaces" in text
    assert 'ControllerInstanceGroupName "controller-machine" -> "controller-2"' in text
    assert "training plan" not in text
    allowed = environment(tmp_path / "allowed", plan=PLAN, allow=["Cluster/Cluster"])
    changes, _ = guard(allowed, edited(allowed, ControllerInstanceGroupName="controller-2")[0])
    assert [c.action for c in changes if c.type == HYPERPOD_TYPE] == ["replace"]
    # The edge: the locked controller's name passes.
    kept = environment(tmp_path / "kept", plan=PLAN)
    changes, _ = guard(kept, edited(kept, ControllerInstanceGroupName="controller-machine")[0])
    assert not [c for c in changes if c.dangerous]
