"""``mlcluster ssh`` and ``mlcluster ssh-config`` against moto: targets built, tools checked, sessions handed over."""

from __future__ import annotations

import json
import os
import shlex
import shutil

import pytest

from tests.cli.conftest import Aws, World

CONTROLLER = "sagemaker-cluster:k3x9q2a1b2c3_controller-machine-i-0c0a1b2c3d4e5f601"


def test_ssh_print_hyperpod_controller(hyperpod: World, aws: Aws) -> None:
    result = hyperpod.run("ssh", "hyperpod", "--print")
    assert result.exit_code == 0, result.output
    command = shlex.split(result.stdout)
    assert command[:5] == ["aws", "ssm", "start-session", "--region", "us-west-2"]
    assert command[command.index("--target") + 1] == CONTROLLER
    assert command[command.index("--document-name") + 1] == "AWS-StartInteractiveCommand"
    assert json.loads(command[command.index("--parameters") + 1]) == {"command": ["sudo su - ubuntu"]}
    assert aws.params("ListClusterNodes") == [{"ClusterName": "ml-hyperpod"}]


def test_ssh_group_and_node_pick_other_nodes(hyperpod: World) -> None:
    by_group = hyperpod.run("ssh", "hyperpod", "--group", "worker-group-1", "--print", "--user", "alice")
    assert by_group.exit_code == 0, by_group.output
    assert "sagemaker-cluster:k3x9q2a1b2c3_worker-group-1-i-0f1e2d3c4b5a69803" in by_group.stdout
    assert "sudo su - alice" in by_group.stdout
    by_node = hyperpod.run("ssh", "hyperpod", "--node", "i-0e1d2c3b4a5968704", "--print", "--user", "ssm-user")
    assert by_node.exit_code == 0, by_node.output
    assert shlex.split(by_node.stdout)[-2:] == [
        "--target",
        "sagemaker-cluster:k3x9q2a1b2c3_worker-group-1-i-0e1d2c3b4a5968704",
    ]


def test_ssh_unknown_node_lists_the_nodes(hyperpod: World) -> None:
    result = hyperpod.run("ssh", "hyperpod", "--node", "i-0000000000000000a", "--print")
    assert result.exit_code == 1
    assert "no node matches --node i-0000000000000000a in ml-hyperpod" in result.stderr
    assert "worker-group-1/i-0f1e2d3c4b5a69803" in result.stderr


def test_ssh_pcluster_head_node_as_os_user(pcluster: World, aws: Aws) -> None:
    result = pcluster.run("ssh", "p5", "--print", "--profile", "ops")
    # --profile names a profile that does not exist in this test's empty AWS config: not set up, exit 4
    assert result.exit_code == 4
    assert result.stderr.startswith("mlcluster: opening the AWS session with profile ops failed: ")
    assert "The config profile (ops) could not be found" in result.stderr
    result = pcluster.run("ssh", "p5", "--print")
    assert result.exit_code == 0, result.output
    command = shlex.split(result.stdout)
    assert command[command.index("--target") + 1] == pcluster.head_node
    assert "sudo su - ec2-user" in result.stdout  # alinux2023 (p5.yaml's default os)
    assert "sagemaker" not in {svc for svc, _, _ in aws.calls}


def test_ssh_runs_the_session(hyperpod: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    executed: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: executed.append((path, argv)))
    result = hyperpod.run("ssh", "hyperpod")
    assert result.exit_code == 0, result.output
    [(path, argv)] = executed
    assert path == "/usr/local/bin/aws"
    assert argv[argv.index("--target") + 1] == CONTROLLER
    assert "opening a session on controller-machine i-0c0a1b2c3d4e5f601" in result.stderr


def test_ssh_without_plugin_says_how_to_install(hyperpod: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/aws" if name == "aws" else None)
    monkeypatch.setattr(os, "execv", lambda *_: pytest.fail("must not start a session"))
    result = hyperpod.run("ssh", "hyperpod")
    assert result.exit_code == 4
    assert "the Session Manager plugin is not installed" in result.stderr
    assert "brew install --cask session-manager-plugin" in result.stderr
    assert "session-manager-plugin.deb" in result.stderr


def test_ssh_without_aws_cli(hyperpod: World, no_tools: None) -> None:
    result = hyperpod.run("ssh", "hyperpod")
    assert result.exit_code == 4
    assert "the AWS CLI (`aws`) is not on PATH" in result.stderr


def test_ssh_config_block(hyperpod: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    result = hyperpod.run("ssh-config", "hyperpod")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:5] == [
        "Host mlcluster-hyperpod",
        "    HostName i-0c0a1b2c3d4e5f601",
        "    User ubuntu",
        "    HostKeyAlias mlcluster-hyperpod",
    ]
    proxy = shlex.split(lines[5].removeprefix("    ProxyCommand "))
    assert proxy == [
        "aws", "ssm", "start-session", "--region", "us-west-2", "--target", CONTROLLER,
        "--document-name", "AWS-StartSSHSession", "--parameters", "portNumber=%p",
    ]  # fmt: skip
    assert result.stderr == ""


def test_ssh_config_warns_without_plugin(pcluster: World, no_tools: None) -> None:
    result = pcluster.run("ssh-config", "p5", "--group", "compute-gpu")
    assert result.exit_code == 0, result.output
    assert "Host mlcluster-p5-i-" in result.stdout
    assert "User ec2-user" in result.stdout
    assert "warning: the Session Manager plugin is not installed" in result.stderr
