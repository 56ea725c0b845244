"""`make mutation`'s own inputs (tools/mutation.py, mutation/*.yaml) and how it counts a run.

The run itself takes many minutes and is not part of `make test`; these checks are what keeps its
inputs from rotting in between: a module pointing at a moved file, a shell mutant whose text no longer
occurs in its script (so it would plant nothing), an equivalent mutant without a reason.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mlcluster_mutation_tool", ROOT / "tools" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


TOOL = load_tool()
SHELL: list[dict[str, Any]] = yaml.safe_load((ROOT / "mutation" / "shell_mutants.yaml").read_text())


@pytest.mark.parametrize("name", list(TOOL.MODULES))
def test_each_module_mutates_existing_files_against_existing_tests(name: str) -> None:
    module = TOOL.MODULES[name]
    for pattern in module.mutate:
        assert list(ROOT.glob(pattern)), f"{name}: {pattern} matches no file"
    for path in module.tests:
        assert (ROOT / path).exists(), f"{name}: {path} does not exist"


def test_the_issue_modules_are_all_there_in_priority_order() -> None:
    assert list(TOOL.MODULES)[:4] == ["lockfile", "replacement", "analysis", "handlers"]
    mutated = {p for m in TOOL.MODULES.values() for p in m.mutate}
    assert {"mlcluster/config/yamlfile.py", "mlcluster/config/names.py", "mlcluster/cli/*"} <= mutated


@pytest.mark.parametrize("mutant", SHELL, ids=[m["id"] for m in SHELL])
def test_each_shell_mutant_plants_exactly_one_change_and_names_its_tests(mutant: dict[str, Any]) -> None:
    assert set(mutant) == {"id", "file", "old", "new", "why", "tests"}
    assert mutant["file"].startswith("mlcluster/lifecycle/")
    text = (ROOT / mutant["file"]).read_text()
    assert text.count(mutant["old"]) == 1, f"{mutant['id']}: 'old' must occur exactly once in {mutant['file']}"
    assert mutant["new"] != mutant["old"]
    assert len(mutant["why"]) > 30
    assert mutant["tests"] and all((ROOT / t).exists() for t in mutant["tests"])


def test_shell_mutant_ids_are_unique_and_cover_the_kinds_the_issue_lists() -> None:
    ids = [m["id"] for m in SHELL]
    assert len(ids) == len(set(ids))
    assert {"manifest-accepts-link", "manifest-checks-only-shell", "boot-unit-not-enabled"} <= set(ids)
    assert {"kernel-compare-lexical", "manifest-checksum-skipped", "manifest-name-unquoted"} <= set(ids)


def test_recorded_equivalents_name_known_modules_and_give_a_reason() -> None:
    for module, entries in TOOL.load_equivalent().items():
        assert module in TOOL.MODULES
        assert all(reason.strip() for reason in entries.values())


def test_a_mutant_no_test_reaches_counts_as_a_survivor_and_equivalents_leave_the_rate() -> None:
    found = {
        "m.x_a__mutmut_1": "killed",
        "m.x_a__mutmut_2": "timeout",
        "m.x_a__mutmut_3": "survived",
        "m.x_a__mutmut_4": "no tests",
        "m.x_a__mutmut_5": "survived",
        "m.x_a__mutmut_6": "not checked",
    }
    result = TOOL.summarize(found, {"m.x_a__mutmut_5": "same output", "m.x_gone__mutmut_1": "old"})
    assert (result["killed"], result["survived"], result["equivalent"], result["not checked"]) == (2, 2, 1, 1)
    assert result["timeouts"] == 1  # one of the kills, shown apart
    assert result["kill_rate"] == 0.5
    assert result["complete"] is False
    assert result["survivors"] == ["m.x_a__mutmut_3 (survived)", "m.x_a__mutmut_4 (no tests)"]
    assert result["stale_equivalents"] == ["m.x_gone__mutmut_1"]


def test_a_run_where_every_mutant_is_killed_or_equivalent_is_complete_at_100_percent() -> None:
    result = TOOL.summarize({"m.x_a__mutmut_1": "killed", "m.x_a__mutmut_2": "survived"}, {"m.x_a__mutmut_2": "why"})
    assert (result["kill_rate"], result["complete"], result["survivors"]) == (1.0, True, [])


def test_a_sample_counts_only_its_mutants_and_the_rest_still_tells_stale_equivalents() -> None:
    found = {f"m.x_a__mutmut_{i}": "not checked" for i in range(1, 11)}
    found |= {"m.x_a__mutmut_1": "killed", "m.x_a__mutmut_2": "survived", "m.x_a__mutmut_3": "killed"}
    result = TOOL.summarize(
        found,
        {"m.x_a__mutmut_9": "same", "m.x_gone__mutmut_1": "old"},
        ["m.x_a__mutmut_1", "m.x_a__mutmut_2", "m.x_a__mutmut_3"],
    )
    assert (result["killed"], result["survived"], result["not checked"], result["total"]) == (2, 1, 0, 3)
    assert result["population"] == 10
    assert result["complete"] is True  # every sampled mutant was decided; the other 7 were never drawn
    assert result["stale_equivalents"] == ["m.x_gone__mutmut_1"]


def test_the_sample_is_fixed_by_its_seed_drawn_without_repeats_and_capped_by_the_population() -> None:
    names = [f"m.x_a__mutmut_{i}" for i in range(1000)]
    first = TOOL.draw(names, 200, 1)
    assert first == TOOL.draw(list(reversed(names)), 200, 1)  # the order names come in does not matter
    assert len(set(first)) == 200 and set(first) <= set(names)
    assert first != TOOL.draw(names, 200, 2)
    assert sorted(TOOL.draw(names[:5], 200, 1)) == sorted(names[:5])


def test_the_kill_rate_interval_is_wilsons() -> None:
    # Reference values: the Wilson score interval at z = 1.96 (e.g. 190 of 200: 0.9104 to 0.9726).
    assert TOOL.wilson(190, 200) == (0.9104, 0.9726)
    assert TOOL.wilson(200, 200) == (0.9812, 1.0)
    assert TOOL.wilson(0, 10) == (0.0, 0.2775)
    assert TOOL.wilson(0, 0) is None


def test_the_table_says_a_sample_and_its_interval() -> None:
    row = {"killed": 190, "survived": 10, "equivalent": 2, "not checked": 0, "total": 202, "population": 9556}
    row |= {"kill_rate": 0.95, "interval_95": [0.9104, 0.9726], "sample": {"size": 202, "seed": 3}}
    row |= {"date": "2026-11-28T11:00:00Z", "tool": "mutmut", "tool_version": "3.8.1"}
    text = TOOL.table({"modules": {"analysis": row}})
    assert "202 of 9556" in text and "95.0% (91.0%-97.3%)" in text and "sample seed 3" in text
    # A sample stopped by time (mutmut ran its cheapest mutants first) or worked on since gives no estimate.
    stopped = TOOL.table({"modules": {"analysis": row | {"not checked": 93}}})
    assert "95.0% (sample not finished: no estimate)" in stopped and "91.0%" not in stopped
    again = TOOL.table({"modules": {"analysis": row | {"recounted": True, "kill_rate": 1.0}}})
    assert "100.0% (same sample, recounted)" in again and "91.0%" not in again
    unfinished = TOOL.table({"modules": {"analysis": row | {"recounted": True, "kill_rate": 1.0, "not checked": 9}}})
    assert "100.0% (same sample, recounted, not finished)" in unfinished
    # A recounted whole-module copy with mutants unchecked is no sample: it says it gives no estimate.
    whole = row | {"recounted": True, "kill_rate": 1.0, "not checked": 960, "sample": None}
    assert "100.0% (stopped by time: no estimate)" in TOOL.table({"modules": {"analysis": whole}})


def test_a_recount_judges_the_sample_the_run_recorded_with_the_equivalents_recorded_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"mlcluster.lockfile.x_a__mutmut_{i}" for i in range(50)]
    sample = TOOL.draw(names, 10, 4)
    record = {"module": "lockfile", "seed": 4, "size": 10, "names": sample}
    (tmp_path / "mutants").mkdir()
    (tmp_path / TOOL.SAMPLE_FILE).write_text(json.dumps(record))
    found = dict.fromkeys(names, "not checked") | dict.fromkeys(sample, "killed")
    found[sample[0]], found[sample[1]] = "survived", "survived"
    monkeypatch.setattr(TOOL, "statuses", lambda work: found if work == tmp_path else {})
    monkeypatch.setattr(TOOL, "RESULTS", tmp_path / "results.json")
    monkeypatch.setattr(TOOL, "load_equivalent", lambda: {"lockfile": {sample[1]: "same bytes"}})
    assert TOOL.recount("lockfile", tmp_path) == 1  # one survivor left: the target fails
    row = json.loads((tmp_path / "results.json").read_text())["modules"]["lockfile"]
    assert (row["killed"], row["survived"], row["equivalent"], row["population"]) == (8, 1, 1, 50)
    assert row["survivors"] == [f"{sample[0]} (survived)"] and row["sample"] == {"size": 10, "seed": 4}
    found[sample[0]] = "killed"
    assert TOOL.recount("lockfile", tmp_path) == 0
    # A folder that is no kept copy is refused with a sentence.
    with pytest.raises(SystemExit, match="is not a copy a --keep run left"):
        TOOL.recount("lockfile", tmp_path / "elsewhere")
    # The copy of another module is refused, naming both.
    with pytest.raises(SystemExit, match="is a copy of module 'lockfile', not 'handlers'"):
        TOOL.recount("handlers", tmp_path)


def test_the_table_says_a_whole_module_run_stopped_by_time_gives_no_estimate() -> None:
    row = {"killed": 391, "survived": 0, "equivalent": 32, "not checked": 219, "total": 642, "kill_rate": 1.0}
    row |= {"date": "2026-11-28T08:15:23Z", "tool": "mutmut", "tool_version": "3.8.1"}
    assert "100.0% (stopped by time: no estimate)" in TOOL.table({"modules": {"config-files": row}})


def test_the_config_mutmut_reads_mutates_only_the_module_and_runs_only_its_tests() -> None:
    import tomllib

    config = tomllib.loads(TOOL.mutmut_config(TOOL.MODULES["lockfile"]))["tool"]["mutmut"]
    assert config["only_mutate"] == ["mlcluster/lockfile.py"]
    assert config["pytest_add_cli_args_test_selection"] == list(TOOL.MODULES["lockfile"].tests)
    assert config["source_paths"] == ["mlcluster"]
    # A slow module fixture is allowed a minute before mutmut calls the mutant "timeout" (a kill).
    assert (config["timeout_constant"], config["timeout_multiplier"]) == (60, 3)


def test_deselected_tests_exist_and_are_passed_to_every_mutmut_run() -> None:
    import tomllib

    for name, module in TOOL.MODULES.items():
        config = tomllib.loads(TOOL.mutmut_config(module))["tool"]["mutmut"]
        args = config["pytest_add_cli_args"]
        assert args[: len(TOOL.PYTEST_ARGS)] == TOOL.PYTEST_ARGS
        assert args[len(TOOL.PYTEST_ARGS) :] == [a for test in module.deselect for a in ("--deselect", test)]
        for test in module.deselect:
            path, _, function = test.partition("::")
            assert f"def {function}(" in (ROOT / path).read_text(), f"{name}: {test} does not exist"
    assert TOOL.MODULES["config-files"].deselect


ORDER_TESTS = {
    # A slow file (its module fixture sleeps) and a fast one; node ids are given interleaved, as a set would.
    "test_slow.py": (
        "import time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def slow():\n    time.sleep(0.3)\n"
        "def test_s1(slow): print('RAN slow1')\n"
        "def test_s2(slow): print('RAN slow2')\n"
    ),
    "test_fast.py": "def test_f1(): print('RAN fast1')\ndef test_f2(): print('RAN fast2')\n",
}


PLUGIN = ("-p", "tools.mutation_order")


def test_the_map_is_widened_to_every_test_of_a_file_one_of_its_tests_reached() -> None:
    """A module fixture runs in its file's first test only; the file's other tests judge the mutant too."""
    import tools.mutation_order as order

    ran = ["tests/a.py::test_1", "tests/a.py::test_2[x]", "tests/b.py::test_3", "tests/c.py::test_4"]
    mapping = {"m.x_built": {"tests/a.py::test_1"}, "m.x_both": {"tests/b.py::test_3", "tests/c.py::test_4"}}
    mapping |= {"m.x_unran": {"tests/d.py::test_5"}}
    order.widen(mapping, ran)
    assert mapping["m.x_built"] == {"tests/a.py::test_1", "tests/a.py::test_2[x]"}  # not b's or c's
    assert mapping["m.x_both"] == {"tests/b.py::test_3", "tests/c.py::test_4"}
    assert mapping["m.x_unran"] == {"tests/d.py::test_5"}  # a test that did not run adds nothing


def order_run(folder: Path, phase: str, *ids: str) -> list[str]:
    import os
    import subprocess

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *PLUGIN,
            "--rootdir",
            str(folder),
            *ids,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MUTANT_UNDER_TEST": phase, "PYTHONPATH": str(ROOT)},
        # (--rootdir: the node ids are relative to the folder, as mutmut's are to mutants/)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.split("RAN ", 1)[1] for line in result.stdout.splitlines() if "RAN " in line]


def test_a_mutants_tests_run_grouped_by_file_cheapest_first_and_none_left_out(tmp_path: Path) -> None:
    for name, text in ORDER_TESTS.items():
        (tmp_path / name).write_text(text)
    interleaved = ["test_slow.py::test_s2", "test_fast.py::test_f2", "test_slow.py::test_s1", "test_fast.py::test_f1"]
    # mutmut's mapping run: every test once, in the order given; the plugin records each file's seconds.
    assert order_run(tmp_path, "stats", *interleaved) == ["slow2", "fast2", "slow1", "fast1"]
    costs = json.loads((tmp_path / "mutation-file-seconds.json").read_text())
    assert costs["test_slow.py"] >= 0.3 > costs["test_fast.py"]
    # mutmut's later mapping run of new tests only: the files measured before keep their cost.
    order_run(tmp_path, "stats", "test_fast.py::test_f1")
    assert json.loads((tmp_path / "mutation-file-seconds.json").read_text())["test_slow.py"] == costs["test_slow.py"]
    # A mutant run: the cheap file first, each file in written order, every test still run.
    assert order_run(tmp_path, "m.x_f__mutmut_1", *interleaved) == ["fast1", "fast2", "slow1", "slow2"]
    # mutmut's clean and forced-fail runs keep the order given.
    assert order_run(tmp_path, "", *interleaved) == ["slow2", "fast2", "slow1", "fast1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "3"], "mutation: --seed 3 chooses a sample: give --sample N too (SAMPLE=N SEED=3)"),
        (["--sample", "0"], "mutation: --sample 0: give a number of mutants, 1 or more"),
    ],
)
def test_a_seed_without_a_sample_and_an_empty_sample_are_refused_before_anything_runs(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(TOOL, "run_module", lambda name, *a, **k: ran.append(name))
    monkeypatch.setattr(sys, "argv", ["mutation.py", "--module", "lockfile", *argv])
    with pytest.raises(SystemExit) as stop:
        TOOL.main()
    assert stop.value.code == message
    assert ran == []


def test_a_seed_with_a_sample_reaches_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def fake_run(name: str, minutes: float, **options: Any) -> dict[str, Any]:
        calls.append((name, options))
        raise SystemExit(0)  # stop before results are written

    monkeypatch.setattr(TOOL, "run_module", fake_run)
    for argv, seed in ((["--sample", "5", "--seed", "0"], 0), (["--sample", "5"], 1)):
        monkeypatch.setattr(sys, "argv", ["mutation.py", "--module", "lockfile", *argv])
        with pytest.raises(SystemExit):
            TOOL.main()
        assert calls.pop() == ("lockfile", {"keep": False, "sample": 5, "seed": seed})


def test_mutmuts_test_listing_passes_over_unused_snapshots_and_a_real_session_still_fails(tmp_path: Path) -> None:
    """mutmut lists tests with --collect-only before a by-name run; syrupy fails a session with unused snapshots."""
    import os
    import subprocess

    (tmp_path / "__snapshots__").mkdir()
    (tmp_path / "__snapshots__" / "test_snap.ambr").write_text(
        "# serializer version: 1\n# name: test_gone\n  'old'\n# ---\n"
    )
    (tmp_path / "test_snap.py").write_text("def test_here(): pass\n")

    def pytest_run(*extra: str) -> int:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *PLUGIN,
                "--rootdir",
                str(tmp_path),
                *extra,
                "test_snap.py",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            # Without the xdist worker's variables: syrupy leaves unused-snapshot failures to xdist's controller
            # in a process it takes for a worker (the suite runs with -n 2; mutmut runs pytest without xdist).
            env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}, "PYTHONPATH": str(ROOT)},
        ).returncode

    assert pytest_run("--collect-only") == 0
    assert pytest_run() != 0  # a session that runs tests still fails on the unused snapshot
