"""Update: in-place UpdateCluster (counts, added and removed groups), replacement on a create-only change, rollback."""

from __future__ import annotations

import copy
import json
import re
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
    expected_name,
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


def _groups(name: str) -> dict[str, int]:
    """The groups moto's cluster ``name`` has now, with their target counts."""
    return {g["InstanceGroupName"]: g["TargetCount"] for g in moto_cluster(name).instance_groups}


def _clusters() -> list[str]:
    return sorted(c["ClusterName"] for c in client("sagemaker").list_clusters()["ClusterSummaries"])


def _created(world: World, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    props = world.props(spec)
    app.on_event(create_event(props))
    return props


def test_instance_count_change_updates_in_place(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    sagemaker_calls.clear()
    new = world.props(world.spec(workers="4"), handle="update-1")

    result = app.on_event(update_event(world.name, new, old))

    assert result == {
        "PhysicalResourceId": world.name,
        "Data": {
            "ClusterName": world.name,
            "ClusterArn": f"arn:aws:sagemaker:us-east-1:123456789012:cluster/{world.name}",
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
    assert _groups(world.name) == {"controller-machine": 1, "login": 1, "workers": 4}
    latest = watcher_inputs(world)[-1]
    assert latest["WaitHandleUrl"] == handle_url("update-1")
    assert latest["ExpectedGroups"]["workers"] == 4


def test_added_group_is_created_after_the_lifecycle_checks(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    put_parameters(provisioning_parameters("workers", "workers-b"))
    spec = world.spec()
    spec["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    sagemaker_calls.clear()

    result = app.on_event(update_event(world.name, world.props(spec, handle="update-1"), old))

    # In place: the cluster keeps its name although the new spec alone would hash to another one.
    assert expected_name(spec) != world.name
    assert result["PhysicalResourceId"] == result["Data"]["ClusterName"] == world.name
    assert "CreateCluster" not in operations(sagemaker_calls)
    assert _clusters() == [world.name]
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["ClusterName"] == world.name
    assert [g["InstanceGroupName"] for g in sent["InstanceGroups"]] == [
        "controller-machine",
        "login",
        "workers",
        "workers-b",
    ]
    assert _groups(world.name) == {"controller-machine": 1, "login": 1, "workers": 2, "workers-b": 3}
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
        app.on_event(update_event(world.name, world.props(spec, handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)


def test_removed_worker_group_is_deleted(world: World, sagemaker_calls: Calls) -> None:
    put_parameters(provisioning_parameters("workers", "workers-b"))
    two = world.spec()
    two["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    old = _created(world, two)
    name = expected_name(two)
    put_parameters(provisioning_parameters("workers"))
    sagemaker_calls.clear()

    result = app.on_event(update_event(name, world.props(world.spec(), handle="update-1"), old))

    assert result["PhysicalResourceId"] == result["Data"]["ClusterName"] == name
    assert "CreateCluster" not in operations(sagemaker_calls)
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["ClusterName"] == name
    assert sent["InstanceGroupsToDelete"] == ["workers-b"]
    assert [g["InstanceGroupName"] for g in sent["InstanceGroups"]] == ["controller-machine", "login", "workers"]
    assert _groups(name) == {"controller-machine": 1, "login": 1, "workers": 2}
    assert [n.instance_group_name for n in moto_cluster(name).nodes.values()].count("workers-b") == 0
    assert _clusters() == [name]


def test_scaling_up_while_the_parameters_name_a_removed_group_is_refused(world: World, sagemaker_calls: Calls) -> None:
    """New nodes run the lifecycle scripts, so the checks run and catch the stale parameters."""
    put_parameters(provisioning_parameters("workers", "workers-b"))
    two = world.spec()
    two["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 3))
    old = _created(world, two)
    sagemaker_calls.clear()

    with pytest.raises(PreflightError, match=r"worker_groups\[1\].instance_group_name is 'workers-b', but ClusterSpec"):
        app.on_event(update_event(expected_name(two), world.props(world.spec(workers=3), handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)


def test_new_instance_type_of_an_existing_group_creates_a_replacement(world: World, sagemaker_calls: Calls) -> None:
    """A new cluster under the new spec's name; CloudFormation deletes the old physical id afterwards."""
    old = _created(world)
    spec = world.spec()
    spec["InstanceGroups"][2]["InstanceType"] = "ml.p4d.24xlarge"
    new = world.props(spec, handle="replace")
    sagemaker_calls.clear()

    result = app.on_event(update_event(world.name, new, old))

    replacement = expected_name(spec)
    assert replacement != world.name
    assert result["PhysicalResourceId"] == result["Data"]["ClusterName"] == replacement
    assert result["Data"]["ClusterStatus"] == "Creating"
    assert operations(sagemaker_calls) == ["DescribeCluster", "CreateCluster"]
    (sent,) = requests_of(sagemaker_calls, "CreateCluster")
    assert (sent["ClusterName"], sent["InstanceGroups"][2]["InstanceType"]) == (replacement, "ml.p4d.24xlarge")
    assert watcher_inputs(world)[-1]["ClusterName"] == replacement
    assert _clusters() == sorted([world.name, replacement])
    # A retried update adopts the replacement instead of making a third cluster.
    assert app.on_event(update_event(world.name, new, old))["PhysicalResourceId"] == replacement
    assert _clusters() == sorted([world.name, replacement])
    # CloudFormation then deletes the old physical id.
    app.on_event(delete_event(world.name, old))
    assert _clusters() == [replacement]


@pytest.mark.parametrize(
    "edit",
    [
        lambda w, s: s["InstanceGroups"][0].update(ThreadsPerCore=2),
        lambda w, s: s["InstanceGroups"][1].update(ExecutionRole="arn:aws:iam::123456789012:role/other"),
        lambda w, s: s["VpcConfig"].update(Subnets=[w.main_table_subnet]),
        lambda w, s: s.update(ClusterName="ml-cluster-b"),
    ],
    ids=["threads_per_core", "execution_role", "vpc", "base_name"],
)
def test_other_create_only_changes_create_a_replacement(world: World, sagemaker_calls: Calls, edit: Any) -> None:
    old = _created(world)
    spec = world.spec()
    edit(world, spec)
    sagemaker_calls.clear()

    result = app.on_event(update_event(world.name, world.props(spec, handle="replace"), old))

    assert result["PhysicalResourceId"] == expected_name(spec) != world.name
    assert "UpdateCluster" not in operations(sagemaker_calls)
    assert _clusters() == sorted([world.name, expected_name(spec)])


def test_replacement_runs_the_create_pre_flight_checks(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    spec = world.spec(VpcConfig={"SecurityGroupIds": [world.sg], "Subnets": [world.public_subnet]})
    sagemaker_calls.clear()

    with pytest.raises(PreflightError, match=rf"subnet {world.public_subnet} is public"):
        app.on_event(update_event(world.name, world.props(spec, handle="replace"), old))
    assert operations(sagemaker_calls) == ["DescribeCluster"]
    assert _clusters() == [world.name]


def test_replacement_whose_hash_matches_the_old_name_gets_a_name_of_its_own(
    world: World, sagemaker_calls: Calls
) -> None:
    """In-place updates can lead back to the create-only fields the old cluster was first named after."""
    put_parameters(provisioning_parameters("workers", "workers-b"))
    first = world.spec()
    first["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 1))
    props = _created(world, first)
    name = expected_name(first)
    steps = [world.spec(), world.spec()]  # drop workers-b, then bring it back as another instance type
    steps[1]["InstanceGroups"].append(group("workers-b", "ml.g5.12xlarge", 1))
    for i, spec in enumerate(steps):
        new = world.props(spec, handle=f"update-{i}")
        assert app.on_event(update_event(name, new, props))["PhysicalResourceId"] == name
        moto_cluster(name).status = "InService"  # the update finished
        props = new
    sagemaker_calls.clear()
    back = world.props(first, handle="replace")  # workers-b's type back: the same hash as the old name

    result = app.on_event(update_event(name, back, props))

    replacement = result["PhysicalResourceId"]
    assert replacement != name
    assert re.fullmatch(r"ml-cluster-[0-9a-f]{6}", replacement)
    assert requests_of(sagemaker_calls, "CreateCluster")[0]["ClusterName"] == replacement
    assert app.on_event(update_event(name, back, props))["PhysicalResourceId"] == replacement  # deterministic
    assert _clusters() == sorted([name, replacement])


def test_tag_change_alone_retags_without_update_or_watcher(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    spec = world.spec(Tags=[{"Key": "owner", "Value": "ml-team"}])
    sagemaker_calls.clear()

    app.on_event(update_event(world.name, world.props(spec), old))

    assert operations(sagemaker_calls) == ["DescribeCluster", "DeleteTags", "AddTags"]
    assert requests_of(sagemaker_calls, "DeleteTags")[0]["TagKeys"] == ["project"]
    arn = moto_cluster(world.name).arn
    assert client("sagemaker").list_tags(ResourceArn=arn)["Tags"] == [{"Key": "owner", "Value": "ml-team"}]
    assert len(watcher_inputs(world)) == 1  # the Create's only


def test_node_recovery_change_is_sent(world: World, sagemaker_calls: Calls) -> None:
    old = _created(world)
    sagemaker_calls.clear()
    app.on_event(update_event(world.name, world.props(world.spec(NodeRecovery="None"), handle="update-1"), old))
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["NodeRecovery"] == "None"


def test_new_wait_handle_without_cluster_change_still_gets_a_signal(world: World, sagemaker_calls: Calls) -> None:
    """A fresh WaitCondition must be signalled even when there is nothing to update, or the stack hangs."""
    old = _created(world)
    sagemaker_calls.clear()
    app.on_event(update_event(world.name, world.props(handle="update-1"), old))
    assert "UpdateCluster" not in operations(sagemaker_calls)
    assert [w["WaitHandleUrl"] for w in watcher_inputs(world)] == [handle_url("create"), handle_url("update-1")]


def test_update_of_a_busy_cluster_is_refused(world: World) -> None:
    old = _created(world)
    moto_cluster(world.name).status = "Updating"
    with pytest.raises(
        RuntimeError, match=rf"'{world.name}' is Updating and cannot be updated now; wait until it is InService"
    ):
        app.on_event(update_event(world.name, world.props(world.spec(workers=4), handle="update-1"), old))


def test_update_of_a_cluster_deleted_out_of_band_is_a_clear_error(world: World) -> None:
    old = _created(world)
    client("sagemaker").delete_cluster(ClusterName=world.name)
    with pytest.raises(
        RuntimeError, match=rf"'{world.name}' does not exist any more \(deleted outside CloudFormation\?\)"
    ):
        app.on_event(update_event(world.name, world.props(world.spec(workers=4), handle="update-1"), old))


def test_failed_update_then_rollback_restores_the_old_groups(
    world: World, sagemaker_calls: Calls, signals: Signals
) -> None:
    """Update adds a group and scales; the cluster fails; CloudFormation rolls back with the old properties."""
    original = _created(world)
    put_parameters(provisioning_parameters("workers", "workers-b"))
    bigger = world.spec(workers=4)
    bigger["InstanceGroups"].append(group("workers-b", "ml.g5.48xlarge", 2))
    failed = world.props(bigger, handle="update-1")
    app.on_event(update_event(world.name, failed, original))
    assert _groups(world.name) == {"controller-machine": 1, "login": 1, "workers": 4, "workers-b": 2}

    # The service gives up on the update; the watcher tells CloudFormation.
    cluster = moto_cluster(world.name)
    cluster.status, cluster.failure_message = "Failed", "InsufficientInstanceCapacity for ml.g5.48xlarge"
    state = {**watcher_inputs(world)[-1], "NotBefore": 0}
    assert app.watch(state)["done"] is True
    assert signals.bodies()[-1]["Status"] == "FAILURE"
    watchers = len(watcher_inputs(world))

    # Rollback: the old properties come back as the new ones.
    sagemaker_calls.clear()
    put_parameters(provisioning_parameters("workers"))
    result = app.on_event(update_event(world.name, original, failed))

    assert result["PhysicalResourceId"] == world.name
    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert sent["InstanceGroupsToDelete"] == ["workers-b"]
    assert [(g["InstanceGroupName"], g["InstanceCount"]) for g in sent["InstanceGroups"]] == [
        ("controller-machine", 1),
        ("login", 1),
        ("workers", 2),
    ]
    assert _groups(world.name) == {"controller-machine": 1, "login": 1, "workers": 2}
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
    app.on_event(update_event(world.name, failed, original))
    cluster = moto_cluster(world.name)
    cluster.instance_groups = [g for g in cluster.instance_groups if g["InstanceGroupName"] != "workers-b"]
    cluster.status = "InService"
    put_parameters(provisioning_parameters("workers"))
    sagemaker_calls.clear()

    app.on_event(update_event(world.name, original, failed))

    (sent,) = requests_of(sagemaker_calls, "UpdateCluster")
    assert "InstanceGroupsToDelete" not in sent
    assert _groups(world.name) == {"controller-machine": 1, "login": 1, "workers": 2}


def test_update_properties_are_parsed_like_create(world: World) -> None:
    old = _created(world)
    bad = copy.deepcopy(world.props(handle="update-1"))
    bad["ClusterSpec"] = json.dumps({**world.spec(), "InstanceGroups": "many"})
    with pytest.raises(
        PropertyError,
        match=r"^ClusterSpec is not a valid CreateCluster request: Invalid type for parameter InstanceGroups",
    ):
        app.on_event(update_event(world.name, bad, old))
    with pytest.raises(PropertyError, match=r"^OldResourceProperties: CreateTimeoutSeconds: 'x' is not valid"):
        app.on_event(update_event(world.name, world.props(handle="update-1"), {**old, "CreateTimeoutSeconds": "x"}))
