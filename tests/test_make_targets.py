"""Every `make` target the README tells users to run exists and points at files that exist.

`make snapshot-update` once ran a test file that had been renamed away; the
README still named it and nothing noticed. Running `make test` or `make bench`
inside the suite would recurse or take minutes, so each target is dry-run
(`make -n`, which fails on a missing target or prerequisite) and every
repository path its recipe names must exist; pytest paths must collect tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

#: A target the README names: ``make x`` in backticks, or a code-block line that runs it (not prose: "make a user").
MAKE_COMMAND = re.compile(r"(?:^[ \t]*|`)make ([a-z][a-z-]*)", re.MULTILINE)
README_TARGETS = sorted(set(MAKE_COMMAND.findall((ROOT / "README.md").read_text())))
PATH_TOKEN = re.compile(r"(?<![\w/.-])((?:tests|tools|mlcluster|\.ci|schema)/[\w./*-]+)")


def dry_run(target: str) -> str:
    result = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"make -n {target}: {result.stderr}"
    return result.stdout


def test_readme_names_the_two_commands() -> None:
    assert {"synth", "test"} <= set(README_TARGETS)


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


# ---------------------------------------------------------------- make synth: cost totals from the price cache


def _p5_cache(folder: Path) -> None:
    """The price cache `mlcluster cost p5` leaves, made from the recorded Price List response."""
    from mlcluster.cli import cost
    from mlcluster.config import load_environment
    from tests.cli.test_cost import Listing

    environment = load_environment(folder / "p5.yaml")
    prices: dict[str, object] = {}

    def recorded(query: cost.Query) -> cost.Price:
        found = cost.lookup(Listing(1), query)
        prices[query.cache_key] = found.__dict__
        return found

    cost.estimate("p5", "us-east-2", cost.plan_of(environment), recorded, "recorded")
    cost.write_cache(cost.cache_path("us-east-2"), prices, "2026-11-20T18:02:11Z")


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, no credentials, and any AWS call a failure; the environments folder."""
    import botocore.client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    def no_call(self: object, operation: str, params: object) -> None:
        raise AssertionError(f"make synth called AWS: {operation}")

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", no_call)
    return ROOT / "environments"


def test_make_synth_runs_the_summary_that_prints_costs() -> None:
    assert "tools/synth_summary.py" in dry_run("synth")


def test_synth_prints_each_cached_total_and_how_to_make_the_cache(
    offline: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools import synth_summary

    _p5_cache(offline)
    monkeypatch.setattr(synth_summary, "synth", lambda selection, outdir: 0)
    monkeypatch.setattr(synth_summary, "summarize", lambda outdir: ["(stacks)"])
    monkeypatch.setattr(synth_summary, "reachability", lambda outdir: ["(reachability)"])
    monkeypatch.setattr(sys, "argv", ["synth_summary.py", "p5,dev"])
    assert synth_summary.main() == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("cost per environment (mlcluster cost ENV for the table):")
    # p5 from the recorded prices: 4 x p5.48xlarge, the head node, a NAT gateway, Lustre and gp3 (test_cost).
    hourly = 4 * 55.04 + 1.536 + 0.045 + (1200 * 0.21 + 1300 * 0.08) / 730  # gp3: roots, /home, /apps
    assert out[start + 1] == (
        f"  p5 (us-east-2): USD {hourly:,.2f}-{hourly:,.2f} per hour, "
        f"{hourly * 730:,.2f}-{hourly * 730:,.2f} per month (On-Demand, min-max nodes; prices cached 2026-11-20)"
    )
    # dev's region (us-east-1) has no cache: one line says how to make it.
    assert out[start + 2] == (
        "  no price cache for dev (us-east-1): run `mlcluster cost ENV` once with AWS credentials "
        "(pricing:GetProducts) to create it"
    )
    assert len(out) == start + 3


def test_a_partial_or_unreadable_cache_never_fails_synth(offline: Path, tmp_path: Path) -> None:
    from mlcluster.cli import cost
    from tools import synth_summary

    _p5_cache(offline)
    cache = cost.cache_path("us-east-2")
    data = json.loads(cache.read_text())
    data["prices"] = {k: v for k, v in data["prices"].items() if "m5.8xlarge" not in k}  # the head node's price
    cache.write_text(json.dumps(data))
    total, missing = synth_summary.cost_lines("p5", offline)[1:]
    assert total.endswith("prices cached 2026-11-20; partial: 1 line(s) unpriced)")
    assert missing == (
        "    not in the us-east-2 price cache: head node: m5.8xlarge: "
        "run `mlcluster cost p5` once with AWS credentials to add them"
    )
    cache.write_text("{not json")
    (line,) = synth_summary.cost_lines("p5", offline)[1:]
    assert line.startswith(f"  p5: no estimate (price cache {cache} is unreadable")
    assert "Traceback" not in line


def test_a_cache_filled_by_another_environment_gives_no_figure(offline: Path) -> None:
    """The region's cache holds only another environment's prices: no USD 0.00 total, the lines named instead."""
    from mlcluster.cli import cost
    from tools import synth_summary

    _p5_cache(offline)
    cache = cost.cache_path("us-east-2")
    data = json.loads(cache.read_text())
    (compute,) = [k for k in data["prices"] if "p5.48xlarge" in k]
    data["prices"] = {compute.replace("p5.48xlarge", "g5.48xlarge"): data["prices"][compute]}
    cache.write_text(json.dumps(data))
    lines = synth_summary.cost_lines("p5", offline)[1:]
    assert lines == [
        "  p5 (us-east-2): no figure: none of its lines is priced in the price cache of 2026-11-20",
        "    not in the us-east-2 price cache: head node: m5.8xlarge; queue compute-gpu/p5: p5.48xlarge; "
        "FSx for Lustre PERSISTENT_2 250 MB/s/TiB; NAT gateway; EBS gp3 (root and /apps volumes): "
        "run `mlcluster cost p5` once with AWS credentials to add them",
    ]
    assert not any("USD" in line for line in lines)
