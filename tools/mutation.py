"""`make mutation`: do the tests catch a planted bug in the code that guards data, access and AWS calls?

Two kinds of mutants, one target (not part of `make test`: it takes many minutes):

- Python modules, mutated by mutmut 3 (``mutmut run --max-children 1``: one worker, the machine is
  shared). Each module in ``MODULES`` is mutated in a fresh copy of this tree, against its own test
  files only; mutmut's per-test mapping then runs, for each mutant, only the tests that reached the
  mutated function. A mutant no test reaches ("no tests") counts as a survivor.
- The node scripts (shell, which no Python tool mutates): the hand-written replacements in
  ``mutation/shell_mutants.yaml``, each applied alone to a copy of the tree, then the tests it names
  run against the copy (they find the scripts through the ``mlcluster.lifecycle`` package of the
  copy, which the copy's ``pythonpath = ["."]`` puts first). Every one must be killed.

A module of thousands of mutants (``cli``: about 14,600) takes hours at a second or more a mutant, so
``--sample N`` judges a seeded random sample of N of the module's mutants instead (mutmut generates
them all, then ``mutmut run NAME...`` checks only the sample). The kill rate of a simple random
sample is an unbiased estimate of the module's; the result carries its 95% Wilson interval, the
population, the sample size and the seed, and a new seed draws a new sample (the honest figure after
killing a sample's survivors is a fresh sample's, since the old one was worked on).

Mutants recorded in ``mutation/equivalent.yaml`` (mutant name and why no test can tell it from the
original) are left out of the kill rate. The result of every module run, with the date and mutmut's
version, is merged into ``mutation/results.json``; `make bench` prints it.

Usage: ``python tools/mutation.py [--module NAME]... [--minutes N] [--sample N --seed S] [--report]``; no module runs
everything (``--module shell``: the node-script mutants); ``--report`` prints the last table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "mutation" / "results.json"
#: Written into a sampled run's copy: the module, seed, size and the names drawn (what --recount counts).
SAMPLE_FILE = "mutation-sample.json"
EQUIVALENT = ROOT / "mutation" / "equivalent.yaml"
SHELL_MUTANTS = ROOT / "mutation" / "shell_mutants.yaml"
PYTHON = Path(sys.executable)
# mutmut's statuses (mutmut/stats.py, status_by_exit_code) and how the kill rate counts them.
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
SURVIVED = {"survived", "no tests", "suspicious"}
# What the tests need of the tree besides the package and its tests (mutmut copies these into mutants/).
#: The node-script mutants' tests: behaviour only (a lint test fails on any planted text, proving nothing).
PYTEST_K = ("-k", "not shellcheck")
#: Every mutmut pytest run: in this process (no xdist workers), no cache written into the copy, and each
#: mutant's tests ordered cheapest file first (tools/mutation_order.py; mutmut itself adds -x).
PYTEST_ARGS = ["-n", "0", "-p", "no:cacheprovider", "-p", "tools.mutation_order"]
#: mutmut stops a mutant's run (status "timeout", which counts as killed: a mutant that hangs) after
#: (estimate + constant) x multiplier seconds of wall time, its estimate being the summed *call* time of
#: the mapped tests in the mapping run. Module fixtures (a CDK synthesis: tests/test_day_two.py's
#: ``results`` synthesizes every edit) are set-up time the estimate leaves out, so mutmut's default
#: (1 s, x15) could stop a mutant during a fixture and count it killed. A minute of set-up allowed,
#: x3: a hanging mutant costs at least three minutes, a slow fixture is not a kill.
TIMEOUT_CONSTANT_S = 60
TIMEOUT_MULTIPLIER = 3
ALSO_COPY = [
    *("tests", "environments", "schema", "docs", "tools", "requirements", "mutation"),
    *("app.py", "cdk.json", "pyproject.toml", "package.json", "package-lock.json", "Makefile", "README.md"),
]


@dataclass(frozen=True, kw_only=True)
class Module:
    """One unit of `make mutation`: the files mutmut mutates and the test files that own them."""

    mutate: tuple[str, ...]
    tests: tuple[str, ...]
    #: Test ids left out: tests that run mlcluster only in a child process started in another folder. In
    #: mutmut's mapping run the child's mutated code looks for mutmut's settings (pyproject.toml) in its
    #: own working folder and fails the run; and a child's calls are never mapped to a mutant, so these
    #: tests are never chosen to judge one (they could kill nothing).
    deselect: tuple[str, ...] = ()


GUARD_TESTS = (
    "tests/test_day_two.py",
    "tests/test_day_two_guard.py",
    "tests/test_accounting_guard.py",
    "tests/test_day_two_training_plan.py",
    "tests/test_data_guard.py",
)
# In priority order: where a silent bug loses data, then opens access, then misreads AWS.
MODULES: dict[str, Module] = {
    "lockfile": Module(
        mutate=("mlcluster/lockfile.py",),
        tests=(*GUARD_TESTS, "tests/mutation_kills/test_lockfile.py", "tests/mutation_kills/test_lockfile_messages.py"),
    ),
    "replacement": Module(
        mutate=("mlcluster/replacement.py",),
        tests=(
            *GUARD_TESTS,
            "tests/cli/test_lock_orphans.py",
            "tests/test_data_inventory.py",
            "tests/mutation_kills/test_replacement.py",
        ),
    ),
    "analysis": Module(mutate=("mlcluster/analysis/*",), tests=("tests/gates",)),
    "handlers": Module(mutate=("mlcluster/handlers/*",), tests=("tests/handlers",)),
    "config-files": Module(
        mutate=("mlcluster/config/yamlfile.py", "mlcluster/config/names.py"),
        tests=(
            "tests/config",
            "tests/test_config.py",
            "tests/gates/test_contracts.py",
            "tests/mutation_kills/test_config_files.py",
        ),
        deselect=(
            "tests/config/test_config_validate_cli.py::test_default_directory_is_environments",
            "tests/config/test_config_validate_cli.py::test_same_message_and_exit_code_as_synth",
            "tests/test_config.py::test_app_prints_one_message_and_exits_1_without_traceback",
        ),
    ),
    "cli": Module(mutate=("mlcluster/cli/*",), tests=("tests/cli", "tests/test_day_two_cli.py")),
    "constructs-security": Module(
        mutate=(
            "mlcluster/constructs/data_bucket.py",
            "mlcluster/constructs/script_bucket.py",
            "mlcluster/constructs/log_key.py",
            "mlcluster/constructs/hyperpod_role.py",
            "mlcluster/constructs/network.py",
            "mlcluster/constructs/lustre.py",
            "mlcluster/constructs/accounting_database.py",
        ),
        tests=("tests/constructs", "tests/test_network.py"),
    ),
}


#: mutmut's own first phase of ``mutmut run`` (generate every mutant into ``mutants/``), on its own, so
#: the names can be listed (``mutmut results --all true``) before a sample of them is run.
GENERATE = """
from os import makedirs
from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants
from mutmut.__main__ import setup_source_paths, store_lines_covered_by_tests
from mutmut.mutation.trampoline import set_mutant_under_test
set_mutant_under_test("mutant_generation")
makedirs("mutants", exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
store_lines_covered_by_tests()
create_mutants(1)
"""


def copy_tree(dest: Path) -> None:
    """The tree as git sees it (tracked and new files, ignores respected) into ``dest``; node_modules linked."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    pack = subprocess.run(
        ["tar", "--null", "--ignore-failed-read", "-T", "-", "-cf", "-"],
        cwd=ROOT,
        input=files,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-xf", "-", "-C", str(dest)], input=pack, check=True)
    if (ROOT / "node_modules").is_dir():
        (dest / "node_modules").symlink_to(ROOT / "node_modules")


def toml_list(items: tuple[str, ...] | list[str]) -> str:
    """A TOML array of strings (json quoting is valid TOML for these plain paths)."""
    return json.dumps(list(items))


def mutmut_config(module: Module) -> str:
    """The ``[tool.mutmut]`` table for one module: mutate its files only, run its own tests only."""
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["mlcluster"]\n'
        f"only_mutate = {toml_list(module.mutate)}\n"
        f"also_copy = {toml_list(ALSO_COPY)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(module.tests)}\n"
        f"pytest_add_cli_args = {toml_list([*PYTEST_ARGS, *deselected(module)])}\n"
        f"timeout_constant = {TIMEOUT_CONSTANT_S}\n"
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}\n"
    )


def deselected(module: Module) -> list[str]:
    """pytest's ``--deselect ID`` for each test the module leaves out."""
    return [arg for test in module.deselect for arg in ("--deselect", test)]


def load_equivalent() -> dict[str, dict[str, str]]:
    """``mutation/equivalent.yaml``: module -> {mutant name: reason}; every reason must be given."""
    data = yaml.safe_load(EQUIVALENT.read_text()) or {}
    for module, entries in data.items():
        if module not in MODULES:
            sys.exit(f"{EQUIVALENT.name}: unknown module {module!r}; known: {', '.join(MODULES)}")
        for name, reason in (entries or {}).items():
            if not isinstance(reason, str) or not reason.strip():
                sys.exit(f"{EQUIVALENT.name}: {module}: {name} has no reason")
    return {module: dict(entries or {}) for module, entries in data.items()}


def statuses(work: Path) -> dict[str, str]:
    """Every mutant of the run in ``work`` and its mutmut status (`mutmut results --all true`)."""
    listed = subprocess.run(
        [str(PYTHON), "-m", "mutmut", "results", "--all", "true"],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        sys.exit(f"mutation: mutmut could not list the mutants in {work}:\n{listed.stderr[-3000:]}")
    out = listed.stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            found[name] = status
    return found


def draw(names: list[str], size: int, seed: int) -> list[str]:
    """A simple random sample of ``size`` mutant names (all of them when there are fewer), fixed by ``seed``."""
    return sorted(random.Random(seed).sample(sorted(names), min(size, len(names))))


def wilson(killed: int, decided: int) -> tuple[float, float] | None:
    """The 95% Wilson score interval of a kill rate of ``killed`` in ``decided`` (None when nothing decided)."""
    if not decided:
        return None
    z = 1.959964
    p = killed / decided
    centre = (p + z * z / (2 * decided)) / (1 + z * z / decided)
    half = z * math.sqrt(p * (1 - p) / decided + z * z / (4 * decided * decided)) / (1 + z * z / decided)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def summarize(found: dict[str, str], equivalent: dict[str, str], sample: list[str] | None = None) -> dict[str, Any]:
    """Counts, kill rate and the survivors' names; a recorded equivalent that no longer exists is an error.

    ``sample``: only these mutants are counted (the rest of ``found`` was not run); ``found`` is still
    what tells a stale equivalent.
    """
    stale = sorted(set(equivalent) - set(found))
    counts = {"killed": 0, "survived": 0, "equivalent": 0, "not checked": 0, "timeouts": 0}
    survivors = []
    judged = found if sample is None else {name: found[name] for name in sample}
    for name, status in sorted(judged.items()):
        if name in equivalent:
            counts["equivalent"] += 1
        elif status in KILLED:
            counts["killed"] += 1
            counts["timeouts"] += status == "timeout"  # killed by a hang: shown apart, to be looked at
        elif status in SURVIVED:
            counts["survived"] += 1
            survivors.append(f"{name} ({status})")
        else:
            counts["not checked"] += 1
    decided = counts["killed"] + counts["survived"]
    interval = wilson(counts["killed"], decided)
    return {
        **counts,
        "total": len(judged),
        "population": len(found),
        "kill_rate": round(counts["killed"] / decided, 4) if decided else None,
        "interval_95": list(interval) if interval else None,
        "complete": counts["not checked"] == 0,
        "survivors": survivors,
        "stale_equivalents": stale,
    }


def run_module(
    name: str, minutes: float, *, keep: bool = False, sample: int | None = None, seed: int = 1
) -> dict[str, Any]:
    """mutmut over one module in a fresh copy of the tree; stops after ``minutes`` (the result says so).

    ``keep`` leaves the copy on disk (its path is printed) so ``mutmut show NAME`` there prints a survivor.
    ``sample``: only a seeded random sample of this many of the module's mutants is run (see the module doc).
    """
    module = MODULES[name]
    prefix = f"mlcluster-mutation-{name}-"
    place: contextlib.AbstractContextManager[str] = (
        contextlib.nullcontext(tempfile.mkdtemp(prefix=prefix)) if keep else tempfile.TemporaryDirectory(prefix=prefix)
    )
    with place as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # some tests run a program as another user, who must reach the copy
        copy_tree(work)
        with (work / "pyproject.toml").open("a") as fh:
            fh.write(mutmut_config(module))
        # The tests run inside mutants/ and some run the pinned CDK CLI from node_modules: link it there
        # (mutmut keeps what it finds in mutants/; copying node_modules would take minutes).
        # And the venvs: tests run tools they hold (shellcheck; ParallelCluster's validators) from the tree's.
        (work / "mutants").mkdir()
        for tools in ("node_modules", ".venv", ".venv-pcluster"):
            if (ROOT / tools).is_dir():
                (work / "mutants" / tools).symlink_to(ROOT / tools)
        print(f"mutation: {name}: mutmut over {', '.join(module.mutate)} against {', '.join(module.tests)}", flush=True)
        log = work / "mutmut.log"
        start = time.monotonic()
        chosen: list[str] | None = None
        if sample is not None:
            made = subprocess.run([str(PYTHON), "-c", GENERATE], cwd=work, capture_output=True, text=True, check=False)
            if made.returncode != 0:
                sys.exit(f"mutation: {name}: mutmut could not generate the mutants:\n{made.stderr[-3000:]}")
            chosen = draw(list(statuses(work)), sample, seed)
            # The sample, for --recount: the same names whatever seed or size is typed then.
            record = {"module": name, "seed": seed, "size": len(chosen), "names": chosen}
            (work / SAMPLE_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            print(f"mutation: {name}: a sample of {len(chosen)} mutants (seed {seed})", flush=True)
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(PYTHON), "-m", "mutmut", "run", "--max-children", "1", *(chosen or [])],
                cwd=work,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=minutes * 60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                print(f"mutation: {name}: stopped after {minutes:g} minutes; the rest is 'not checked'", flush=True)
        result = summarize(statuses(work), load_equivalent().get(name, {}), chosen)
        if proc.returncode not in (0, -signal.SIGTERM) or result["not checked"] == result["total"]:
            sys.exit(f"mutation: {name}: mutmut failed (exit {proc.returncode}):\n{log.read_text()[-3000:]}")
        result["seconds"] = round(time.monotonic() - start)
        if keep:
            print(
                f"mutation: {name}: the copy is kept in {work}; a survivor's diff: cd {work} && "
                f"{PYTHON} -m mutmut show NAME; after killing survivors, re-run them there "
                f"({PYTHON} -m mutmut run --max-children 1 NAME...), then from this checkout: "
                f"{PYTHON} tools/mutation.py --recount {work} --module {name}",
                flush=True,
            )
        result["mutate"] = list(module.mutate)
        result["tests"] = list(module.tests)
        result["sample"] = {"size": len(chosen), "seed": seed} if chosen is not None else None
        return result


def run_shell(minutes: float) -> dict[str, Any]:
    """Each hand-written node-script mutant alone in one copy of the tree; the tests it names must fail."""
    mutants = yaml.safe_load(SHELL_MUTANTS.read_text())
    killed, survivors = 0, []
    deadline = time.monotonic() + minutes * 60
    baseline: dict[tuple[str, ...], bool] = {}
    with tempfile.TemporaryDirectory(prefix="mlcluster-mutation-shell-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # some node tests run a script as another user, who must reach the copy
        copy_tree(work)
        for mutant in mutants:
            if time.monotonic() > deadline:
                survivors.append(f"{mutant['id']} (not checked: out of time)")
                continue
            target = work / mutant["file"]
            original = target.read_text()
            if original.count(mutant["old"]) != 1:
                sys.exit(f"{SHELL_MUTANTS.name}: {mutant['id']}: 'old' must occur exactly once in {mutant['file']}")
            target.write_text(original.replace(mutant["old"], mutant["new"]))
            try:
                run = run_tests(work, mutant["tests"])
            finally:
                target.write_text(original)
            caught = run.returncode == 1
            if caught and tuple(mutant["tests"]) not in baseline:
                # A failure proves the mutant caught only if the same tests pass on the unmutated copy.
                baseline[tuple(mutant["tests"])] = run_tests(work, mutant["tests"]).returncode == 0
            if caught and not baseline[tuple(mutant["tests"])]:
                sys.exit(f"mutation: shell: {', '.join(mutant['tests'])} fail on the unmutated copy; nothing is proven")
            failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
            print(f"mutation: shell: {mutant['id']}: {'killed' if caught else 'SURVIVED'} {failed[:1]}", flush=True)
            if caught:
                killed += 1
            else:
                survivors.append(f"{mutant['id']} (pytest exit {run.returncode})")
    total = len(mutants)
    return {
        "killed": killed,
        "survived": total - killed,
        "equivalent": 0,
        "not checked": 0,
        "total": total,
        "kill_rate": round(killed / total, 4) if total else None,
        "complete": True,
        "survivors": survivors,
        "stale_equivalents": [],
    }


def run_tests(work: Path, tests: list[str]) -> subprocess.CompletedProcess[str]:
    """The named tests on the copy in ``work``, stopping at the first failure; lint tests left out."""
    return subprocess.run(
        # A lint finding on the planted text is no proof a test would catch the bug: behaviour only (-k).
        [
            str(PYTHON),
            "-m",
            "pytest",
            "-x",
            "-q",
            "-n",
            "0",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *PYTEST_K,
            *tests,
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )


def write_results(new: dict[str, dict[str, Any]]) -> None:
    """Merge this run's modules into ``mutation/results.json`` (modules not run keep their last result)."""
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"modules": {}}
    stamp = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tool": "mutmut",
        "tool_version": metadata.version("mutmut"),
    }
    for name, result in new.items():
        tool = (
            {"tool": "hand-written mutants", "tool_version": "mutation/shell_mutants.yaml"} if name == "shell" else {}
        )
        data["modules"][name] = {**stamp, **tool, **result}
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def table(data: dict[str, Any]) -> str:
    """The kill-rate table `make mutation` and `make bench` print."""
    head = f"{'module':<20} {'mutants':>15} {'killed':>7} {'survived':>9} {'equiv':>6} {'unchecked':>10}"
    lines = [f"{head} {'kill rate (95% interval)':>35}  date"]
    for name, r in data["modules"].items():
        rate = "-" if r["kill_rate"] is None else f"{r['kill_rate']:.1%}"
        if r.get("recounted") and r.get("sample"):
            # The same sample after its survivors were worked on: 100% by construction, no estimate of the module.
            rate += " (same sample, recounted" + (", not finished)" if r["not checked"] else ")")
        elif r.get("interval_95") and not r["not checked"]:
            low, high = r["interval_95"]
            rate += f" ({low:.1%}-{high:.1%})"
        elif r.get("sample"):
            rate += " (sample not finished: no estimate)"  # mutmut ran the cheapest first, not a random part
        elif r["not checked"]:
            rate += " (stopped by time: no estimate)"
        drawn = r.get("sample")
        mutants = f"{r['total']} of {r.get('population', r['total'])}" if drawn else str(r["total"])
        seed = f", sample seed {drawn['seed']}" if drawn else ""
        lines.append(
            f"{name:<20} {mutants:>15} {r['killed']:>7} {r['survived']:>9} {r['equivalent']:>6} {r['not checked']:>10}"
            f" {rate:>35}  {r['date']} ({r['tool']} {r['tool_version']}{seed})"
        )
    return "\n".join(lines)


def recount(name: str, work: Path) -> int:
    """The "after" figure of a kept copy: its statuses now, the same sample, the equivalents recorded now.

    The sample is the one the run wrote into the copy (``SAMPLE_FILE``); a copy of a whole-module run has none.
    """
    if not (work / "mutants").is_dir():
        sys.exit(f"mutation: {work} is not a copy a --keep run left (no mutants/ in it)")
    record_file = work / SAMPLE_FILE
    record = json.loads(record_file.read_text(encoding="utf-8")) if record_file.exists() else None
    if record is not None and record["module"] != name:
        sys.exit(f"mutation: {work} is a copy of module {record['module']!r}, not {name!r}")
    found = statuses(work)
    chosen: list[str] | None = record["names"] if record is not None else None
    seed = record["seed"] if record is not None else 0
    result = summarize(found, load_equivalent().get(name, {}), chosen)
    module = MODULES[name]
    result |= {"mutate": list(module.mutate), "tests": list(module.tests), "recounted": True}
    result["sample"] = {"size": len(chosen), "seed": seed} if chosen is not None else None
    write_results({name: result})
    for survivor in result["survivors"]:
        print(f"  survived: {survivor}")
    print(table(json.loads(RESULTS.read_text())))
    return 1 if result["survived"] or result["stale_equivalents"] or not result["complete"] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=[*MODULES, "shell"], default=[])
    parser.add_argument("--minutes", type=float, default=60.0, help="stop one module after this long (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep each module's copy (to read survivors)")
    parser.add_argument("--sample", type=int, help="run a seeded random sample of this many mutants a module")
    parser.add_argument("--seed", type=int, help="the sample's seed (default 1; only with --sample)")
    parser.add_argument("--report", action="store_true", help="print the last result (mutation/results.json) only")
    parser.add_argument(
        "--recount",
        type=Path,
        metavar="COPY",
        help="count again the copy a --keep run left (its survivors re-run there by name), the same sample",
    )
    args = parser.parse_args()
    if args.report:
        print(table(json.loads(RESULTS.read_text())) if RESULTS.exists() else "no mutation/results.json yet")
        return 0
    if args.recount:
        if len(args.module) != 1 or args.module == ["shell"]:
            sys.exit("mutation: --recount needs exactly one Python --module (the one the copy was made for)")
        return recount(args.module[0], args.recount)
    if args.sample is not None and args.sample < 1:
        sys.exit(f"mutation: --sample {args.sample}: give a number of mutants, 1 or more")
    if args.seed is not None and args.sample is None:
        # A seed alone would run every mutant and say nothing of it: the user meant a sample.
        sys.exit(f"mutation: --seed {args.seed} chooses a sample: give --sample N too (SAMPLE=N SEED={args.seed})")
    if shutil.which("git") is None:
        sys.exit("mutation: git is needed to copy the tree")
    chosen = args.module or [*MODULES, "shell"]
    results: dict[str, dict[str, Any]] = {}
    for name in chosen:
        if name == "shell":
            results[name] = run_shell(args.minutes)
        else:
            results[name] = run_module(
                name, args.minutes, keep=args.keep, sample=args.sample, seed=1 if args.seed is None else args.seed
            )
        write_results({name: results[name]})
        for survivor in results[name]["survivors"]:
            print(f"  survived: {survivor}")
        for stale in results[name]["stale_equivalents"]:
            print(f"  {EQUIVALENT.name} names a mutant that no longer exists: {stale}")
    print(table(json.loads(RESULTS.read_text())))
    bad = [n for n, r in results.items() if r["survived"] or r["stale_equivalents"] or not r["complete"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
