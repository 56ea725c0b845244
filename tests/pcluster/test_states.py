"""Every ParallelCluster state mlcluster reads has a decision, read from the installed models, not typed here.

The cluster stack's statuses come from ParallelCluster's own API model
(``pcluster/api/openapi/openapi.yaml`` in .venv-pcluster, schema
``CloudFormationStackStatus``) and from botocore's CloudFormation
``StackStatus``; the nodes' from botocore's EC2 ``InstanceStateName``.
"""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest
import yaml

from mlcluster.pcluster.states import CLUSTER_STACK_STATES, NODE_STATES, State, cluster_stack_state
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON


def _openapi() -> dict[str, object]:
    found = sorted(PCLUSTER_PYTHON.parent.parent.glob("lib/python3*/site-packages/pcluster/api/openapi/openapi.yaml"))
    if not found:
        pytest.skip(".venv-pcluster is not set up (make pytest does)")
    spec: dict[str, object] = yaml.safe_load(Path(found[0]).read_text(encoding="utf-8"))
    return spec


def pcluster_enum(name: str) -> list[str]:
    """The values of one enum schema of ParallelCluster's installed API model."""
    values: list[str] = _openapi()["components"]["schemas"][name]["enum"]  # type: ignore[index]
    return values


def botocore_enum(service: str, shape: str) -> list[str]:
    values: list[str] = botocore.session.get_session().get_service_model(service).shape_for(shape).enum
    return values


def missing(table: dict[str, State], values: list[str]) -> list[str]:
    """The values without a decision (the assertion every table test makes)."""
    return [v for v in values if v not in table]


def test_every_parallelcluster_stack_status_has_a_decision() -> None:
    values = pcluster_enum("CloudFormationStackStatus")
    assert "UPDATE_ROLLBACK_COMPLETE" in values and len(values) >= 16  # the model was read, not an empty list
    assert missing(CLUSTER_STACK_STATES, values) == []


def test_every_cloudformation_stack_status_has_a_decision() -> None:
    assert missing(CLUSTER_STACK_STATES, botocore_enum("cloudformation", "StackStatus")) == []


def test_every_node_state_has_a_decision() -> None:
    assert missing(NODE_STATES, botocore_enum("ec2", "InstanceStateName")) == []


def test_a_value_without_a_decision_is_reported() -> None:
    """The check itself can fail: a table without one model value names it."""
    values = pcluster_enum("CloudFormationStackStatus")
    partial = {k: v for k, v in CLUSTER_STACK_STATES.items() if k != "ROLLBACK_COMPLETE"}
    assert missing(partial, values) == ["ROLLBACK_COMPLETE"]


def test_the_table_follows_parallelclusters_cluster_status() -> None:
    """ParallelCluster's ClusterStatus is its stack's status: ready exactly for its *_COMPLETE values we call ready."""
    cluster_status = pcluster_enum("ClusterStatus")
    assert [s for s in cluster_status if s not in CLUSTER_STACK_STATES] == []
    assert {s for s in cluster_status if CLUSTER_STACK_STATES[s].decision == "ready"} == {
        "CREATE_COMPLETE",
        "UPDATE_COMPLETE",
    }
    assert {s for s in cluster_status if CLUSTER_STACK_STATES[s].decision == "wait"} == {
        s for s in cluster_status if s.endswith("_IN_PROGRESS")
    }
    assert {s for s in cluster_status if CLUSTER_STACK_STATES[s].decision == "fail"} == {
        s for s in cluster_status if s.endswith("_FAILED")
    } | {"DELETE_COMPLETE"}


def test_an_unknown_status_is_a_failure_not_health() -> None:
    state = cluster_stack_state("SOMETHING_NEW")
    assert (state.decision, "SOMETHING_NEW" in state.reason) == ("fail", True)
