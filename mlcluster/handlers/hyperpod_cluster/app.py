"""Entry point ``on_event`` (CDK Provider framework) of the two read-only checks around the cluster.

CloudFormation's own ``AWS::SageMaker::Cluster`` handler creates, updates,
rolls back and deletes the cluster. These custom resources only look:

- ``Custom::HyperPodPreflight`` runs before the cluster resource on every
  Create and Update (a rollback is an Update with the old properties). It
  checks the inputs (lifecycle objects, provisioning parameters, private
  subnets, self-referencing security groups) and the cluster as it is:
  a new name must be free; an existing cluster must still exist, and one that
  is busy (Creating, Updating, SystemUpdating, RollingBack) is waited for,
  bounded, so CloudFormation's UpdateCluster does not meet a conflict; a
  rename (create-before-delete) refuses groups on a training plan, which
  holds exactly the instances the old cluster uses.
- ``Custom::HyperPodNodesReady`` runs after the cluster resource, on every
  Create and Update, and succeeds only when every group has as many
  ``Running`` nodes as it asks for (InService alone does not promise that).

Properties: ``ClusterSpec`` (JSON of the CreateCluster request the cluster
resource is built from) and ``ProvisioningParametersKey`` for the pre-flight;
``ClusterArn`` (a resolved attribute of the cluster resource),
``ExpectedCounts`` (JSON ``{group: count}``) and ``SpecDigest`` (changes with
every change of the cluster) for the node check. Delete does nothing: there is
nothing of ours to remove. Neither resource ever calls a SageMaker API that
changes anything, so neither can harm a cluster it was not made for.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError
from botocore.model import StructureShape

from .aws import Clients, describe_cluster, error_text
from .preflight import PreflightError, check_all
from .spec import Properties, PropertyError, parse_properties

logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

PREFLIGHT = "Custom::HyperPodPreflight"
NODES_READY = "Custom::HyperPodNodesReady"
#: Statuses in which UpdateCluster answers ConflictException: the pre-flight waits them out.
BUSY_STATUSES = ("Creating", "Updating", "SystemUpdating", "RollingBack")
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
    deadline = _deadline(context)
    if kind == PREFLIGHT:
        return _preflight(event, deadline)
    if kind == NODES_READY:
        return _nodes_ready(event, deadline)
    raise ValueError(f"ResourceType {kind!r} is not {PREFLIGHT} or {NODES_READY}")


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
        problems.append(
            f"a HyperPod cluster named {props.name!r} already exists (status {existing.get('ClusterStatus')}, "
            f"{existing.get('ClusterArn')}); choose another cluster.name, or delete that cluster first"
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
        if status not in BUSY_STATUSES:
            if status == "Deleting":
                raise PreflightError(
                    name, [f"the HyperPod cluster {name!r} is being deleted outside CloudFormation; wait, then deploy"]
                )
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


def _nodes_ready(event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
    props = event.get("ResourceProperties") or {}
    arn = props.get("ClusterArn")
    if not isinstance(arn, str) or ":cluster/" not in arn:
        raise PropertyError(f"ClusterArn: {arn!r} is not valid; expected the cluster resource's ClusterArn attribute")
    expected = _expected_counts(props.get("ExpectedCounts"))
    while True:
        cluster = describe_cluster(clients().sagemaker, arn)
        if cluster is None:
            raise RuntimeError(f"HyperPod cluster {arn} does not exist; it was deleted while the stack ran")
        short = _missing_nodes(arn, cluster, expected)
        if not short:
            physical_id = event.get("PhysicalResourceId") or f"{cluster.get('ClusterName')}-nodes"
            return {"PhysicalResourceId": physical_id, "Data": {"ClusterStatus": str(cluster.get("ClusterStatus"))}}
        if clock() + POLL_SECONDS > deadline:
            raise RuntimeError(
                f"HyperPod cluster {cluster.get('ClusterName')} ({cluster.get('ClusterStatus')}) does not have the "
                f"nodes it asks for: {'; '.join(short)}. Node logs: /aws/sagemaker/Clusters/"
                f"{cluster.get('ClusterName')}/{arn.rsplit('/', 1)[-1]}"
            )
        sleep(POLL_SECONDS)


def _expected_counts(raw: Any) -> dict[str, int]:
    try:
        counts = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(counts, dict) or not counts:
            raise ValueError
        return {str(k): int(v) for k, v in counts.items()}
    except (ValueError, TypeError):
        raise PropertyError(f"ExpectedCounts: {raw!r} is not valid; expected JSON {{group name: count}}") from None


def _missing_nodes(arn: str, cluster: Mapping[str, Any], expected: Mapping[str, int]) -> list[str]:
    """Per group with fewer Running nodes than asked, what is there instead ([] when all are)."""
    running: dict[str, int] = dict.fromkeys(expected, 0)
    others: dict[str, list[str]] = {}
    paginator = clients().sagemaker.get_paginator("list_cluster_nodes")
    try:
        for page in paginator.paginate(ClusterName=arn):
            for node in page.get("ClusterNodeSummaries", []):
                group = str(node.get("InstanceGroupName"))
                state = str((node.get("InstanceStatus") or {}).get("Status"))
                if state == "Running":
                    running[group] = running.get(group, 0) + 1
                else:
                    others.setdefault(group, []).append(f"{node.get('InstanceId')} {state}")
    except ClientError as err:  # after botocore's own retries (throttling included)
        raise RuntimeError(f"ListClusterNodes for {arn} failed: {error_text(err)}") from err
    groups = {str(g.get("InstanceGroupName")): g for g in cluster.get("InstanceGroups", [])}
    short = []
    for group, count in expected.items():
        if running.get(group, 0) >= count:
            continue
        current = groups.get(group, {}).get("CurrentCount", 0)
        listed = ", ".join(others.get(group, [])[:MAX_NODES_LISTED]) or "none other"
        short.append(f"{group}: {running.get(group, 0)} of {count} Running (CurrentCount {current}; {listed})")
    return short
