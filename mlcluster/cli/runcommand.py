"""Run a shell script on one node through Systems Manager and wait for it, bounded.

The script runs as root and, when a user is given, is handed to that user's
login shell with ``sudo -iu``, so Slurm jobs belong to the cluster's default user.

Two transports, because SSM Run Command (``SendCommand``) does not accept
HyperPod's ``sagemaker-cluster:`` targets (its ``InstanceIds`` pattern is
``i-``/``mi-`` only, and AWS's own HyperPod tooling runs node commands through
sessions):

- EC2 instances (ParallelCluster): Run Command ``AWS-RunShellScript``, bounded
  by ``timeout`` on the node, the document's ``executionTimeout`` and a
  deadline here, after which the command is cancelled. Results come from
  ``GetCommandInvocation`` (up to 24000 characters of output).
- HyperPod nodes: a Session Manager session with the
  ``AWS-StartNonInteractiveCommand`` document through the AWS CLI and its
  plugin, bounded by a process timeout. The script's exit code comes back as
  a marker line, because the session's own exit code does not carry it.

Either way the node-side scripts print summaries, not logs.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlcluster.cli.context import Target
from mlcluster.cli.errors import CliError, aws_errors
from mlcluster.cli.nodes import Node

if TYPE_CHECKING:
    from rich.console import Console

#: Seconds between polls of the command's status.
POLL_SECONDS = 5.0
#: What GetCommandInvocation returns of a command's output.
OUTPUT_LIMIT = 24000
#: Marker line carrying the script's exit code out of a session.
EXIT_MARKER = "MLCLUSTER_EXIT="
#: The largest ``executionTimeout`` the AWS-RunShellScript document accepts (its parameter's allowed pattern
#: ends at 172800): SendCommand refuses more.
MAX_EXECUTION_TIMEOUT_S = 172800
#: A user name ``as_user`` accepts (the POSIX portable set, as useradd's default NAME_REGEX).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: Every ``CommandInvocationStatus`` of botocore's SSM model: final (the result is read) or still changing.
FINAL = {"Success", "Failed", "Cancelled", "TimedOut"}
CHANGING = {"Pending", "InProgress", "Delayed", "Cancelling"}


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


def where_to_look(target: Target, node: Node, result: Result) -> str:
    """How to see a step's full output again."""
    if result.command_id:
        return (
            f"`aws ssm get-command-invocation --region {target.region} --command-id {result.command_id} "
            f"--instance-id {node.ssm_target}`"
        )
    return f"`mlcluster ssh {target.name}` and run the step by hand"


def as_user(script: str, user: str | None) -> str:
    """``script`` wrapped so that it runs in ``user``'s login shell (unchanged for ``None``).

    The script goes in a quoted here-document whose delimiter carries a random token and is checked
    to be on no line of the script, so no line of it can end the here-document early and run the rest
    as root. ``user`` must be a plain POSIX user name, and is quoted besides.
    """
    if user is None:
        return script
    if USER_NAME.fullmatch(user) is None:
        raise ValueError(f"user: {user!r} is not allowed; allowed: a POSIX user name ({USER_NAME.pattern})")
    delimiter = f"MLCLUSTER_SCRIPT_{secrets.token_hex(8)}"
    if delimiter in script.splitlines():  # 64 random bits: only a test that fixes the token reaches this
        raise ValueError("the script contains the here-document delimiter; run it again")
    return f"sudo -iu {shlex.quote(user)} bash -s <<'{delimiter}'\n{script.rstrip()}\n{delimiter}\n"


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
    """Run ``script`` on ``node`` (Run Command for EC2 ids, a session for HyperPod), with a spinner."""
    if node.ssm_target.startswith(("i-", "mi-")):
        return run_command(
            target, node, script, comment=comment, timeout_seconds=timeout_seconds, user=user, console=console
        )
    return run_session(
        target, node, script, comment=comment, timeout_seconds=timeout_seconds, user=user, console=console
    )


def run_session(
    target: Target,
    node: Node,
    script: str,
    *,
    comment: str,
    timeout_seconds: int,
    user: str | None,
    console: Console,
) -> Result:
    """Run ``script`` through ``aws ssm start-session --document-name AWS-StartNonInteractiveCommand``."""
    from mlcluster.cli.ssh import require_tools

    aws = require_tools()
    # The exit-code line must be a line of its own: a script without a final newline would glue the command
    # to its last one (`tail -c 2000echo ...`), and output without one would glue the marker to its last line.
    body = as_user(script, user)
    body += ("" if body.endswith("\n") else "\n") + f"code=$?; printf '\\n{EXIT_MARKER}%s\\n' \"$code\"\n"
    encoded = base64.b64encode(body.encode()).decode()
    # The command goes in a parameters file: inline shorthand breaks on quotes and commas. The script is
    # decoded into a file mktemp makes (new, 0600, an unpredictable name) and removed afterwards: every
    # user of the node can write /tmp, so a fixed name there could be planted and then run as root.
    step = f'step=$(mktemp) || exit 1; echo {encoded} | base64 -d >"$step" && bash "$step"; '
    parameters = {"command": [f"bash -c '{step}code=$?; rm -f \"$step\"; exit $code'"]}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "parameters.json"
        path.write_text(json.dumps(parameters), encoding="utf-8")
        command = [
            aws, "ssm", "start-session", "--region", target.region,
            *(["--profile", target.profile] if target.profile else []),
            "--target", node.ssm_target,
            "--document-name", "AWS-StartNonInteractiveCommand",
            "--parameters", f"file://{path}",
        ]  # fmt: skip
        with console.status(f"{comment}: running on {node.instance_id}"):
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=timeout_seconds + 60, check=False
                )
            except subprocess.TimeoutExpired:
                return Result("", "TimedOut", -1, "", f"no result after {timeout_seconds + 60} s; session stopped")
    lines = [
        line
        for line in done.stdout.replace("\r", "").splitlines()
        if not line.startswith(("Starting session with SessionId", "Exiting session with sessionId"))
    ]
    codes = [int(m[1]) for line in lines if (m := re.fullmatch(EXIT_MARKER + r"(\d+)", line.strip()))]
    output = "\n".join(line for line in lines if not line.startswith(EXIT_MARKER)).strip() + "\n"
    if not codes:
        detail = (done.stderr.strip() or output.strip())[-500:]
        return Result("", "Failed", done.returncode or -1, output, f"the session ended without a result: {detail}")
    return Result("", "Success", codes[-1], output, done.stderr.strip())


def run_command(
    target: Target,
    node: Node,
    script: str,
    *,
    comment: str,
    timeout_seconds: int,
    user: str | None,
    console: Console,
) -> Result:
    """Run Command on an EC2 instance, showing a spinner on ``console``; at most ``timeout_seconds`` (+ a minute)."""
    if timeout_seconds > MAX_EXECUTION_TIMEOUT_S:
        raise CliError(
            f"this run may take {timeout_seconds} s on {node.instance_id}, beyond the {MAX_EXECUTION_TIMEOUT_S} s "
            "(48 h) AWS-RunShellScript allows for executionTimeout; run it on fewer nodes (a --partition at a time)",
        )
    ssm = target.client("ssm")
    body = as_user(script, user)
    with aws_errors(f"SendCommand (AWS-RunShellScript) to {node.ssm_target}"):
        sent = ssm.send_command(
            DocumentName="AWS-RunShellScript",
            Comment=comment[:100],
            # SendCommand allows 30 to 2592000 s; the run is at most MAX_EXECUTION_TIMEOUT_S (checked above).
            TimeoutSeconds=max(30, timeout_seconds),
            Parameters={"commands": [body], "executionTimeout": [str(timeout_seconds)]},
            InstanceIds=[node.ssm_target],
        )
    command_id = str(sent["Command"]["CommandId"])
    deadline = time.monotonic() + timeout_seconds + 60
    status = "Pending"
    from botocore.exceptions import ClientError

    with console.status(f"{comment}: {status}") as spinner:
        while True:
            with aws_errors(f"GetCommandInvocation for {command_id}"):
                try:
                    invocation = ssm.get_command_invocation(CommandId=command_id, InstanceId=node.ssm_target)
                except ClientError as error:
                    # Right after SendCommand the invocation may not exist yet.
                    if error.response.get("Error", {}).get("Code") != "InvocationDoesNotExist":
                        raise
                    invocation = {"Status": "Pending"}
            status = str(invocation.get("Status", "Pending"))
            if status not in FINAL | CHANGING:
                raise CliError(
                    f"command {command_id} on {node.ssm_target} is {status!r}, a status mlcluster does not know "
                    f"(it knows {', '.join(sorted(FINAL | CHANGING))})\n  what to do: `aws ssm get-command-invocation "
                    f"--command-id {command_id} --instance-id {node.ssm_target}`",
                )
            if status in FINAL:
                return Result(
                    command_id=command_id,
                    status=status,
                    exit_code=int(invocation.get("ResponseCode", -1)),
                    stdout=str(invocation.get("StandardOutputContent", "")),
                    stderr=str(invocation.get("StandardErrorContent", "") or invocation.get("StatusDetails", "")),
                )
            if time.monotonic() >= deadline:
                with aws_errors(f"CancelCommand {command_id}"):
                    ssm.cancel_command(CommandId=command_id)
                return Result(command_id, "TimedOut", -1, "", f"no result after {timeout_seconds + 60} s; cancelled")
            spinner.update(f"{comment}: {status}")
            time.sleep(POLL_SECONDS)
