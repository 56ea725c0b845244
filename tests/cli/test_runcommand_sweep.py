"""Running a script on a node (issue 27 sweep): the exact Run Command requests, each status and error SSM can
answer, the exact session command and its parameters file, and the whole Result the smoke and health steps read.

Run Command goes through botocore's Stubber (every request's parameters checked against SSM's model and compared
whole); the session through a stand-in for ``aws ssm start-session`` that records its argv and parameters file.
"""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from rich.console import Console

from mlcluster.cli import runcommand
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, CliError
from mlcluster.cli.nodes import Node
from mlcluster.cli.runcommand import Result, as_user, where_to_look

EC2 = Node("head-node", "i-0123456789abcdef0", "m5.xlarge", "running", "", "i-0123456789abcdef0")
HYPERPOD = Node(
    "controller", "i-0c0a1b2c3d4e5f601", "ml.m5.xlarge", "Running", "", "sagemaker-cluster:k3_c-i-0c0a1b2c3d4e5f601"
)
CMD = "11111111-2222-3333-4444-555555555555"


def console() -> Console:
    return Console(file=io.StringIO())


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(runcommand, "POLL_SECONDS", 0.0)
    client = boto3.client("ssm", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(client) as stub:
        client.stub = stub
        yield client
        stub.assert_no_pending_responses()


def target(client: Any = None, profile: str | None = None) -> Any:
    return SimpleNamespace(client=lambda name: client, region="us-east-2", name="p5", profile=profile)


def send(stub: Stubber, body: str, *, comment: str, timeout: int, delivery: int) -> None:
    stub.add_response(
        "send_command",
        {"Command": {"CommandId": CMD}},
        {
            "DocumentName": "AWS-RunShellScript",
            "Comment": comment,
            "TimeoutSeconds": delivery,
            "Parameters": {"commands": [body], "executionTimeout": [str(timeout)]},
            "InstanceIds": [EC2.ssm_target],
        },
    )


def invocation(stub: Stubber, answer: dict[str, Any]) -> None:
    stub.add_response("get_command_invocation", answer, {"CommandId": CMD, "InstanceId": EC2.ssm_target})


def test_run_command_waits_through_every_changing_status_and_returns_the_whole_result(ssm: Any) -> None:
    send(ssm.stub, "echo hi", comment="c" * 100, timeout=29, delivery=30)
    ssm.stub.add_client_error(
        "get_command_invocation",
        "InvocationDoesNotExist",
        expected_params={"CommandId": CMD, "InstanceId": EC2.ssm_target},
    )
    for status in ("Pending", "InProgress", "Delayed", "Cancelling"):
        invocation(ssm.stub, {"Status": status})
    invocation(
        ssm.stub,
        {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": "hi\n", "StandardErrorContent": "warn"},
    )
    result = runcommand.run(
        target(ssm), EC2, "echo hi", comment="c" * 101, timeout_seconds=29, user=None, console=console()
    )
    assert result == Result(CMD, "Success", 0, "hi\n", "warn")
    assert (result.ok, result.truncated) == (True, False)


def test_run_command_delivery_bound_is_the_run_bound_from_30_s(ssm: Any) -> None:
    send(ssm.stub, "true", comment="c", timeout=31, delivery=31)
    invocation(ssm.stub, {"Status": "Failed", "ResponseCode": 2, "StatusDetails": "Failed"})
    result = runcommand.run_command(
        target(ssm), EC2, "true", comment="c", timeout_seconds=31, user=None, console=console()
    )
    # no StandardErrorContent: the status details say why
    assert result == Result(CMD, "Failed", 2, "", "Failed")
    assert not result.ok


def test_run_command_without_a_response_code_reads_minus_one(ssm: Any) -> None:
    send(ssm.stub, "true", comment="c", timeout=172800, delivery=172800)
    invocation(ssm.stub, {"Status": "Cancelled", "StandardErrorContent": ""})
    assert runcommand.run_command(
        target(ssm), EC2, "true", comment="c", timeout_seconds=172800, user=None, console=console()
    ) == Result(CMD, "Cancelled", -1, "", "")


def test_run_command_as_a_user_sends_the_wrapped_script(ssm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlcluster.cli.runcommand.secrets.token_hex", lambda n: "ab" * n)
    body = (
        "sudo -iu ec2-user bash -s <<'MLCLUSTER_SCRIPT_abababababababab'\nid -un\nMLCLUSTER_SCRIPT_abababababababab\n"
    )
    send(ssm.stub, body, comment="c", timeout=60, delivery=60)
    invocation(ssm.stub, {"Status": "TimedOut", "ResponseCode": 124, "StandardOutputContent": "x" * 24000})
    result = runcommand.run(
        target(ssm), EC2, "id -un\n\n", comment="c", timeout_seconds=60, user="ec2-user", console=console()
    )
    assert (result.status, result.exit_code, result.truncated, result.ok) == ("TimedOut", 124, True, False)


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [("AccessDeniedException", EXIT_AWS), ("ThrottlingException", EXIT_AWS), ("InvalidInstanceId", EXIT_AWS)],
)
def test_run_command_errors_name_the_call(ssm: Any, code: str, exit_code: int) -> None:
    ssm.stub.add_client_error("send_command", code, "no")
    with pytest.raises(CliError) as raised:
        runcommand.run_command(target(ssm), EC2, "true", comment="c", timeout_seconds=60, user=None, console=console())
    assert raised.value.exit_code == exit_code
    assert raised.value.message.startswith(f"SendCommand (AWS-RunShellScript) to {EC2.ssm_target} failed: {code}: no\n")
    send(ssm.stub, "true", comment="c", timeout=60, delivery=60)
    ssm.stub.add_client_error("get_command_invocation", code, "nope")
    with pytest.raises(CliError) as polled:
        runcommand.run_command(target(ssm), EC2, "true", comment="c", timeout_seconds=60, user=None, console=console())
    assert polled.value.message.startswith(f"GetCommandInvocation for {CMD} failed: {code}: nope\n")


def test_run_command_an_unknown_status_stops_with_what_to_do(ssm: Any) -> None:
    send(ssm.stub, "true", comment="c", timeout=60, delivery=60)
    invocation(ssm.stub, {"Status": "Paused"})
    with pytest.raises(CliError) as raised:
        runcommand.run_command(target(ssm), EC2, "true", comment="c", timeout_seconds=60, user=None, console=console())
    assert (raised.value.exit_code, raised.value.message) == (
        EXIT_FAILED,
        f"command {CMD} on {EC2.ssm_target} is 'Paused', a status mlcluster does not know (it knows Cancelled, "
        "Cancelling, Delayed, Failed, InProgress, Pending, Success, TimedOut)\n  what to do: `aws ssm "
        f"get-command-invocation --command-id {CMD} --instance-id {EC2.ssm_target}`",
    )


def test_run_command_past_its_deadline_is_cancelled(ssm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1000.0, 1099.0, 1100.0])  # start; a poll just before the deadline (40 + 60 s); one at it
    monkeypatch.setattr("mlcluster.cli.runcommand.time.monotonic", lambda: next(clock))
    send(ssm.stub, "true", comment="c", timeout=40, delivery=40)
    invocation(ssm.stub, {"Status": "InProgress"})
    invocation(ssm.stub, {"Status": "InProgress"})
    ssm.stub.add_response("cancel_command", {}, {"CommandId": CMD})
    result = runcommand.run_command(
        target(ssm), EC2, "true", comment="c", timeout_seconds=40, user=None, console=console()
    )
    assert result == Result(CMD, "TimedOut", -1, "", "no result after 100 s; cancelled")


def test_run_command_cancel_refused_is_an_error(ssm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlcluster.cli.runcommand.time.monotonic", iter([0.0, 1e9]).__next__)
    send(ssm.stub, "true", comment="c", timeout=40, delivery=40)
    invocation(ssm.stub, {"Status": "InProgress"})
    ssm.stub.add_client_error("cancel_command", "AccessDeniedException", "denied")
    with pytest.raises(CliError) as raised:
        runcommand.run_command(target(ssm), EC2, "true", comment="c", timeout_seconds=40, user=None, console=console())
    assert raised.value.message.startswith(f"CancelCommand {CMD} failed: AccessDeniedException: denied\n")


def test_run_command_refuses_a_run_beyond_its_limit_with_the_way() -> None:
    with pytest.raises(CliError) as raised:
        runcommand.run_command(target(), EC2, "true", comment="c", timeout_seconds=172801, user=None, console=console())
    assert (raised.value.exit_code, raised.value.message) == (
        EXIT_FAILED,
        f"this run may take 172801 s on {EC2.instance_id}, beyond the 172800 s (48 h) AWS-RunShellScript allows for "
        "executionTimeout; run it on fewer nodes (a --partition at a time)",
    )


# -- sessions (HyperPod) ---------------------------------------------------------------------------------------------
class Session:
    """A stand-in for ``aws ssm start-session``: records argv, timeout and the parameters file; prints ``stdout``."""

    def __init__(self, stdout: str = "", stderr: str = "", code: int = 0, hang: bool = False) -> None:
        self.stdout, self.stderr, self.code, self.hang = stdout, stderr, code, hang
        self.calls: list[tuple[list[str], float, dict[str, Any]]] = []

    def __call__(self, argv: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert kwargs == {"capture_output": True, "text": True, "check": False}
        path = argv[argv.index("--parameters") + 1]
        assert path.startswith("file://") and path.endswith("/parameters.json")
        self.calls.append((argv, timeout, json.loads(Path(path.removeprefix("file://")).read_text())))
        if self.hang:
            raise subprocess.TimeoutExpired(argv, timeout)
        return subprocess.CompletedProcess(argv, self.code, self.stdout, self.stderr)


def session(monkeypatch: pytest.MonkeyPatch, fake: Session, script: str = "echo hi", **kw: Any) -> Result:
    from mlcluster.cli import ssh

    monkeypatch.setattr(ssh, "require_tools", lambda: "/bin/aws")
    monkeypatch.setattr("mlcluster.cli.runcommand.subprocess.run", fake)
    monkeypatch.setattr("mlcluster.cli.runcommand.secrets.token_hex", lambda n: "cd" * n)
    options: dict[str, Any] = {"comment": "c", "timeout_seconds": 30, "user": None} | kw
    profile = options.pop("profile", None)
    return runcommand.run(target(profile=profile), HYPERPOD, script, console=console(), **options)


def decoded(parameters: dict[str, Any]) -> str:
    """The script the node runs: the base64 text of the session's one command, decoded."""
    (command,) = parameters["command"]
    match = re.fullmatch(
        r"bash -c 'step=\$\(mktemp\) \|\| exit 1; echo ([A-Za-z0-9+/=]+) \| base64 -d >\"\$step\" && "
        r"bash \"\$step\"; code=\$\?; rm -f \"\$step\"; exit \$code'",
        command,
    )
    assert match, command
    return base64.b64decode(match[1]).decode()


def test_a_session_runs_the_script_and_reads_its_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Session(
        "\r\nStarting session with SessionId: ops-1\r\nhi\r\nthere\r\nMLCLUSTER_EXIT=3\r\n\r\n"
        "Exiting session with sessionId: ops-1.\r\n",
        stderr="  note  \n",
    )
    result = session(monkeypatch, fake, user="ubuntu", profile="ops")
    assert result == Result("", "Success", 3, "hi\nthere\n", "note")
    ((argv, timeout, parameters),) = fake.calls
    assert argv[:-1] == [
        "/bin/aws", "ssm", "start-session", "--region", "us-east-2", "--profile", "ops",
        "--target", HYPERPOD.ssm_target, "--document-name", "AWS-StartNonInteractiveCommand", "--parameters",
    ]  # fmt: skip
    assert timeout == 90
    assert decoded(parameters) == (
        "sudo -iu ubuntu bash -s <<'MLCLUSTER_SCRIPT_cdcdcdcdcdcdcdcd'\necho hi\nMLCLUSTER_SCRIPT_cdcdcdcdcdcdcdcd\n"
        "code=$?; printf '\\nMLCLUSTER_EXIT=%s\\n' \"$code\"\n"
    )


def test_a_session_without_a_profile_or_user_and_the_last_exit_line_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Session("MLCLUSTER_EXIT=1\nout\n  MLCLUSTER_EXIT=0  \n")
    result = session(monkeypatch, fake, script="true")
    assert result == Result("", "Success", 0, "out\n  MLCLUSTER_EXIT=0\n", "")
    ((argv, _, parameters),) = fake.calls
    assert "--profile" not in argv
    # a script without a final newline: the exit line is a line of its own
    assert decoded(parameters) == "true\ncode=$?; printf '\\nMLCLUSTER_EXIT=%s\\n' \"$code\"\n"


def test_a_session_without_the_exit_line_failed_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    said = "An error occurred (TargetNotConnected) when calling the StartSession operation: x" + "y" * 600
    failed = session(monkeypatch, Session("partial\n", stderr=said + "\n", code=255))
    assert failed == Result("", "Failed", 255, "partial\n", f"the session ended without a result: {said[-500:]}")
    quiet = session(monkeypatch, Session("partial\r\n", code=0))
    assert quiet == Result("", "Failed", -1, "partial\n", "the session ended without a result: partial")


def test_a_session_past_its_bound_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Session(hang=True)
    assert session(monkeypatch, fake, timeout_seconds=45) == Result(
        "", "TimedOut", -1, "", "no result after 105 s; session stopped"
    )
    assert fake.calls[0][1] == 105


# -- what every step prints about where to look, and the user wrapper -------------------------------------------------
def test_where_to_look_names_the_command_or_the_way_by_hand() -> None:
    ran = Result(CMD, "Failed", 1, "", "")
    assert where_to_look(target(), EC2, ran) == (
        f"`aws ssm get-command-invocation --region us-east-2 --command-id {CMD} --instance-id {EC2.ssm_target}`"
    )
    assert where_to_look(target(), HYPERPOD, Result("", "Failed", 1, "", "")) == (
        "`mlcluster ssh p5` and run the step by hand"
    )


@pytest.mark.parametrize("user", ["a", "_x", "ec2-user", "u" * 32, "a0_-"])
def test_as_user_accepts_posix_names(user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlcluster.cli.runcommand.secrets.token_hex", lambda n: "0" * (2 * n))
    mark = "MLCLUSTER_SCRIPT_0000000000000000"
    assert as_user("a\nb  \n\n", user) == f"sudo -iu {user} bash -s <<'{mark}'\na\nb\n{mark}\n"
    assert as_user("a", None) == "a"


@pytest.mark.parametrize("user", ["", "0abc", "Root", "u" * 33, "a b", "a;b", "-x", "a$"])
def test_as_user_refuses_anything_else(user: str) -> None:
    with pytest.raises(ValueError) as raised:
        as_user("true", user)
    assert str(raised.value) == (
        f"user: {user!r} is not allowed; allowed: a POSIX user name ([a-z_][a-z0-9_-]{{0,31}})"
    )


def test_a_result_is_cut_at_the_output_limit() -> None:
    assert not Result("", "Success", 0, "x" * 23999, "").truncated
    assert Result("", "Success", 0, "x" * 24000, "").truncated
    assert not Result("", "Success", 1, "", "").ok
    assert not Result("", "Failed", 0, "", "").ok


class Spinner:
    """A console whose ``status`` records what the operator's spinner says, first and at each update."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def status(self, text: str) -> Spinner:
        self.said.append(text)
        return self

    def update(self, text: str) -> None:
        self.said.append(text)

    def __enter__(self) -> Spinner:
        return self

    def __exit__(self, *_: object) -> None:
        return None


def test_the_spinner_says_the_step_and_its_status(ssm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    send(ssm.stub, "true", comment="smoke p5: sinfo", timeout=60, delivery=60)
    invocation(ssm.stub, {"Status": "Pending"})
    invocation(ssm.stub, {"Status": "InProgress"})
    invocation(ssm.stub, {"Status": "Success", "ResponseCode": 0})
    spinner = Spinner()
    runcommand.run_command(
        target(ssm),
        EC2,
        "true",
        comment="smoke p5: sinfo",
        timeout_seconds=60,
        user=None,
        console=spinner,  # type: ignore[arg-type]
    )
    assert spinner.said == ["smoke p5: sinfo: Pending", "smoke p5: sinfo: Pending", "smoke p5: sinfo: InProgress"]
    from mlcluster.cli import ssh

    monkeypatch.setattr(ssh, "require_tools", lambda: "/bin/aws")
    monkeypatch.setattr("mlcluster.cli.runcommand.subprocess.run", Session("MLCLUSTER_EXIT=0\n"))
    session_spinner = Spinner()
    runcommand.run(
        target(), HYPERPOD, "true", comment="health p5: quick checks", timeout_seconds=30, user=None,
        console=session_spinner,  # type: ignore[arg-type]
    )  # fmt: skip
    assert session_spinner.said == ["health p5: quick checks: running on i-0c0a1b2c3d4e5f601"]


def test_an_invocation_without_a_status_yet_is_still_pending(ssm: Any) -> None:
    send(ssm.stub, "true", comment="c", timeout=60, delivery=60)
    invocation(ssm.stub, {"CommandId": CMD})
    invocation(ssm.stub, {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": "ok\n"})
    spinner: Any = Spinner()
    result = runcommand.run_command(
        target(ssm), EC2, "true", comment="c", timeout_seconds=60, user=None, console=spinner
    )
    assert (result, spinner.said) == (Result(CMD, "Success", 0, "ok\n", ""), ["c: Pending", "c: Pending"])


def test_a_lone_carriage_return_joins_its_line_as_the_terminal_would_not_split_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session's output keeps each line whole: a progress bar's bare carriage returns are dropped, not new lines."""
    result = session(monkeypatch, Session("10%\r50%\rdone\r\nMLCLUSTER_EXIT=0\r\n"))
    assert result == Result("", "Success", 0, "10%50%done\n", "")


def test_a_script_holding_the_delimiter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mlcluster.cli.runcommand.secrets.token_hex", lambda n: "0" * (2 * n))
    with pytest.raises(ValueError) as raised:
        as_user("true\nMLCLUSTER_SCRIPT_0000000000000000\nrm -rf /\n", "ubuntu")
    assert str(raised.value) == "the script contains the here-document delimiter; run it again"
