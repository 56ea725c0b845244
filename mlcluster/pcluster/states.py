"""What each state of a ParallelCluster cluster means to the operator command: ready, wait, degraded or failed.

ParallelCluster's own API model (``pcluster/api/openapi/openapi.yaml`` of the
``aws-parallelcluster`` package, schemas ``CloudFormationStackStatus`` and
``ClusterStatus``) derives a cluster's status from the CloudFormation stack
ParallelCluster builds, named after the cluster (``Cluster.status`` returns
the stack's status). ``mlcluster status`` and ``mlcluster preflight`` read
that stack's ``StackStatus``, so the table is keyed by it: every value of
ParallelCluster's ``CloudFormationStackStatus`` and of botocore's
CloudFormation ``StackStatus`` (a superset: ``UPDATE_FAILED``, the review and
import states) has a decision; tests/pcluster/test_states.py reads both enums
from the installed packages and fails on a value without one.

The compute nodes are EC2 instances (``pcluster_nodes``); their
``InstanceStateName`` (botocore's EC2 model) has its own table.

Nothing here waits: ParallelCluster's custom resource makes CloudFormation
wait on the cluster, with ParallelCluster's own timeouts. These tables decide
what a read reports and whether a deploy may start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: ``ready``: the cluster runs its current configuration. ``degraded``: it runs, but its last change
#: failed and was undone (a deploy may start). ``wait``: an operation is under way. ``fail``: it needs
#: a hand (or a delete) before anything else.
Decision = Literal["ready", "degraded", "wait", "fail"]


@dataclass(frozen=True)
class State:
    """A decision and the reason an operator reads."""

    decision: Decision
    reason: str


_CREATE_FAILED = "the create failed with rollback off (the stack is kept for its logs): delete it, then deploy"
_ROLLED_BACK = "the create failed and was rolled back: delete the cluster stack, then deploy"
_STUCK = "CloudFormation could not finish; fix the failing resource or continue the rollback in the console"

#: ParallelCluster's cluster stack status -> decision.
CLUSTER_STACK_STATES: dict[str, State] = {
    "CREATE_IN_PROGRESS": State("wait", "ParallelCluster is creating the cluster"),
    "CREATE_FAILED": State("fail", _CREATE_FAILED),
    "CREATE_COMPLETE": State("ready", "the cluster is up"),
    "ROLLBACK_IN_PROGRESS": State("wait", "the create failed and is being rolled back"),
    "ROLLBACK_FAILED": State("fail", _STUCK),
    "ROLLBACK_COMPLETE": State("fail", _ROLLED_BACK),
    "DELETE_IN_PROGRESS": State("wait", "the cluster is being deleted"),
    "DELETE_FAILED": State("fail", "the delete failed: retry it, or remove the resource it names by hand"),
    "DELETE_COMPLETE": State("fail", "the cluster is deleted"),
    "UPDATE_IN_PROGRESS": State("wait", "ParallelCluster is updating the cluster"),
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS": State("wait", "the update is done; old resources are being removed"),
    "UPDATE_COMPLETE": State("ready", "the cluster is up with its last update"),
    "UPDATE_FAILED": State("fail", "the update failed and was not rolled back: " + _STUCK),
    "UPDATE_ROLLBACK_IN_PROGRESS": State("wait", "the last update failed and is being rolled back"),
    "UPDATE_ROLLBACK_FAILED": State("fail", _STUCK),
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS": State("wait", "the rollback is done; new resources are removed"),
    # ParallelCluster's maintainers (aws/aws-parallelcluster PR #7150): the stack's rollback can complete while
    # the head node still applies its own rollback of the configuration (cfn-hup runs chef on the node).
    "UPDATE_ROLLBACK_COMPLETE": State(
        "degraded",
        "the last update failed and was rolled back: the cluster runs its previous configuration once the head "
        "node's own rollback has finished; confirm it did in /var/log/chef-client.log on the head node before "
        "deploying",
    ),
    "REVIEW_IN_PROGRESS": State("wait", "a change set is being created for a new stack"),
    "IMPORT_IN_PROGRESS": State("wait", "resources are being imported"),
    "IMPORT_COMPLETE": State("ready", "the cluster is up (resources imported)"),
    "IMPORT_ROLLBACK_IN_PROGRESS": State("wait", "an import failed and is being rolled back"),
    "IMPORT_ROLLBACK_FAILED": State("fail", _STUCK),
    "IMPORT_ROLLBACK_COMPLETE": State("degraded", "an import failed and was rolled back"),
}

#: EC2 ``InstanceStateName`` of a ParallelCluster node -> decision.
NODE_STATES: dict[str, State] = {
    # A dynamic fleet starts and terminates compute nodes as jobs come and go: both are normal, not failures.
    "pending": State("wait", "the instance is starting (Slurm scales up)"),
    "running": State("ready", "the instance runs"),
    "shutting-down": State("wait", "the instance is terminating (Slurm scales down, or replaces a failed node)"),
    "terminated": State("fail", "the instance is terminated"),
    "stopping": State("fail", "the instance is stopping: nothing in a cluster stops nodes"),
    "stopped": State("fail", "the instance is stopped: nothing in a cluster stops nodes"),
}


def cluster_stack_state(status: str) -> State:
    """The decision for a cluster stack status; a status no model knows is a failure to look at, not health."""
    unknown = State("fail", f"{status} is no CloudFormation stack status mlcluster knows")
    return CLUSTER_STACK_STATES.get(status, unknown)


def node_state(status: str, *, head_node: bool = False) -> State:
    """The decision for an EC2 instance state of a node (unknown states: a failure to look at).

    The head node is no fleet: once the cluster exists, anything but ``running`` needs a look.
    """
    state = NODE_STATES.get(status, State("fail", f"{status} is no EC2 instance state mlcluster knows"))
    if head_node and state.decision == "wait":
        return State("fail", f"the head node is {status}: the cluster has no head node while it is")
    return state
