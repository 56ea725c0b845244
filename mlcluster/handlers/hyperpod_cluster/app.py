"""Entry point ``on_event`` (CDK Provider framework) of the two read-only checks around the cluster.

CloudFormation's own ``AWS::SageMaker::Cluster`` handler creates, updates,
rolls back and deletes the cluster. These custom resources only look:

- ``Custom::HyperPodPreflight`` runs before the cluster resource on every
  Create and Update. It
  checks the inputs (lifecycle objects, provisioning parameters, private
  subnets, self-referencing security groups) and the cluster as it is:
  a new name must be free; an existing cluster must still exist, and one that
  is busy (Creating, Updating, SystemUpdating, RollingBack) is waited for,
  bounded, so CloudFormation's UpdateCluster does not meet a conflict; a
  rename (create-before-delete) refuses groups on a training plan, which
  holds exactly the instances the old cluster uses.
- ``Custom::HyperPodNodesReady`` runs after the cluster resource, on every
  Create and Update, and decides from ``CLUSTER_DECISIONS`` and
  ``NODE_DECISIONS`` whether every group has its nodes (InService alone does
  not promise that). Nodes in a deep health check (which can last hours) or
  still starting or being replaced when the wait ends are accepted and
  reported, never a reason to roll the cluster back.

A rollback of a failed update reaches both as an Update with the old
properties (the Provider framework keeps the physical id, aws/aws-cdk#17040).
Every Update first asks DescribeStacks for the event's stack: while it is
``UPDATE_ROLLBACK_IN_PROGRESS`` neither checks (``Checked`` says "not checked
during rollback"), since a check failing again would leave the stack in
UPDATE_ROLLBACK_FAILED; the pre-flight still waits, bounded, for a busy
cluster (so the rollback's UpdateCluster meets no conflict) and then answers
success whatever it found. If the stack cannot be read, the event fails.

That rollback wait is capped (``MAX_WAIT_SECONDS``, about 12 minutes: one
Lambda invocation lasts at most 15). A cluster still busy after it (a large
group still being replaced) makes the rollback's UpdateCluster meet a
ConflictException, and the stack stops in UPDATE_ROLLBACK_FAILED. The way out
(docs/use-cases/day-two.md): wait until ``DescribeCluster`` says InService or
Failed, then ``aws cloudformation continue-update-rollback --stack-name
<env>-Cluster`` (skip nothing: the cluster has to go back to its old
properties). CloudFormation then retries the resources that did not roll
back; this pre-flight had already answered, so its wait is not counted on.

Why the handler does not answer "not finished" instead: the Provider framework
(``aws_cdk.custom_resources.Provider``) can only keep polling through an
``isComplete`` handler, a Step Functions waiter bounded by its ``totalTimeout``
(at most two hours). That would add a state machine to every HyperPod
environment, on the path of every create and update too, and its own timeout
still ends a rollback in UPDATE_ROLLBACK_FAILED, with the same way out. A
failure here can only stop a rollback, never help it, so the handler answers
within one invocation and the documented continue-update-rollback covers the
longer case.

Properties: ``ClusterSpec`` (JSON of the CreateCluster request the cluster
resource is built from) and ``ProvisioningParametersKey`` for the pre-flight;
``ClusterArn`` (a resolved attribute of the cluster resource),
``ExpectedCounts`` (JSON ``{group: count}``) and ``SpecDigest`` (changes with
every change of the cluster) for the node check. Delete does nothing: there is
nothing of ours to remove. Neither resource ever calls a SageMaker API that
changes anything, so neither can harm a cluster it was not made for.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from botocore.exceptions import ClientError
from botocore.model import StructureShape

from .aws import Clients, describe_cluster, error_text
from .preflight import PreflightError, check_all
from .spec import Properties, PropertyError, parse_properties

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

PREFLIGHT = "Custom::HyperPodPreflight"
NODES_READY = "Custom::HyperPodNodesReady"
#: The stack status in which an Update event is CloudFormation rolling back a failed update: not checked.
ROLLBACK_STATUS = "UPDATE_ROLLBACK_IN_PROGRESS"
#: The ``Checked`` attribute (and log line) of an Update answered without a check during a rollback.
NOT_CHECKED = "not checked during rollback"
#: Every ``ClusterStatus`` of botocore's SageMaker model, and what the pre-flight of an in-place update does:
#: ``wait`` where UpdateCluster would answer ConflictException (bounded by ``MAX_WAIT_SECONDS``), ``fail``
#: where the cluster is going away, ``proceed`` where CloudFormation's UpdateCluster can run (a Failed
#: cluster included: the update is how it is repaired, and the service says so if it cannot).
PREFLIGHT_DECISIONS: dict[str, Literal["proceed", "wait", "fail"]] = {
    "InService": "proceed",
    "Failed": "proceed",
    "Creating": "wait",
    "Updating": "wait",
    "SystemUpdating": "wait",
    "RollingBack": "wait",
    "Deleting": "fail",
}
#: Statuses in which UpdateCluster answers ConflictException: the pre-flight waits them out.
BUSY_STATUSES = tuple(status for status, decision in PREFLIGHT_DECISIONS.items() if decision == "wait")
#: How often a busy cluster or missing nodes are looked at again.
POLL_SECONDS = 30
#: The longest wait inside one invocation; the function's timeout (15 minutes) leaves room to answer.
MAX_WAIT_SECONDS = 12 * 60
#: Left over for the answer when the Lambda context says how much time remains.
ANSWER_MARGIN_SECONDS = 60
#: Enough nodes to explain a failure; the framework truncates long reasons anyway.
MAX_NODES_LISTED = 20

#: Replaced by tests to walk waits without sleeping.
sleep: Callable[[float], None] = time.sleep
clock: Callable[[], float] = time.monotonic


@functools.cache
def clients() -> Clients:
    """The AWS clients, created on first use and reused while the container lives."""
    return Clients()


@functools.cache
def _input_shape(operation: str) -> StructureShape:
    shape = clients().sagemaker.meta.service_model.operation_model(operation).input_shape
    if shape is None:  # pragma: no cover - every SageMaker operation has an input
        raise RuntimeError(f"botocore's SageMaker model has no input for {operation}")
    return shape


def on_event(event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
    """Create/Update: run the check the resource type names; Delete: nothing to do."""
    kind = event.get("ResourceType")
    request = event.get("RequestType")
    logger.info("%s %s %s", request, kind, event.get("LogicalResourceId"))
    if request == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    if request not in ("Create", "Update"):
        raise ValueError(f"RequestType {request!r} is not one of Create, Update, Delete")
    if kind not in (PREFLIGHT, NODES_READY):
        raise ValueError(f"ResourceType {kind!r} is not {PREFLIGHT} or {NODES_READY}")
    if request == "Update" and _rolling_back(event):
        # The Provider framework keeps the physical id, so a rollback reaches us as an Update (aws/aws-cdk#17040).
        # Checking again cannot help: a failure would stop the rollback in UPDATE_ROLLBACK_FAILED. The pre-flight
        # still waits, bounded, for a busy cluster (the failed update may still run), so that CloudFormation's
        # UpdateCluster back to the old properties does not meet a ConflictException; then it answers success.
        logger.info("stack %s is %s: %s not checked", event["StackId"], ROLLBACK_STATUS, kind)
        if kind == PREFLIGHT:
            _wait_for_rollback(event, _deadline(context))
        return {"PhysicalResourceId": event["PhysicalResourceId"], "Data": {"Checked": NOT_CHECKED}}
    deadline = _deadline(context)
    if kind == PREFLIGHT:
        return _preflight(event, deadline)
    return _nodes_ready(event, deadline)


def _rolling_back(event: Mapping[str, Any]) -> bool:
    """Whether the event's stack is ``UPDATE_ROLLBACK_IN_PROGRESS`` (DescribeStacks); any error fails the event.

    A failed look is never read as "not rolling back, check" nor as "rolling
    back, skip": an Update whose stack cannot be read fails with the reason.
    """
    stack_id = str(event.get("StackId") or "")
    try:
        stacks = clients().cloudformation.describe_stacks(StackName=stack_id).get("Stacks") or []
    except ClientError as err:  # after botocore's own retries (throttling included)
        raise RuntimeError(
            f"DescribeStacks for {stack_id} failed: {error_text(err)}; the checks need cloudformation:DescribeStacks "
            "on their own stack to tell an update from its rollback"
        ) from err
    if len(stacks) != 1:
        raise RuntimeError(f"DescribeStacks for {stack_id} returned {len(stacks)} stacks, expected exactly one")
    return str(stacks[0].get("StackStatus")) == ROLLBACK_STATUS


def _wait_for_rollback(event: Mapping[str, Any], deadline: float) -> None:
    """During a rollback: wait while the cluster is busy (``BUSY_STATUSES``), at most until ``deadline``.

    Never raises: whatever it meets (bad properties, a cluster gone, an AWS
    error, the end of the wait) is logged and the rollback goes on; a failure
    here would stop it in UPDATE_ROLLBACK_FAILED.
    """
    try:
        name = _parse(event.get("ResourceProperties"), "ResourceProperties").name
        while True:
            cluster = describe_cluster(clients().sagemaker, name)
            status = None if cluster is None else str(cluster.get("ClusterStatus"))
            if status not in BUSY_STATUSES:
                logger.info("rollback: cluster %s is %s; answering", name, status or "gone")
                return
            if clock() + POLL_SECONDS > deadline:
                logger.warning("rollback: cluster %s still %s at the end of the wait; answering", name, status)
                return
            logger.info("rollback: cluster %s is %s; looking again in %s s", name, status, POLL_SECONDS)
            sleep(POLL_SECONDS)
    except Exception:  # nothing may fail a rollback: the reason goes to the log
        logger.exception("rollback: waiting for the cluster failed; answering")


def _deadline(context: object) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    budget = float(MAX_WAIT_SECONDS)
    if callable(remaining):
        budget = min(budget, remaining() / 1000 - ANSWER_MARGIN_SECONDS)
    return clock() + max(budget, 0.0)


# -- pre-flight -------------------------------------------------------------


def _parse(raw: Any, where: str) -> Properties:
    if not isinstance(raw, Mapping):
        raise PropertyError(f"{where}: expected the resource's properties, got {raw!r}")
    return parse_properties(raw, _input_shape("CreateCluster"))


def _preflight(event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
    props = _parse(event.get("ResourceProperties"), "ResourceProperties")
    name = props.name
    old = _parse(event["OldResourceProperties"], "OldResourceProperties") if event["RequestType"] == "Update" else None
    sagemaker = clients().sagemaker
    if old is None or old.name != name:
        # CloudFormation will call CreateCluster with this name: before the old cluster (if any) is deleted.
        problems = _new_cluster_problems(props, old, describe_cluster(sagemaker, name))
        if problems:
            raise PreflightError(name, problems)
    else:
        _wait_until_updatable(name, deadline)
    check_all(clients().s3, clients().ec2, props, name=name)
    physical_id = event.get("PhysicalResourceId") or f"{name}-preflight"
    return {"PhysicalResourceId": physical_id, "Data": {"ClusterName": name}}


def _new_cluster_problems(props: Properties, old: Properties | None, existing: Mapping[str, Any] | None) -> list[str]:
    problems: list[str] = []
    if existing is not None:
        status = existing.get("ClusterStatus")
        # Deleting is advised only for a cluster that failed: one in service may be another environment's, with
        # its jobs and its nodes' disks.
        ways = {
            "Failed": "choose another cluster.name, or delete that failed cluster first",
            # Already going: the name is free once DescribeCluster no longer finds it.
            "Deleting": "that cluster is being deleted: deploy again once its deletion has finished, or choose "
            "another cluster.name",
        }
        way = ways.get(
            str(status), "choose another cluster.name (that cluster may be in use: do not delete it to make room)"
        )
        problems.append(
            f"a HyperPod cluster named {props.name!r} already exists (status {status}, "
            f"{existing.get('ClusterArn')}); {way}"
        )
    if old is not None:
        plans = sorted(set(props.training_plans()) | set(old.training_plans()))
        if plans:
            problems.append(
                f"renaming the cluster from {old.name!r} to {props.name!r} creates the new cluster before "
                f"CloudFormation deletes the old one, but groups draw their capacity from training plan(s) "
                f"{', '.join(plans)}, which hold only the instances the old cluster uses, so the new one cannot get "
                "its nodes. Safe way: set the instance count of the groups on the plan to 0 and deploy, rename with "
                "those counts still 0, then set them back; or destroy the cluster stack first (`cdk destroy "
                "<environment>/Cluster`; data in the storage stack stays), then deploy with the new name"
            )
    return problems


def _wait_until_updatable(name: str, deadline: float) -> None:
    """Return when cluster ``name`` can take an UpdateCluster; fail clearly if it is gone or stays busy."""
    while True:
        cluster = describe_cluster(clients().sagemaker, name)
        if cluster is None:
            raise PreflightError(
                name,
                [
                    f"the HyperPod cluster {name!r} no longer exists: it was deleted outside CloudFormation. Way "
                    "back: if this update is rolled back and the rollback stops (UPDATE_ROLLBACK_FAILED), run `aws "
                    "cloudformation continue-update-rollback --stack-name <environment>-Cluster --resources-to-skip "
                    "<logical ids CloudFormation names>`; then either change cluster.name and deploy (a new cluster "
                    "is created), or destroy the cluster stack and deploy again"
                ],
            )
        status = str(cluster.get("ClusterStatus"))
        decision = PREFLIGHT_DECISIONS.get(status)
        if decision is None:
            raise PreflightError(
                name,
                [
                    f"the HyperPod cluster {name!r} is {status!r}, a status this check does not know (it knows "
                    f"{', '.join(PREFLIGHT_DECISIONS)}); deploy again when it is InService"
                ],
            )
        if decision == "fail":
            raise PreflightError(
                name, [f"the HyperPod cluster {name!r} is being deleted outside CloudFormation; wait, then deploy"]
            )
        if decision == "proceed":
            return
        if clock() + POLL_SECONDS > deadline:
            raise PreflightError(
                name,
                [
                    f"the HyperPod cluster {name!r} is still {status} (an update or patching the service runs); "
                    "UpdateCluster would be refused with ConflictException. Deploy again when `aws sagemaker "
                    f"describe-cluster --cluster-name {name}` shows InService"
                ],
            )
        logger.info("cluster %s is %s; looking again in %s s", name, status, POLL_SECONDS)
        sleep(POLL_SECONDS)


# -- nodes ready --------------------------------------------------------------
#
# Deep health checks can take hours and automatic node replacement leaves nodes Pending meanwhile, while a
# custom resource gets at most an hour. "Ready" therefore cannot mean "every node Running": the check looks
# every ``POLL_SECONDS`` within one invocation and succeeds as soon as every group's nodes run, at once when
# the only nodes not running are in a deep health check, and at the end of the wait when the rest are still
# starting, patching or being replaced (reported in ``NotRunning``). The end of the wait is never a reason to
# fail by itself: the check fails, with the reason, only on what waiting cannot change (a cluster rolling back,
# failed or being deleted; a failed node that node recovery "None" leaves failed; a group short of nodes with
# none even starting; a state this check does not know). It stays inside one invocation on purpose: the
# Provider framework's asynchronous is_complete would put the event, with CloudFormation's presigned
# response URL, into a Step Functions execution's input (issue 17: no presigned URL in any execution input).

ClusterDecision = Literal["look at nodes", "wait", "fail"]
NodeDecision = Literal["ready", "long check", "settling", "leaving", "failed"]

#: Every ``ClusterStatus`` of botocore's SageMaker model, and what the node check does on meeting it
#: (``wait``: look again; at the end of the wait the nodes decide).
CLUSTER_DECISIONS: dict[str, ClusterDecision] = {
    "InService": "look at nodes",
    "Creating": "wait",
    "Updating": "wait",
    "SystemUpdating": "wait",
    "RollingBack": "fail",
    "Failed": "fail",
    "Deleting": "fail",
}
#: Every ``ClusterInstanceStatus`` of botocore's SageMaker model, and what a node in it counts as:
#: ``ready`` counts towards its group; ``long check`` (a deep health check: minutes to hours) counts at once,
#: reported; ``settling`` (starting, patching, being attached) counts at the end of the wait, reported;
#: ``leaving`` (shutting down or detached, as when a node is replaced) and ``failed`` count at the end of the
#: wait only while automatic node recovery replaces them (else the group is short and the check fails,
#: naming them with the service's message).
NODE_DECISIONS: dict[str, NodeDecision] = {
    "Running": "ready",
    "DeepHealthCheckInProgress": "long check",
    "Pending": "settling",
    "SystemUpdating": "settling",
    "AttachInProgress": "settling",
    "ShuttingDown": "leaving",
    "DetachInProgress": "leaving",
    "Failure": "failed",
    "NotFound": "failed",
}


class NodesNotReadyError(RuntimeError):
    """The node check failed; the message is the reason CloudFormation shows."""


def _nodes_ready(event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
    """Look at the cluster and its nodes until ``judge_nodes`` decides, or decide at ``deadline``."""
    props = event.get("ResourceProperties") or {}
    arn = _cluster_arn(props)
    expected = _expected_counts(props.get("ExpectedCounts"))
    while True:
        final = clock() + POLL_SECONDS > deadline
        cluster = describe_cluster(clients().sagemaker, arn)
        if cluster is None:
            raise NodesNotReadyError(f"HyperPod cluster {arn} does not exist; it was deleted while the stack ran")
        name = str(cluster.get("ClusterName"))
        status = str(cluster.get("ClusterStatus"))
        logs = f"Node logs: /aws/sagemaker/Clusters/{name}/{arn.rsplit('/', 1)[-1]}"
        decision = CLUSTER_DECISIONS.get(status)
        if decision is None:
            raise NodesNotReadyError(
                f"HyperPod cluster {name} is {status!r}, a status this check does not know (it knows "
                f"{', '.join(CLUSTER_DECISIONS)}); look at the cluster and deploy again once it is InService"
            )
        if decision == "fail":
            reason = cluster.get("FailureMessage") or "no failure message"
            raise NodesNotReadyError(f"HyperPod cluster {name} is {status} ({reason}). {logs}")
        if decision == "look at nodes" or final:
            recovery = str(cluster.get("NodeRecovery")) == "Automatic"
            verdict = judge_nodes(_list_nodes(arn), expected, final=final, recovery=recovery)
            if verdict.failures:
                raise NodesNotReadyError(f"HyperPod cluster {name} ({status}): {'; '.join(verdict.failures)}. {logs}")
            if verdict.done:
                physical_id = event.get("PhysicalResourceId") or f"{name}-nodes"
                data = {"ClusterStatus": status, "NotRunning": "; ".join(verdict.pending) or "none"}
                return {"PhysicalResourceId": physical_id, "Data": data}
            logger.info("cluster %s (%s): %s; looking again in %s s", name, status, verdict.pending, POLL_SECONDS)
        else:
            logger.info("cluster %s is %s; looking again in %s s", name, status, POLL_SECONDS)
        sleep(POLL_SECONDS)


@dataclasses.dataclass(frozen=True)
class NodesVerdict:
    """What the nodes say: done (succeed), failures (fail with these), or neither (look again)."""

    done: bool
    failures: list[str]
    #: Nodes not Running, by group, for the log and the success report.
    pending: list[str]


def judge_nodes(
    nodes: list[Mapping[str, Any]], expected: Mapping[str, int], *, final: bool, recovery: bool
) -> NodesVerdict:
    """Decide from ListClusterNodes' summaries whether every group of ``expected`` has its nodes.

    A group is complete when its ``ready`` and ``long check`` nodes reach its
    count. Otherwise it is looked at again, unless this is the ``final`` look:
    then ``settling`` nodes count too, and, with automatic node ``recovery``,
    ``leaving`` and ``failed`` ones (the service is replacing them); a group
    still short fails. A status outside ``NODE_DECISIONS`` fails at once.
    """
    by_group: dict[str, dict[NodeDecision, list[str]]] = {group: {} for group in expected}
    failures: list[str] = []
    for node in nodes:
        group = str(node.get("InstanceGroupName"))
        details = node.get("InstanceStatus") or {}
        status = str(details.get("Status"))
        decision = NODE_DECISIONS.get(status)
        label = f"{node.get('InstanceId')} {status}" + (f" ({details['Message']})" if details.get("Message") else "")
        if decision is None:
            failures.append(f"{group}: {label} is in a status this check does not know ({', '.join(NODE_DECISIONS)})")
            continue
        by_group.setdefault(group, {}).setdefault(decision, []).append(label)
    pending: list[str] = []
    waiting = False
    counted_at_end: tuple[NodeDecision, ...] = ("settling", "leaving", "failed") if recovery else ("settling",)
    for group, count in expected.items():
        states = by_group.get(group, {})
        others = [label for decision, labels in states.items() if decision != "ready" for label in labels]
        if others:
            pending.append(f"{group}: {', '.join(others[:MAX_NODES_LISTED])}")
        counted = len(states.get("ready", [])) + len(states.get("long check", []))
        if counted >= count:
            continue
        if not final:
            waiting = True
            continue
        if counted + sum(len(states.get(d, [])) for d in counted_at_end) >= count:
            continue
        listed = ", ".join(others[:MAX_NODES_LISTED]) or "no other nodes"
        running = len(states.get("ready", []))
        failures.append(
            f"{group}: {running} of {count} Running at the end of the wait ({listed}; node recovery "
            f"{'Automatic' if recovery else 'off'})"
        )
    return NodesVerdict(done=not waiting and not failures, failures=failures, pending=pending)


def _cluster_arn(props: Mapping[str, Any]) -> str:
    arn = props.get("ClusterArn")
    if not isinstance(arn, str) or ":cluster/" not in arn:
        raise PropertyError(f"ClusterArn: {arn!r} is not valid; expected the cluster resource's ClusterArn attribute")
    return arn


def _list_nodes(arn: str) -> list[Mapping[str, Any]]:
    """Every node summary of the cluster; a service error (after botocore's retries) is a failure."""
    paginator = clients().sagemaker.get_paginator("list_cluster_nodes")
    try:
        return [node for page in paginator.paginate(ClusterName=arn) for node in page.get("ClusterNodeSummaries", [])]
    except ClientError as err:  # after botocore's own retries (throttling included)
        raise NodesNotReadyError(f"ListClusterNodes for {arn} failed: {error_text(err)}") from err


def _expected_counts(raw: Any) -> dict[str, int]:
    try:
        counts = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(counts, dict) or not counts:
            raise ValueError
        return {str(k): int(v) for k, v in counts.items()}
    except (ValueError, TypeError):
        raise PropertyError(f"ExpectedCounts: {raw!r} is not valid; expected JSON {{group name: count}}") from None
