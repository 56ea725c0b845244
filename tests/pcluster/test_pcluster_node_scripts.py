"""The ParallelCluster node scripts, run against a scratch root with stub system commands.

The stubs stand in for package managers, systemd, the AWS CLI, curl, git and
friends: they log every call and keep just enough state (installed packages,
enabled and running services) for the scripts' idempotency checks. Real
coreutils, tar and make run as usual, so files land under the scratch root.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config.schema import ConfigError
from mlcluster.lifecycle.collector import COLLECTOR_DIR
from mlcluster.lifecycle.exporters import EXPORTER_FILES, EXPORTERS_DIR
from mlcluster.lifecycle.hyperpod.plan import HEALTH_EXPECTATIONS
from mlcluster.lifecycle.pcluster import (
    HEALTH_CHECK_PROGRAM,
    HEALTH_TOOL,
    NODE_SCRIPT_FILES,
    PCLUSTER_DIR,
    STEPS,
    SUPPORT_FILES,
    node_files,
)
from mlcluster.pcluster.checks import check_node_scripts
from mlcluster.pcluster.render import head_node_steps, login_node_steps, queue_steps, render_cluster_config
from tests.lifecycle.pcluster_sandbox import LISTED, manifest_args
from tests.lifecycle.pcluster_sandbox import STUBS as SANDBOX_STUBS
from tests.pcluster.pcluster_support import inputs, pcluster
from tests.support import ROOT

SHELLCHECK = ROOT / ".venv" / "bin" / "shellcheck"
#: The uploaded files that are shell scripts.
SHELL_SCRIPTS = sorted(name for name in NODE_SCRIPT_FILES if name.endswith(".sh"))

LOG = 'printf "%s\\n" "${0##*/} $*" >>"$STUB_LOG"\n'

STUBS: dict[str, str] = {
    "rpm": '[[ "$1" == -q ]] && grep -qxF -- "$2" "$STUB_STATE/pkgs" 2>/dev/null\n',
    "dpkg-query": 'name="${*: -1}"\ngrep -qxF -- "$name" "$STUB_STATE/pkgs" 2>/dev/null && echo "install ok installed"\n'
    "exit 0\n",
    "dpkg": "echo amd64\n",
    "dnf": """skip=0
for a in "$@"; do
  if ((skip)); then skip=0; continue; fi
  case "$a" in
    -o) skip=1 ;;
    -*|install|update) ;;
    *)
      name="${a##*/}"
      case "$name" in *.rpm|*.deb) name="${name%.*}" ;; esac
      if [[ -n "${STUB_FAIL_PACKAGE:-}" && "$name" == "$STUB_FAIL_PACKAGE" ]]; then
        echo "stub: no package $name" >&2
        exit 1
      fi
      echo "$name" >>"$STUB_STATE/pkgs"
      ;;
  esac
done
""",
    "systemctl": SANDBOX_STUBS["systemctl"],  # the same unit bookkeeping as the fake-node harness
    "groupadd": 'echo "$1:x:990:" >>"$MLCLUSTER_ROOT/etc/group"\n',
    "usermod": """group="$2" user="$3"
sed -i -e "/^${group}:.*:$/ s/$/${user}/" -e "t" -e "/^${group}:/ s/$/,${user}/" "$MLCLUSTER_ROOT/etc/group"
""",
    "aws": 'src="${*: -2:1}"\ncp "$STUB_S3_DIR/${src##*/}" "${*: -1}"\n',
    "curl": """out="" url="${*: -1}"
while (($#)); do [[ "$1" == -o ]] && out="$2"; shift; done
[[ -n "${STUB_FAIL_URL:-}" && "$url" == *"$STUB_FAIL_URL"* ]] && exit 22
if [[ -f "$STUB_DOWNLOADS/${url##*/}" ]]; then cp "$STUB_DOWNLOADS/${url##*/}" "$out"
else echo "downloaded from $url" >"$out"; fi
""",
    "gpg": 'cp "${*: -1}" "${*: -2:1}"\n',
    "git": """dir="${*: -1}"
mkdir -p "$dir"
printf 'all:\\n\\t@echo built pyxis\\ninstall:\\n\\tinstall -d $(DESTDIR)$(prefix)/lib/slurm\\n\\ttouch $(DESTDIR)$(prefix)/lib/slurm/spank_pyxis.so\\n' >"$dir/Makefile"
""",
    "scontrol": "",
    "ldconfig": "",
    "sleep": "",
}
STUBS["yum"] = STUBS["dnf"]
STUBS["apt-get"] = STUBS["dnf"]


class Node:
    """A scratch root, stub commands and the environment to run the node scripts in."""

    def __init__(self, base: Path, *, os_release: str, user: str, gpu: bool) -> None:
        self.root = base / "root"
        self.bin = base / "bin"
        self.state = base / "state"
        self.downloads = base / "downloads"
        self.stub_log = base / "calls.log"
        for folder in (self.root / "etc", self.bin, self.state, self.downloads):
            folder.mkdir(parents=True, exist_ok=True)
        (self.root / "etc" / "os-release").write_text(os_release)
        (self.root / "etc" / "passwd").write_text(
            f"root:x:0:0::/root:/bin/bash\n{user}:x:1000:1000::/home/{user}:/bin/bash\n"
        )
        (self.root / "etc" / "group").write_text(f"root:x:0:\n{user}:x:1000:\n")
        stubs = dict(STUBS)
        if gpu:
            stubs["nvidia-smi"] = ""
        for name, body in stubs.items():
            path = self.bin / name
            path.write_text("#!/bin/bash\n" + LOG + LISTED + body)
            path.chmod(0o755)
        self.extra_env: dict[str, str] = {}

    def add(self, relative: str, content: str = "", executable: bool = False) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if executable:
            path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    def run(self, *args: str, source: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.root),
            "MLCLUSTER_ROOT": str(self.root),
            "MLCLUSTER_RETRY_ATTEMPTS": "2",
            "MLCLUSTER_RETRY_DELAY": "0",
            "STUB_LOG": str(self.stub_log),
            "STUB_STATE": str(self.state),
            "STUB_DOWNLOADS": str(self.downloads),
            "STUB_S3_DIR": str(PCLUSTER_DIR),
            **self.extra_env,
        }
        manifest = manifest_args(Path(self.extra_env.get("STUB_S3_DIR", PCLUSTER_DIR)))  # the files as uploaded
        command = ["bash", str(PCLUSTER_DIR / "run.sh"), "--source", source or str(PCLUSTER_DIR), *manifest, *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)

    def calls(self) -> list[str]:
        return self.stub_log.read_text().splitlines() if self.stub_log.exists() else []

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()

    def tree(self) -> dict[str, str]:
        """Every file under the root (logs aside) with a hash of its content and its mode."""
        out = {}
        for path in sorted(self.root.rglob("*")):
            relative = str(path.relative_to(self.root))
            if path.is_file() and not relative.startswith("var/log/"):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[relative] = f"{digest} {oct(path.stat().st_mode)}"
            elif path.is_dir():
                out[relative + "/"] = oct(path.stat().st_mode)
        return out

    def started_steps(self) -> list[str]:
        lines = self.text("var/log/mlcluster/run.log").splitlines()
        return [line.split("step ")[1].split(":")[0] for line in lines if line.endswith(": starting")]


AMAZON_LINUX = 'NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2023"\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'

MakeNode = Callable[..., Node]


@pytest.fixture
def make_node(tmp_path: Path) -> MakeNode:
    def make(*, os_release: str = AMAZON_LINUX, user: str = "ec2-user", gpu: bool = True, ami: bool = True) -> Node:
        node = Node(tmp_path, os_release=os_release, user=user, gpu=gpu)
        (node.root / "scratch").mkdir()
        if ami:  # what a ParallelCluster AMI brings: EFA, bundled aws-ofi-nccl, Pyxis
            node.add("opt/amazon/efa/bin/fi_info", "#!/bin/sh\n", executable=True)
            node.add("opt/amazon/efa/lib64/libfabric.so.1")
            node.add("opt/amazon/ofi-nccl/lib/libnccl-net.so")
            node.add("opt/slurm/lib/slurm/spank_pyxis.so")
        return node

    return make


def test_shellcheck_clean() -> None:
    scripts = sorted(p.name for p in PCLUSTER_DIR.glob("*.sh"))
    assert scripts == SHELL_SCRIPTS
    proc = subprocess.run(
        [str(SHELLCHECK), "-x", *scripts], cwd=PCLUSTER_DIR, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("folder", [EXPORTERS_DIR, COLLECTOR_DIR], ids=["exporters", "collector"])
def test_shared_node_scripts_are_shellcheck_clean(folder: Path) -> None:
    """The files both backends upload from the shared folders."""
    scripts = sorted(str(p) for p in folder.glob("*.sh"))
    assert scripts
    proc = subprocess.run([str(SHELLCHECK), "-x", *scripts], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_the_shared_exporter_units_need_neither_backends_lib() -> None:
    """exporter_units.sh only prints text: sourced in a bare shell, every unit comes out whole."""
    calls = (
        "node_exporter_unit 1.8.2 /opt/mlcluster/node_exporter-1.8.2; textfile_service_unit efa 'EFA port counters'"
        " AF_UNIX; textfile_timer_unit efa 'EFA port counters'; dcgm_exporter_unit 995:995 image@sha256:0;"
        " neuron_monitor_unit /opt/mlcluster/python/w.whl /opt/aws/neuron/bin"
    )
    script = f'set -euo pipefail; . "{EXPORTERS_DIR}/exporter_units.sh"; {calls}'
    proc = subprocess.run(["env", "-i", "bash", "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    units = proc.stdout
    # The node exporter, the textfile service and neuron-monitor (the timer runs nothing; DCGM runs in Docker).
    assert units.count("User=mlc-exporter") == 3
    assert units.count("CapabilityBoundingSet=\n") == 3
    assert "ExecStart=/opt/mlcluster/bin/mlcluster-efa-metrics /var/lib/mlcluster-exporters/textfile" in units
    assert "--user 995:995 --cap-drop ALL" in units and "image@sha256:0 -f /etc/dcgm-exporter/mlcluster.csv" in units
    assert "/opt/aws/neuron/bin/neuron-monitor | /usr/bin/python3" in units


def test_run_sh_fetches_the_shared_exporter_files_for_the_exporters_step() -> None:
    match = re.search(r"^readonly EXPORTER_FILES=\(([^)]*)\)", (PCLUSTER_DIR / "run.sh").read_text(), flags=re.M)
    assert match and tuple(match.group(1).split()) == EXPORTER_FILES


def test_lib_helpers_write_text_exactly_once_and_read_os_release(tmp_path: Path) -> None:
    """put_file keeps every byte (trailing newlines too), writes nothing when the file is equal and refuses a
    NUL byte; os_release reads quoted and last lines; log (and run.sh) stamp UTC whatever the node's time zone."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.4"')  # no final newline
    script = f"""set -euo pipefail; . "{PCLUSTER_DIR}/lib.sh"
put_file /etc/x/y.conf 0640 < <(printf 'a\\n\\n  b \\n\\n'); echo "changed=$CHANGED"
cp -p "$MLCLUSTER_ROOT/etc/x/y.conf" "$MLCLUSTER_ROOT/first"
CHANGED=0; put_file /etc/x/y.conf 0640 < <(printf 'a\\n\\n  b \\n\\n'); echo "changed=$CHANGED"
put_file /etc/x/y.conf 0640 < <(printf 'a\\n'); echo "changed=$CHANGED"
echo "id=$(os_release ID) version=$(os_release VERSION_ID) none=$(os_release NOPE)"
log hello
printf 'a\\0b' | put_file /etc/x/z.conf 0644"""
    env = {"PATH": "/usr/bin:/bin", "MLCLUSTER_ROOT": str(root), "TZ": "Asia/Tokyo"}
    before = subprocess.run(["date", "-u", "+%Y-%m-%dT%H"], capture_output=True, text=True, check=True).stdout
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    run = subprocess.run(
        ["bash", str(PCLUSTER_DIR / "run.sh"), "--role", "worker", "--source", str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["changed=1", "changed=0", "changed=1", "id=rocky version=9.4 none="]
    assert (root / "first").read_bytes() == b"a\n\n  b \n\n"
    assert (root / "etc/x/y.conf").read_bytes() == b"a\n"
    assert oct(stat.S_IMODE((root / "etc/x/y.conf").stat().st_mode)) == "0o640"
    assert [p.name for p in (root / "etc/x").iterdir()] == ["y.conf"]  # no temporary file left, z.conf refused
    assert proc.stderr.count("wrote /etc/x/y.conf") == 2
    assert "put_file /etc/x/z.conf: the content has a NUL byte (text only)" in proc.stderr
    after = subprocess.run(["date", "-u", "+%Y-%m-%dT%H"], capture_output=True, text=True, check=True).stdout
    utc = f"(?:{before.strip()}|{after.strip()})"  # the hour in UTC (either side of a turn of the hour)
    (hello,) = [line for line in proc.stderr.splitlines() if line.endswith("[node-scripts] hello")]
    assert re.fullmatch(rf"{utc}:\d\d:\d\dZ \[node-scripts\] hello", hello), hello
    assert run.returncode == 1
    assert re.fullmatch(rf"{utc}:\d\d:\d\dZ \[run\] ERROR: --role must be .*", run.stderr.strip()), run.stderr


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_bash_syntax(script: str) -> None:
    proc = subprocess.run(["bash", "-n", str(PCLUSTER_DIR / script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_failing_step_stops_the_run_and_is_named(make_node: MakeNode) -> None:
    node = make_node()
    node.extra_env["STUB_FAIL_PACKAGE"] = "docker"
    proc = node.run("--role", "compute", "docker", "enroot_pyxis", "nccl_efa")
    assert proc.returncode == 1
    assert "step 'docker' failed with exit code 1; see /var/log/mlcluster/docker.log" in proc.stderr
    assert "giving up after 2 attempts" in proc.stderr  # the tail of the step's log
    assert node.started_steps() == ["docker"]
    assert not (node.root / "etc/enroot").exists()


def test_pyxis_without_slurm_headers_fails_clearly(make_node: MakeNode) -> None:
    node = make_node(ami=False)
    (node.state / "pkgs").write_text("enroot\n")
    proc = node.run("--role", "compute", "enroot_pyxis")
    assert proc.returncode == 1
    assert "step 'enroot_pyxis' failed" in proc.stderr
    assert "Slurm headers (/opt/slurm/include)" in node.text("var/log/mlcluster/enroot_pyxis.log")


def test_nccl_needs_efa(make_node: MakeNode) -> None:
    node = make_node(ami=False)
    proc = node.run("--role", "compute", "nccl_efa")
    assert proc.returncode == 1
    assert "step 'nccl_efa' failed" in proc.stderr
    assert "the EFA software is not installed" in node.text("var/log/mlcluster/nccl_efa.log")


def test_network_failures_are_retried_then_reported(make_node: MakeNode) -> None:
    node = make_node(ami=False)
    node.add("opt/amazon/efa/bin/fi_info", "#!/bin/sh\n", executable=True)
    node.add("opt/amazon/efa/lib/libfabric.so.1")
    (node.root / "usr/local/cuda").mkdir(parents=True)
    node.extra_env["STUB_FAIL_URL"] = "aws-ofi-nccl"
    proc = node.run("--role", "compute", "nccl_efa")
    assert proc.returncode == 1
    assert len([c for c in node.calls() if c.startswith("curl ")]) == 2
    assert [c for c in node.calls() if c.startswith("sleep ")] == ["sleep 0"]


def test_scripts_come_from_s3(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    node.extra_env["MLCLUSTER_STEPS"] = "docker"
    proc = node.run("--role", "login", source="s3://node-scripts/pcluster/")
    assert proc.returncode == 0, proc.stderr
    copied = [c.split()[-2] for c in node.calls() if c.startswith("aws s3 cp")]
    assert copied == [f"s3://node-scripts/pcluster/{name}" for name in (*SUPPORT_FILES, "docker.sh")]
    assert (node.root / "opt/mlcluster/node-scripts/docker.sh").read_text() == (PCLUSTER_DIR / "docker.sh").read_text()
    assert node.started_steps() == ["docker"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--role", "compute", "podman"],
            "unknown step 'podman'; allowed: docker docker_group enroot_pyxis nccl_efa neuron",
        ),
        (["--role", "worker", "docker"], "--role must be head, compute or login (got 'worker')"),
    ],
)
def test_bad_arguments_are_named(make_node: MakeNode, args: list[str], message: str) -> None:
    node = make_node()
    proc = node.run(*args)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert node.calls() == []


def test_unknown_operating_system(make_node: MakeNode) -> None:
    node = make_node(os_release='ID="sles"\nVERSION_ID="15"\n')
    proc = node.run("--role", "compute", "docker")
    assert proc.returncode == 1
    assert "unsupported operating system 'sles'" in node.text("var/log/mlcluster/docker.log")


DOCKER_GROUP_QUEUES = """
queues:
  - name: train
    compute_resources:
      - name: gpu
        instance_type: p5.48xlarge
login_nodes: {}
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("", ["docker", "enroot_pyxis"]),
        ("docker_group: false", ["docker", "enroot_pyxis"]),
        ("docker_group: true", ["docker", "docker_group", "enroot_pyxis"]),
    ],
)
def test_docker_group_step_only_when_the_file_asks(setting: str, expected: list[str]) -> None:
    cfg = pcluster(DOCKER_GROUP_QUEUES + f"node_scripts: {{{setting}}}\n")
    assert head_node_steps(cfg) == expected
    assert login_node_steps(cfg) == expected
    assert queue_steps(cfg, cfg.queues[0]) == [*expected, "nccl_efa", "health_check"]


def test_docker_group_is_announced_as_root_equivalent() -> None:
    on = [f for f in check_node_scripts(pcluster(DOCKER_GROUP_QUEUES + "node_scripts: {docker_group: true}\n"))]
    assert [(f.level, f.path) for f in on] == [("warning", "cluster.pcluster.node_scripts.docker_group")]
    assert "docker group members are root there" in on[0].message
    assert check_node_scripts(pcluster(DOCKER_GROUP_QUEUES)) == []


def test_docker_group_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        pcluster(DOCKER_GROUP_QUEUES + "node_scripts: {docker_group: sometimes}\n")
    assert "node_scripts.docker_group" in str(caught.value)


@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        ("version: 3.10.1\n", True),
        ("version: 3.11.0\n", False),
        ("version: 3.10.1\nnode_scripts: {docker_enroot_pyxis: false}\n", False),
        ("version: 3.10.1\ncustom_ami: ami-0123456789abcdef0\n", False),
    ],
)
def test_enroot_needs_a_parallelcluster_311_ami(settings: str, warned: bool) -> None:
    found = [f for f in check_node_scripts(pcluster(DOCKER_GROUP_QUEUES + settings)) if f.path.endswith(".version")]
    assert bool(found) == warned
    if warned:
        assert found[0].level == "warning" and "AMIs carry no Enroot (it ships from 3.11)" in found[0].message


# ---------------------------------------------------------------- the manifest run.sh checks


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    """A fake node-script bucket: a folder holding what the stack uploads (the stub aws cp reads it)."""
    folder = tmp_path / "bucket"
    folder.mkdir()
    for path in PCLUSTER_DIR.glob("*.sh"):
        shutil.copy2(path, folder / path.name)
    return folder


def rendered_config() -> dict[str, Any]:
    """A cluster configuration with one queue, a login pool and Prometheus, from the bucket ``node-scripts``."""
    return render_cluster_config(
        pcluster("queues: [{name: q, compute_resources: [{name: c, instance_type: m5.large}]}]\nlogin_nodes: {}\n"),
        inputs(
            node_script_bucket="node-scripts",
            exporters=True,
            collector_policy_arn="arn:aws:iam::123456789012:policy/parallelcluster/collector",
        ),
    )


def rendered_args(steps: tuple[str, ...]) -> list[str]:
    """``--role compute`` and the ``--sha256`` arguments the deploy renders in a queue for the files ``steps``
    fetch."""
    action = rendered_config()["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]
    assert action["Script"] == "s3://node-scripts/pcluster/run.sh"
    args = action["Args"]
    by_name = dict(value.split("=", 1) for option, value in itertools.pairwise(args) if option == "--sha256")
    return ["--role", "compute", *[x for name in node_files(steps) for x in ("--sha256", f"{name}={by_name[name]}")]]


def run_from_bucket(
    node: Node, bucket: Path, *args: str, steps: tuple[str, ...] = ("docker",)
) -> subprocess.CompletedProcess[str]:
    node.extra_env["STUB_S3_DIR"] = str(bucket)
    command = ["bash", str(PCLUSTER_DIR / "run.sh"), "--source", "s3://node-scripts/pcluster/", *args, *steps]
    env = {
        "PATH": f"{node.bin}:/usr/bin:/bin",
        "HOME": str(node.root),
        "MLCLUSTER_ROOT": str(node.root),
        "MLCLUSTER_RETRY_ATTEMPTS": "2",
        "MLCLUSTER_RETRY_DELAY": "0",
        "STUB_LOG": str(node.stub_log),
        "STUB_STATE": str(node.state),
        "STUB_DOWNLOADS": str(node.downloads),
        **node.extra_env,
    }
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_rendered_manifest_lets_the_uploaded_scripts_run(make_node: MakeNode, bucket: Path) -> None:
    """The digests the deploy renders are those of the files the stack uploads: an untouched bucket runs."""
    node = make_node(gpu=False)
    proc = run_from_bucket(node, bucket, *rendered_args(("docker",)))
    assert proc.returncode == 0, proc.stderr
    assert node.started_steps() == ["docker"]
    scripts = node.root / "opt/mlcluster/node-scripts"
    assert sorted(p.name for p in scripts.iterdir()) == sorted(node_files(("docker",)))
    assert (scripts.stat().st_uid, stat.S_IMODE(scripts.stat().st_mode)) == (0, 0o755)


CANARY = 'touch "$MLCLUSTER_ROOT/canary"\n'


@pytest.mark.parametrize("name", ["docker.sh", "lib.sh", "pins.sh"])
def test_a_file_changed_in_the_bucket_is_refused_before_anything_runs(
    make_node: MakeNode, bucket: Path, name: str
) -> None:
    """Today's bucket policy is the only guard of what run.sh runs as root; now the digests in the
    configuration are: a changed step or support file stops the run before any step."""
    node = make_node(gpu=False)
    args = rendered_args(("docker",))
    with (bucket / name).open("a") as changed:
        changed.write(CANARY)
    proc = run_from_bucket(node, bucket, *args)
    assert proc.returncode == 1
    assert not (node.root / "canary").exists()
    assert f"checksum mismatch for {name}" in proc.stderr, proc.stderr
    assert "refusing to run" in proc.stderr
    assert "step docker: starting" not in node.text("var/log/mlcluster/run.log")
    assert not (node.root / "opt/mlcluster/node-scripts").exists()
    assert not list((node.root / "opt/mlcluster").glob("node-scripts.new.*"))  # the staging folder went


@pytest.mark.parametrize("kind", ["group-writable", "world-writable sticky", "link"])
def test_a_folder_others_could_write_above_the_checked_copy_is_refused(
    make_node: MakeNode, bucket: Path, tmp_path: Path, kind: str
) -> None:
    """/opt/mlcluster holds the checked copy until it runs: if others could write it they could swap the copy,
    so run.sh refuses before fetching anything. A folder of root's, 0755, is the edge that runs."""
    node = make_node(gpu=False)
    args = rendered_args(("docker",))
    parent = node.root / "opt/mlcluster"
    if kind == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o755)
        parent.parent.mkdir(parents=True, exist_ok=True)
        parent.symlink_to(elsewhere)
    else:
        parent.mkdir(parents=True, exist_ok=True)
        parent.chmod(0o775 if kind == "group-writable" else 0o1777)
    proc = run_from_bucket(node, bucket, *args)
    assert proc.returncode == 1, proc.stderr
    assert "must be a folder of uid" in proc.stderr and "refusing to run" in proc.stderr
    assert not list(parent.glob("node-scripts*"))
    assert "step docker: starting" not in node.text("var/log/mlcluster/run.log")
    if kind != "link":
        parent.chmod(0o755)
        ok = run_from_bucket(node, bucket, *args)
        assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("kind", ["group-writable", "world-writable sticky", "link", "another user's"])
def test_a_log_folder_others_could_write_is_refused_before_anything_is_written(
    make_node: MakeNode, bucket: Path, tmp_path: Path, kind: str
) -> None:
    """/var/log/mlcluster gets root's run log, step logs and lock: a folder another user could write (or a link to
    one) would let them plant a link that root writes through. run.sh refuses before writing anything there,
    and a folder of root's, 0755, is the edge that runs."""
    node = make_node(gpu=False)
    args = rendered_args(("docker",))
    logs = node.root / "var/log/mlcluster"
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    if kind == "link":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o755)
        (elsewhere / "run.log").symlink_to(victim)
        logs.parent.mkdir(parents=True, exist_ok=True)
        logs.symlink_to(elsewhere)
    else:
        logs.mkdir(parents=True, exist_ok=True)
        logs.chmod({"group-writable": 0o775, "world-writable sticky": 0o1777}.get(kind, 0o755))
        if kind == "another user's":
            os.chown(logs, 2001, 2001)
        for name in ("run.log", "run.lock", "docker.log"):
            (logs / name).symlink_to(victim)
    proc = run_from_bucket(node, bucket, *args)
    assert proc.returncode == 1, proc.stderr
    assert "var/log/mlcluster must be a folder of uid 0" in proc.stderr and "refusing to run" in proc.stderr
    assert victim.read_text() == "root's file\n"
    assert not (node.root / "opt/mlcluster/node-scripts").exists()
    assert node.started_steps() == []
    if kind != "link":
        for name in ("run.log", "run.lock", "docker.log"):
            (logs / name).unlink()
        os.chown(logs, 0, 0)
        logs.chmod(0o755)
        ok = run_from_bucket(node, bucket, *args)
        assert ok.returncode == 0, ok.stderr
        assert victim.read_text() == "root's file\n"


def test_the_log_folder_run_sh_makes_under_a_group_writable_umask_is_accepted(
    make_node: MakeNode, bucket: Path
) -> None:
    """Root's umask may be 0002: the folders run.sh makes itself and then checks (the log folder, /opt/mlcluster
    above the checked copy) must still be 0755, or its own checks refuse every run."""
    node = make_node(gpu=False)
    logs = node.root / "var/log/mlcluster"
    assert not logs.exists()
    previous = os.umask(0o002)
    try:
        proc = run_from_bucket(node, bucket, *rendered_args(("docker",)))
    finally:
        os.umask(previous)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(logs.stat().st_mode) == 0o755
    assert stat.S_IMODE((node.root / "opt/mlcluster").stat().st_mode) == 0o755
    assert node.started_steps() == ["docker"]


def test_the_run_lock_is_opened_for_appending(make_node: MakeNode, bucket: Path) -> None:
    """run.sh takes its lock on /var/log/mlcluster/run.lock without truncating what is there (``>>``, not ``>``)."""
    node = make_node(gpu=False)
    node.add("var/log/mlcluster/run.lock", "kept\n")
    (node.root / "var/log/mlcluster").chmod(0o755)
    proc = run_from_bucket(node, bucket, *rendered_args(("docker",)))
    assert proc.returncode == 0, proc.stderr
    assert node.text("var/log/mlcluster/run.lock") == "kept\n"


def test_a_missing_file_or_manifest_entry_is_refused(make_node: MakeNode, bucket: Path) -> None:
    node = make_node(gpu=False)
    args = rendered_args(("docker",))
    (bucket / "user_dirs.sh").unlink()
    proc = run_from_bucket(node, bucket, *args)
    assert proc.returncode == 1
    assert "cannot download s3://node-scripts/pcluster/user_dirs.sh" in proc.stderr
    shutil.copy2(PCLUSTER_DIR / "user_dirs.sh", bucket / "user_dirs.sh")
    # No digest for docker.sh (an older configuration, or one not rendered by mlcluster): refused.
    at = next(i for i, a in enumerate(args) if a.startswith("docker.sh="))
    without = args[: at - 1] + args[at + 1 :]
    proc = run_from_bucket(node, bucket, *without)
    assert proc.returncode == 1
    assert "docker.sh has no --sha256 in the arguments" in proc.stderr
    proc = run_from_bucket(node, bucket, *args[:-1], "docker.sh=" + "0" * 63)
    assert proc.returncode == 1
    assert "is not NAME=HEX" in proc.stderr
    assert not (node.root / "opt/mlcluster/node-scripts").exists()


def test_an_extra_file_never_reaches_the_folder_the_steps_run_from(make_node: MakeNode, bucket: Path) -> None:
    """An object the configuration does not name is never fetched, and the steps' folder is rebuilt from the
    checked files alone: what an earlier run (or anyone) left there is gone."""
    node = make_node(gpu=False)
    (bucket / "evil.sh").write_text(CANARY)
    node.add("opt/mlcluster/node-scripts/evil.sh", CANARY, executable=True)
    node.add("opt/mlcluster/node-scripts/lib.sh", CANARY)
    proc = run_from_bucket(node, bucket, *rendered_args(("docker",)))
    assert proc.returncode == 0, proc.stderr
    assert not any("evil.sh" in c for c in node.calls())
    scripts = node.root / "opt/mlcluster/node-scripts"
    assert sorted(p.name for p in scripts.iterdir()) == sorted(node_files(("docker",)))
    assert (scripts / "lib.sh").read_bytes() == (PCLUSTER_DIR / "lib.sh").read_bytes()
    assert not (node.root / "canary").exists()


def test_a_link_in_a_source_folder_is_refused(make_node: MakeNode, bucket: Path) -> None:
    """From a local folder: a file replaced by a link (even to the right content) is refused before any step."""
    node = make_node(gpu=False)
    args = rendered_args(("docker",))
    (bucket / "docker.sh").unlink()
    (bucket / "docker.sh").symlink_to(PCLUSTER_DIR / "docker.sh")
    proc = subprocess.run(
        ["bash", str(PCLUSTER_DIR / "run.sh"), "--source", str(bucket), *args, "docker"],
        env={"PATH": f"{node.bin}:/usr/bin:/bin", "MLCLUSTER_ROOT": str(node.root), "STUB_LOG": str(node.stub_log)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert f"{bucket}/docker.sh is missing or not a regular file (a link is refused)" in proc.stderr
    assert "step docker: starting" not in node.text("var/log/mlcluster/run.log")


def head_and_login_args() -> dict[str, list[str]]:
    """The node-script arguments the deploy renders for the head node and the login pool (no steps)."""
    config = rendered_config()
    out = {}
    for role, section in (("head", config["HeadNode"]), ("login", config["LoginNodes"]["Pools"][0])):
        (action,) = section["CustomActions"]["OnNodeConfigured"]["Sequence"]
        assert action["Script"] == "s3://node-scripts/pcluster/run.sh"
        out[role] = [a for a in action["Args"] if a not in STEPS]
    return out


def test_the_head_node_runs_the_collector_from_the_bucket_with_its_rendered_arguments(
    make_node: MakeNode, bucket: Path
) -> None:
    """The head node's action names no digest (ParallelCluster refuses to update it): run.sh fetches the files,
    the collector's deploy-time configuration included, from the bucket the deploy alone may write."""
    node = make_node(gpu=False)
    args = head_and_login_args()["head"]
    assert args == ["--role", "head", "--source", "s3://node-scripts/pcluster/"]  # the pre-manifest form
    script = (
        'set -euo pipefail; here="$(dirname "${BASH_SOURCE[0]}")"; '
        'cat "$here/collector.yml" "$here/collector_targets.json" >"$MLCLUSTER_ROOT/seen"\n'
    )
    (bucket / "collector.sh").write_text(script)
    for name in ("collector_install.sh", "collector_targets.py"):
        (bucket / name).write_text("# stand-in\n")
    (bucket / "collector.yml").write_text("rendered: 1\n")
    (bucket / "collector_targets.json").write_text("{}\n")
    proc = run_from_bucket(node, bucket, *args, steps=("collector",))
    assert proc.returncode == 0, proc.stderr
    assert node.text("seen") == "rendered: 1\n{}\n"
    scripts = node.root / "opt/mlcluster/node-scripts"
    assert sorted(p.name for p in scripts.iterdir()) == sorted(
        (*node_files(("collector",)), "collector.yml", "collector_targets.json")
    )
    assert "bucket-trusted: no manifest" in node.text("var/log/mlcluster/run.log")
    # A missing file stops the run before any step, as with a manifest.
    (bucket / "collector_targets.json").unlink()
    (node.root / "seen").unlink()
    proc = run_from_bucket(node, bucket, *args, steps=("collector",))
    assert proc.returncode == 1
    assert "cannot download s3://node-scripts/pcluster/collector_targets.json" in proc.stderr
    assert not (node.root / "seen").exists()


def test_the_package_docstring_names_the_head_and_login_arguments_rendered() -> None:
    """The module's prose about the head node and login pools names the options their rendered action has
    (``--role``, ``--source``), and does not claim they run with ``--bucket-trusted``, which is not rendered."""
    import mlcluster.lifecycle.pcluster as package

    doc = " ".join((package.__doc__ or "").split())
    sentence = doc[doc.index("The head node and login pools") :].split(". ")[0]
    rendered = {a for args in head_and_login_args().values() for a in args if a.startswith("--")}
    assert rendered == {"--role", "--source"}
    named = set(re.findall(r"``(--[a-z0-9-]+)``", sentence))
    assert rendered <= named, sentence
    assert not re.search(r"run with ``--bucket-trusted``", doc), sentence


def test_the_login_pool_runs_from_the_bucket_too(make_node: MakeNode, bucket: Path) -> None:
    node = make_node(gpu=False)
    args = head_and_login_args()["login"]
    assert args == ["--role", "login", "--source", "s3://node-scripts/pcluster/"]
    proc = run_from_bucket(node, bucket, *args, steps=("docker",))
    assert proc.returncode == 0, proc.stderr
    assert node.started_steps() == ["docker"]


def test_compute_nodes_cannot_drop_the_manifest(make_node: MakeNode, bucket: Path) -> None:
    """--bucket-trusted is for head and login nodes; with a manifest it is refused too (one or the other)."""
    node = make_node(gpu=False)
    (bucket / "docker.sh").write_text(CANARY)
    proc = run_from_bucket(node, bucket, "--role", "compute", "--bucket-trusted")
    assert proc.returncode == 1
    assert "--bucket-trusted is for head and login nodes" in proc.stderr
    proc = run_from_bucket(node, bucket, "--role", "compute", "docker")  # no manifest at all: not trusted
    assert proc.returncode == 1, proc.stderr
    proc = run_from_bucket(node, bucket, "--role", "head", "--bucket-trusted", *rendered_args(("docker",))[2:])
    assert proc.returncode == 1
    assert "--bucket-trusted takes no --sha256" in proc.stderr
    assert not (node.root / "canary").exists()
    assert not (node.root / "opt/mlcluster/node-scripts").exists()


# -- health_check: the node health tool and Slurm's HealthCheckProgram ------------------------------------


def uploaded(tmp_path: Path) -> Path:
    """The node-script prefix as the stack uploads it: the scripts, and the shared health tool as health.sh."""
    folder = tmp_path / "s3"
    folder.mkdir()
    for path in PCLUSTER_DIR.iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    (folder / "health.sh").write_bytes(HEALTH_TOOL.read_bytes())
    return folder


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [("p5.48xlarge", (8, 32, 0)), ("trn1.32xlarge", (0, 8, 16)), ("c7i.48xlarge", (0, 0, 0))],
)
def test_health_check_step_installs_the_tool_and_the_program(
    make_node: MakeNode, tmp_path: Path, instance_type: str, expected: tuple[int, int, int]
) -> None:
    node = make_node()
    node.extra_env["STUB_S3_DIR"] = str(uploaded(tmp_path))
    (node.downloads / "instance-type").write_text(instance_type)
    (node.downloads / "token").write_text("imds-token")
    proc = node.run("--role", "compute", "health_check", source="s3://node-scripts/pcluster/")
    assert proc.returncode == 0, proc.stderr
    copied = [c.split()[-2] for c in node.calls() if c.startswith("aws s3 cp")]
    assert copied == [f"s3://node-scripts/pcluster/{name}" for name in (*SUPPORT_FILES, "health_check.sh", "health.sh")]
    tool = node.root / "usr/local/bin/mlcluster-health"
    assert tool.read_bytes() == HEALTH_TOOL.read_bytes()
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755
    gpus, efa, neuron = expected
    assert node.text("etc/mlcluster/health.env").splitlines()[1:] == [
        f"MLC_EXPECT_GPUS={gpus}",
        f"MLC_EXPECT_EFA={efa}",
        f"MLC_EXPECT_NEURON={neuron}",
    ]
    program = node.root / HEALTH_CHECK_PROGRAM.lstrip("/")
    assert stat.S_IMODE(program.stat().st_mode) == 0o755
    assert program.read_text().splitlines()[-1] == "exec /usr/local/bin/mlcluster-health --tier quick --drain"
    imds = [c for c in node.calls() if c.startswith("curl ")]
    assert "-X PUT -H X-aws-ec2-metadata-token-ttl-seconds: 60" in imds[0]
    assert imds[0].endswith("http://169.254.169.254/latest/api/token")
    assert "X-aws-ec2-metadata-token: imds-token" in imds[1]
    assert imds[1].endswith("http://169.254.169.254/latest/meta-data/instance-type")
    before = node.tree()
    assert node.run("--role", "compute", "health_check", source="s3://node-scripts/pcluster/").returncode == 0
    assert node.tree() == before


def test_health_check_step_without_imds_warns_and_expects_nothing(make_node: MakeNode, tmp_path: Path) -> None:
    """IMDS not answering leaves the node booting (a failed step fails the bootstrap): no expectations, a warning."""
    node = make_node()
    node.extra_env.update(STUB_S3_DIR=str(uploaded(tmp_path)), STUB_FAIL_URL="meta-data/instance-type")
    proc = node.run("--role", "compute", "health_check", source="s3://node-scripts/pcluster/")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: cannot read this node's instance type from IMDS" in node.text("var/log/mlcluster/health_check.log")
    assert node.text("etc/mlcluster/health.env").splitlines()[1:] == [
        "MLC_EXPECT_GPUS=0",
        "MLC_EXPECT_EFA=0",
        "MLC_EXPECT_NEURON=0",
    ]
    assert (node.root / HEALTH_CHECK_PROGRAM.lstrip("/")).exists()


@pytest.mark.parametrize(
    ("instance_type", "no_efa", "expected"),
    [
        ("p5.48xlarge", "p4de.24xlarge,p5.48xlarge", (8, 0, 0)),
        ("trn1.32xlarge", "trn1.32xlarge", (0, 0, 16)),
        ("p4de.24xlarge", "p4de.24xlarge", (8, 0, 0)),
        # a type that is only a prefix or a suffix of a listed one keeps its EFA
        ("p5.48xlarge", "p5.48xlarge2,xp5.48xlarge", (8, 32, 0)),
    ],
)
def test_health_check_step_expects_no_efa_where_efa_is_off(
    make_node: MakeNode, tmp_path: Path, instance_type: str, no_efa: str, expected: tuple[int, int, int]
) -> None:
    node = make_node()
    node.extra_env["STUB_S3_DIR"] = str(uploaded(tmp_path))
    (node.downloads / "instance-type").write_text(instance_type)
    proc = node.run("--role", "compute", "--no-efa", no_efa, "health_check", source="s3://node-scripts/pcluster/")
    assert proc.returncode == 0, proc.stderr
    gpus, efa, neuron = expected
    assert node.text("etc/mlcluster/health.env").splitlines()[1:] == [
        f"MLC_EXPECT_GPUS={gpus}",
        f"MLC_EXPECT_EFA={efa}",
        f"MLC_EXPECT_NEURON={neuron}",
    ]


def test_health_check_env_for_efa_off_lets_the_tool_skip_efa(make_node: MakeNode, tmp_path: Path) -> None:
    """The written health.env, read by the real tool on a p5 without EFA devices or fi_info: no EFA check fails."""
    node = make_node()
    node.extra_env["STUB_S3_DIR"] = str(uploaded(tmp_path))
    (node.downloads / "instance-type").write_text("p5.48xlarge")
    assert (
        node.run(
            "--role", "compute", "--no-efa", "p5.48xlarge", "health_check", source="s3://node-scripts/pcluster/"
        ).returncode
        == 0
    )
    done = subprocess.run(
        ["bash", str(HEALTH_TOOL), "--tier", "quick", "--expect-gpus", "0"],
        env={"PATH": "/usr/bin:/bin", "MLC_ROOT": str(node.root)},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert [line.split()[1:3] for line in lines if " efa_count " in line or " fi_info " in line] == [
        ["SKIP", "efa_count"],
        ["SKIP", "fi_info"],
    ], done.stdout


def test_run_sh_refuses_a_no_efa_list_that_is_not_instance_types(make_node: MakeNode) -> None:
    node = make_node()
    proc = node.run("--role", "compute", "--no-efa", "p5.48xlarge;reboot", "health_check")
    assert proc.returncode == 1
    assert "--no-efa takes instance types separated by commas (got 'p5.48xlarge;reboot')" in proc.stderr


def test_health_check_step_installs_log_rotation(make_node: MakeNode, tmp_path: Path) -> None:
    """The HyperPod log_rotation rule for /var/log/mlcluster/health.log, on ParallelCluster nodes too."""
    node = make_node()
    node.extra_env["STUB_S3_DIR"] = str(uploaded(tmp_path))
    (node.downloads / "instance-type").write_text("p5.48xlarge")
    assert node.run("--role", "compute", "health_check", source="s3://node-scripts/pcluster/").returncode == 0
    rule = node.text("etc/logrotate.d/mlcluster-health")
    hyperpod = (HEALTH_TOOL.parent / "steps/log_rotation.sh").read_text()
    body = rule.split("\n", 1)[1]
    assert body in hyperpod
    assert body.startswith("/var/log/mlcluster/health.log {\n    size 10M\n")


def test_health_check_step_refuses_an_instance_type_that_is_not_one(make_node: MakeNode, tmp_path: Path) -> None:
    node = make_node()
    node.extra_env["STUB_S3_DIR"] = str(uploaded(tmp_path))
    (node.downloads / "instance-type").write_text("p5.48xlarge; reboot")
    proc = node.run("--role", "compute", "health_check", source="s3://node-scripts/pcluster/")
    assert proc.returncode == 1
    assert "IMDS gave an instance type that is not one" in node.text("var/log/mlcluster/health_check.log")


def test_health_check_step_table_is_the_lifecycle_table() -> None:
    """health_check.sh's expectations are mlcluster.lifecycle.hyperpod.plan.HEALTH_EXPECTATIONS, entry for entry."""
    text = (PCLUSTER_DIR / "health_check.sh").read_text()
    block = re.search(r"^declare -A HEALTH_EXPECTATIONS=\((.*?)^\)", text, flags=re.M | re.S)
    assert block
    table = {
        name: tuple(int(n) for n in counts.split())
        for name, counts in re.findall(r'\[([a-z0-9.-]+)\]="([0-9 ]+)"', block.group(1))
    }
    assert table == HEALTH_EXPECTATIONS


def test_run_sh_fetches_the_health_tool_for_the_health_check_step() -> None:
    match = re.search(r"^readonly HEALTH_FILES=\(([^)]*)\)", (PCLUSTER_DIR / "run.sh").read_text(), flags=re.M)
    assert match and match.group(1).split() == ["health.sh"]
    assert re.search(r"^readonly KNOWN_STEPS=\(([^)]*)\)", (PCLUSTER_DIR / "run.sh").read_text(), flags=re.M)[
        1
    ].split() == list(STEPS)
