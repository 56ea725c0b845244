"""Delete and is_complete: deletion, clusters already gone, physical ids that never were clusters."""

from __future__ import annotations

from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from tests.handlers.conftest import (
    World,
    client,
    create_event,
    delete_event,
    moto_cluster,
    operations,
    service_error,
    update_event,
)

Calls = list[tuple[str, dict[str, Any]]]


def test_delete_deletes_and_is_complete_confirms(world: World, sagemaker_calls: Calls) -> None:
    props = world.props()
    app.on_event(create_event(props))
    sagemaker_calls.clear()

    assert app.on_event(delete_event(world.name, props)) == {"PhysicalResourceId": world.name}
    assert app.is_complete(delete_event(world.name, props)) == {"IsComplete": True}

    assert operations(sagemaker_calls) == ["DescribeCluster", "DeleteCluster", "DescribeCluster"]
    assert client("sagemaker").list_clusters()["ClusterSummaries"] == []


def test_is_complete_waits_while_deleting(world: World, sagemaker_calls: Calls) -> None:
    app.on_event(create_event(world.props()))
    moto_cluster(world.name).status = "Deleting"
    sagemaker_calls.clear()

    assert app.on_event(delete_event(world.name)) == {"PhysicalResourceId": world.name}
    assert app.is_complete(delete_event(world.name)) == {"IsComplete": False}
    assert operations(sagemaker_calls) == ["DescribeCluster", "DescribeCluster"]  # no second DeleteCluster


def test_is_complete_asks_again_when_the_cluster_is_not_deleting(world: World, sagemaker_calls: Calls) -> None:
    """The delete request not yet visible, or a deletion that fell back: ask again, keep waiting."""
    app.on_event(create_event(world.props()))
    moto_cluster(world.name).status = "Failed"
    sagemaker_calls.clear()

    assert app.is_complete(delete_event(world.name)) == {"IsComplete": False}
    assert operations(sagemaker_calls) == ["DescribeCluster", "DeleteCluster"]
    assert app.is_complete(delete_event(world.name)) == {"IsComplete": True}


def test_delete_of_a_cluster_deleted_out_of_band_succeeds(world: World, sagemaker_calls: Calls) -> None:
    app.on_event(create_event(world.props()))
    client("sagemaker").delete_cluster(ClusterName=world.name)
    sagemaker_calls.clear()

    assert app.on_event(delete_event(world.name)) == {"PhysicalResourceId": world.name}
    assert app.is_complete(delete_event(world.name)) == {"IsComplete": True}
    assert operations(sagemaker_calls) == ["DescribeCluster", "DescribeCluster"]


@pytest.mark.parametrize(
    "physical_id",
    ["AWSCDK::CustomResourceProviderFramework::CREATE_FAILED", "", "2f0c8a44-request-id_with_underscore"],
)
def test_delete_of_something_never_created_succeeds_without_calls(
    world: World, sagemaker_calls: Calls, physical_id: str
) -> None:
    assert app.on_event(delete_event(physical_id)) == {"PhysicalResourceId": physical_id}
    assert app.is_complete(delete_event(physical_id)) == {"IsComplete": True}
    assert sagemaker_calls == []


def test_delete_of_a_cluster_name_that_never_existed_succeeds(world: World, sagemaker_calls: Calls) -> None:
    assert app.on_event(delete_event("never-created")) == {"PhysicalResourceId": "never-created"}
    assert app.is_complete(delete_event("never-created")) == {"IsComplete": True}
    assert operations(sagemaker_calls) == ["DescribeCluster", "DescribeCluster"]


def test_failed_delete_request_is_a_clear_error(world: World, intercept: Any) -> None:
    app.on_event(create_event(world.props()))
    intercept(app.clients().sagemaker, "DeleteCluster", service_error("AccessDeniedException", "not allowed"))
    with pytest.raises(
        RuntimeError,
        match=rf"DeleteCluster for HyperPod cluster '{world.name}' failed: AccessDeniedException: not allowed",
    ):
        app.on_event(delete_event(world.name))


def test_is_complete_keeps_waiting_through_a_conflict(world: World, sagemaker_calls: Calls, intercept: Any) -> None:
    """A cluster busy with another operation refuses DeleteCluster for a while: ask again on the next poll."""
    app.on_event(create_event(world.props()))
    moto_cluster(world.name).status = "Updating"
    conflict = service_error("ConflictException", "cluster is Updating")
    intercept(app.clients().sagemaker, "DeleteCluster", conflict, times=1)
    sagemaker_calls.clear()

    assert app.is_complete(delete_event(world.name)) == {"IsComplete": False}  # refused
    assert app.is_complete(delete_event(world.name)) == {"IsComplete": False}  # accepted
    assert app.is_complete(delete_event(world.name)) == {"IsComplete": True}  # gone
    assert operations(sagemaker_calls) == ["DescribeCluster", "DeleteCluster"] * 2 + ["DescribeCluster"]


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_is_complete_is_immediate_for_create_and_update(
    world: World, sagemaker_calls: Calls, request_type: str
) -> None:
    """The WaitCondition does the long wait; the Provider must not poll."""
    props = world.props()
    event = create_event(props) if request_type == "Create" else update_event(world.name, props, props)
    assert app.is_complete({**event, "PhysicalResourceId": world.name}) == {"IsComplete": True}
    assert sagemaker_calls == []
