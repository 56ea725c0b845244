"""A pytest plugin `make mutation` loads (``-p tools.mutation_order``): each mutant's tests run cheapest file first.

mutmut hands a mutant's tests to pytest as node ids in the order of a Python set, so the test files
come interleaved. pytest tears a module's fixtures down when it moves to another file and sets them
up again when it comes back: a module fixture that synthesizes CDK apps (tests/test_day_two.py's
``baselines``, tests/test_day_two_guard.py's ``locked``) ran once per switch. And a mutant that a
fast test kills could wait for every synthesis of a slow file that came first.

In mutmut's mapping run (``MUTANT_UNDER_TEST=stats``, every test once) the plugin records the
seconds each test file spent (set-up, call and tear-down) in ``mutation-file-seconds.json``. When a
mutant is under test, it sorts the items by that cost, file by file, keeping pytest's own order inside
a file (its grouping of parametrized fixtures). Nothing is left out: a mutant no test kills still runs
every test mapped to it; only the order (and so where ``-x`` stops) changes.

The plugin also widens mutmut's map to whole files. mutmut credits a function to the test during whose
set-up, call or tear-down it ran; a module-scoped fixture (a stack built once for a file's tests) runs
in the first test's set-up only, so the file's other tests, whose assertions read that stack, were
never chosen to judge a mutant of the code the fixture ran: the mutant "survived" tests that would
have failed on it. At the end of the mapping run, every function mapped to a test of a file is mapped
to every test of that file that ran (``widen``). A session fixture shared across files is still
credited to the first file only.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

#: Written in the folder the tests run in (mutmut's ``mutants/``) by the mapping run, read by the mutant runs.
COSTS = Path("mutation-file-seconds.json")
#: ``MUTANT_UNDER_TEST`` values that are not a mutant: mutmut's own phases (see mutmut.mutation.trampoline).
NOT_A_MUTANT = {"", "stats", "fail", "mutant_generation"}

_seconds: defaultdict[str, float] = defaultdict(float)
#: The node ids the mapping run ran, in order (as mutmut records them: relative to ``mutants/``).
_ran: list[str] = []


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def widen(tests_by_function: dict[str, set[str]], ran: list[str]) -> None:
    """Map every function to every test of each file one of its tests is in (in place; only tests that ran)."""
    by_file: defaultdict[str, set[str]] = defaultdict(set)
    for nodeid in ran:
        by_file[_file(nodeid)].add(nodeid)
    for tests in tests_by_function.values():
        for file in {_file(test) for test in tests}:
            tests |= by_file[file]


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    """In the mapping run: remember each test that ran (mutmut's own ids drop a leading ``mutants/``)."""
    if _phase() == "stats":
        _ran.append(nodeid.removeprefix("mutants/"))


def _phase() -> str:
    return os.environ.get("MUTANT_UNDER_TEST", "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the mapping run: add this phase's seconds to its file's cost."""
    if _phase() == "stats":
        _seconds[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the mapping run: widen mutmut's map to whole files; write each file's cost for the mutant runs."""
    if _phase() == "stats" and _ran:
        from mutmut.state import state  # only ever loaded by mutmut, which saves the map after this session

        widen(state().tests_by_mangled_function_name, _ran)
    if _phase() == "stats" and _seconds:
        # mutmut's later mapping runs cover new tests only: merge, so the files measured before keep their cost.
        known = json.loads(COSTS.read_text(encoding="utf-8")) if COSTS.exists() else {}
        COSTS.write_text(json.dumps({**known, **_seconds}, indent=1, sort_keys=True), encoding="utf-8")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With a mutant under test: the items grouped by file, cheapest file first (unknown files last), in file order."""
    if _phase() in NOT_A_MUTANT or not COSTS.exists():
        return
    cost = json.loads(COSTS.read_text(encoding="utf-8"))
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::", 1)[0], len(first_seen))

    def key(indexed: tuple[int, pytest.Item]) -> tuple[float, int, int, int]:
        index, item = indexed
        file = item.nodeid.split("::", 1)[0]
        return (cost.get(file, float("inf")), first_seen[file], item.location[1] or 0, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def pytest_configure(config: pytest.Config) -> None:
    """Let mutmut's test listing pass where syrupy snapshots lie unused.

    Before a run of named mutants mutmut lists the tests with ``--collect-only`` and takes any exit code
    but 0 for a failed collection ("Failed to collect list of tests"). Syrupy fails a session that leaves
    snapshots unused, and a collection runs no test: tests/cli's snapshots made every such listing fail.
    Only the listing is eased; a session that runs tests still fails on an unused snapshot.
    """
    if config.option.collectonly and hasattr(config.option, "warn_unused_snapshots"):
        config.option.warn_unused_snapshots = True
