"""How the command finds its project and CDK feature flags (issue 26, finding 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mlcluster.app
from mlcluster.appdir import ProjectError, find_project, packaged_context, read_context
from tests.support import ROOT


def test_packaged_flags_equal_the_repositorys_cdk_json() -> None:
    """The wheel's flags are the project's: a stale copy would synthesize other templates without cdk.json."""
    assert packaged_context() == json.loads((ROOT / "cdk.json").read_text())["context"]
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cdk_context.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_in_process_synthesis_reads_the_cdk_json_of_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before issue 26 the flags came from the cdk.json beside the package, whatever folder the user was in."""
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "x", "context": {"@aws-cdk/core:checkSecretUsage": False}}))
    nested = tmp_path / "environments" / "deeper"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    assert mlcluster.app.project_context() == {"@aws-cdk/core:checkSecretUsage": False}


def test_walks_up_to_the_folder_with_cdk_json(tmp_path: Path) -> None:
    (tmp_path / "cdk.json").write_text("{}")
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    project = find_project(start)
    assert (project.root, project.cdk_json, project.environments) == (
        tmp_path.resolve(),
        (tmp_path / "cdk.json").resolve(),
        tmp_path.resolve() / "environments",
    )
    assert project.notice() is None
    assert project.context() == {}


def test_without_cdk_json_the_packaged_flags_are_used_and_said(tmp_path: Path) -> None:
    project = find_project(tmp_path)
    assert project.cdk_json is None and project.root == tmp_path.resolve()
    assert project.context() == packaged_context()
    notice = project.notice()
    assert notice is not None and f"no cdk.json in {tmp_path.resolve()} or above" in notice
    assert "flags this mlcluster package ships" in notice


def test_app_dir_wins_over_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "cdk.json").write_text("{}")
    (tmp_path / "there").mkdir()
    assert find_project(tmp_path / "here", app_dir=tmp_path / "there").cdk_json is None
    assert find_project(tmp_path, app_dir=tmp_path / "here").root == (tmp_path / "here").resolve()


@pytest.mark.parametrize("text", ["{not json", "[]", '{"context": 3}'])
def test_unreadable_cdk_json_names_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "cdk.json").write_text(text)
    with pytest.raises(ProjectError, match=rf"^{tmp_path}/cdk.json: "):
        read_context(tmp_path / "cdk.json")


def test_the_command_finds_environments_beside_cdk_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a subfolder, or anywhere with --app-dir, as the CDK CLI's users expect (not ./environments)."""
    from click.testing import CliRunner

    from mlcluster.cli.main import cli

    (tmp_path / "cdk.json").write_text("{}")
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")
    assert CliRunner().invoke(cli, ["validate"]).output == "mlcluster: 1 environment file(s) valid: qa\n"
    elsewhere = tmp_path.parent
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(cli, ["--app-dir", str(tmp_path), "validate", "--json"])
    assert json.loads(result.output)["environments"] == ["qa"]
