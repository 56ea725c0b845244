"""The node-side NCCL check and run prelude, run for real by bash in a fake node root; the EFA device table."""

from __future__ import annotations

import gzip
import json
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from mlcluster.cli.nccl import EFA_DEVICES, LIBRARY_DIRS, Backend, efa_devices, node_check, node_run
from mlcluster.cli.parsers import parse_all_reduce, parse_node_check
from mlcluster.cli.smoke import NCCL_BINARY, NCCL_FILTER

HYPERPOD_PATH = (
    "/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/nccl/build/lib"
    ":/usr/local/cuda/lib64"
)


def fake_node(tmp_path: Path, *, skip: tuple[str, ...] = (), missing_lib: str = "") -> Path:
    """A node root with the DLAMI's library folders, the plugin and nccl-tests; ``ldd`` and ``hostname`` stubs."""
    root = tmp_path / "root"
    for folder in HYPERPOD_PATH.split(":"):
        if not any(folder.startswith(s) for s in skip):
            (root / folder.lstrip("/")).mkdir(parents=True)
    plugin_dir = root / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
    if plugin_dir.is_dir():
        (plugin_dir / "libnccl-net-ofi.so").write_text("elf")
    if (root / "opt/nccl/build/lib").is_dir():
        (root / "opt/nccl/build/lib/libnccl.so.2").write_text("elf")
    binary = root / NCCL_BINARY.lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("elf")
    binary.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # ldd as glibc prints it: "\tname => path (address)" or "\tname => not found".
    (bin_dir / "ldd").write_text(
        '#!/bin/bash\nfor f in "$@"; do echo "$f:"; echo "\tlibnccl.so.2 => /usr/lib/libnccl.so.2 (0x1)"\n'
        + (f'echo "\t{missing_lib} => not found"\n' if missing_lib else "")
        + "done\n"
    )
    (bin_dir / "hostname").write_text("#!/bin/sh\necho ip-10-1-4-190\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return root


def run(script: str, root: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{root.parent / 'bin'}:/usr/bin:/bin"
    return subprocess.run(
        ["bash", "-c", script],
        env={"PATH": path, "MLC_ROOT": str(root), "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_check_passes_and_prints_the_library_path(tmp_path: Path) -> None:
    root = fake_node(tmp_path)
    result = run(node_check("hyperpod", NCCL_BINARY), root, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    expected = ":".join(f"{root}{d}" for d in HYPERPOD_PATH.split(":"))
    assert result.stdout == f"MLC-NCCL ip-10-1-4-190 ok {expected}\n"
    assert parse_node_check(result.stdout).ok == {"ip-10-1-4-190": expected}


def test_check_names_a_missing_folder_a_missing_plugin_and_ldd_not_found(tmp_path: Path) -> None:
    no_mpi = fake_node(tmp_path / "a", skip=("/opt/amazon/openmpi",))
    result = run(node_check("hyperpod", NCCL_BINARY), no_mpi, tmp_path)
    assert (result.returncode, result.stdout) == (1, "MLC-NCCL ip-10-1-4-190 missing openmpi\n")

    no_plugin = fake_node(tmp_path / "b")
    (no_plugin / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so").unlink()
    result = run(node_check("hyperpod", NCCL_BINARY), no_plugin, tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith("MLC-NCCL ip-10-1-4-190 no-plugin ")

    unlinked = fake_node(tmp_path / "c", missing_lib="libmpi.so.40")
    result = run(node_check("hyperpod", NCCL_BINARY), unlinked, tmp_path)
    assert (result.returncode, result.stdout) == (1, "MLC-NCCL ip-10-1-4-190 not-found libmpi.so.40\n")
    assert parse_node_check(result.stdout).problems == {"ip-10-1-4-190": "ldd: not found: libmpi.so.40"}


def test_check_flags_tuner_settings_from_environment_and_files(tmp_path: Path) -> None:
    root = fake_node(tmp_path)
    (root / "etc").mkdir()
    (root / "etc/nccl.conf").write_text("FI_PROVIDER=efa\n  NCCL_PROTO = simple\n#NCCL_ALGO=ring\n")
    (tmp_path / ".nccl.conf").write_text("NCCL_ALGO=Tree\n")
    result = run(node_check("hyperpod", NCCL_BINARY), root, tmp_path, NCCL_ALGO="Ring")
    assert result.returncode == 0, result.stdout + result.stderr
    assert parse_node_check(result.stdout).settings == [
        "ip-10-1-4-190: NCCL_ALGO=Ring (environment)",
        "ip-10-1-4-190: NCCL_PROTO=simple (/etc/nccl.conf)",
        f"ip-10-1-4-190: NCCL_ALGO=Tree ({tmp_path}/.nccl.conf)",
    ]


def test_pcluster_takes_lib64_and_the_built_plugin(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for folder in ("opt/amazon/efa/lib64", "opt/amazon/openmpi/lib64", "opt/aws-ofi-nccl/lib", "usr/local/cuda/lib64"):
        (root / folder).mkdir(parents=True)
    (root / "usr/local/cuda/lib64/libnccl.so.2").write_text("elf")
    result = run(node_run("pcluster", 'printf "%s\\n" "$LD_LIBRARY_PATH"'), root, tmp_path, LD_LIBRARY_PATH="/keep")
    folders = [f"{root}/{f}" for f in ("opt/amazon/efa/lib64", "opt/amazon/openmpi/lib64", "opt/aws-ofi-nccl/lib")]
    cuda = f"{root}/usr/local/cuda/lib64"
    assert result.stdout == ":".join([*folders, cuda, cuda, "/keep"]) + "\n"
    assert [name for name, _ in LIBRARY_DIRS["pcluster"]] == ["efa", "openmpi", "ofi-nccl", "nccl", "cuda"]


@pytest.mark.parametrize(
    ("nccl_home", "expected"),
    [
        ("opt/nccl/build/lib", "opt/nccl/build/lib"),  # the step's first NCCL_HOME, /opt/nccl/build
        ("usr/local/cuda/lib", "usr/local/cuda/lib"),  # NCCL_HOME=/usr/local/cuda: -L$NCCL_HOME/lib
        (None, None),
    ],
)
def test_nccls_own_folder_is_on_the_library_path(tmp_path: Path, nccl_home: str | None, expected: str | None) -> None:
    """nccl-tests link -lnccl without an rpath: the folder holding libnccl.so.2 must be on the path."""
    root = fake_node(tmp_path, skip=("/opt/nccl",))
    (root / "usr/local/cuda/lib").mkdir(parents=True)  # an empty lib folder is not NCCL's
    if nccl_home:
        (root / nccl_home).mkdir(parents=True, exist_ok=True)
        (root / nccl_home / "libnccl.so.2").write_text("elf")
    result = run(node_check("hyperpod", NCCL_BINARY), root, tmp_path)
    if expected is None:
        assert (result.returncode, result.stdout) == (1, "MLC-NCCL ip-10-1-4-190 missing nccl\n")
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{root}/{expected}" in result.stdout.split()[-1].split(":")


def test_check_says_not_installed_when_all_reduce_perf_is_missing(tmp_path: Path) -> None:
    """ldd of a missing file prints "No such file", not "not found": the binary is checked first."""
    root = fake_node(tmp_path)
    (root / NCCL_BINARY.lstrip("/")).unlink()
    result = run(node_check("hyperpod", NCCL_BINARY), root, tmp_path)
    assert (result.returncode, result.stdout) == (1, f"MLC-NCCL ip-10-1-4-190 not-installed {NCCL_BINARY}\n")
    assert parse_node_check(result.stdout).problems == {"ip-10-1-4-190": f"no executable {NCCL_BINARY}"}


def test_filter_keeps_one_provider_line_per_device_count(tmp_path: Path) -> None:
    """16 ranks on two nodes print 16 provider lines; the filter keeps the 32 and the 31 (the bad node)."""
    lines = [
        f"ip-10-1-{n}-1:{100 + r}:{200 + r} [{r}] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.3"
        for n in (4, 5)
        for r in range(8)
    ]
    lines += [
        f"ip-10-1-{n}-1:{100 + r}:{200 + r} [{r}] NCCL INFO NET/OFI Selected provider is efa, "
        f"fabric is efa-direct (found {32 if n == 4 else 31} nics)"
        for n in (4, 5)
        for r in range(8)
    ]
    lines += ["#  Rank  0 Group  0 Pid 100 on ip-10-1-4-1 device  0 [0x53] NVIDIA H100 80GB HBM3"]
    result = subprocess.run(
        ["bash", "-c", NCCL_FILTER], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    )
    kept = result.stdout.splitlines()
    assert len(kept) == 3
    parsed = parse_all_reduce(result.stdout)
    assert parsed.nics == {32: "ip-10-1-4-1", 31: "ip-10-1-5-1"}
    assert parsed.plugin_version == "1.16.3"


def moto_efa_interfaces() -> dict[str, int]:
    data = resources.files("moto").joinpath("ec2/resources/instance_types.json.gz")
    raw = data.read_bytes()
    table = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return {
        name: info["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"]
        for name, info in table.items()
        if info.get("NetworkInfo", {}).get("EfaInfo", {}).get("MaximumEfaInterfaces")
    }


@pytest.mark.parametrize("instance_type", sorted(EFA_DEVICES))
def test_efa_device_counts_match_ec2(instance_type: str) -> None:
    known = moto_efa_interfaces()
    if instance_type not in known:
        pytest.skip(f"moto's snapshot has no EfaInfo for {instance_type}")
    assert EFA_DEVICES[instance_type] == known[instance_type]


def test_efa_devices_takes_the_sagemaker_prefix() -> None:
    assert (efa_devices("ml.p5.48xlarge"), efa_devices("p4d.24xlarge"), efa_devices("trn1.32xlarge")) == (32, 4, 8)
    assert efa_devices("g5.48xlarge") is None


@pytest.mark.parametrize("backend", ["pcluster", "hyperpod"])
def test_generated_shell_is_shellcheck_clean(backend: Backend, tmp_path: Path) -> None:
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/bash\n" + node_check(backend, NCCL_BINARY) + node_run(backend, "true"))
    shellcheck = Path(__file__).resolve().parents[2] / ".venv/bin/shellcheck"
    result = subprocess.run([str(shellcheck), str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
