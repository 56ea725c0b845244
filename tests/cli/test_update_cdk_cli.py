"""Which CDK CLI ``mlcluster update`` deploys with: the project's pinned one, else a ``cdk`` on PATH of the pinned major.

A library user's app has no ``node_modules`` of ours (user review: ``update`` could plan but never deploy there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlcluster.cli import update
from mlcluster.cli.errors import EXIT_SETUP, EXIT_USAGE, CliError
from tests.support import ROOT


def _fake_cdk(folder: Path, says: str, code: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cli = folder / "cdk"
    cli.write_text(f"#!/bin/sh\necho '{says}'\nexit {code}\n")
    cli.chmod(0o755)
    return cli


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's app folder without node_modules, and a PATH holding only the test's bin folder."""
    app = tmp_path / "app"
    app.mkdir()
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=app, cdk_json=None))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path


def test_the_pin_is_the_one_package_json_installs() -> None:
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert ".".join(map(str, update.PINNED_CDK_CLI)) == pinned


def _with_cdk_json(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = project / "app"
    (app / "cdk.json").write_text("{}")
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=app, cdk_json=app / "cdk.json"))


def test_the_projects_pinned_cli_comes_first(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_cdk_json(project, monkeypatch)
    mine = _fake_cdk(project / "app" / "node_modules" / ".bin", "2.1148.1 (build x)")
    _fake_cdk(project / "bin", "2.1200.0 (build y)")
    assert update.cdk_cli() == mine


def test_the_projects_cli_is_version_checked_too(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_cdk_json(project, monkeypatch)
    _fake_cdk(project / "app" / "node_modules" / ".bin", "1.0.0")
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP


def test_without_a_cdk_json_a_node_modules_in_the_folder_is_never_run(project: Path) -> None:
    """The current folder is nobody's project: a planted node_modules/.bin/cdk there is not taken (re-review)."""
    _fake_cdk(project / "app" / "node_modules" / ".bin", "2.1148.1 (planted)")
    on_path = _fake_cdk(project / "bin", "2.1148.1 (build y)")
    assert update.cdk_cli() == on_path


def test_the_version_is_asked_in_the_folder_the_deploy_runs_in(project: Path) -> None:
    cli = _fake_cdk(project / "bin", "")
    cli.write_text('#!/bin/sh\ncase "$PWD" in */app) echo "2.1148.1 (build z)";; *) echo "1.0.0";; esac\n')
    assert update.cdk_cli() == cli


@pytest.mark.parametrize("says", ["2.1148.1 (build a1b2c3d)", "2.1200.0 (build z)"])
def test_a_cdk_on_path_of_the_pinned_major_and_no_older_is_taken(project: Path, says: str) -> None:
    on_path = _fake_cdk(project / "bin", says)
    assert update.cdk_cli() == on_path


@pytest.mark.parametrize(
    ("says", "code"), [("3.0.0 (build n)", 0), ("2.1148.0 (build o)", 0), ("2.99.0", 0), ("garbage", 0), ("", 1)]
)
def test_a_cdk_on_path_of_another_major_or_older_is_refused(project: Path, says: str, code: int) -> None:
    _fake_cdk(project / "bin", says, code)
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert "mlcluster deploys with aws-cdk 2.x, 2.1148.1 or newer" in str(raised.value)


def test_no_cli_anywhere_says_how_to_install_it(project: Path) -> None:
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert "npm install -g aws-cdk@2.1148.1" in str(raised.value)


def test_a_relative_path_entry_is_not_searched(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cdk(project / "rel", "2.1148.1")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", "rel" + os.pathsep + str(project / "bin"))
    with pytest.raises(CliError):
        update.cdk_cli()


def test_options_that_exclude_each_other_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(CliError) as raised:
        update.update.callback("p4de", tmp_path, None, None, False, False, True, True, 60, 300)  # type: ignore[misc]
    assert raised.value.exit_code == EXIT_USAGE


def test_a_project_folder_others_can_write_is_refused(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cdk.json in a shared parent (found walking up from the current folder) makes a planted project: its
    node_modules CDK CLI would run with the operator's credentials (attacker review)."""
    _with_cdk_json(project, monkeypatch)
    _fake_cdk(project / "app" / "node_modules" / ".bin", "2.1148.1 (planted)")
    (project / "app").chmod(0o777)
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert "is not the operator's or root's, or others can write it" in raised.value.message
    # The edge: the operator's own folder, mode 755, is the project.
    (project / "app").chmod(0o755)
    assert update.cdk_cli() == project / "app" / "node_modules" / ".bin" / "cdk"


def test_without_a_cdk_json_a_current_folder_others_can_write_is_refused(project: Path) -> None:
    """Whole-diff attacker review: the CLI reads ./cdk.json where it runs and loads its plugins; in a folder others
    can write, one could be planted while the fleet stops. The operator's own folder, mode 755, is the edge."""
    _fake_cdk(project / "bin", "2.1148.1 (build y)")
    (project / "app").chmod(0o777)
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP and "(the current folder)" in raised.value.message
    (project / "app").chmod(0o755)
    assert update.deploy_folder() == project / "app"


@pytest.mark.parametrize(("uid", "mode"), [(0, 0o664), (1000, 0o644)])
def test_a_cdk_json_others_can_change_is_refused_at_the_deploy(project: Path, uid: int, mode: int) -> None:
    """A cdk.json another user owns, or one group or others can write, in the operator's folder (planted after the
    lookup, or found there): refused right before the deploy. The operator's own, mode 644, passes."""
    planted = project / "app" / "cdk.json"
    planted.write_text('{"plugin": ["./evil.js"]}')
    os.chown(planted, uid, 1000)  # group 1000: a group that is not the operator's own
    planted.chmod(mode)
    with pytest.raises(CliError) as raised:
        update.deploy_folder()
    assert "or its cdk.json is not the operator's or root's, or others can write it" in raised.value.message
    os.chown(planted, 0, 0)
    planted.chmod(0o644)
    assert update.deploy_folder() == project / "app"


def _groups(monkeypatch: pytest.MonkeyPatch, *, members: list[str], others_primary: bool) -> None:
    """The operator's primary group as grp and pwd describe it: ``members``, and another user whose primary group
    it is when ``others_primary``."""
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid())
    users = [me] + ([SimpleNamespace(pw_name="colleague", pw_gid=os.getgid())] if others_primary else [])
    monkeypatch.setattr(
        update.grp, "getgrgid", lambda gid: SimpleNamespace(gr_mem=members) if gid == os.getgid() else grp.getgrgid(gid)
    )
    monkeypatch.setattr(update.pwd, "getpwall", lambda: users)


def test_a_checkout_group_writable_only_by_the_operators_own_group_is_accepted(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole-diff user review: RHEL and Amazon Linux set umask 002 under user private groups, so a plain checkout is
    775. Group write by the operator's own group (no other member, nobody else's primary group) is no one else's."""
    os.chown(project / "app", os.getuid(), os.getgid())
    (project / "app").chmod(0o775)
    _groups(monkeypatch, members=[], others_primary=False)
    assert update.deploy_folder() == project / "app"


@pytest.mark.parametrize(("members", "others_primary"), [(["colleague"], False), ([], True)])
def test_a_checkout_group_writable_by_a_shared_group_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch, members: list[str], others_primary: bool
) -> None:
    os.chown(project / "app", os.getuid(), os.getgid())
    (project / "app").chmod(0o775)
    _groups(monkeypatch, members=members, others_primary=others_primary)
    with pytest.raises(CliError) as raised:
        update.deploy_folder()
    assert f"`chmod g-w,o-w {project / 'app'}` if it is yours" in raised.value.message
