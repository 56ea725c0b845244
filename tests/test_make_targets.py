"""Every `make` target the README or the docs tell users to run exists and points at files that exist.

`make snapshot-update` once ran a test file that had been renamed away; the
README still named it and nothing noticed. Running `make test` or `make bench`
inside the suite would recurse or take minutes, so each target is dry-run
(`make -n`, which fails on a missing target or prerequisite) and every
repository path its recipe names must exist; pytest paths must collect tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

#: A target the README names: ``make x`` in backticks, or a code-block line that runs it (not prose: "make a user").
MAKE_COMMAND = re.compile(r"(?:^[ \t]*|`)make ([a-z][a-z-]*)", re.MULTILINE)
#: The README and every page of the docs site.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_TARGETS = sorted({t for doc in DOCUMENTS for t in MAKE_COMMAND.findall(doc.read_text(encoding="utf-8"))})
PATH_TOKEN = re.compile(r"(?<![\w/.-])((?:tests|tools|mlcluster|\.ci|schema)/[\w./*-]+)")


def dry_run(target: str) -> str:
    result = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"make -n {target}: {result.stderr}"
    return result.stdout


def test_readme_names_the_two_commands_and_the_docs() -> None:
    assert {"synth", "test", "docs"} <= set(MAKE_COMMAND.findall((ROOT / "README.md").read_text(encoding="utf-8")))


def test_targets_are_read_from_commands_not_prose() -> None:
    text = "Run `make bench` or\n```\nmake synth   # set-up\n  make test\n```\nvalues that make a user an admin"
    assert MAKE_COMMAND.findall(text) == ["bench", "synth", "test"]


@pytest.mark.parametrize("target", README_TARGETS)
def test_target_exists_and_its_files_exist(target: str) -> None:
    recipe = dry_run(target)
    for token in PATH_TOKEN.findall(recipe):
        if "*" in token:
            assert list(ROOT.glob(token)), f"make {target}: nothing matches {token}"
        else:
            assert (ROOT / token).exists(), f"make {target} runs {token}, which does not exist"


@pytest.mark.parametrize("target", [t for t in README_TARGETS if "pytest" in dry_run(t)])
def test_pytest_targets_collect_tests(target: str) -> None:
    """A pytest run that collects nothing passes silently in some setups; here it must find tests."""
    for line in dry_run(target).splitlines():
        if "pytest" not in line:
            continue
        paths = [t for t in PATH_TOKEN.findall(line) if t.startswith("tests/")]
        for command in re.findall(r"\$\((grep [^)]*)\)", line):  # a file list the shell computes
            listed = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, check=False)
            assert listed.stdout.split(), f"make {target}: `{command}` lists no test file"
            paths += listed.stdout.split()
        if not paths:
            continue
        collected = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:syrupy",
                *paths,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert collected.returncode == 0, collected.stdout[-2000:]
        assert re.search(r"\d+ tests? collected", collected.stdout), collected.stdout[-2000:]


def test_a_missing_file_in_a_recipe_is_caught(tmp_path: Path) -> None:
    """The check above would have caught the old snapshot-update recipe."""
    recipe = ".venv/bin/pytest -n 2 --dist loadfile --snapshot-update tests/test_snapshots.py"
    missing = [t for t in PATH_TOKEN.findall(recipe) if not (ROOT / t).exists()]
    assert missing == ["tests/test_snapshots.py"]
