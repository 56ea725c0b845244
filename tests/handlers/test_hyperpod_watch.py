"""watch: the Step Functions loop body that signals the WaitCondition, and the signal itself."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.waitsignal import MAX_SIGNAL_BYTES, SignalError, signal_body
from tests.handlers.conftest import (
    Signals,
    World,
    client,
    create_event,
    handle_url,
    moto_cluster,
    operations,
    watcher_inputs,
)

Calls = list[tuple[str, dict[str, Any]]]
CLUSTER_ID = "abcd1234efgh"
ARN = f"arn:aws:sagemaker:us-east-1:123456789012:cluster/{CLUSTER_ID}"


def log_group(world: World) -> str:
    """Where HyperPod writes the logs of the default cluster."""
    return f"/aws/sagemaker/Clusters/{world.name}/{CLUSTER_ID}"


def _watching(world: World, status: str = "Creating") -> dict[str, Any]:
    """Create the cluster, put it in ``status`` with a service-like ARN; the watcher's input, settled."""
    app.on_event(create_event(world.props()))
    cluster = moto_cluster(world.name)
    cluster.status, cluster.arn = status, ARN
    return {**watcher_inputs(world)[0], "NotBefore": 0}


def test_in_service_signals_success(world: World, signals: Signals, sagemaker_calls: Calls) -> None:
    state = _watching(world, "InService")
    sagemaker_calls.clear()
    out = app.watch(state)

    assert out["done"] is True
    assert out["ClusterStatus"] == "InService"
    (sent,) = signals.sent
    assert sent["method"] == "PUT"
    assert sent["url"] == handle_url("create")
    assert sent["content_type"] == ""  # part of the presigned URL's signature
    assert json.loads(sent["body"]) == {
        "Status": "SUCCESS",
        "UniqueId": world.name,
        "Reason": f"HyperPod cluster '{world.name}' is InService.",
        "Data": "InService",
    }
    assert operations(sagemaker_calls) == ["DescribeCluster"]


def test_creating_is_not_done_and_carries_the_state(world: World, signals: Signals) -> None:
    state = _watching(world, "Creating")
    out = app.watch(state)
    assert out["done"] is False
    assert out["ClusterStatus"] == "Creating"
    assert {k: out[k] for k in ("ClusterName", "WaitHandleUrl", "Deadline", "ExpectedGroups")} == {
        k: state[k] for k in ("ClusterName", "WaitHandleUrl", "Deadline", "ExpectedGroups")
    }
    assert signals.sent == []
    # The output is the next input: the loop keeps going until the cluster is ready.
    moto_cluster(world.name).status = "InService"
    assert app.watch(out)["done"] is True
    assert signals.bodies()[0]["Status"] == "SUCCESS"


def test_in_service_is_not_believed_before_the_settle_time(world: World, signals: Signals) -> None:
    """Right after UpdateCluster, DescribeCluster may still show the previous InService."""
    state = _watching(world, "InService")
    early = {**state, "NotBefore": int(time.time()) + 60}
    assert app.watch(early)["done"] is False
    assert signals.sent == []


def test_in_service_with_other_counts_is_not_done_until_they_match(world: World, signals: Signals) -> None:
    state = _watching(world, "InService")
    assert app.watch({**state, "ExpectedGroups": {**state["ExpectedGroups"], "workers": 4}})["done"] is False
    assert signals.sent == []


def test_failed_cluster_signals_failure_with_message_nodes_and_logs(
    world: World, signals: Signals, sagemaker_calls: Calls
) -> None:
    state = _watching(world, "Failed")
    cluster = moto_cluster(world.name)
    cluster.failure_message = "Lifecycle scripts did not run successfully on nodes workers-1."
    cluster.nodes["workers-1"].status = "Failure"
    cluster.nodes["login-0"].status = "Pending"
    sagemaker_calls.clear()

    out = app.watch(state)

    assert (out["done"], out["ClusterStatus"]) == (True, "Failed")
    (body,) = signals.bodies()
    assert body["Status"] == "FAILURE"
    assert body["UniqueId"] == world.name
    assert body["Data"] == ARN
    assert body["Reason"] == (
        f"HyperPod cluster '{world.name}' failed (status Failed). "
        "FailureMessage: Lifecycle scripts did not run successfully on nodes workers-1. "
        f"Logs: CloudWatch log group {log_group(world)}. Nodes not running: "
        "workers-1 (workers): Failure - message; login-0 (login): Pending - message"
    )
    assert operations(sagemaker_calls) == ["DescribeCluster", "ListClusterNodes"]


def test_cluster_deleted_out_of_band_signals_failure(world: World, signals: Signals) -> None:
    state = _watching(world, "Creating")
    client("sagemaker").delete_cluster(ClusterName=world.name)
    out = app.watch(state)
    assert (out["done"], out["ClusterStatus"]) == (True, "NotFound")
    (body,) = signals.bodies()
    assert body["Status"] == "FAILURE"
    assert body["Reason"] == (
        f"HyperPod cluster '{world.name}' no longer exists: it was deleted while CloudFormation waited for it."
    )


def test_deleting_cluster_signals_failure(world: World, signals: Signals) -> None:
    state = _watching(world, "Deleting")
    assert app.watch(state)["done"] is True
    assert signals.bodies()[0]["Reason"].startswith(f"HyperPod cluster '{world.name}' is being deleted")


def test_rollback_that_ends_in_service_signals_failure(world: World, signals: Signals) -> None:
    state = _watching(world, "RollingBack")
    out = app.watch(state)
    assert (out["done"], out["SawRollingBack"]) == (False, True)
    moto_cluster(world.name).status = "InService"
    assert app.watch(out)["done"] is True
    (body,) = signals.bodies()
    assert body["Status"] == "FAILURE"
    assert body["Reason"].startswith(
        f"HyperPod cluster '{world.name}' rolled back the update and is InService with its previous configuration."
    )
    assert f"Logs: CloudWatch log group {log_group(world)}." in body["Reason"]


def test_deadline_passed_signals_timeout_with_last_status(world: World, signals: Signals) -> None:
    state = _watching(world, "Creating")
    deadline = int(time.time()) - 1
    out = app.watch({**state, "Deadline": str(deadline)})  # numbers may arrive as strings
    assert (out["done"], out["ClusterStatus"]) == (True, "Creating")
    (body,) = signals.bodies()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline))
    assert body["Status"] == "FAILURE"
    assert body["Reason"].startswith(
        f"Timed out waiting for HyperPod cluster '{world.name}' to be InService (deadline {stamp}); last status Creating."
    )
    assert log_group(world) in body["Reason"]


def test_timeout_names_the_groups_that_never_matched(world: World, signals: Signals) -> None:
    state = _watching(world, "InService")
    expected = {"controller-machine": 1, "workers": 8, "workers-b": 2}
    app.watch({**state, "Deadline": 0, "ExpectedGroups": expected})
    reason = signals.bodies()[0]["Reason"]
    assert "last status InService. Group workers-b is missing. Group workers has target count 2, expected 8. " in reason
    assert "Group login is still present." in reason


def test_throttled_describe_is_retried_in_watch(world: World, signals: Signals, throttle: Any) -> None:
    state = _watching(world, "InService")
    delays = throttle("DescribeCluster", 3)
    assert app.watch(state)["done"] is True
    assert len(delays) == 3
    assert signals.bodies()[0]["Status"] == "SUCCESS"


def test_long_failure_reason_is_cut_to_fit(world: World, signals: Signals) -> None:
    state = _watching(world, "Failed")
    cluster = moto_cluster(world.name)
    cluster.failure_message = "Capacity error: " + "é" * 5000
    for node in cluster.nodes.values():
        node.status = "Failure"

    app.watch(state)

    (sent,) = signals.sent
    assert len(sent["body"]) <= MAX_SIGNAL_BYTES
    reason = json.loads(sent["body"])["Reason"]
    assert reason.startswith(
        f"HyperPod cluster '{world.name}' failed (status Failed). FailureMessage: Capacity error: éé"
    )
    assert f"... Logs: CloudWatch log group {log_group(world)}. Nodes not running: (+4 more)" in reason


def test_signal_body_drops_nodes_before_the_message() -> None:
    items = [f"i-{n:017x} (workers): Failure - health check failed" for n in range(200)]
    body = signal_body("FAILURE", "c", "arn", "Head.", "FailureMessage: short.", "Logs: here.", items)
    reason = json.loads(body)["Reason"]
    assert len(body) <= MAX_SIGNAL_BYTES
    assert reason.startswith("Head. FailureMessage: short. Logs: here. i-")
    kept = reason.count("health check failed")
    assert 0 < kept < 200
    assert reason.endswith(f"; (+{200 - kept} more)")


def test_signal_body_keeps_everything_when_it_fits() -> None:
    body = signal_body("FAILURE", "c", "arn", "Head.", "Message.", "Tail:", ["a", "b"])
    assert json.loads(body)["Reason"] == "Head. Message. Tail: a; b"


def test_signal_is_retried_on_server_errors(world: World, signals: Signals) -> None:
    state = _watching(world, "InService")
    signals.errors = [503, 500]
    assert app.watch(state)["done"] is True
    assert len(signals.sent) == 3
    assert signals.pauses == [2, 4]


def test_signal_refused_by_s3_is_an_error(world: World, signals: Signals) -> None:
    """An expired or wrong URL is not retried; the execution fails loudly instead of hanging the stack quietly."""
    state = _watching(world, "InService")
    signals.errors = [403]
    with pytest.raises(
        SignalError,
        match=r"could not signal the wait condition handle https://cloudformation-waitcondition.*/create: HTTP 403",
    ) as caught:
        app.watch(state)
    assert len(signals.sent) == 1
    assert "secret" not in str(caught.value)  # the signature stays out of messages


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"ClusterName": "ml-cluster-0a1b2c"}, r"watcher input lacks WaitHandleUrl, Deadline"),
        ({"ClusterName": "c", "WaitHandleUrl": "https://x", "Deadline": "tomorrow"}, r"watcher input is not valid"),
    ],
)
def test_bad_watcher_input_is_refused(world: World, event: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        app.watch(event)
