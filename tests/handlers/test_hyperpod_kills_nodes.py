"""The HyperPod handler: more behaviour `make mutation MODULE=handlers` showed no test asserted.

- Every node in a status the check does not know is named, not only the first (app.py ``judge_nodes``
  mutant 43: "continue" to "break").
- A page of ListClusterNodes without the summaries counts as empty (``_list_nodes`` mutants 7, 9).
- DescribeStacks answering no stack for the event's own stack fails with the count (``_rolling_back``
  mutant 22).
- An AWS error's text for people: ``Code: message``, and without either still names the error (aws.py
  ``error_text`` mutants 3, 5, 10-26).
- A training plan is drawn on by a group of one instance (spec.py ``Properties.training_plans`` mutant 24:
  "> 0" to "> 1").
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from mlcluster.handlers.hyperpod_cluster import app
from mlcluster.handlers.hyperpod_cluster.aws import error_text
from mlcluster.handlers.hyperpod_cluster.spec import Properties

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-two-weeks-0001"
OTHER_PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-later-0002"


def node(group: str, instance: str, status: str) -> dict[str, Any]:
    return {"InstanceGroupName": group, "InstanceId": instance, "InstanceStatus": {"Status": status}}


def test_every_node_in_an_unknown_status_is_named() -> None:
    verdict = app.judge_nodes(
        [node("workers", "i-1", "Rebooting"), node("workers", "i-2", "Hibernating"), node("login", "i-3", "Running")],
        {"workers": 2, "login": 1},
        final=True,
        recovery=False,
    )
    known = ", ".join(app.NODE_DECISIONS)
    assert verdict.failures == [
        f"workers: i-1 Rebooting is in a status this check does not know ({known})",
        f"workers: i-2 Hibernating is in a status this check does not know ({known})",
        "workers: 0 of 2 Running at the end of the wait (no other nodes; node recovery off)",
    ]
    assert not verdict.done


class Paginator:
    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages
        self.asked: list[dict[str, Any]] = []

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.asked.append(kwargs)
        return self.pages


def test_a_page_without_node_summaries_counts_as_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    paginator = Paginator([{}, {"ClusterNodeSummaries": [node("workers", "i-1", "Running")]}, {}])
    sagemaker = SimpleNamespace(get_paginator=lambda name: paginator if name == "list_cluster_nodes" else None)
    monkeypatch.setattr(app, "clients", lambda: SimpleNamespace(sagemaker=sagemaker))
    assert app._list_nodes("arn:cluster") == [node("workers", "i-1", "Running")]
    assert paginator.asked == [{"ClusterName": "arn:cluster"}]


@pytest.mark.parametrize("stacks", [[], [{"StackStatus": "UPDATE_IN_PROGRESS"}] * 2])
def test_describe_stacks_answering_other_than_one_stack_fails(
    monkeypatch: pytest.MonkeyPatch, stacks: list[dict[str, str]]
) -> None:
    cloudformation = SimpleNamespace(describe_stacks=lambda **kwargs: {"Stacks": stacks})
    monkeypatch.setattr(app, "clients", lambda: SimpleNamespace(cloudformation=cloudformation))
    with pytest.raises(RuntimeError) as raised:
        app._rolling_back({"StackId": "arn:stack/dev/1"})
    assert (
        str(raised.value) == f"DescribeStacks for arn:stack/dev/1 returned {len(stacks)} stacks, expected exactly one"
    )


def test_an_aws_error_reads_code_colon_message() -> None:
    error = ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "ListClusterNodes")
    assert error_text(error) == "ThrottlingException: Rate exceeded"


@pytest.mark.parametrize("response", [{}, {"Error": {}}])
def test_an_aws_error_without_code_or_message_still_names_the_error(response: dict[str, Any]) -> None:
    error = ClientError(response, "ListClusterNodes")  # type: ignore[arg-type]
    assert error_text(error) == f"Error: {error}"
    assert "ListClusterNodes operation" in str(error)


def properties(*groups: dict[str, Any]) -> Properties:
    return Properties(spec={"ClusterName": "ml", "InstanceGroups": list(groups)}, provisioning_parameters_key="k")


def test_a_group_of_one_instance_draws_on_its_training_plan() -> None:
    props = properties(
        {"InstanceGroupName": "workers", "InstanceCount": 1, "TrainingPlanArn": PLAN},
        {"InstanceGroupName": "spare", "InstanceCount": 0, "TrainingPlanArn": OTHER_PLAN},
        {"InstanceGroupName": "login", "InstanceCount": 1},
    )
    assert props.training_plans() == [PLAN]
