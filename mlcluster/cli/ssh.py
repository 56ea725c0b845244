"""``mlcluster ssh`` and ``mlcluster ssh-config``: a shell on a node through Session Manager.

Both build the SSM target for the user (for HyperPod
``sagemaker-cluster:<cluster id>_<group>-<instance id>``) and hand the session
to the AWS CLI, which needs the Session Manager plugin on this machine.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import click

from mlcluster.cli.context import Target, environment_options
from mlcluster.cli.errors import EXIT_SETUP, CliError
from mlcluster.cli.nodes import Node, cluster_name, pick

PLUGIN_HELP = (
    "install the Session Manager plugin for the AWS CLI: on macOS `brew install --cask session-manager-plugin`; "
    "on Debian/Ubuntu download and `sudo dpkg -i` "
    "https://s3.amazonaws.com/session-manager-downloads/plugin/latest/ubuntu_64bit/session-manager-plugin.deb; "
    "on Amazon Linux/RHEL `sudo dnf install -y "
    "https://s3.amazonaws.com/session-manager-downloads/plugin/latest/linux_64bit/session-manager-plugin.rpm`; "
    "other systems: https://docs.aws.amazon.com/systems-manager/latest/userguide/"
    "session-manager-working-with-install-plugin.html"
)


def require_tools() -> str:
    """The path of the ``aws`` CLI, after checking that it and the Session Manager plugin are installed."""
    aws = shutil.which("aws")
    if aws is None:
        raise CliError(
            "the AWS CLI (`aws`) is not on PATH; it opens Session Manager sessions\n"
            "  what to do: install AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/"
            "getting-started-install.html)",
            EXIT_SETUP,
        )
    if shutil.which("session-manager-plugin") is None:
        raise CliError(f"the Session Manager plugin is not installed\n  what to do: {PLUGIN_HELP}", EXIT_SETUP)
    return aws


def _aws_prefix(target: Target, profile: str | None) -> list[str]:
    return ["aws", "ssm", "start-session", "--region", target.region, *(["--profile", profile] if profile else [])]


def session_command(target: Target, node: Node, user: str, profile: str | None) -> list[str]:
    """``aws ssm start-session`` on ``node``, landing in a login shell of ``user`` (plain session for ssm-user)."""
    command = [*_aws_prefix(target, profile), "--target", node.ssm_target]
    if user != "ssm-user":
        shell = f"sudo su - {shlex.quote(user)}"
        command += ["--document-name", "AWS-StartInteractiveCommand", "--parameters", json.dumps({"command": [shell]})]
    return command


def node_options(command: click.decorators.FC) -> click.decorators.FC:
    command = click.option(
        "--node", "node_id", metavar="ID", help="Instance id of the node (default: the head node or controller)."
    )(command)
    return click.option(
        "--group",
        metavar="G",
        help="HyperPod instance group or ParallelCluster queue: its first running node (default: the controller).",
    )(command)


@click.command()
@environment_options
@node_options
@click.option("--user", metavar="NAME", help="Log in as NAME (default: the cluster's default user; ssm-user: no sudo).")
@click.option("--print", "print_only", is_flag=True, help="Print the aws command instead of running it.")
def ssh(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    group: str | None,
    node_id: str | None,
    user: str | None,
    print_only: bool,
) -> None:
    """Open a shell on the head node / controller (or any node) through Session Manager.

    HyperPod's target `sagemaker-cluster:<cluster id>_<group>-<instance id>` is built from
    the cluster and its nodes; ParallelCluster's head node comes from the stack output.
    Needs the AWS CLI and its Session Manager plugin.
    """
    target = Target.load(env, environments, region, profile)
    node = pick(target, group, node_id)
    command = session_command(target, node, user or target.default_user, profile)
    if print_only:
        click.echo(shlex.join(command))
        return
    aws = require_tools()
    click.echo(f"mlcluster: opening a session on {node.group} {node.instance_id} ({node.ssm_target})", err=True)
    os.execv(aws, command)


@click.command("ssh-config")
@environment_options
@node_options
@click.option("--user", metavar="NAME", help="SSH user (default: the cluster's default user).")
def ssh_config(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    group: str | None,
    node_id: str | None,
    user: str | None,
) -> None:
    """Print an ~/.ssh/config block that reaches a node through Session Manager.

    Append it to ~/.ssh/config; then `ssh`, `scp`, `rsync` and editors' remote
    sessions work with `mlcluster-ENV` (your public key must be in the user's
    ~/.ssh/authorized_keys on the node). The target names the node's current
    instance: run this again after the node is replaced.
    """
    target = Target.load(env, environments, region, profile)
    node = pick(target, group, node_id)
    alias = (
        f"mlcluster-{target.name}"
        if group is None and node_id is None
        else f"mlcluster-{target.name}-{node.instance_id}"
    )
    proxy = [
        *_aws_prefix(target, profile),
        "--target",
        node.ssm_target,
        "--document-name",
        "AWS-StartSSHSession",
        "--parameters",
        "portNumber=%p",
    ]
    if shutil.which("session-manager-plugin") is None:
        click.echo(f"mlcluster: warning: the Session Manager plugin is not installed; {PLUGIN_HELP}", err=True)
    click.echo(
        "\n".join(
            [
                f"# mlcluster ssh-config {target.name}: {node.group} {node.instance_id} of {cluster_name(target)}"
                f" ({target.region})",
                f"Host {alias}",
                f"    HostName {node.instance_id}",
                f"    User {user or target.default_user}",
                f"    HostKeyAlias {alias}",
                f"    ProxyCommand {shlex.join(proxy)}",
                "    ServerAliveInterval 60",
            ]
        )
    )
