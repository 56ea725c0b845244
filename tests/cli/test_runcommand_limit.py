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
