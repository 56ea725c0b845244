"""mlcluster-health (health.sh) run by bash on a fake node whose tools print their documented formats."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlcluster.cli.nccl import EFA_DEVICES
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.lifecycle.hyperpod.plan import HEALTH_EXPECTATIONS, health_env
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

DATA = Path(__file__).parent / "data/health"
CLI_DATA = Path(__file__).parents[1] / "cli/transcripts"
HEALTH = HYPERPOD_DIR / "health.sh"

#: journalctl's two output formats (journalctl(1), --output): "short", like a syslog file
#: (``Nov 27 10:02:17 HOST kernel: MESSAGE``), the default; "cat", the message alone. The journal files
#: hold the short form; the stub prints whichever the arguments ask for.
JOURNAL = (
    'case " $* " in *" -o cat "*) sed -E "s/^[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} [^ ]+ kernel: //" "$DATA/$1" ;; '
    '*) cat "$DATA/$1" ;; esac'
)
#: nvidia-smi answers -L and the two --query-gpu calls from files; an old driver rejects the
#: clocks_event_reasons.* names as nvidia-smi does ("is not a valid field to query").
STUBS = {
    "nvidia-smi": """case "$*" in
  -L) cat "$DATA/L" ;;
  *ecc.errors*) cat "$DATA/ecc" ;;
  *clocks_event_reasons*) if [ -e "$DATA/old_driver" ]; then echo 'Field "clocks_event_reasons.hw_slowdown" is not a valid field to query.'; exit 2; fi; cat "$DATA/clocks" ;;
  *clocks_throttle_reasons*) cat "$DATA/clocks" ;;
  *) exit 2 ;;
esac
""",
    "journalctl": f'journal() {{ {JOURNAL}; }}\njournal journal "$@"\n',
    "fi_info": 'cat "$DATA/fi_info"\n',
    "neuron-ls": 'cat "$DATA/neuron_ls"\n',
    "dcgmi": 'cat "$DATA/dcgmi"; [ ! -e "$DATA/dcgmi_fails" ]\n',
    "scontrol": 'printf "%s\\n" "$*" >>"$DATA/scontrol.log"\n',
    "hostname": "echo ip-10-1-4-190\n",
}


@dataclass
class Node:
    """A fake node root, its tools' answers in ``data`` and the stubs on PATH."""

    root: Path
    data: Path
    bin: Path

    def efa(self, count: int) -> None:
        driver = self.root / "sys/bus/pci/drivers/efa"
        driver.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            device = self.root / f"sys/class/infiniband/rdmap{79 + i}s0/device"
            device.mkdir(parents=True)
            (device / "driver").symlink_to(driver)

    def answer(self, name: str, text: str) -> None:
        (self.data / name).write_text(text)

    def run(self, *args: str, memlock: str = "unlimited", **env: str) -> subprocess.CompletedProcess[str]:
        """Run health.sh; ``memlock`` is the soft limit /proc/self/limits shows (proc(5) layout)."""
        limits = self.root / "proc/self/limits"
        limits.parent.mkdir(parents=True, exist_ok=True)
        limits.write_text(
            "Limit                     Soft Limit           Hard Limit           Units     \n"
            "Max open files            1048576              1048576              files     \n"
            f"Max locked memory         {memlock:<20} {memlock:<20} bytes     \n"
        )
        return subprocess.run(
            ["bash", str(HEALTH), *args],
            env={"PATH": f"{self.bin}:/usr/bin:/bin", "MLC_ROOT": str(self.root), "DATA": str(self.data), **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def scontrol(self) -> list[str]:
        log = self.data / "scontrol.log"
        return log.read_text().splitlines() if log.exists() else []


def make_node(tmp_path: Path, instance_type: str) -> Node:
    node = Node(tmp_path / "root", tmp_path / "data", tmp_path / "bin")
    for folder in (node.root / "etc/mlcluster", node.root / "var/log", node.data, node.bin):
        folder.mkdir(parents=True)
    (node.root / "etc/mlcluster/health.env").write_text(health_env(instance_type))
    for name, body in STUBS.items():
        (node.bin / name).write_text("#!/bin/sh\n" + body)
        (node.bin / name).chmod(0o755)
    return node


@pytest.fixture
def p5(tmp_path: Path) -> Node:
    node = make_node(tmp_path, "ml.p5.48xlarge")
    node.answer("L", (DATA / "nvidia_smi_L_p5.txt").read_text())
    node.answer("ecc", (DATA / "nvidia_smi_ecc_ok.csv").read_text())
    node.answer("clocks", (DATA / "nvidia_smi_clocks_ok.csv").read_text())
    node.answer("journal", "Nov 27 09:58:01 ip-10-1-4-190 kernel: Linux version 6.8.0-1024-aws\n")
    node.answer("fi_info", (DATA / "fi_info_p5.txt").read_text())
    node.efa(32)
    return node


def checks(out: str) -> dict[str, str]:
    """check name -> "STATUS severity" from the per-check lines."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] in {"PASS", "FAIL", "SKIP"}:
            found[parts[2]] = f"{parts[1]} {parts[3].rstrip(':')}"
    return found


def test_expectations_match_the_instance_type_tables() -> None:
    """plan.py runs on the node with the standard library: its table must equal the sourced ones."""
    for name, (gpus, efa, neuron) in HEALTH_EXPECTATIONS.items():
        kind = INSTANCE_TYPES[name]
        assert (gpus, neuron) == (
            kind.accelerators if kind.accelerator == "nvidia" else 0,
            kind.accelerators if kind.accelerator == "neuron" else 0,
        ), name
        assert efa == EFA_DEVICES[name], name
    assert set(EFA_DEVICES) <= set(HEALTH_EXPECTATIONS)
    assert health_env("ml.m5.12xlarge").endswith("MLC_EXPECT_GPUS=0\nMLC_EXPECT_EFA=0\nMLC_EXPECT_NEURON=0\n")


def test_healthy_p5_passes_the_quick_tier(p5: Node) -> None:
    result = p5.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert checks(result.stdout) == {
        "gpu_count": "PASS critical",
        "xid": "PASS critical",
        "ecc": "PASS critical",
        "throttle": "PASS warning",
        "efa_count": "PASS critical",
        "fi_info": "PASS critical",
        "memlock": "PASS warning",
        "neuron": "SKIP critical",
    }
    assert result.stdout.splitlines()[-1] == "ip-10-1-4-190: healthy"
    assert p5.scontrol() == []
    assert "PASS fi_info critical: libfabric's efa provider lists 32 devices" in (
        (p5.root / "var/log/mlcluster/health.log").read_text()
    )


def test_broken_p5_fails_critically_and_drains_itself_with_the_reason(p5: Node) -> None:
    p5.answer("L", "".join((DATA / "nvidia_smi_L_p5.txt").read_text().splitlines(keepends=True)[:7]))
    p5.answer("journal", (DATA / "journal_xid79.txt").read_text())
    p5.answer("fi_info", "".join((DATA / "fi_info_p5.txt").read_text().split("provider: efa\n", 2)[2:]))
    (p5.root / "sys/class/infiniband/rdmap79s0/device/driver").unlink()
    result = p5.run("--drain", memlock="8388608", SLURMD_NODENAME="p5-st-p5-1")
    assert result.returncode == 1
    out = result.stdout
    assert "ip-10-1-4-190 FAIL gpu_count critical: 7 of 8 GPUs visible. Action: reboot the node;" in out
    assert "ip-10-1-4-190 FAIL xid critical: Xid 79 since boot. Action: drain the node and replace it" in out
    assert "ip-10-1-4-190 FAIL efa_count critical: 31 of 32 EFA devices." in out
    assert "ip-10-1-4-190 FAIL fi_info critical: libfabric's efa provider lists 31 of 32 devices." in out
    assert "ip-10-1-4-190 FAIL memlock warning: hard locked-memory limit 8388608 bytes" in out
    assert "ip-10-1-4-190: 4 critical, 1 warning" in out
    reason = "mlcluster-health: gpu_count xid efa_count fi_info failed"
    assert p5.scontrol() == [f"update nodename=p5-st-p5-1 state=drain reason={reason}"]
    assert f"ip-10-1-4-190: drained p5-st-p5-1 ({reason})" in out


def test_warnings_do_not_drain(p5: Node) -> None:
    p5.answer("journal", (DATA / "journal_xid13.txt").read_text())
    p5.answer(
        "clocks",
        "0, Not Active, Active, Not Active\n"
        + "".join(f"{i}, Not Active, Not Active, Not Active\n" for i in range(1, 8)),
    )
    p5.answer("ecc", "0, 0, No, Yes\n" + "".join(f"{i}, 0, No, No\n" for i in range(1, 8)))
    (p5.data / "old_driver").touch()  # before driver 535 the fields are clocks_throttle_reasons.*
    result = p5.run("--drain")
    assert result.returncode == 0, result.stdout
    assert checks(result.stdout)["xid"] == "FAIL warning"
    assert "FAIL throttle warning: hardware clock slowdown on GPU 0." in result.stdout
    assert "FAIL ecc warning: row remapping pending on GPU 0. Action: reboot the node" in result.stdout
    assert result.stdout.splitlines()[-1] == "ip-10-1-4-190: 0 critical, 3 warning"
    assert p5.scontrol() == []


def test_uncorrected_ecc_is_critical(p5: Node) -> None:
    p5.answer("ecc", "0, 0, No, No\n1, 2, No, No\n2, [N/A], Yes, No\n")
    result = p5.run()
    assert result.returncode == 1
    assert (
        "FAIL ecc critical: GPU 1 (uncorrected 2, remap failure No) GPU 2 (uncorrected [N/A], remap failure Yes)"
        in result.stdout
    )


def test_deep_tier_runs_dcgm_and_single_node_nccl(p5: Node) -> None:
    p5.answer("dcgmi", (DATA / "dcgmi_diag_fail.txt").read_text())
    (p5.data / "dcgmi_fails").touch()
    nccl = p5.root / "opt/mlcluster/nccl-tests/bin/all_reduce_perf"
    nccl.parent.mkdir(parents=True)
    # the single-node run prints nccl-tests' summary lines (src/util.cu)
    nccl.write_text(
        '#!/bin/sh\necho "$*" >"$DATA/nccl_args"\nprintf "# Out of bounds values : 0 OK\\n# Avg bus bandwidth    : 358.12 \\n"\n'
    )
    nccl.chmod(0o755)
    result = p5.run("--tier", "deep")
    assert result.returncode == 1
    assert (
        "FAIL dcgm_diag critical: dcgmi diag -r 2 failed: Page Retirement/Row Remap: Fail;GPU Memory: Fail - GPU: 3"
        in result.stdout
    )
    assert "PASS nccl_single critical: all_reduce on 8 GPUs: avg bus bandwidth 358.12 GB/s" in result.stdout
    assert (p5.data / "nccl_args").read_text() == "-b 1G -e 4G -f 2 -g 8\n"
    assert "SKIP nccom_single critical" in result.stdout


def test_trn1_counts_neuron_devices_and_skips_the_gpu_checks(tmp_path: Path) -> None:
    node = make_node(tmp_path, "trn1.32xlarge")
    node.answer("neuron_ls", (CLI_DATA / "neuron_ls_trn1.txt").read_text())
    node.answer("journal", "")
    blocks = (DATA / "fi_info_p5.txt").read_text().split("provider: efa\n")[1:9]
    node.answer("fi_info", "".join("provider: efa\n" + block for block in blocks))
    node.efa(8)
    result = node.run()
    assert result.returncode == 0, result.stdout
    found = checks(result.stdout)
    assert found["neuron"] == "PASS critical"
    assert (found["gpu_count"], found["xid"], found["ecc"]) == ("SKIP critical",) * 3
    assert (found["efa_count"], found["fi_info"]) == ("PASS critical", "PASS critical")
    node.answer("neuron_ls", "")
    broken = node.run("--drain")
    assert "FAIL neuron critical: 0 of 16 Neuron devices" in broken.stdout
    assert node.scontrol() == ["update nodename=ip-10-1-4-190 state=drain reason=mlcluster-health: neuron failed"]


@pytest.mark.parametrize("args", [["--tier", "long"], ["--expect-gpus", "eight"], ["--bogus"]])
def test_bad_arguments(p5: Node, args: list[str]) -> None:
    result = p5.run(*args)
    assert result.returncode == 2
    assert "usage: mlcluster-health [--tier quick|deep]" in result.stderr


def test_shellcheck_clean() -> None:
    shellcheck = Path(__file__).parents[2] / ".venv/bin/shellcheck"
    result = subprocess.run([str(shellcheck), str(HEALTH)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_the_operator_commands_inline_copy_runs_without_health_env(p5: Node) -> None:
    """`mlcluster health` sends the script with the instance type's counts; no installed file is needed."""
    from mlcluster.cli.health import health_command
    from mlcluster.cli.smoke import NodeKind

    (p5.root / "etc/mlcluster/health.env").unlink()
    p5.run()  # writes the proc(5) limits file
    command = health_command(NodeKind("p5-group", "ml.p5.48xlarge", efa=True), "quick")
    result = subprocess.run(
        ["bash", "-c", command],
        env={"PATH": f"{p5.bin}:/usr/bin:/bin", "MLC_ROOT": str(p5.root), "DATA": str(p5.data)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ip-10-1-4-190 PASS efa_count critical: 32 EFA devices" in result.stdout
    assert result.stdout.splitlines()[-1] == "ip-10-1-4-190: healthy"


def wrapper_text() -> str:
    """The HealthCheckProgram wrapper install_tools writes (its here-document)."""
    text = (HYPERPOD_DIR / "steps/install_tools.sh").read_text()
    return text.split("mlcluster-health-check\" 755 <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"


def test_wrapper_under_an_empty_environment_finds_the_tools_in_their_install_folders(p5: Node) -> None:
    """slurmd starts HealthCheckProgram with no environment at all: no PATH (slurm.conf(5))."""
    p5.run()  # writes the proc(5) limits file
    homes = {
        "nvidia-smi": "usr/bin",
        "journalctl": "usr/bin",
        "hostname": "usr/bin",
        "fi_info": "opt/amazon/efa/bin",
        "scontrol": "opt/slurm/bin",
    }
    for tool, home in homes.items():
        (p5.root / home).mkdir(parents=True, exist_ok=True)
        (p5.bin / tool).rename(p5.root / home / tool)
    wrapper = p5.root / "usr/local/sbin/mlcluster-health-check"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(wrapper_text().replace("/usr/local/bin/mlcluster-health", f"bash {HEALTH}"))
    p5.answer("fi_info", "".join((DATA / "fi_info_p5.txt").read_text().split("provider: efa\n", 2)[2:]))
    result = subprocess.run(
        ["/usr/bin/env", "-i", f"MLC_ROOT={p5.root}", f"DATA={p5.data}", "/bin/sh", str(wrapper)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "PASS gpu_count critical: 8 GPUs" in result.stdout, result.stdout + result.stderr
    assert "PASS efa_count critical: 32 EFA devices" in result.stdout
    assert "FAIL fi_info critical: libfabric's efa provider lists 31 of 32 devices" in result.stdout
    assert p5.scontrol() == ["update nodename=ip-10-1-4-190 state=drain reason=mlcluster-health: fi_info failed"], (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize(("tool", "check"), [("fi_info", "fi_info"), ("neuron-ls", "neuron")])
def test_a_missing_tool_says_not_found_and_does_not_count_zero_devices(tmp_path: Path, tool: str, check: str) -> None:
    node = make_node(tmp_path, "trn1.32xlarge")
    node.answer("neuron_ls", (CLI_DATA / "neuron_ls_trn1.txt").read_text())
    node.answer("journal", "")
    blocks = (DATA / "fi_info_p5.txt").read_text().split("provider: efa\n")[1:9]
    node.answer("fi_info", "".join("provider: efa\n" + block for block in blocks))
    node.efa(8)
    (node.bin / tool).unlink()
    result = subprocess.run(
        ["/bin/bash", str(HEALTH), "--drain"],
        env={"PATH": str(node.bin), "MLC_ROOT": str(node.root), "DATA": str(node.data)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert f"FAIL {check} warning: {tool} not found (PATH=" in result.stdout, result.stdout + result.stderr
    assert " 0 of " not in result.stdout
    assert node.scontrol() == []


def test_libfabric_2_lists_every_device_twice_and_still_counts_32(p5: Node) -> None:
    """libfabric >= 2.1 returns an efa-direct and an efa entry per device; distinct domains count."""
    p5.answer("fi_info", (DATA / "fi_info_p5_libfabric2.txt").read_text())
    result = p5.run()
    assert "PASS fi_info critical: libfabric's efa provider lists 32 devices" in result.stdout, result.stdout
    assert result.returncode == 0


def test_xid_94_is_a_warning_and_48_is_critical(p5: Node) -> None:
    line = "Nov 27 10:02:11 ip-10-1-4-190 kernel: NVRM: Xid (PCI:0000:53:00): {code}, pid=4121, name=python\n"
    p5.answer("journal", line.format(code=94))
    result = p5.run("--drain")
    assert "FAIL xid warning: Xid 94 since boot" in result.stdout, result.stdout
    assert result.returncode == 0 and p5.scontrol() == []
    p5.answer("journal", line.format(code=48))
    (p5.root / "var/lib/mlcluster/health-xid-since").unlink()
    assert "FAIL xid critical: Xid 48 since boot" in p5.run().stdout


def test_the_periodic_check_counts_only_xids_after_its_last_run(p5: Node) -> None:
    """An Xid 79 drains the node once; after a reset and resume the old kernel line must not drain it again."""
    journal_stub = (
        'printf "%s\\n" "$*" >>"$DATA/journal.args"\n'
        f"journal() {{ {JOURNAL}; }}\n"
        'case "$*" in *--since*) journal journal_new "$@" ;; *) journal journal "$@" ;; esac\n'
    )
    (p5.bin / "journalctl").write_text("#!/bin/sh\n" + journal_stub)
    p5.answer("journal", (DATA / "journal_xid79.txt").read_text())
    p5.answer("journal_new", "")
    first = p5.run("--drain")
    assert "FAIL xid critical: Xid 79 since boot" in first.stdout
    since = (p5.root / "var/lib/mlcluster/health-xid-since").read_text().strip()
    assert since.isdigit()
    again = p5.run("--drain")
    assert again.returncode == 0, again.stdout
    assert f"PASS xid critical: no Xid since @{since}" in again.stdout
    assert (p5.data / "journal.args").read_text().splitlines()[-1] == f"-k -b --no-pager -q -o cat --since @{since}"
    assert len(p5.scontrol()) == 1


def test_memlock_checks_the_hard_limit_as_a_warning(p5: Node) -> None:
    """Slurm gives a job the submitter's soft limit up to slurmd's hard limit; only the hard one is slurmd's."""
    limits = "Limit  Soft Limit  Hard Limit  Units\nMax locked memory         {soft:<20} {hard:<20} bytes\n"
    p5.run()
    (p5.root / "proc/self/limits").write_text(limits.format(soft="8388608", hard="unlimited"))
    assert (
        "PASS memlock"
        in subprocess.run(
            ["bash", str(HEALTH)],
            env={"PATH": f"{p5.bin}:/usr/bin:/bin", "MLC_ROOT": str(p5.root), "DATA": str(p5.data)},
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    )
    (p5.root / "proc/self/limits").write_text(limits.format(soft="8388608", hard="8388608"))
    result = subprocess.run(
        ["bash", str(HEALTH), "--drain"],
        env={"PATH": f"{p5.bin}:/usr/bin:/bin", "MLC_ROOT": str(p5.root), "DATA": str(p5.data)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "FAIL memlock warning: hard locked-memory limit 8388608 bytes" in result.stdout, result.stdout
    assert result.returncode == 0 and p5.scontrol() == []


def test_deep_single_node_nccl_gets_the_library_path(p5: Node) -> None:
    for folder in ("opt/amazon/efa/lib", "opt/amazon/openmpi/lib", "opt/amazon/ofi-nccl/lib", "usr/local/cuda/lib64"):
        (p5.root / folder).mkdir(parents=True)
    nccl = p5.root / "opt/mlcluster/nccl-tests/bin/all_reduce_perf"
    nccl.parent.mkdir(parents=True)
    nccl.write_text(
        '#!/bin/sh\necho "$LD_LIBRARY_PATH" >"$DATA/nccl_ld"\n'
        'printf "# Out of bounds values : 0 OK\\n# Avg bus bandwidth    : 358.12 \\n"\n'
    )
    nccl.chmod(0o755)
    result = p5.run("--tier", "deep")
    assert "PASS nccl_single critical" in result.stdout, result.stdout
    ld = (p5.data / "nccl_ld").read_text().strip().split(":")
    assert ld[:4] == [
        f"{p5.root}/opt/amazon/efa/lib",
        f"{p5.root}/opt/amazon/openmpi/lib",
        f"{p5.root}/opt/amazon/ofi-nccl/lib",
        f"{p5.root}/usr/local/cuda/lib64",
    ]


def test_the_deep_tiers_library_prelude_is_the_smoke_tests() -> None:
    """health.sh carries a copy of nccl.library_prelude("hyperpod") between markers; they must not drift."""
    from mlcluster.cli.nccl import library_prelude

    text = HEALTH.read_text()
    block = text.split("# BEGIN library_prelude hyperpod", 1)[1].split("\n", 1)[1].split("# END library_prelude", 1)[0]
    assert [line.strip() for line in block.splitlines() if line.strip()] == [
        line.strip() for line in library_prelude("hyperpod").splitlines() if line.strip()
    ]


ALICE = 2001


def as_alice(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    """``bash -c SCRIPT`` as an unprivileged user (uid 2001, no groups), ROOT set to the node's root."""
    command = ["setpriv", f"--reuid={ALICE}", f"--regid={ALICE}", "--clear-groups", "bash", "-c", script]
    return subprocess.run(
        command,
        env={"PATH": "/usr/bin:/bin", "ROOT": str(root)},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def reachable_p5(p5: Node) -> Iterator[Node]:
    """The p5 node under a folder an unprivileged user may traverse (pytest's own is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="mlc-health-", dir="/tmp"))
    base.chmod(0o755)
    try:
        shutil.copytree(p5.root.parent, base / "node", symlinks=True)
        node = Node(base / "node/root", base / "node/data", base / "node/bin")
        for path in (base / "node", node.root, node.root / "var", node.root / "var/log", node.root / "etc"):
            path.chmod(0o755)
        yield node
    finally:
        shutil.rmtree(base)


def test_a_user_cannot_make_root_write_the_health_files_elsewhere(reachable_p5: Node) -> None:
    """The files root writes for mlcluster-health: a user can plant nothing in their folders, and where a folder
    is not root's alone (a user's, or open to others), root refuses to write or trust anything there."""
    node = reachable_p5
    first = node.run("--drain")
    assert first.returncode == 0, first.stdout + first.stderr
    for folder in ("var/lib/mlcluster", "var/log/mlcluster"):
        info = (node.root / folder).lstat()
        assert (info.st_uid, info.st_mode & 0o7777, stat.S_ISDIR(info.st_mode)) == (0, 0o755, True), folder
    victim = node.root / "etc/victim"
    victim.write_text("root's file\n")
    plant = as_alice(
        "for p in var/lib/mlcluster/health-xid-since var/log/mlcluster/health.log var/lib/mlcluster/x; do\n"
        '  ln -sf "$ROOT/etc/victim" "$ROOT/$p" && echo "planted $p"\n'
        "done\n"
        'mkdir -p "$ROOT/etc/logrotate.d" 2>/dev/null; touch "$ROOT/etc/logrotate.d/mlcluster-health" && echo planted lr\n'
        "true",
        node.root,
    )
    assert "planted" not in plant.stdout, plant.stdout
    assert plant.stderr.count("Permission denied") >= 3, plant.stderr

    # A folder root did not make for itself: alice owns it and plants links at both files.
    for folder in ("var/lib/mlcluster", "var/log/mlcluster"):
        shutil.rmtree(node.root / folder)
        (node.root / folder).mkdir()
        os.chown(node.root / folder, ALICE, ALICE)
    plant = as_alice(
        'ln -s "$ROOT/etc/victim" "$ROOT/var/lib/mlcluster/health-xid-since"\n'
        'ln -s "$ROOT/etc/victim" "$ROOT/var/log/mlcluster/health.log"\n',
        node.root,
    )
    assert plant.returncode == 0, plant.stderr
    result = node.run("--drain")
    assert victim.read_text() == "root's file\n"
    assert "var/lib/mlcluster is not a folder only root may write" in result.stderr, result.stderr
    assert (node.root / "var/lib/mlcluster/health-xid-since").is_symlink()  # left as it was, not followed

    # A folder others may write (mode 0777, root's): refused the same way, and a planted "since" is not trusted.
    for folder in ("var/lib/mlcluster", "var/log/mlcluster"):
        shutil.rmtree(node.root / folder)
        (node.root / folder).mkdir(mode=0o777)
        (node.root / folder).chmod(0o777)
    (node.root / "var/lib/mlcluster/health-xid-since").write_text("99999999999\n")
    os.chown(node.root / "var/lib/mlcluster/health-xid-since", ALICE, ALICE)
    node.answer("journal", (DATA / "journal_xid79.txt").read_text())
    result = node.run("--drain")
    assert "FAIL xid critical: Xid 79 since boot" in result.stdout, result.stdout + result.stderr
    assert (node.root / "var/lib/mlcluster/health-xid-since").read_text() == "99999999999\n"
    assert not (node.root / "var/log/mlcluster/health.log").exists()


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        # The guide's outputs (NCCOM-TEST User Guide, Neuron SDK 2.28.0, aws-neuron/aws-neuron-sdk
        # tools/neuron-sys-tools/nccom-test.rst at 86a9286833dc2a1cd23b674f7081061924aa587a): a run whose
        # average line has a tab after the colon, and a failed size.
        (
            DATA / "nccom_alltoallv.txt",
            "PASS nccom_single critical: all-reduce on 32 NeuronCores: avg bus bandwidth 0.5490 GB/s",
        ),
        (
            CLI_DATA / "nccom_failed.txt",
            "FAIL nccom_single critical: nccom-test all-reduce failed: 1 errors found - test failed",
        ),
    ],
)
def test_deep_tier_runs_nccom_with_the_documented_options(tmp_path: Path, output: Path, expected: str) -> None:
    node = make_node(tmp_path, "trn1.32xlarge")
    node.answer("neuron_ls", (CLI_DATA / "neuron_ls_trn1.txt").read_text())
    node.answer("journal", "")
    node.answer("nccom", output.read_text())
    (node.bin / "nccom-test").write_text('#!/bin/sh\necho "$*" >"$DATA/nccom_args"\ncat "$DATA/nccom"\n')
    (node.bin / "nccom-test").chmod(0o755)
    result = node.run("--tier", "deep")
    assert expected in result.stdout
    assert (node.data / "nccom_args").read_text() == "-r 32 -b 64M -e 1G -f 2 --check -d fp32 --non-interactive allr\n"


# -- the kernel log: only the driver's own lines count ----------------------------------------------------
#: The reviewer's planted line: a segfault message names the program and its file, both the user's
#: choice, so any user can put "NVRM: Xid ..." inside a kernel line.
PLANTED = (
    "Nov 27 10:05:00 ip-10-1-4-190 kernel: inj[22925]: segfault at 0 ip 00007f36718ef000 sp 00007ffd0 "
    "error 15 in x NVRM: Xid (PCI:0000:53:00): 79, pid=1[0,7f36718ef000+1000]\n"
    "Nov 27 10:05:01 ip-10-1-4-190 kernel: inj[22926]: segfault at 0 ip 0 sp 0 error 15 in "
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, x[0,1+1000]\n"
)
REAL_XID = "Nov 27 10:02:17 ip-10-1-4-190 kernel: NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
REAL_SXID = "Nov 27 10:02:18 ip-10-1-4-190 kernel: nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error\n"


def test_a_planted_xid_inside_another_kernel_line_is_not_an_xid(p5: Node) -> None:
    p5.answer("journal", PLANTED)
    result = p5.run("--drain")
    assert "PASS xid critical: no Xid since boot" in result.stdout, result.stdout
    assert "sxid" not in checks(result.stdout)
    assert result.returncode == 0 and p5.scontrol() == []


def test_the_drivers_own_xid_and_sxid_lines_are_detected(p5: Node) -> None:
    p5.answer("journal", PLANTED + REAL_XID + REAL_SXID)
    result = p5.run("--drain")
    assert "FAIL xid critical: Xid 79 since boot" in result.stdout, result.stdout
    assert checks(result.stdout)["sxid"] == "FAIL warning"
    assert len(p5.scontrol()) == 1


def test_without_journalctl_dmesg_is_read_without_its_timestamps(p5: Node) -> None:
    """dmesg prints ``[  12.345678] MESSAGE``; ``--notime`` the message alone (dmesg(1))."""
    (p5.bin / "journalctl").write_text("#!/bin/sh\nexit 1\n")
    (p5.bin / "dmesg").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --notime "*) sed -E "s/^[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} [^ ]+ kernel: //" "$DATA/journal" ;; '
        '*) sed -E "s/^[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} [^ ]+ kernel: /[  123.456789] /" "$DATA/journal" ;; esac\n'
    )
    (p5.bin / "dmesg").chmod(0o755)
    p5.answer("journal", PLANTED)
    assert "PASS xid critical: no Xid since boot" in p5.run().stdout
    p5.answer("journal", PLANTED + REAL_XID)
    assert "FAIL xid critical: Xid 79 since boot" in p5.run().stdout


# -- time limits inside slurmd's 60 s ------------------------------------------------------------------------
def hang(node: Node, tool: str) -> None:
    """``tool`` hangs (a wedged driver); each call is counted in DATA/<tool>.calls."""
    (node.bin / tool).write_text(f'#!/bin/sh\necho x >>"$DATA/{tool}.calls"\nexec sleep 30\n')
    (node.bin / tool).chmod(0o755)


def calls(node: Node, tool: str) -> int:
    path = node.data / f"{tool}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_hanging_nvidia_smi_is_critical_called_once_and_the_node_drains(p5: Node) -> None:
    hang(p5, "nvidia-smi")
    started = time.monotonic()
    result = p5.run("--drain", MLC_HEALTH_TOOL_TIMEOUT_S="1")
    elapsed = time.monotonic() - started
    found = checks(result.stdout)
    assert found["gpu_count"] == found["ecc"] == found["throttle"] == "FAIL critical", result.stdout
    assert "FAIL gpu_count critical: nvidia-smi did not answer within 1 s. Action: a hung driver" in result.stdout
    assert calls(p5, "nvidia-smi") == 1  # later checks do not wait for it again
    assert elapsed < 10
    assert p5.scontrol() == [
        "update nodename=ip-10-1-4-190 state=drain reason=mlcluster-health: gpu_count ecc throttle failed"
    ]


@pytest.mark.parametrize(("tool", "check"), [("fi_info", "fi_info"), ("journalctl", "xid")])
def test_a_hanging_tool_fails_its_check_as_critical(p5: Node, tool: str, check: str) -> None:
    hang(p5, tool)
    result = p5.run("--drain", MLC_HEALTH_TOOL_TIMEOUT_S="1")
    assert f"FAIL {check} critical: {tool} did not answer within 1 s" in result.stdout, result.stdout
    assert result.returncode == 1
    assert p5.scontrol() == [f"update nodename=ip-10-1-4-190 state=drain reason=mlcluster-health: {check} failed"]
    if tool == "journalctl":
        assert not (p5.root / "var/lib/mlcluster/health-xid-since").exists()


def test_a_hanging_neuron_ls_is_critical(tmp_path: Path) -> None:
    node = make_node(tmp_path, "trn1.32xlarge")
    node.answer("journal", "")
    node.efa(8)
    blocks = (DATA / "fi_info_p5.txt").read_text().split("provider: efa\n")[1:9]
    node.answer("fi_info", "".join("provider: efa\n" + block for block in blocks))
    hang(node, "neuron-ls")
    result = node.run(MLC_HEALTH_TOOL_TIMEOUT_S="1")
    assert "FAIL neuron critical: neuron-ls did not answer within 1 s" in result.stdout, result.stdout


def test_a_critical_xid_is_seen_again_until_the_node_is_drained(p5: Node) -> None:
    """A run whose drain did not happen (scontrol failed, or slurmd killed the run) keeps the Xid window."""
    since = p5.root / "var/lib/mlcluster/health-xid-since"
    p5.answer("journal", REAL_XID)
    (p5.bin / "scontrol").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >>"$DATA/scontrol.log"\nexit 1\n')
    first = p5.run("--drain")
    assert "FAIL xid critical: Xid 79 since boot" in first.stdout
    assert not since.exists()
    (p5.bin / "scontrol").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >>"$DATA/scontrol.log"\n')
    second = p5.run("--drain")
    assert "FAIL xid critical: Xid 79 since boot" in second.stdout
    assert since.read_text().strip().isdigit()
    assert len(p5.scontrol()) == 2


def test_no_critical_xid_moves_the_window_on(p5: Node) -> None:
    p5.run("--drain")
    assert (p5.root / "var/lib/mlcluster/health-xid-since").read_text().strip().isdigit()


def test_a_missing_nvidia_smi_is_a_warning_for_every_gpu_check(p5: Node) -> None:
    """``missing``: a tool not installed never drains a node on its own (ECC and throttle included)."""
    (p5.bin / "nvidia-smi").unlink()
    result = p5.run("--drain")
    found = checks(result.stdout)
    assert found["gpu_count"] == found["ecc"] == found["throttle"] == "FAIL warning", result.stdout
    assert "FAIL ecc warning: nvidia-smi not found (PATH=" in result.stdout
    assert result.returncode == 0 and p5.scontrol() == []


def test_the_hung_tool_markers_live_in_a_fresh_folder_of_roots_that_planted_names_cannot_reach(
    p5: Node, tmp_path: Path
) -> None:
    """Root's run keeps its hung-tool markers in a folder ``mktemp -d`` makes (new, 0700, random name) under
    TMPDIR: names a user planted in a shared TMPDIR (a link, a look-alike folder) are neither written nor removed,
    and the folder is gone after the run."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    target = tmp_path / "root-file"
    target.write_text("untouched\n")
    (shared / "mlcluster-health.AAAAAA").symlink_to(target)
    (shared / "mlcluster-health.BBBBBB").mkdir()
    (shared / "mlcluster-health.BBBBBB" / "nvidia-smi").symlink_to(target)
    hang(p5, "nvidia-smi")
    result = p5.run("--drain", MLC_HEALTH_TOOL_TIMEOUT_S="1", TMPDIR=str(shared))
    assert "FAIL gpu_count critical: nvidia-smi did not answer within 1 s" in result.stdout, result.stdout
    assert calls(p5, "nvidia-smi") == 1  # the marker was written in the run's own folder, and read back
    assert target.read_text() == "untouched\n"
    assert sorted(p.name for p in shared.iterdir()) == ["mlcluster-health.AAAAAA", "mlcluster-health.BBBBBB"]


#: A hanging nvidia-smi that first lists its TMPDIR (the caller's, inherited) into DATA/tmpdir.
LISTS_TMPDIR = '#!/bin/sh\nls -A "$TMPDIR" >"$DATA/tmpdir"\necho x >>"$DATA/nvidia-smi.calls"\nexec sleep 30\n'


def test_roots_run_ignores_a_callers_tmpdir(reachable_p5: Node) -> None:
    """``sudo -E`` keeps a user's TMPDIR: root's hung-tool folder must not be made inside the user's folder (the
    user could rename it and plant links there). Root's run uses /tmp; the markers still work."""
    node = reachable_p5
    users_tmp = node.root.parent / "alice-tmp"
    users_tmp.mkdir(mode=0o700)
    os.chown(users_tmp, ALICE, ALICE)
    (node.bin / "nvidia-smi").write_text(LISTS_TMPDIR)
    result = node.run("--drain", MLC_HEALTH_TOOL_TIMEOUT_S="1", TMPDIR=str(users_tmp))
    assert "FAIL gpu_count critical: nvidia-smi did not answer within 1 s" in result.stdout, result.stdout
    assert calls(node, "nvidia-smi") == 1  # the marker folder (under /tmp) was written and read back
    assert (node.data / "tmpdir").read_text() == ""  # nothing of root's in the user's folder while it ran
    assert list(users_tmp.iterdir()) == []


def test_a_users_run_keeps_its_own_tmpdir(reachable_p5: Node) -> None:
    """The edge that must keep working: an unprivileged run (srun as the user) makes its folder in its TMPDIR."""
    node = reachable_p5
    users_tmp = node.root.parent / "alice-tmp"
    users_tmp.mkdir(mode=0o700)
    os.chown(users_tmp, ALICE, ALICE)
    for folder in (node.data, node.bin):
        folder.chmod(0o777)
    (node.bin / "nvidia-smi").write_text(LISTS_TMPDIR)
    (node.bin / "nvidia-smi").chmod(0o755)
    result = as_alice(
        f"export TMPDIR={users_tmp} DATA={node.data} MLC_ROOT={node.root} MLC_HEALTH_TOOL_TIMEOUT_S=1 "
        f"PATH={node.bin}:/usr/bin:/bin; exec bash {HEALTH}",
        node.root,
    )
    assert "FAIL gpu_count critical: nvidia-smi did not answer within 1 s" in result.stdout, (
        result.stdout + result.stderr
    )
    assert (node.data / "tmpdir").read_text().startswith("mlcluster-health.")
    assert calls(node, "nvidia-smi") == 1
    assert list(users_tmp.iterdir()) == []  # removed after the run


# -- the deep tier's repair advice, per backend; nccom-test found, bounded and sized by neuron-ls ----------------
@pytest.mark.parametrize(
    ("marker", "advice"),
    [
        ("opt/ml/config/resource_config.json", "sudo bash /opt/mlcluster/lifecycle/on_create.sh nccl_tests"),
        (
            "opt/parallelcluster/",
            "sudo MLCLUSTER_STEP=nccl_efa MLCLUSTER_NODE_ROLE=compute bash /opt/mlcluster/node-scripts/nccl_efa.sh",
        ),
    ],
)
def test_missing_nccl_tests_advice_names_the_backends_own_step(p5: Node, marker: str, advice: str) -> None:
    """HyperPod's nodes carry resource_config.json, ParallelCluster's /opt/parallelcluster: the advice to
    reinstall nccl-tests names that backend's step only."""
    path = p5.root / marker
    if marker.endswith("/"):
        path.mkdir(parents=True)
    else:
        path.parent.mkdir(parents=True)
        path.write_text("{}\n")
    result = p5.run("--tier", "deep")
    line = next(line for line in result.stdout.splitlines() if " nccl_single " in line)
    assert line.startswith("ip-10-1-4-190 FAIL nccl_single critical: /opt/mlcluster/nccl-tests/bin/all_reduce_perf")
    assert line.endswith(
        f"Action: re-run the {'lifecycle' if 'ml/config' in marker else 'node'} step: {advice}"
        + ("" if "ml/config" in marker else " (its log: /var/log/mlcluster/nccl_efa.log)")
    ), line
    other = "on_create.sh" if "parallelcluster" in marker else "nccl_efa.sh"
    assert other not in line


def test_missing_nccl_tests_advice_on_an_unknown_node_names_both(p5: Node) -> None:
    result = p5.run("--tier", "deep")
    line = next(line for line in result.stdout.splitlines() if " nccl_single " in line)
    assert "Action: HyperPod: re-run the lifecycle step: sudo bash /opt/mlcluster/lifecycle/on_create.sh" in line
    assert "; ParallelCluster: re-run the node step: sudo MLCLUSTER_STEP=nccl_efa" in line


def trn_node(tmp_path: Path, instance_type: str, neuron_ls: str) -> Node:
    node = make_node(tmp_path, instance_type)
    node.answer("neuron_ls", neuron_ls)
    node.answer("journal", "")
    node.answer("nccom", (DATA / "nccom_alltoallv.txt").read_text())
    return node


def nccom_stub(node: Node, body: str = 'cat "$DATA/nccom"') -> None:
    (node.bin / "nccom-test").write_text(f'#!/bin/sh\necho "$*" >"$DATA/nccom_args"\n{body}\n')
    (node.bin / "nccom-test").chmod(0o755)


def trn2_neuron_ls(cores: int) -> str:
    """neuron-ls's table (the trn1 transcript's layout, Neuron "Neuron LS User Guide") for 16 Trainium2
    devices showing ``cores`` NeuronCores each: 4 with the default LNC=2, 8 with LNC=1."""
    head, *_ = (CLI_DATA / "neuron_ls_trn1.txt").read_text().split("| 0      |", 1)
    rows = "".join(f"| {i:<6} | {cores:<6} | 96 GB  | 1, 3, 4, 12   | 0000:{16 + i:02x}:1c.0 |\n" for i in range(16))
    return head.replace("trn1.32xlarge", "trn2.48xlarge") + rows


@pytest.mark.parametrize(("cores", "ranks"), [(4, 64), (8, 128)])
def test_trn2_nccom_ranks_are_the_neuroncores_neuron_ls_lists(tmp_path: Path, cores: int, ranks: int) -> None:
    """trn2: 8 physical NeuronCores per device, 4 logical with the default LNC=2: the rank count is read from
    neuron-ls, not assumed 2 per device as on trn1."""
    node = trn_node(tmp_path, "trn2.48xlarge", trn2_neuron_ls(cores))
    nccom_stub(node)
    result = node.run("--tier", "deep")
    assert "PASS neuron critical: 16 Neuron devices" in result.stdout, result.stdout
    assert f"PASS nccom_single critical: all-reduce on {ranks} NeuronCores" in result.stdout
    assert (node.data / "nccom_args").read_text().startswith(f"-r {ranks} -b 64M")


def test_a_missing_nccom_test_fails_the_deep_tier(tmp_path: Path) -> None:
    """nccom-test ships with neuron-ls (aws-neuronx-tools): a Neuron node without it ran no all-reduce, and the
    deep tier must not pass it (a missing quick-tier tool stays a warning)."""
    node = trn_node(tmp_path, "trn1.32xlarge", (CLI_DATA / "neuron_ls_trn1.txt").read_text())
    result = node.run("--tier", "deep")
    assert "FAIL nccom_single critical: nccom-test not found (PATH=" in result.stdout, result.stdout
    assert "Action: install aws-neuronx-tools" in result.stdout
    assert "nccom_single warning" not in result.stdout
    assert result.returncode == 1


def test_a_hanging_nccom_test_fails_within_its_bound(tmp_path: Path) -> None:
    node = trn_node(tmp_path, "trn1.32xlarge", (CLI_DATA / "neuron_ls_trn1.txt").read_text())
    nccom_stub(node, "exec sleep 60")
    started = time.monotonic()
    result = node.run("--tier", "deep", MLC_HEALTH_DEEP_TIMEOUT_S="2")
    assert time.monotonic() - started < 30
    assert "FAIL nccom_single critical: nccom-test all-reduce did not finish within 2 s" in result.stdout, result.stdout


def test_a_hanging_all_reduce_and_dcgm_fail_within_their_bound(p5: Node) -> None:
    nccl = p5.root / "opt/mlcluster/nccl-tests/bin/all_reduce_perf"
    nccl.parent.mkdir(parents=True)
    nccl.write_text("#!/bin/sh\nexec sleep 60\n")
    nccl.chmod(0o755)
    (p5.bin / "dcgmi").write_text("#!/bin/sh\nexec sleep 60\n")
    started = time.monotonic()
    result = p5.run("--tier", "deep", MLC_HEALTH_DEEP_TIMEOUT_S="2")
    assert time.monotonic() - started < 30
    assert "FAIL dcgm_diag critical: dcgmi diag -r 2 did not finish within 2 s" in result.stdout, result.stdout
    assert "FAIL nccl_single critical: all_reduce on 8 GPUs failed: all_reduce_perf exited 124" in result.stdout


def test_require_env_fails_a_node_without_health_env_and_accepts_one_with_it(p5: Node) -> None:
    """`mlcluster health` sends --require-env where it cannot tell a node's kind: the node's own file decides, and
    a node without it fails instead of skipping every check."""
    result = p5.run("--require-env")
    assert result.returncode == 0, result.stdout
    assert "PASS efa_count critical: 32 EFA devices" in result.stdout
    (p5.root / "etc/mlcluster/health.env").unlink()
    result = p5.run("--require-env")
    assert result.returncode == 1
    assert "FAIL expectations critical: /etc/mlcluster/health.env is missing" in result.stdout, result.stdout
    assert p5.run().returncode == 0  # without the option: every check skips, as before
