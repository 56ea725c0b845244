"""Run Command's own limit: AWS-RunShellScript's executionTimeout accepts at most 172800 s (its allowed pattern).

A deep health check of a large cluster asks for more (1800 s a wave of 16 nodes): it is refused before any
call, with the way, instead of SendCommand's validation error (final AWS review).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mlcluster.cli import runcommand
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.nodes import Node

NODE = Node("controller", "i-0123456789abcdef0", "ml.m5.xlarge", "Running", "", "sagemaker-cluster:x_controller-i-1")


class Calls:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def client(self, name: str) -> Any:
        assert name == "ssm"
        return SimpleNamespace(send_command=self.send)

    def send(self, **kwargs: Any) -> Any:
        self.sent.append(kwargs)
        raise RuntimeError("stop after the call")  # the test only looks at what was sent


def test_a_run_longer_than_run_commands_limit_is_refused_before_any_call() -> None:
    target = Calls()
    with pytest.raises(CliError) as raised:
        runcommand.run_command(
            target,
            NODE,
            "true",
            comment="c",
            timeout_seconds=172801,
            user=None,
            console=None,  # type: ignore[arg-type]
        )
    assert raised.value.exit_code == EXIT_FAILED
    assert "beyond the 172800 s (48 h) AWS-RunShellScript allows" in raised.value.message
    assert target.sent == []


def test_a_run_at_the_limit_is_sent_with_it() -> None:
    target = Calls()
    with pytest.raises(RuntimeError, match="stop after the call"):
        runcommand.run_command(
            target,
            NODE,
            "true",
            comment="c",
            timeout_seconds=172800,
            user=None,
            console=None,  # type: ignore[arg-type]
        )
    assert target.sent[0]["Parameters"]["executionTimeout"] == ["172800"]


class Answers(Calls):
    """SendCommand accepted; GetCommandInvocation answers ``invocation`` (final at once)."""

    def __init__(self, invocation: dict[str, Any]) -> None:
        super().__init__()
        self.invocation = invocation

    def client(self, name: str) -> Any:
        assert name == "ssm"
        return SimpleNamespace(send_command=self.accept, get_command_invocation=lambda **_: self.invocation)

    def accept(self, **kwargs: Any) -> Any:
        self.sent.append(kwargs)
        return {"Command": {"CommandId": "0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f"}}


@pytest.mark.parametrize(
    ("invocation", "stderr"),
    [
        ({"Status": "Failed", "ResponseCode": 1, "StandardErrorContent": "boom"}, "boom"),
        ({"Status": "Failed", "ResponseCode": 1, "StatusDetails": "DeliveryTimedOut"}, "DeliveryTimedOut"),
        ({"Status": "Success", "ResponseCode": 0, "StandardOutputContent": "ok"}, ""),  # neither: nothing made up
    ],
)
def test_a_finished_runs_error_text_is_its_stderr_else_its_status_details(
    invocation: dict[str, Any], stderr: str
) -> None:
    """``run_command`` mutant 165 of the cli seed-4 sample: what a step shows as the node's error output."""
    from rich.console import Console

    result = runcommand.run_command(
        Answers(invocation), NODE, "true", comment="c", timeout_seconds=60, user=None, console=Console(quiet=True)
    )
    assert (result.status, result.exit_code, result.stderr) == (
        invocation["Status"],
        invocation["ResponseCode"],
        stderr,
    )
