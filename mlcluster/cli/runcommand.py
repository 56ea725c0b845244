"""Run a shell script on one node through SSM Run Command (``AWS-RunShellScript``) and wait for it.

The script runs as root (what Run Command does) and, when a user is given,
is handed to that user's login shell with ``sudo -iu``, so Slurm jobs belong
to the cluster's default user. The wait is bounded three ways: ``timeout``
around the script on the node, the document's ``executionTimeout``, and a
deadline here, after which the command is cancelled.

Results are read with ``ListCommandInvocations`` (``Details``), because
``GetCommandInvocation`` only accepts EC2 ids (``i-``/``mi-``) and HyperPod
nodes are ``sagemaker-cluster:`` targets. That call returns at most 2500
characters of output per plugin, so the scripts print summaries, not logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlcluster.cli.context import Target
from mlcluster.cli.errors import aws_errors
from mlcluster.cli.nodes import Node

if TYPE_CHECKING:
    from rich.console import Console

#: Seconds between polls of the command's status.
POLL_SECONDS = 5.0
#: What Run Command keeps of a plugin's output in ListCommandInvocations.
OUTPUT_LIMIT = 2500
#: Statuses after which an invocation does not change any more.
FINAL = {"Success", "Failed", "Cancelled", "TimedOut", "Undeliverable", "Terminated", "DeliveryTimedOut"}


@dataclass(frozen=True)
class Result:
    """What came back from one script: final status, exit code, output and the command id."""

    command_id: str
    status: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == "Success" and self.exit_code == 0

    @property
    def truncated(self) -> bool:
        return len(self.stdout) >= OUTPUT_LIMIT


def as_user(script: str, user: str | None) -> str:
    """``script`` wrapped so that it runs in ``user``'s login shell (unchanged for ``None``)."""
    if user is None:
        return script
    return f"sudo -iu {user} bash -s <<'MLCLUSTER_SCRIPT'\n{script.rstrip()}\nMLCLUSTER_SCRIPT\n"


def _targeting(node: Node) -> dict[str, Any]:
    if node.ssm_target.startswith(("i-", "mi-")):
        return {"InstanceIds": [node.ssm_target]}
    return {"Targets": [{"Key": "InstanceIds", "Values": [node.ssm_target]}]}


def run(
    target: Target,
    node: Node,
    script: str,
    *,
    comment: str,
    timeout_seconds: int,
    user: str | None,
    console: Console,
) -> Result:
    """Run ``script`` on ``node``, showing a spinner on ``console``; at most ``timeout_seconds`` (+ a minute)."""
    ssm = target.client("ssm")
    body = as_user(script, user)
    with aws_errors(f"SendCommand (AWS-RunShellScript) to {node.ssm_target}"):
        sent = ssm.send_command(
            DocumentName="AWS-RunShellScript",
            Comment=comment[:100],
            TimeoutSeconds=max(30, min(timeout_seconds, 2592000)),
            Parameters={"commands": [body], "executionTimeout": [str(timeout_seconds)]},
            **_targeting(node),
        )
    command_id = str(sent["Command"]["CommandId"])
    deadline = time.monotonic() + timeout_seconds + 60
    status = "Pending"
    with console.status(f"{comment}: {status}") as spinner:
        while True:
            with aws_errors(f"ListCommandInvocations for {command_id}"):
                listed = ssm.list_command_invocations(CommandId=command_id, Details=True)
            invocations = listed.get("CommandInvocations", [])
            if invocations:
                invocation = invocations[0]
                status = str(invocation.get("Status", "Pending"))
                if status in FINAL:
                    plugins = invocation.get("CommandPlugins") or [{}]
                    plugin = plugins[0]
                    return Result(
                        command_id=command_id,
                        status=status,
                        exit_code=int(plugin.get("ResponseCode", -1)),
                        stdout=str(plugin.get("Output", "")),
                        stderr=str(invocation.get("StatusDetails", "")),
                    )
            if time.monotonic() >= deadline:
                with aws_errors(f"CancelCommand {command_id}"):
                    ssm.cancel_command(CommandId=command_id)
                return Result(command_id, "TimedOut", -1, "", f"no result after {timeout_seconds + 60} s; cancelled")
            spinner.update(f"{comment}: {status}")
            time.sleep(POLL_SECONDS)
