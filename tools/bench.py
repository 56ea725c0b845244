"""`make bench`: synth wall times against the jsii floor, and the pytest run time.

Measured in one run on this machine:
- the pinned ``cdk synth`` for every example environment (one at a time);
- the same CLI synthesizing a one-stack, one-bucket CDK Python app (the
  floor any Python CDK app pays for starting jsii and the CLI);
- their ratio (target <= 2.0);
- the wall time of ``make test``'s pytest run.
"""

from __future__ import annotations

import os
import shutil
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
    pytest = shutil.which("pytest", path=str(Path(sys.executable).parent))
    start = time.perf_counter()
    code = subprocess.run(
        [pytest or "pytest", "-q", "-n", "2", "--dist", "loadfile"], cwd=ROOT, env=ENV, check=False
    ).returncode
    test_seconds = time.perf_counter() - start
    print(f"{'pytest (make test suite)':<34} {test_seconds:>8.1f}")
    print(f"worst synth/floor ratio: {worst:.2f} (target <= 2.0) {'OK' if worst <= 2.0 else 'OVER TARGET'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
