"""The cluster's nodes and the ways onto them, whole: every node record, every request, every ssh line.

A Target whose clients are recorders (each request's operation and every parameter) answers in the
shapes botocore's models allow, optional fields left out too; each test compares the whole list of
nodes, the node picked, the complete error and the complete ``ssh --print`` / ``ssh-config`` output
with ``==`` (issue 27, cli sweep).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mlcluster.cli import context, nodes, ssh
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_SETUP, CliError
from mlcluster.cli.nodes import Node
from mlcluster.config import load_environment
from tests.cli.conftest import REPO, invoke

ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/k3x9q2a1b2c3"


class Recorder:
    """A boto3 client stand-in: ``answers[operation]`` is a list of pages (paginated) or one answer, or raises."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _answer(self, operation: str, params: dict[str, Any]) -> Any:
        self.calls.append((operation, params))
        answer = self.answers[operation]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get_paginator(self, operation: str) -> Any:
        recorder = self

        class Paginator:
            def paginate(self, **params: Any) -> list[dict[str, Any]]:
                return list(recorder._answer(operation, params))

        return Paginator()

    def __getattr__(self, operation: str) -> Any:
        return lambda **params: self._answer(operation, params)


def target(env: str, outputs: dict[str, str], **clients: Recorder) -> context.Target:
    made = context.Target(
        environment=load_environment(REPO / "environments" / f"{env}.yaml"),
        session=boto3.Session(region_name="us-west-2"),
    )
    made.remember_outputs("Cluster", {"Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]})
    made._clients.update(clients)
    return made


def summary(group: str, instance_id: str, status: str = "Running", **extra: Any) -> dict[str, Any]:
    return {
        "InstanceGroupName": group,
        "InstanceId": instance_id,
        "InstanceType": "ml.p5.48xlarge",
        "InstanceStatus": {"Status": status},
        **extra,
    }


def hyperpod(pages: list[dict[str, Any]]) -> tuple[context.Target, Recorder]:
    sagemaker = Recorder({"describe_cluster": {"ClusterArn": ARN}, "list_cluster_nodes": pages})
    return target("hyperpod", {"ClusterName": "ml-hyperpod"}, sagemaker=sagemaker), sagemaker


def hp_node(group: str, instance_id: str, status: str = "Running", **fields: Any) -> Node:
    return Node(
        **{
            "group": group,
            "instance_id": instance_id,
            "instance_type": "ml.p5.48xlarge",
            "status": status,
            "message": "",
            "ssm_target": f"sagemaker-cluster:k3x9q2a1b2c3_{group}-{instance_id}",
            **fields,
        }
    )


def test_every_hyperpod_node_of_every_page_with_its_state_and_target() -> None:
    pages: list[dict[str, Any]] = [
        {
            "ClusterNodeSummaries": [
                summary("controller-machine", "i-01"),
                summary("worker", "i-02", "Pending", InstanceStatus={"Status": "Pending", "Message": "booting"}),
            ]
        },
        {},  # a page without the list
        {
            "ClusterNodeSummaries": [
                {"InstanceGroupName": "worker", "InstanceId": "i-03", "InstanceStatus": {"Message": None}},
                {"InstanceGroupName": "worker", "InstanceId": "i-04"},
            ]
        },
    ]
    made, sagemaker = hyperpod(pages)
    assert nodes.hyperpod_nodes(made, ARN) == [
        hp_node("controller-machine", "i-01"),
        hp_node("worker", "i-02", "Pending", message="booting"),
        hp_node("worker", "i-03", "Unknown", instance_type=""),
        hp_node("worker", "i-04", "Unknown", instance_type=""),
    ]
    assert sagemaker.calls == [("list_cluster_nodes", {"ClusterName": "ml-hyperpod"})]


def test_a_hyperpod_target_uses_the_cluster_id_at_the_end_of_the_arn() -> None:
    assert nodes.hyperpod_target(ARN, "g", "i-1") == "sagemaker-cluster:k3x9q2a1b2c3_g-i-1"
    assert nodes.hyperpod_target("k3x9q2a1b2c3", "g", "i-1") == "sagemaker-cluster:k3x9q2a1b2c3_g-i-1"


def instance(instance_id: str, state: str, tags: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "InstanceId": instance_id,
        "InstanceType": "p5.48xlarge",
        "State": {"Name": state},
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        **extra,
    }


HEAD = {"parallelcluster:node-type": "HeadNode", "parallelcluster:queue-name": "ignored"}
COMPUTE = {"parallelcluster:node-type": "Compute", "parallelcluster:queue-name": "compute-gpu"}
LOGIN = {"parallelcluster:node-type": "LoginNode"}


def test_every_parallelcluster_node_by_its_tags_with_its_state() -> None:
    reason = {"StateReason": {"Code": "x", "Message": "Client.UserInitiatedShutdown"}}
    pages = [
        {
            "Reservations": [
                {"Instances": [instance("i-h", "running", HEAD, **reason)]},
                {},
                {"Instances": [instance("i-c1", "stopped", COMPUTE, **reason), instance("i-c2", "pending", COMPUTE)]},
            ]
        },
        {},
        {"Reservations": [{"Instances": [instance("i-l", "running", LOGIN), {"InstanceId": "i-bare"}]}]},
    ]
    ec2 = Recorder({"describe_instances": pages})
    made = target("p5", {"ClusterName": "p5-train"}, ec2=ec2)
    assert nodes.pcluster_nodes(made) == [
        Node("head-node", "i-h", "p5.48xlarge", "running", "", "i-h", kind="HeadNode"),
        Node("compute-gpu", "i-c1", "p5.48xlarge", "stopped", "Client.UserInitiatedShutdown", "i-c1", kind="Compute"),
        Node("compute-gpu", "i-c2", "p5.48xlarge", "pending", "", "i-c2", kind="Compute"),
        Node("LoginNode", "i-l", "p5.48xlarge", "running", "", "i-l", kind="LoginNode"),
        Node("", "i-bare", "", "unknown", "", "i-bare", kind=""),
    ]
    assert ec2.calls == [
        (
            "describe_instances",
            {
                "Filters": [
                    {"Name": "tag:parallelcluster:cluster-name", "Values": ["p5-train"]},
                    {
                        "Name": "instance-state-name",
                        "Values": ["pending", "running", "stopping", "stopped", "shutting-down"],
                    },
                ]
            },
        )
    ]


def test_a_node_as_a_record_leaves_its_kind_out() -> None:
    node = Node("compute-gpu", "i-1", "p5.48xlarge", "running", "m", "i-1", kind="Compute")
    assert node.as_dict() == {
        "group": "compute-gpu",
        "instance_id": "i-1",
        "instance_type": "p5.48xlarge",
        "status": "running",
        "message": "m",
        "ssm_target": "i-1",
    }


def test_the_parallelcluster_controller_is_the_head_node_output_without_any_call() -> None:
    ec2 = Recorder({})
    made = target("p5", {"ClusterName": "p5-train", "HeadNodeInstanceId": "i-head"}, ec2=ec2)
    assert nodes.pick(made, None, None) == Node("head-node", "i-head", "", "", "", "i-head")
    assert ec2.calls == []


def test_the_hyperpod_controller_is_the_first_running_node_of_its_group() -> None:
    made, sagemaker = hyperpod(
        [
            {
                "ClusterNodeSummaries": [
                    summary("worker", "i-w"),
                    summary("controller-machine", "i-old", "Failure"),
                    summary("controller-machine", "i-new", "Running"),
                    summary("controller-machine", "i-newer", "Running"),
                ]
            }
        ]
    )
    assert nodes.pick(made, None, None) == hp_node("controller-machine", "i-new")
    assert sagemaker.calls == [
        ("describe_cluster", {"ClusterName": "ml-hyperpod"}),
        ("list_cluster_nodes", {"ClusterName": "ml-hyperpod"}),
    ]


def test_a_group_with_no_running_node_gives_its_first_node() -> None:
    made, _ = hyperpod([{"ClusterNodeSummaries": [summary("w", "i-1", "Pending"), summary("w", "i-2", "Failure")]}])
    assert nodes.pick(made, "w", None) == hp_node("w", "i-1", "Pending")


def test_node_and_group_together_must_both_match() -> None:
    made, _ = hyperpod([{"ClusterNodeSummaries": [summary("a", "i-1"), summary("b", "i-2"), summary("a", "i-2")]}])
    assert nodes.pick(made, "a", "i-2") == hp_node("a", "i-2")
    assert nodes.pick(made, None, "i-2") == hp_node("b", "i-2")
    with pytest.raises(CliError) as caught:
        nodes.pick(made, "b", "i-1")
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_FAILED,
        "no node matches --group b --node i-1 in ml-hyperpod (nodes: a/i-1, a/i-2, b/i-2)",
    )
    with pytest.raises(CliError, match=r"^no node matches --group c in ml-hyperpod \(nodes: a/i-1, a/i-2, b/i-2\)$"):
        nodes.pick(made, "c", None)
    with pytest.raises(CliError, match=r"^no node matches --node i-9 in ml-hyperpod \(nodes: a/i-1, a/i-2, b/i-2\)$"):
        nodes.pick(made, None, "i-9")


def test_a_cluster_without_nodes_says_none() -> None:
    ec2 = Recorder({"describe_instances": [{}]})
    made = target("p5", {"ClusterName": "p5-train"}, ec2=ec2)
    with pytest.raises(CliError, match=r"^no node matches --group q in p5-train \(nodes: none\)$"):
        nodes.pick(made, "q", None)


def test_a_cluster_less_environment_has_no_nodes_to_pick() -> None:
    made = target("dev", {})
    with pytest.raises(
        CliError, match=r"^environment dev has cluster\.backend 'none'; this command needs 'pcluster' or"
    ):
        nodes.pick(made, None, None)


@pytest.mark.parametrize(
    ("client", "operation", "doing"),
    [
        ("sagemaker", "describe_cluster", "DescribeCluster for ml-hyperpod"),
        ("sagemaker", "list_cluster_nodes", "ListClusterNodes for ml-hyperpod"),
        ("ec2", "describe_instances", "DescribeInstances for cluster ml-hyperpod"),
    ],
)
def test_a_refused_node_lookup_names_its_call(client: str, operation: str, doing: str) -> None:
    refused = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, operation)
    answers: dict[str, Any] = {"describe_cluster": {"ClusterArn": ARN}, "list_cluster_nodes": [{}]}
    answers[operation] = refused
    made = target("hyperpod", {"ClusterName": "ml-hyperpod"}, **{client: Recorder(answers)})
    call: Callable[[], object] = {
        "describe_cluster": lambda: nodes.describe_hyperpod(made),
        "list_cluster_nodes": lambda: nodes.hyperpod_nodes(made, ARN),
        "describe_instances": lambda: nodes.pcluster_nodes(made),
    }[operation]
    with pytest.raises(CliError) as caught:
        call()
    assert (caught.value.exit_code, caught.value.message.splitlines()[0]) == (
        EXIT_AWS,
        f"{doing} failed: AccessDeniedException: no",
    )


# ---- ssh and ssh-config: the whole command and the whole block ----


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``Target.load`` answers the target the test puts in ``loaded["target"]``, recording its arguments."""
    box: dict[str, Any] = {"args": []}

    def load(env: str, *args: Any, **kwargs: Any) -> context.Target:
        box["args"].append((env, *args))
        return box["target"]  # type: ignore[no-any-return]

    monkeypatch.setattr(context.Target, "load", staticmethod(load))
    return box


def p5_target() -> context.Target:
    ec2 = Recorder({"describe_instances": [{"Reservations": [{"Instances": [instance("i-c1", "running", COMPUTE)]}]}]})
    return target("p5", {"ClusterName": "p5-train", "HeadNodeInstanceId": "i-head"}, ec2=ec2)


def test_ssh_print_is_the_whole_session_command(loaded: dict[str, Any]) -> None:
    loaded["target"] = p5_target()
    result = invoke("ssh", "p5", "--print")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "aws ssm start-session --region us-west-2 --target i-head --document-name AWS-StartInteractiveCommand "
        '--parameters \'{"command": ["sudo su - ec2-user"]}\'\n',
        "",
    )
    assert loaded["args"] == [("p5", None, None, None)]
    result = invoke("ssh", "p5", "--print", "--profile", "ops", "--user", "ssm-user", "--region", "us-west-2")
    assert result.stdout == "aws ssm start-session --region us-west-2 --profile ops --target i-head\n"
    assert loaded["args"][-1] == ("p5", None, "us-west-2", "ops")


def test_ssh_quotes_a_user_name_for_the_remote_shell() -> None:
    made = p5_target()
    node = Node("head-node", "i-head", "", "", "", "i-head")
    command = ssh.session_command(made, node, "a b", None)
    assert json.loads(command[-1]) == {"command": ["sudo su - 'a b'"]}


def test_ssh_execs_the_aws_cli_and_says_where(loaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    loaded["target"] = p5_target()
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    executed: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: executed.append((path, argv)))
    result = invoke("ssh", "p5", "--group", "compute-gpu", "--user", "ssm-user")
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "mlcluster: opening a session on compute-gpu i-c1 (i-c1)\n"
    assert executed == [("/opt/bin/aws", ["aws", "ssm", "start-session", "--region", "us-west-2", "--target", "i-c1"])]


def test_ssh_without_the_tools_says_what_to_install(loaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    loaded["target"] = p5_target()
    monkeypatch.setattr(os, "execv", lambda *_: pytest.fail("must not start a session"))
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    result = invoke("ssh", "p5")
    assert (result.exit_code, result.stdout) == (EXIT_SETUP, "")
    assert result.stderr == (
        "mlcluster: the AWS CLI (`aws`) is not on PATH; it opens Session Manager sessions\n"
        "  what to do: install AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/"
        "getting-started-install.html)\n"
    )
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/bin/aws" if name == "aws" else None)
    result = invoke("ssh", "p5")
    assert (result.exit_code, result.stdout) == (EXIT_SETUP, "")
    assert result.stderr == (
        f"mlcluster: the Session Manager plugin is not installed\n  what to do: {ssh.PLUGIN_HELP}\n"
    )


def test_ssh_config_is_the_whole_block(loaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    loaded["target"] = p5_target()
    monkeypatch.setattr(shutil, "which", lambda name: f"/opt/bin/{name}")
    result = invoke("ssh-config", "p5")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        "# mlcluster ssh-config p5: head-node i-head of p5-train (us-west-2)\n"
        "Host mlcluster-p5\n"
        "    HostName i-head\n"
        "    User ec2-user\n"
        "    HostKeyAlias mlcluster-p5\n"
        "    ProxyCommand aws ssm start-session --region us-west-2 --target i-head "
        "--document-name AWS-StartSSHSession --parameters portNumber=%p\n"
        "    ServerAliveInterval 60\n"
    )


@pytest.mark.parametrize("pick", [("--group", "compute-gpu"), ("--node", "i-c1")])
def test_ssh_config_for_another_node_names_it_in_the_alias(
    loaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch, pick: tuple[str, str]
) -> None:
    loaded["target"] = p5_target()
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    result = invoke("ssh-config", "p5", *pick, "--user", "alice", "--profile", "ops")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "# mlcluster ssh-config p5: compute-gpu i-c1 of p5-train (us-west-2)\n"
        "Host mlcluster-p5-i-c1\n"
        "    HostName i-c1\n"
        "    User alice\n"
        "    HostKeyAlias mlcluster-p5-i-c1\n"
        "    ProxyCommand "
        + shlex.join(
            [
                *("aws", "ssm", "start-session", "--region", "us-west-2", "--profile", "ops", "--target", "i-c1"),
                *("--document-name", "AWS-StartSSHSession", "--parameters", "portNumber=%p"),
            ]
        )
        + "\n    ServerAliveInterval 60\n"
    )
    assert result.stderr == f"mlcluster: warning: the Session Manager plugin is not installed; {ssh.PLUGIN_HELP}\n"


def test_a_parallelcluster_group_gives_its_first_running_node() -> None:
    pages = [
        {
            "Reservations": [
                {"Instances": [instance("i-c1", "stopped", COMPUTE), instance("i-c2", "running", COMPUTE)]},
            ]
        }
    ]
    made = target("p5", {"ClusterName": "p5-train"}, ec2=Recorder({"describe_instances": pages}))
    assert nodes.pick(made, "compute-gpu", None) == Node(
        "compute-gpu", "i-c2", "p5.48xlarge", "running", "", "i-c2", kind="Compute"
    )
