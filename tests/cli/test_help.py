"""Help text of every command (snapshots), and a start-up that loads neither the CDK nor boto3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from tests.cli.conftest import REPO, invoke

COMMANDS = [
    [],
    ["ssh"],
    ["ssh-config"],
    ["status"],
    ["smoke"],
    ["health"],
    ["patch"],
    ["update"],
    ["preflight"],
    ["cost"],
    ["validate"],
    ["diff"],
    ["lock"],
    ["protect"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c) or "mlcluster")
def test_help(command: list[str], snapshot: SnapshotAssertion, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert result.output == snapshot


def test_start_up_imports_neither_cdk_nor_boto3_nor_rich() -> None:
    code = (
        "import sys; from mlcluster.cli.main import cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aws_cdk', 'jsii', 'constructs', 'boto3', 'botocore', 'rich'})); "
        "print(sorted(m for m in sys.modules if m.startswith(('mlcluster.constructs', 'mlcluster.stacks'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]", "[]"]


def test_console_script_exits_with_the_error_code(tmp_path: Path) -> None:
    """``main()`` (the console script) carries a CliError's exit code out, not only CliRunner."""
    (tmp_path / "environments").mkdir()
    code = "import sys; from mlcluster.cli.main import main; sys.argv = ['mlcluster', *sys.argv[1:]]; main()"
    result = subprocess.run(
        [sys.executable, "-c", code, "status", "qa", "--environments", str(tmp_path / "environments")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("mlcluster: no environment 'qa'")
