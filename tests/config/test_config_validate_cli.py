"""``mlcluster validate``: the checks synth runs, without CDK, same messages and exit codes, fast."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from tests.config.cases import NET

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "environments").glob("*.yaml"))
#: Runs ``mlcluster`` and reports on stderr whether aws-cdk-lib was imported.
PROBE = (
    "import sys\n"
    "from mlcluster.cli.main import main\n"
    "sys.argv = ['mlcluster', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "finally:\n"
    "    print('cdk imported' if 'aws_cdk' in sys.modules else 'cdk not imported', file=sys.stderr)\n"
)


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, check=False, env=env
    )


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_examples_are_valid_without_cdk_in_well_under_a_second_each() -> None:
    # CPU time of the child (interpreter start included), not wall time: the test machine is shared.
    started = cpu_seconds()
    result = run("validate", *map(str, EXAMPLES))
    elapsed = cpu_seconds() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"mlcluster: {len(EXAMPLES)} environment file(s) valid: " + ", ".join(p.stem for p in EXAMPLES) + "\n"
    )
    # The examples warn only where data has no second copy by default (tests/config/test_config_advice.py).
    *warnings, last = result.stderr.splitlines()
    assert last == "cdk not imported"
    assert [(Path(w.split(": ")[2]).name, w.split(": ")[3]) for w in warnings] == [
        ("hyperpod.yaml", "cluster.hyperpod.lifecycle.accounting.mode"),
    ]
    assert elapsed / len(EXAMPLES) < 0.5, f"{elapsed:.2f} s for {len(EXAMPLES)} files"


def test_default_directory_is_environments(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    result = run("validate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_same_message_and_exit_code_as_synth(tmp_path: Path) -> None:
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "dev.yaml").write_text("account: 012345670123\n" + NET, encoding="utf-8")
    (tmp_path / "environments" / "qa.yml").write_text(NET + "network: {}\n", encoding="utf-8")
    validate = run("validate", cwd=tmp_path)
    synth = subprocess.run(
        [sys.executable, str(ROOT / "app.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert validate.returncode == synth.returncode == 1
    assert "Traceback" not in validate.stderr + synth.stderr
    expected = (
        "mlcluster: configuration error\n"
        "environments/dev.yaml: account: 1402433619 is not valid; expected a string; allowed: a 12-digit AWS "
        "account ID, quoted; YAML read the unquoted 012345670123 as the octal number 1402433619; quote it: "
        '"012345670123"\n'
        "environments/qa.yml: network: 'network' is not valid; written twice in one mapping (line 1 "
        "and line 2); keep one\n"
    )
    assert validate.stderr == expected + "cdk not imported\n"
    assert synth.stderr.endswith(expected)


def test_warnings_go_to_stderr_and_exit_0(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(NET + "cluster: {name: x}\n", encoding="utf-8")
    result = run("validate", str(path))
    assert result.returncode == 0
    assert result.stderr == (
        f"mlcluster: warning: {path}: cluster.name: 'x' is set but cluster.backend is none, so nothing uses it\n"
        "cdk not imported\n"
    )


def test_files_with_another_suffix_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "dev.json"
    path.write_text('{"network": {"availability_zone": "us-east-1a"}}', encoding="utf-8")
    result = run("validate", str(path))
    assert result.returncode == 1
    assert result.stderr == (
        f"mlcluster: configuration error\n{path}: (file name): 'dev.json' is not valid; allowed: an environment "
        "file named <name>.yaml or <name>.yml\ncdk not imported\n"
    )


def test_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    result = run("validate", "--environments", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert result.stderr == (
        f"mlcluster: configuration error\n{tmp_path}/nope: (directory): '{tmp_path}/nope' is not valid; "
        "no such directory\ncdk not imported\n"
    )
