"""Every state the operator command's waits can meet has a decision (issue 25), from botocore's models.

``mlcluster patch`` waits on a HyperPod cluster and its nodes, the
run-command helper on SSM command invocations: a botocore release that adds
a state fails here until the table says what to do with it, and a state the
table lacks at run time stops the wait with a message instead of spinning.
"""

from __future__ import annotations

import botocore.session

from mlcluster.cli import patch, runcommand


def _enum(service: str, shape: str) -> list[str]:
    model = botocore.session.get_session().get_service_model(service)
    return sorted(model.shape_for(shape).enum)  # type: ignore[attr-defined]


def test_patch_knows_every_cluster_and_node_state() -> None:
    assert sorted(patch.PATCH_CLUSTER_DECISIONS) == _enum("sagemaker", "ClusterStatus")
    assert sorted(patch.PATCH_NODE_DECISIONS) == _enum("sagemaker", "ClusterInstanceStatus")
    assert {d for d in patch.PATCH_CLUSTER_DECISIONS.values()} == {"done when no node is busy", "wait", "fail"}


def test_run_command_knows_every_invocation_state() -> None:
    assert not runcommand.FINAL & runcommand.CHANGING
    assert sorted(runcommand.FINAL | runcommand.CHANGING) == _enum("ssm", "CommandInvocationStatus")


def test_status_calls_healthy_only_states_the_services_have() -> None:
    """``mlcluster status`` calls everything outside its healthy sets a problem (fail-closed); the healthy
    sets themselves must be states of the services' models, or a renamed state would always look broken."""
    from mlcluster.cli import status

    assert set(_enum("cloudformation", "StackStatus")) >= status.HEALTHY_STACK
    assert "Running" in _enum("sagemaker", "ClusterInstanceStatus")
    assert "running" in _enum("ec2", "InstanceStateName")
    assert {"Running", "running"} == status.HEALTHY_NODE
    assert "AVAILABLE" in _enum("fsx", "FileSystemLifecycle")
    assert "AVAILABLE" in _enum("fsx", "DataRepositoryLifecycle")
    assert "InService" in _enum("sagemaker", "ClusterStatus")
