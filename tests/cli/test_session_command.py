"""The shell command a HyperPod Session Manager session runs as root on a node.

It decodes the script into a file and runs that file. Every cluster user of the node can write
``/tmp``: a fixed name there can be planted beforehand (when root's write into someone else's file is
refused, or a link is followed, root runs the planted file), so the file must be one ``mktemp`` makes
(new, private, an unpredictable name), and it is removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target
from mlcluster.cli.nodes import Node

#: The real ``subprocess.run``: the tests replace it (the module's attribute) to catch ``aws ssm start-session``.
REAL_RUN = subprocess.run
NODE = Node(
    "controller", "i-0123456789abcdef0", "ml.m5.12xlarge", "Running", "", "sagemaker-cluster:abc_controller-i-0123"
)


def session_command(monkeypatch: pytest.MonkeyPatch, script: str) -> str:
    """The ``command`` parameter ``run_session`` hands to ``aws ssm start-session`` for ``script``."""
    sent: list[str] = []

    def start_session(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        parameters = json.loads(Path(argv[argv.index("--parameters") + 1].removeprefix("file://")).read_text())
        sent.append(parameters["command"][0])
        return subprocess.CompletedProcess(argv, 0, "MLCLUSTER_EXIT=0\n", "")

    monkeypatch.setattr(runcommand.subprocess, "run", start_session)
    monkeypatch.setattr("mlcluster.cli.ssh.require_tools", lambda: "aws")
    target = cast(Target, SimpleNamespace(region="us-west-2", profile=None))
    runcommand.run_session(
        target, NODE, script, comment="test", timeout_seconds=30, user=None, console=Console(quiet=True)
    )
    assert len(sent) == 1
    return sent[0]


def run_on_node(command: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by a shell the way the session document runs it, with ``tmp`` as the node's /tmp."""
    return REAL_RUN(
        ["sh", "-c", command],
        env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def node_tmp(tmp_path: Path) -> Path:
    """A world-writable, sticky folder like a node's /tmp, with a file a user planted at the old fixed name."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    (tmp / "mlcluster-step.sh").write_text("echo PLANTED\n")
    return tmp


def test_the_script_runs_from_a_private_file_never_from_a_fixed_name_in_tmp(
    monkeypatch: pytest.MonkeyPatch, node_tmp: Path
) -> None:
    command = session_command(monkeypatch, 'echo "ran the script from $0"\n')
    assert "/tmp/" not in command, command
    done = run_on_node(command, node_tmp)
    assert done.returncode == 0, done.stderr
    first, blank, marker = done.stdout.splitlines()
    assert blank == ""
    assert first.startswith(f"ran the script from {node_tmp}/tmp.")  # mktemp's file under the node's TMPDIR
    assert marker == "MLCLUSTER_EXIT=0"
    assert "PLANTED" not in done.stdout
    # Nothing is left behind: only the planted file remains.
    assert sorted(p.name for p in node_tmp.iterdir()) == ["mlcluster-step.sh"]


def test_the_scripts_exit_code_comes_back_and_the_file_is_still_removed(
    monkeypatch: pytest.MonkeyPatch, node_tmp: Path
) -> None:
    done = run_on_node(session_command(monkeypatch, "exit 3\n"), node_tmp)
    # The script's own ``exit`` ends it before the marker line: the session reports the shell's exit code.
    assert done.returncode == 3
    assert sorted(p.name for p in node_tmp.iterdir()) == ["mlcluster-step.sh"]


def test_a_script_without_a_final_newline_still_runs_and_reports(
    monkeypatch: pytest.MonkeyPatch, node_tmp: Path
) -> None:
    """`... | tail -c 2000` without a newline used to become `tail -c 2000echo ...`; output without one glued the marker."""
    done = run_on_node(session_command(monkeypatch, "printf 'no newline' | tail -c 2000"), node_tmp)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["no newline", "MLCLUSTER_EXIT=0"]


def test_a_line_equal_to_the_old_delimiter_does_not_end_the_user_script_early(tmp_path: Path) -> None:
    """The user's here-document cannot be closed by a line of the script: the rest would run as root."""
    canary = tmp_path / "canary"
    script = f"echo first\nMLCLUSTER_SCRIPT\ntouch {canary}\n"
    wrapped = runcommand.as_user(script, "nobody")
    delimiter = wrapped.split("<<'", 1)[1].split("'", 1)[0]
    assert delimiter.startswith("MLCLUSTER_SCRIPT_") and len(delimiter) == len("MLCLUSTER_SCRIPT_") + 16
    # Replace sudo by a shell that prints what it got on stdin: the whole script, nothing run outside.
    done = REAL_RUN(
        ["bash", "-c", wrapped.replace("sudo -iu nobody bash -s", "cat")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.stdout == script
    assert not canary.exists()
    assert runcommand.as_user(script, "nobody") != wrapped  # a new token each time


@pytest.mark.parametrize("user", ["root; id", "$(id)", "Alice", "a b", "-u0", ""])
def test_as_user_refuses_a_user_name_that_is_not_plain(user: str) -> None:
    with pytest.raises(ValueError, match="is not allowed; allowed: a POSIX user name"):
        runcommand.as_user("true\n", user)


@pytest.mark.parametrize("user", ["ubuntu", "ec2-user", "_svc", "a" * 32])
def test_as_user_accepts_plain_user_names(user: str) -> None:
    assert runcommand.as_user("true\n", user).startswith(f"sudo -iu {user} bash -s <<'MLCLUSTER_SCRIPT_")
