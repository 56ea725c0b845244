"""Update: in-place UpdateCluster (counts, added and removed groups), replacement on a new name, refusals, rollback."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.preflight import PreflightError
from mlcluster.handlers.hyperpod_cluster.spec import PropertyError
from tests.handlers.conftest import (
    Signals,
    World,
    client,
    create_event,
    delete_event,
    group,
    handle_url,
    moto_cluster,
    operations,
    provisioning_parameters,
    put_parameters,
    requests_of,
    update_event,
    watcher_inputs,
)

Calls = list[tuple[str, dict[str, Any]]]


def _groups(name: str = "ml-cluster") -> dict[str, int]:
    """The groups moto's cluster has now, with their target counts."""
    return {g["InstanceGroupName"]: g["TargetCount"] for g in moto_cluster(name).instance_groups}


def _created(world: World, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    props = world.props(spec)
    app.on_event(create_event(props))
    return props


def test_instance_count_change_updates_in_place(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    sagemaker_calls.clear()
    new = world.props(world.spec(workers="4"), handle="update-1")

    result = app.on_event(update_event("ml-cluster", new, old))

    assert result == {
        "PhysicalResourceId": "ml-cluster",
        "Data": {
            "ClusterName": "ml-cluster",
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/ml-cluster",
            "ClusterStatus": "Updating",
        },
    }
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert [(g["InstanceGroupName"], g["InstanceCount"]) for g in sent["InstanceGroups"]] == [
        ("controller-machine", 1),
        ("login", 1),
        ("workers", 4),
    ]
    assert "InstanceGroupsToDelete" not in sent
    assert "NodeRecovery" not in sent  # unchanged cluster-level fields are not sent
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 4}
    latest = watcher_inputs(world)[-1]
    assert latest["WaitHandleUrl"] == handle_url("update-1")
    assert latest["ExpectedGroups"]["workers"] == 4


def test_added_group_is_created_after_the_lifecycle_checks(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    put_parameters(provisioning_parameters("workers", "workers-b"))
    spec = world.spec()
    spec["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    sagemaker_calls.clear()

    app.on_event(update_event("ml-cluster", world.props(spec, handle="update-1"), old))

    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert [g["InstanceGroupName"] for g in sent["InstanceGroups"]] == [
        "controller-machine",
        "login",
        "workers",
        "workers-b",
    ]
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 2, "workers-b": 3}
    assert watcher_inputs(world)[-1]["ExpectedGroups"] == {
        "controller-machine": 1,
        "login": 1,
        "workers": 2,
        "workers-b": 3,
    }


def test_added_group_without_lifecycle_scripts_is_refused(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    client("s3").delete_object(Bucket="sagemaker-mlcluster-lifecycle-test", Key="lifecycle/v1/on_create.sh")
    spec = world.spec()
    spec["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    sagemaker_calls.clear()

    with pytest.raises(PreflightError, match=r"on_create\.sh does not exist"):
        app.on_event(update_event("ml-cluster", world.props(spec, handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)


def test_removed_worker_group_is_deleted(world: World, sagemaker_calls: Calls) -> None:
    put_parameters(provisioning_parameters("workers", "workers-b"))
    two = world.spec()
    two["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    old = _created(world, two)
    put_parameters(provisioning_parameters("workers"))
    sagemaker_calls.clear()

    app.on_event(update_event("ml-cluster", world.props(world.spec(), handle="update-1"), old))

    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["InstanceGroupsToDelete"] == ["workers-b"]
    assert [g["InstanceGroupName"] for g in sent["InstanceGroups"]] == ["controller-machine", "login", "workers"]
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 2}
    assert sorted(n.instance_group_name for n in moto_cluster("ml-cluster").nodes.values()).count("workers-b") == 0


def test_scaling_up_while_the_parameters_name_a_removed_group_is_refused(world: World, sagemaker_calls: Calls) -> None:
    """New nodes run the lifecycle scripts, so the checks run and catch the stale parameters."""
    put_parameters(provisioning_parameters("workers", "workers-b"))
    two = world.spec()
    two["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    old = _created(world, two)
    sagemaker_calls.clear()

    with pytest.raises(PreflightError, match=r"worker_groups\[1\].instance_group_name is 'workers-b', but ClusterSpec"):
        app.on_event(update_event("ml-cluster", world.props(world.spec(workers=3), handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)


def test_new_cluster_name_creates_a_replacement(world: World, sagemaker_calls: Calls) -> None:
    """The construct renames the cluster when a create-only field changes; the old one is deleted afterwards."""
    old = _created(world)
    spec = world.spec(name="ml-cluster-2")
    spec["InstanceGroups"][2]["InstanceType"] = "ml.p4d.24xlarge"
    sagemaker_calls.clear()

    result = app.on_event(update_event("ml-cluster", world.props(spec, handle="replace"), old))

    assert result["PhysicalResourceId"] == "ml-cluster-2"
    assert result["Data"]["ClusterName"] == "ml-cluster-2"
    assert operations(sagemaker_calls) == ["DescribeCluster", "CreateCluster"]
    assert requests_of(sagemaker_calls, "CreateCluster")[0]["ClusterName"] == "ml-cluster-2"
    assert watcher_inputs(world)[-1]["ClusterName"] == "ml-cluster-2"
    # CloudFormation then deletes the old physical id.
    app.on_event(delete_event("ml-cluster", old))
    assert sorted(c["ClusterName"] for c in client("sagemaker").list_clusters()["ClusterSummaries"]) == ["ml-cluster-2"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s["InstanceGroups"][2].update(InstanceType="ml.p4d.24xlarge"),
            r"ClusterSpec.InstanceGroups\[workers\].InstanceType: changing 'ml.p5.48xlarge' to 'ml.p4d.24xlarge' needs a new cluster",
        ),
        (
            lambda s: s["InstanceGroups"][0].update(ThreadsPerCore=2),
            r"InstanceGroups\[controller-machine\].ThreadsPerCore: changing 1 to 2 needs a new cluster",
        ),
        (
            lambda s: s["InstanceGroups"][1].update(ExecutionRole="arn:aws:iam::123456789012:role/other"),
            r"InstanceGroups\[login\].ExecutionRole: changing .* needs a new cluster",
        ),
        (
            lambda s: s["VpcConfig"].update(Subnets=["subnet-0123456789abcdef0"]),
            r"ClusterSpec.VpcConfig: changing .* needs a new cluster \(HyperPod cannot change VpcConfig in place\); give the cluster a new ClusterName",
        ),
    ],
)
def test_create_only_changes_under_the_same_name_are_refused(
    world: World, sagemaker_calls: Calls, edit: Any, message: str
) -> None:
    old = _created(world)
    spec = world.spec()
    edit(spec)
    sagemaker_calls.clear()
    with pytest.raises(PropertyError, match=message):
        app.on_event(update_event("ml-cluster", world.props(spec, handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)


def test_tag_change_alone_retags_without_update_or_watcher(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    spec = world.spec(Tags=[{"Key": "owner", "Value": "ml-team"}])
    sagemaker_calls.clear()

    app.on_event(update_event("ml-cluster", world.props(spec), old))

    assert operations(sagemaker_calls) == ["DescribeCluster", "DeleteTags", "AddTags"]
    assert requests_of(sagemaker_calls, "DeleteTags")[0]["TagKeys"] == ["project"]
    arn = moto_cluster("ml-cluster").arn
    assert client("sagemaker").list_tags(ResourceArn=arn)["Tags"] == [{"Key": "owner", "Value": "ml-team"}]
    assert len(watcher_inputs(world)) == 1  # the Create's only


def test_node_recovery_change_is_sent(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    sagemaker_calls.clear()
    app.on_event(update_event("ml-cluster", world.props(world.spec(NodeRecovery="None"), handle="update-1"), old))
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["NodeRecovery"] == "None"


def test_new_wait_handle_without_cluster_change_still_gets_a_signal(world: World, sagemaker_calls: Calls) -> None:
    """A fresh WaitCondition must be signalled even when there is nothing to update, or the stack hangs."""
    old = _created(world)
    sagemaker_calls.clear()
    app.on_event(update_event("ml-cluster", world.props(handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)
    assert [w["WaitHandleUrl"] for w in watcher_inputs(world)] == [handle_url("create"), handle_url("update-1")]


def test_update_of_a_busy_cluster_is_refused(world: World) -> None:
    old = _created(world)
    moto_cluster("ml-cluster").status = "Updating"
    with pytest.raises(
        RuntimeError, match=r"'ml-cluster' is Updating and cannot be updated now; wait until it is InService"
    ):
        app.on_event(update_event("ml-cluster", world.props(world.spec(workers=4), handle="update-1"), old))


def test_update_of_a_cluster_deleted_out_of_band_is_a_clear_error(world: World) -> None:
    old = _created(world)
    client("sagemaker").delete_cluster(ClusterName="ml-cluster")
    with pytest.raises(
        RuntimeError, match=r"'ml-cluster' does not exist any more \(deleted outside CloudFormation\?\)"
    ):
        app.on_event(update_event("ml-cluster", world.props(world.spec(workers=4), handle="update-1"), old))


def test_failed_update_then_rollback_restores_the_old_groups(
    world: World, sagemaker_calls: Calls, signals: Signals
) -> None:
    """Update adds a group and scales; the cluster fails; CloudFormation rolls back with the old properties."""
    original = _created(world)
    put_parameters(provisioning_parameters("workers", "workers-b"))
    bigger = world.spec(workers=4)
    bigger["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 2))
    failed = world.props(bigger, handle="update-1")
    app.on_event(update_event("ml-cluster", failed, original))
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 4, "workers-b": 2}

    # The service gives up on the update; the watcher tells CloudFormation.
    cluster = moto_cluster("ml-cluster")
    cluster.status, cluster.failure_message = "Failed", "InsufficientInstanceCapacity for ml.g5.48xlarge"
    state = {**watcher_inputs(world)[-1], "NotBefore": 0}
    assert app.watch(state)["done"] is True
    assert signals.bodies()[-1]["Status"] == "FAILURE"
    watchers = len(watcher_inputs(world))

    # Rollback: the old properties come back as the new ones.
    sagemaker_calls.clear()
    put_parameters(provisioning_parameters("workers"))
    result = app.on_event(update_event("ml-cluster", original, failed))

    assert result["PhysicalResourceId"] == "ml-cluster"
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["InstanceGroupsToDelete"] == ["workers-b"]
    assert [(g["InstanceGroupName"], g["InstanceCount"]) for g in sent["InstanceGroups"]] == [
        ("controller-machine", 1),
        ("login", 1),
        ("workers", 2),
    ]
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 2}
    # The original handle was signalled long ago: no second watcher for it.
    assert len(watcher_inputs(world)) == watchers


def test_rollback_after_the_service_rolled_back_itself_asks_only_for_what_is_there(
    world: World, sagemaker_calls: Calls
) -> None:
    """If the added group never appeared, the rollback must not ask to delete it."""
    original = _created(world)
    put_parameters(provisioning_parameters("workers", "workers-b"))
    bigger = world.spec()
    bigger["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 2))
    failed = world.props(bigger, handle="update-1")
    app.on_event(update_event("ml-cluster", failed, original))
    cluster = moto_cluster("ml-cluster")
    cluster.instance_groups = [g for g in cluster.instance_groups if g["InstanceGroupName"] != "workers-b"]
    cluster.status = "InService"
    put_parameters(provisioning_parameters("workers"))
    sagemaker_calls.clear()

    app.on_event(update_event("ml-cluster", original, failed))

    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert "InstanceGroupsToDelete" not in sent
    assert _groups() == {"controller-machine": 1, "login": 1, "workers": 2}


def test_update_properties_are_parsed_like_create(world: World) -> None:
    old = _created(world)
    bad = copy.deepcopy(world.props(handle="update-1"))
    bad["ClusterSpec"] = json.dumps({**world.spec(), "InstanceGroups": "many"})
    with pytest.raises(
        PropertyError,
        match=r"^ClusterSpec is not a valid CreateCluster request: Invalid type for parameter InstanceGroups",
    ):
        app.on_event(update_event("ml-cluster", bad, old))
    with pytest.raises(PropertyError, match=r"^OldResourceProperties: CreateTimeoutSeconds: 'x' is not valid"):
        app.on_event(update_event("ml-cluster", world.props(handle="update-1"), {**old, "CreateTimeoutSeconds": "x"}))
