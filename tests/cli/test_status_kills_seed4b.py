"""``mlcluster status``: an orphan stack shows CloudFormation's status, and a ParallelCluster stack that is gone
is said to be gone (issue 27, cli seed 4)."""

from __future__ import annotations

import json
from typing import Any

from mlcluster.cli import orphans
from mlcluster.config import load_environment
from tests.cli.conftest import REPO, Aws, World, aws_client


class _Stacks:
    """A CloudFormation client whose DescribeStacks paginator answers one page of ``stacks``."""

    def __init__(self, stacks: list[dict[str, Any]]) -> None:
        self.stacks = stacks

    def get_paginator(self, operation: str) -> _Stacks:
        assert operation == "describe_stacks"
        return self

    def paginate(self) -> list[dict[str, Any]]:
        return [{"Stacks": self.stacks}]


def test_an_orphan_stack_shows_its_cloudformation_status_and_the_way_out() -> None:
    """The status tells the operator whether delete-stack can work now (a stack stuck in a failed rollback
    needs it first); the record is the whole row status prints."""
    env = load_environment(REPO / "environments" / "dev.yaml")
    stack = {
        "StackName": f"{env.name}-Old",
        "StackStatus": "UPDATE_ROLLBACK_FAILED",
        "EnableTerminationProtection": True,
        "Tags": [{"Key": orphans.ENVIRONMENT_TAG, "Value": env.name}],
    }
    assert orphans.orphan_stacks(_Stacks([stack]), env) == [
        {
            "stack": f"{env.name}-Old",
            "status": "UPDATE_ROLLBACK_FAILED",
            "bills": "every resource in it, as when it was in the app",
            "remove": "aws cloudformation update-termination-protection --no-enable-termination-protection "
            f"--stack-name {env.name}-Old; aws cloudformation delete-stack --stack-name {env.name}-Old "
            "(retained resources stay, listed below once it is gone)",
            "adopt": "put it back in the app (the environment setting that dropped it, or the file of its "
            "environment) and deploy",
        }
    ]


def test_status_says_the_parallelcluster_stack_does_not_exist(aws: Aws, pcluster: World) -> None:
    """DescribeStacks answers ValidationError "Stack with id ... does not exist" for a deleted cluster: status
    reports the cluster gone (a problem, exit 1), not an AWS failure (exit 3)."""
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []})
    aws_client("cloudformation", pcluster.region).delete_stack(StackName=pcluster.cluster)
    result = pcluster.run("status", "p5", "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert (data["cluster"]["status"], data["cluster"]["failure"]) == (
        "NOT_FOUND",
        f"ParallelCluster's stack {pcluster.cluster} does not exist",
    )
    assert (
        f"cluster {pcluster.cluster} is NOT_FOUND: ParallelCluster's stack {pcluster.cluster} does not exist"
        in (data["problems"])
    )
