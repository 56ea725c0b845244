"""The cluster's nodes, and the Session Manager target of each, for both backends.

HyperPod nodes are reached as ``sagemaker-cluster:<cluster id>_<group>-<instance id>``
(the cluster id is the last part of the cluster ARN). ParallelCluster nodes
are EC2 instances, reached by instance id; the head node's id is a stack
output and the compute nodes carry ParallelCluster's tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlcluster.cli.context import Target
from mlcluster.cli.errors import EXIT_FAILED, CliError, aws_errors


@dataclass(frozen=True)
class Node:
    """One node: its group (HyperPod instance group or ParallelCluster queue), id, state and SSM target."""

    group: str
    instance_id: str
    instance_type: str
    status: str
    message: str
    ssm_target: str
    #: ParallelCluster's ``parallelcluster:node-type`` tag (``HeadNode``, ``Compute``, ``LoginNode``); empty elsewhere.
    #: The group cannot tell a node's kind: a queue may be named like the head node's group (``head-node``).
    kind: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "group": self.group,
            "instance_id": self.instance_id,
            "instance_type": self.instance_type,
            "status": self.status,
            "message": self.message,
            "ssm_target": self.ssm_target,
        }


def cluster_name(target: Target) -> str:
    """The deployed cluster's name, from the cluster stack's ``ClusterName`` output."""
    return target.output("Cluster", "ClusterName")


def hyperpod_target(cluster_arn: str, group: str, instance_id: str) -> str:
    """The SSM target of a HyperPod node."""
    return f"sagemaker-cluster:{cluster_arn.rsplit('/', 1)[-1]}_{group}-{instance_id}"


def describe_hyperpod(target: Target) -> dict[str, Any]:
    """DescribeCluster for the environment's HyperPod cluster."""
    name = cluster_name(target)
    with aws_errors(f"DescribeCluster for {name}"):
        return dict(target.client("sagemaker").describe_cluster(ClusterName=name))


def hyperpod_nodes(target: Target, cluster_arn: str) -> list[Node]:
    """Every node of the HyperPod cluster (ListClusterNodes, all pages)."""
    name = cluster_name(target)
    nodes: list[Node] = []
    with aws_errors(f"ListClusterNodes for {name}"):
        for page in target.client("sagemaker").get_paginator("list_cluster_nodes").paginate(ClusterName=name):
            for summary in page.get("ClusterNodeSummaries", []):
                status = summary.get("InstanceStatus", {})
                nodes.append(
                    Node(
                        group=summary["InstanceGroupName"],
                        instance_id=summary["InstanceId"],
                        instance_type=summary.get("InstanceType", ""),
                        status=status.get("Status", "Unknown"),
                        message=status.get("Message", "") or "",
                        ssm_target=hyperpod_target(cluster_arn, summary["InstanceGroupName"], summary["InstanceId"]),
                    )
                )
    return nodes


def pcluster_nodes(target: Target) -> list[Node]:
    """The ParallelCluster head node and compute nodes (EC2 DescribeInstances by ParallelCluster's tags)."""
    name = cluster_name(target)
    nodes: list[Node] = []
    filters = [
        {"Name": "tag:parallelcluster:cluster-name", "Values": [name]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]},
    ]
    with aws_errors(f"DescribeInstances for cluster {name}"):
        for page in target.client("ec2").get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                    node_type = tags.get("parallelcluster:node-type", "")
                    group = (
                        "head-node" if node_type == "HeadNode" else tags.get("parallelcluster:queue-name", node_type)
                    )
                    state = instance.get("State", {}).get("Name", "unknown")
                    nodes.append(
                        Node(
                            group=group,
                            instance_id=instance["InstanceId"],
                            instance_type=instance.get("InstanceType", ""),
                            status=state,
                            message=instance.get("StateReason", {}).get("Message", "") if state != "running" else "",
                            ssm_target=instance["InstanceId"],
                            kind=node_type,
                        )
                    )
    return nodes


def controller(target: Target) -> Node:
    """The node that runs Slurm's controller: the ParallelCluster head node or the HyperPod controller."""
    if target.backend == "pcluster":
        instance_id = target.output("Cluster", "HeadNodeInstanceId")
        return Node("head-node", instance_id, "", "", "", instance_id)
    hyperpod = target.environment.config.cluster.hyperpod
    assert hyperpod is not None  # a hyperpod backend always has its section (config check)
    return pick(target, group=hyperpod.controller.instance_group_name, node_id=None)


def pick(target: Target, group: str | None, node_id: str | None) -> Node:
    """The node ``--node`` names, else the first running node of ``--group``, else the controller."""
    target.require_backend("pcluster", "hyperpod")
    if group is None and node_id is None:
        return controller(target)
    if target.backend == "hyperpod":
        arn = str(describe_hyperpod(target)["ClusterArn"])
        nodes = hyperpod_nodes(target, arn)
    else:
        nodes = pcluster_nodes(target)
    candidates = [
        n for n in nodes if (node_id is None or n.instance_id == node_id) and (group is None or n.group == group)
    ]
    if not candidates:
        known = ", ".join(sorted({f"{n.group}/{n.instance_id}" for n in nodes})) or "none"
        wanted = " ".join(
            part for part in (f"--group {group}" if group else "", f"--node {node_id}" if node_id else "") if part
        )
        raise CliError(f"no node matches {wanted} in {cluster_name(target)} (nodes: {known})", EXIT_FAILED)
    running = [n for n in candidates if n.status in {"Running", "running"}]
    return (running or candidates)[0]
