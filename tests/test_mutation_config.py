"""`make mutation`'s own inputs (tools/mutation.py, mutation/*.yaml) and how it counts a run.

The run itself takes many minutes and is not part of `make test`; these checks are what keeps its
inputs from rotting in between: a module pointing at a moved file, a shell mutant whose text no longer
occurs in its script (so it would plant nothing), an equivalent mutant without a reason.
"""

from __future__ import annotations

import importlib.util
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
    assert result["kill_rate"] == 0.5
    assert result["complete"] is False
    assert result["survivors"] == ["m.x_a__mutmut_3 (survived)", "m.x_a__mutmut_4 (no tests)"]
    assert result["stale_equivalents"] == ["m.x_gone__mutmut_1"]


def test_a_run_where_every_mutant_is_killed_or_equivalent_is_complete_at_100_percent() -> None:
    result = TOOL.summarize({"m.x_a__mutmut_1": "killed", "m.x_a__mutmut_2": "survived"}, {"m.x_a__mutmut_2": "why"})
    assert (result["kill_rate"], result["complete"], result["survivors"]) == (1.0, True, [])


def test_the_config_mutmut_reads_mutates_only_the_module_and_runs_only_its_tests() -> None:
    import tomllib

    config = tomllib.loads(TOOL.mutmut_config(TOOL.MODULES["lockfile"]))["tool"]["mutmut"]
    assert config["only_mutate"] == ["mlcluster/lockfile.py"]
    assert config["pytest_add_cli_args_test_selection"] == list(TOOL.MODULES["lockfile"].tests)
    assert config["source_paths"] == ["mlcluster"]
