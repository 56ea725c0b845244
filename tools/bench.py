"""`make bench`: synth wall times against the jsii floor, and the pytest run time.

Measured in one run on this machine:
- the pinned ``cdk synth`` for every example environment (one at a time);
- the same CLI synthesizing a one-stack, one-bucket CDK Python app (the
  floor any Python CDK app pays for starting jsii and the CLI);
- their ratio (target <= 2.0);
- the wall time of ``make test``'s pytest run in this checkout (target < 120 s), and its
  CPU time (user + sys of pytest, its workers and everything they ran);
- the wall time of the whole ``make test`` (installs included) in a fresh
  clone of this checkout's HEAD, as CI runs it;
- the last ``make mutation`` result (mutation/results.json: kill rate per module), which bench
  does not rerun (it takes much longer than the rest).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlcluster.config.environment import environment_files

ROOT = Path(__file__).resolve().parent.parent
CDK = ROOT / "node_modules" / ".bin" / "cdk"
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true"}
FLOOR_APP = """
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
app = cdk.App()
s3.Bucket(cdk.Stack(app, "Floor"), "Bucket")
app.synth()
"""


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return elapsed


def main() -> int:
    envs = sorted(p.stem for p in environment_files(ROOT / "environments"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        floor_dir = out / "floor"
        floor_dir.mkdir()
        (floor_dir / "app.py").write_text(FLOOR_APP)
        (floor_dir / "cdk.json").write_text(f'{{"app": "{sys.executable} app.py"}}')
        floor = timed([str(CDK), "synth", "--quiet", "--no-notices", "--output", str(out / "f")], floor_dir)
        times = {
            name: timed(
                [str(CDK), "synth", "**", "--quiet", "--no-notices", "-c", f"env={name}", "--output", str(out / name)],
                ROOT,
            )
            for name in envs
        }
    print(f"{'measurement':<34} {'seconds':>8} {'x floor':>8}")
    print(f"{'jsii floor (1 stack, 1 bucket)':<34} {floor:>8.1f} {1.0:>8.2f}")
    worst = 0.0
    for name, seconds in times.items():
        ratio = seconds / floor
        worst = max(worst, ratio)
        print(f"{'cdk synth ' + name:<34} {seconds:>8.1f} {ratio:>8.2f}")
    cpu_before = children_cpu()
    start = time.perf_counter()
    run = subprocess.run(  # make test's own pytest command (workers, order, TMPDIR), installs already done
        ["make", "--no-print-directory", "pytest", "PYTEST_ARGS=-q -p no:cacheprovider"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    test_seconds = time.perf_counter() - start
    test_cpu = children_cpu() - cpu_before
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else "(no output)"
    print(f"{'pytest (make test suite)':<34} {test_seconds:>8.1f}   {summary}")
    print(f"{'pytest CPU, user + sys':<34} {test_cpu:>8.1f}   (less noisy than wall time on a shared machine)")
    fresh_seconds, fresh_summary = fresh_clone_make_test()
    print(f"{'make test, fresh clone (installs)':<34} {fresh_seconds:>8.1f}   {fresh_summary}")
    print(f"worst synth/floor ratio: {worst:.2f} (target <= 2.0) {'OK' if worst <= 2.0 else 'OVER TARGET'}")
    print(f"pytest: {test_seconds:.1f} s (target < 120 s) {'OK' if test_seconds < 120 else 'OVER TARGET'}")
    print("last make mutation (mutation/results.json):")
    subprocess.run([sys.executable, str(ROOT / "tools" / "mutation.py"), "--report"], cwd=ROOT, check=False)
    return run.returncode


def children_cpu() -> float:
    """User plus system CPU seconds of every finished child process of this one (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fresh_clone_make_test() -> tuple[float, str]:
    """Clone HEAD into a temporary folder and time ``make test`` there, installs included, as CI does."""
    with tempfile.TemporaryDirectory() as tmp:
        # A clone anyone can traverse, like a checkout under /tmp or a home: the fake-node tests run
        # scripts of the checkout as unprivileged users (TemporaryDirectory makes its folder 0700).
        Path(tmp).chmod(0o755)
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        start = time.perf_counter()
        run = subprocess.run(
            ["make", "test"], cwd=clone, env={**ENV, "CI": "true"}, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
    passed = re.findall(r"^=*\s*(\d+ passed.*?)\s*=*$", run.stdout, flags=re.MULTILINE)
    summary = passed[-1] if passed else f"exit {run.returncode}: {run.stdout[-300:]}{run.stderr[-300:]}"
    return seconds, summary


if __name__ == "__main__":
    sys.exit(main())
