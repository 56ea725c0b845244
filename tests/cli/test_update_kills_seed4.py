"""A CDK CLI that cannot be run at all: the operator is told which one, why, and that it is a setup fault
(issue 27, cli seed 4).

``cdk_cli`` asks the CLI it found for ``--version``; a file that cannot be executed (a broken shebang, a
node_modules copied from another machine) or one that hangs past the bound must end ``mlcluster update`` with
a message naming the file and the failure, exit code :data:`EXIT_SETUP` (fix the machine, not AWS).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlcluster.cli import update
from mlcluster.cli.errors import EXIT_SETUP, CliError


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``cdk`` on PATH whose interpreter does not exist, in a user's app folder without node_modules."""
    app = tmp_path / "app"
    app.mkdir()
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=app, cdk_json=None))
    (tmp_path / "bin").mkdir()
    cli = tmp_path / "bin" / "cdk"
    cli.write_text("#!/nonexistent/node\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return cli


def test_a_cdk_that_cannot_be_executed_is_named_with_the_reason(on_path: Path) -> None:
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert raised.value.message == (
        f"the CDK CLI {on_path} did not answer `--version`: [Errno 2] No such file or directory: '{on_path}'"
    )


def test_a_cdk_that_hangs_is_named_with_its_bound(on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hangs(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(update.subprocess, "run", hangs)
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert raised.value.message == (
        f"the CDK CLI {on_path} did not answer `--version`: "
        f"Command '['{on_path}', '--version']' timed out after 120 seconds"
    )
