"""Entry points: ``on_event`` and ``is_complete`` (CDK Provider framework), ``watch`` (Step Functions).

Resource properties (all set by the construct):

- ``ClusterSpec``: JSON string of the CreateCluster request; its
  ``ClusterName`` is the base name (at most 56 characters).
- ``WaitHandleUrl``: Ref of the WaitConditionHandle that waits for this
  Create/Update; new whenever the cluster spec changes.
- ``CreateTimeoutSeconds``: the WaitCondition's timeout.
- ``ProvisioningParametersKey``: full S3 key of provisioning_parameters.json,
  under the groups' ``SourceS3Uri``.

The physical id is the cluster's name, chosen here on Create:
``<base>-<6 hex digits of sha256 over the create-only fields>`` (VpcConfig,
Orchestrator, and every group's name, instance type, execution role and
threads per core). It is deterministic, so a retried Create adopts the
cluster the first attempt made. On Update the handler compares the old and
new properties: a new base name, a new VpcConfig, or a create-only change to
a group present in both means a new cluster (named from the new spec, with
the same pre-flight checks as Create), whose name is returned as the new
physical id so CloudFormation deletes the old cluster afterwards. Anything
else (instance counts, node recovery, added and removed groups, tags) is
applied in place with UpdateCluster to the cluster the physical id names.
Data: ``ClusterName`` (the physical name), ``ClusterArn``, ``ClusterStatus``.

The watcher state machine (ARN in ``WATCHER_STATE_MACHINE_ARN``) runs
``watch`` until it returns ``done``, feeding each output back as the next
input; ``watch`` signals the wait handle with the outcome.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError
from botocore.model import StructureShape

from .aws import Clients, describe_cluster, error_code, error_text, is_cluster_not_found
from .preflight import check_all
from .spec import (
    Properties,
    PropertyError,
    is_cluster_name,
    parse_properties,
    physical_name,
    plan_update,
    replacement_reasons,
)
from .waitsignal import redact, send_signal, signal_body

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

WATCHER_ENV = "WATCHER_STATE_MACHINE_ARN"
#: The watcher gives up this long before the WaitCondition would, so the
#: stack shows the watcher's reason rather than a bare timeout.
DEADLINE_MARGIN_SECONDS = 300
#: InService is only believed this long after the API call: right after
#: UpdateCluster, DescribeCluster can still report the old InService.
SETTLE_SECONDS = 60
#: Statuses in which the cluster cannot take an UpdateCluster.
BUSY_STATUSES = ("Creating", "Updating", "RollingBack", "SystemUpdating", "Deleting")
#: Enough nodes to explain a failure; the reason is truncated anyway.
MAX_NODES_LISTED = 500


@functools.cache
def clients() -> Clients:
    """The AWS clients, created on first use and reused while the container lives."""
    return Clients()


def _input_shape(operation: str) -> StructureShape:
    shape = clients().sagemaker.meta.service_model.operation_model(operation).input_shape
    assert shape is not None
    return shape


def _properties(raw: Any, where: str = "ResourceProperties") -> Properties:
    if not isinstance(raw, Mapping):
        raise PropertyError(f"{where}: {raw!r} is not valid; expected an object")
    try:
        return parse_properties(raw, _input_shape("CreateCluster"))
    except PropertyError as err:
        if where == "ResourceProperties":
            raise
        raise PropertyError(f"{where}: {err}") from None


def _loggable(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event without presigned URLs (they are credentials for their one use)."""
    out = {k: v for k, v in event.items() if k != "ResponseURL"}
    for key in ("ResourceProperties", "OldResourceProperties"):
        props = out.get(key)
        if isinstance(props, Mapping) and isinstance(props.get("WaitHandleUrl"), str):
            out[key] = {**props, "WaitHandleUrl": redact(props["WaitHandleUrl"])}
    if isinstance(out.get("WaitHandleUrl"), str):
        out["WaitHandleUrl"] = redact(out["WaitHandleUrl"])
    return out


def on_event(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """Create, update or delete the cluster; returns ``PhysicalResourceId`` and ``Data``."""
    logger.info("event: %s", json.dumps(_loggable(event), default=str))
    request_type = event.get("RequestType")
    if request_type == "Create":
        props = _properties(event.get("ResourceProperties"))
        return _create(physical_name(props.spec), props)
    if request_type == "Update":
        return _update(event)
    if request_type == "Delete":
        return _delete(str(event.get("PhysicalResourceId", "")))
    raise ValueError(f"RequestType: {request_type!r} is not valid; expected Create, Update or Delete")


def is_complete(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """For Delete, whether the cluster is gone; Create and Update are complete at once.

    The long wait after Create and Update belongs to the WaitCondition. A
    cluster that exists but is not Deleting (the request not yet visible, or
    a deletion that fell back) is asked to delete again.
    """
    if event.get("RequestType") != "Delete":
        return {"IsComplete": True}
    name = str(event.get("PhysicalResourceId", ""))
    if not is_cluster_name(name):
        return {"IsComplete": True}
    cluster = describe_cluster(clients().sagemaker, name)
    if cluster is None:
        logger.info("cluster %s is gone", name)
        return {"IsComplete": True}
    status = cluster.get("ClusterStatus")
    if status != "Deleting":
        logger.warning(
            "cluster %s is %s, not Deleting (%s); asking DeleteCluster again",
            name,
            status,
            cluster.get("FailureMessage") or "no failure message",
        )
        _request_delete(name, tolerate_conflict=True)
    return {"IsComplete": False}


def _data(name: str, arn: str, status: str) -> dict[str, str]:
    return {"ClusterName": name, "ClusterArn": arn, "ClusterStatus": status}


def _create(name: str, props: Properties) -> dict[str, Any]:
    """Pre-flight, then CreateCluster named ``name``; a cluster of that name already there is adopted."""
    sagemaker = clients().sagemaker
    cluster = describe_cluster(sagemaker, name)
    if cluster is None:
        check_all(clients().s3, clients().ec2, props, name=name)
        try:
            arn = sagemaker.create_cluster(**props.create_request(name))["ClusterArn"]
            status = "Creating"
            logger.info("CreateCluster %s: %s", name, arn)
        except ClientError as err:
            if error_code(err) not in ("ResourceInUse", "ResourceInUseException"):
                raise RuntimeError(f"CreateCluster for HyperPod cluster {name!r} failed: {error_text(err)}") from err
            cluster = describe_cluster(sagemaker, name)
            if cluster is None:
                raise RuntimeError(
                    f"CreateCluster for {name!r} says the name is in use, but DescribeCluster cannot find it; retry"
                ) from err
    if cluster is not None:
        status = str(cluster["ClusterStatus"])
        arn = str(cluster["ClusterArn"])
        if status == "Deleting":
            raise RuntimeError(f"a HyperPod cluster named {name!r} is being deleted; retry once it is gone")
        logger.info("cluster %s exists already (%s): adopting it", name, status)
    _start_watcher(name, props)
    return {"PhysicalResourceId": name, "Data": _data(name, arn, status)}


def _update(event: Mapping[str, Any]) -> dict[str, Any]:
    """A create-only change creates a new cluster under a new name; anything else is UpdateCluster in place."""
    new = _properties(event.get("ResourceProperties"))
    old = _properties(event.get("OldResourceProperties"), "OldResourceProperties")
    name = str(event.get("PhysicalResourceId", ""))
    reasons = replacement_reasons(new, old, _input_shape("UpdateCluster"))
    if reasons:
        replacement = physical_name(new.spec, avoid=name)
        logger.info(
            "%s: replacing cluster %s with %s; CloudFormation deletes the old one afterwards",
            "; ".join(reasons),
            name,
            replacement,
        )
        return _create(replacement, new)
    sagemaker = clients().sagemaker
    cluster = describe_cluster(sagemaker, name) if is_cluster_name(name) else None
    if cluster is None:
        raise RuntimeError(
            f"HyperPod cluster {name!r} does not exist any more (deleted outside CloudFormation?); change the "
            "cluster's base name to create a fresh one"
        )
    plan = plan_update(name, new, old, cluster, _input_shape("UpdateCluster"))
    status = str(cluster["ClusterStatus"])
    arn = str(cluster["ClusterArn"])
    if plan.request is not None:
        if status in BUSY_STATUSES:
            raise RuntimeError(
                f"HyperPod cluster {name!r} is {status} and cannot be updated now; wait until it is InService "
                "(a stack stuck in UPDATE_ROLLBACK_FAILED can then continue its rollback)"
            )
        if plan.launches_nodes:
            check_all(clients().s3, clients().ec2, new, name=name, network=False)
        try:
            sagemaker.update_cluster(**plan.request)
        except ClientError as err:
            raise RuntimeError(f"UpdateCluster for HyperPod cluster {name!r} failed: {error_text(err)}") from err
        logger.info("UpdateCluster %s: %s", name, json.dumps(plan.request))
        status = "Updating"
    if plan.tag_keys_to_remove:
        sagemaker.delete_tags(ResourceArn=arn, TagKeys=plan.tag_keys_to_remove)
    if plan.tags_to_add:
        sagemaker.add_tags(ResourceArn=arn, Tags=plan.tags_to_add)  # type: ignore[arg-type]
    if plan.request is not None or new.wait_handle_url != old.wait_handle_url:
        _start_watcher(name, new)
    return {"PhysicalResourceId": name, "Data": _data(name, arn, status)}


def _delete(name: str) -> dict[str, Any]:
    """DeleteCluster; something that is not (or no longer) a cluster is already deleted."""
    if not is_cluster_name(name):
        logger.info("physical id %r is not a cluster name (a Create that failed): nothing to delete", name)
        return {"PhysicalResourceId": name}
    cluster = describe_cluster(clients().sagemaker, name)
    if cluster is None:
        logger.info("cluster %s does not exist: nothing to delete", name)
    elif cluster.get("ClusterStatus") != "Deleting":
        _request_delete(name, tolerate_conflict=False)
    return {"PhysicalResourceId": name}


def _request_delete(name: str, *, tolerate_conflict: bool) -> None:
    try:
        clients().sagemaker.delete_cluster(ClusterName=name)
        logger.info("DeleteCluster %s", name)
    except ClientError as err:
        if is_cluster_not_found(err):
            return
        if tolerate_conflict and error_code(err) == "ConflictException":
            logger.warning("DeleteCluster %s: %s; will ask again", name, error_text(err))
            return
        raise RuntimeError(f"DeleteCluster for HyperPod cluster {name!r} failed: {error_text(err)}") from err


def _start_watcher(name: str, props: Properties) -> None:
    """Start the watcher of cluster ``name`` for this wait handle, at most once.

    The execution name is derived from the cluster and the handle, so a
    retried request does not start a second watcher, and a rollback that
    brings back an old, already signalled handle starts none.
    """
    state_machine = os.environ.get(WATCHER_ENV)
    if not state_machine:
        raise RuntimeError(f"environment variable {WATCHER_ENV} is not set; it must hold the watcher state machine ARN")
    now = int(time.time())
    payload = {
        "ClusterName": name,
        "WaitHandleUrl": props.wait_handle_url,
        "Deadline": now + props.create_timeout_seconds - DEADLINE_MARGIN_SECONDS,
        "NotBefore": now + SETTLE_SECONDS,
        "ExpectedGroups": props.expected_counts(),
    }
    digest = hashlib.sha256(props.wait_handle_url.encode()).hexdigest()[:16]
    execution = f"{name}-{digest}"
    try:
        clients().sfn.start_execution(stateMachineArn=state_machine, name=execution, input=json.dumps(payload))
        logger.info("watcher %s started for %s", execution, redact(props.wait_handle_url))
    except ClientError as err:
        if error_code(err) != "ExecutionAlreadyExists":
            raise RuntimeError(f"could not start the watcher for HyperPod cluster {name!r}: {error_text(err)}") from err
        logger.info("watcher %s exists already: not starting another", execution)


@dataclasses.dataclass(frozen=True)
class WatchState:
    """The watcher's input; ``watch`` returns it (updated) as its output."""

    cluster_name: str
    wait_handle_url: str
    deadline: int
    not_before: int = 0
    expected_groups: dict[str, int] = dataclasses.field(default_factory=dict)
    saw_rolling_back: bool = False

    @classmethod
    def parse(cls, event: Mapping[str, Any]) -> WatchState:
        """Read the state from the execution input; numbers may arrive as strings."""
        missing = [k for k in ("ClusterName", "WaitHandleUrl", "Deadline") if k not in event]
        if missing:
            raise ValueError(f"watcher input lacks {', '.join(missing)}; expected ClusterName, WaitHandleUrl, Deadline")
        try:
            return cls(
                cluster_name=str(event["ClusterName"]),
                wait_handle_url=str(event["WaitHandleUrl"]),
                deadline=int(event["Deadline"]),
                not_before=int(event.get("NotBefore", 0)),
                expected_groups={str(k): int(v) for k, v in (event.get("ExpectedGroups") or {}).items()},
                saw_rolling_back=str(event.get("SawRollingBack", False)).lower() == "true",
            )
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"watcher input is not valid ({err}): Deadline and NotBefore are epoch seconds") from err

    def output(self, done: bool, status: str) -> dict[str, Any]:
        return {
            "ClusterName": self.cluster_name,
            "WaitHandleUrl": self.wait_handle_url,
            "Deadline": self.deadline,
            "NotBefore": self.not_before,
            "ExpectedGroups": self.expected_groups,
            "SawRollingBack": self.saw_rolling_back,
            "ClusterStatus": status,
            "done": done,
        }


def watch(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """One look at the cluster; signals the wait handle once the outcome is known.

    InService (matching the expected groups, after the settle time) signals
    SUCCESS; Failed, a finished rollback, a deletion, or the deadline signal
    FAILURE with what went wrong and where the logs are. Returns the state
    with ``done`` and the last ``ClusterStatus``.
    """
    state = WatchState.parse(event)
    name = state.cluster_name
    cluster = describe_cluster(clients().sagemaker, name)
    if cluster is None:
        head = f"HyperPod cluster {name!r} no longer exists: it was deleted while CloudFormation waited for it."
        send_signal(state.wait_handle_url, signal_body("FAILURE", name, name, head))
        return state.output(True, "NotFound")
    status = str(cluster["ClusterStatus"])
    state = dataclasses.replace(state, saw_rolling_back=state.saw_rolling_back or status == "RollingBack")
    logger.info("cluster %s is %s", name, status)
    now = time.time()
    if status == "Failed":
        _fail(state, cluster, f"HyperPod cluster {name!r} failed (status Failed).", _failure_message(cluster))
        return state.output(True, status)
    if status == "Deleting":
        _fail(state, cluster, f"HyperPod cluster {name!r} is being deleted while CloudFormation waited for it.")
        return state.output(True, status)
    mismatch = _group_mismatch(cluster, state.expected_groups)
    if status == "InService" and state.saw_rolling_back:
        head = f"HyperPod cluster {name!r} rolled back the update and is InService with its previous configuration."
        _fail(state, cluster, head, _failure_message(cluster))
        return state.output(True, status)
    if status == "InService" and not mismatch and now >= state.not_before:
        # The data is the status: the stack outputs it (WaitCondition Data maps each cluster name to it).
        body = signal_body("SUCCESS", name, "InService", f"HyperPod cluster {name!r} is InService.")
        send_signal(state.wait_handle_url, body)
        return state.output(True, status)
    if now >= state.deadline:
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(state.deadline))
        head = (
            f"Timed out waiting for HyperPod cluster {name!r} to be InService (deadline {deadline}); "
            f"last status {status}."
        )
        _fail(state, cluster, head, " ".join(mismatch))
        return state.output(True, status)
    return state.output(False, status)


def _failure_message(cluster: Mapping[str, Any]) -> str:
    message = str(cluster.get("FailureMessage") or "").strip()
    return f"FailureMessage: {message}" if message else "The service gave no FailureMessage."


def _group_mismatch(cluster: Mapping[str, Any], expected: Mapping[str, int]) -> list[str]:
    """How the cluster's groups differ from what the watcher waits for."""
    if not expected:
        return []
    actual = {
        str(g["InstanceGroupName"]): g.get("TargetCount", g.get("CurrentCount"))
        for g in cluster.get("InstanceGroups", [])
    }
    out = [f"Group {n} is missing." for n in expected if n not in actual]
    out += [
        f"Group {n} has target count {actual[n]}, expected {count}."
        for n, count in expected.items()
        if n in actual and actual[n] is not None and int(actual[n]) != count
    ]
    out += [f"Group {n} is still present." for n in actual if n not in expected]
    return out


def _log_group(cluster: Mapping[str, Any]) -> str:
    """The CloudWatch log group HyperPod writes lifecycle and node logs to."""
    cluster_id = str(cluster["ClusterArn"]).rsplit("/", 1)[-1]
    return f"/aws/sagemaker/Clusters/{cluster['ClusterName']}/{cluster_id}"


def _nodes_not_running(name: str) -> list[str]:
    """``instance-id (group): Status - message`` for every node not Running, failures first."""
    nodes: list[dict[str, Any]] = []
    try:
        pages = (
            clients()
            .sagemaker.get_paginator("list_cluster_nodes")
            .paginate(ClusterName=name, PaginationConfig={"MaxItems": MAX_NODES_LISTED, "PageSize": 100})
        )
        for page in pages:
            nodes += [dict(n) for n in page.get("ClusterNodeSummaries", [])]
    except ClientError as err:
        return [f"node list unavailable ({error_text(err)})"]
    bad = [n for n in nodes if n.get("InstanceStatus", {}).get("Status") != "Running"]
    bad.sort(key=lambda n: (n.get("InstanceStatus", {}).get("Status") != "Failure", n.get("InstanceGroupName", "")))
    out = []
    for node in bad:
        status = node.get("InstanceStatus", {})
        text = f"{node.get('InstanceId')} ({node.get('InstanceGroupName')}): {status.get('Status')}"
        if status.get("Message"):
            text += f" - {status['Message']}"
        out.append(text)
    return out


def _fail(state: WatchState, cluster: Mapping[str, Any], head: str, message: str = "") -> None:
    """Signal FAILURE with the logs' location and the nodes that are not running."""
    nodes = _nodes_not_running(state.cluster_name)
    tail = f"Logs: CloudWatch log group {_log_group(cluster)}."
    if nodes:
        tail += " Nodes not running:"
    body = signal_body("FAILURE", state.cluster_name, str(cluster["ClusterArn"]), head, message, tail, nodes)
    logger.error("signalling FAILURE: %s", json.loads(body)["Reason"])
    send_signal(state.wait_handle_url, body)
