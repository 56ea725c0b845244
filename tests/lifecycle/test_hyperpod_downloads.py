"""Issue 17, item 8 for the HyperPod steps: downloads are pinned and verified before use.

Repository keys are checked by fingerprint, Pyxis and nccl-tests by commit and by the SHA-256 of
their file list (``git ls-tree -r``, which carries every file's content hash). A tampered download
stops the step with a message naming the artifact, and nothing of it is installed or built.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, DATA, WORKER_IP, Sandbox


def test_a_docker_key_with_another_fingerprint_is_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.serve / "gpg").write_text("FPR=0000000000000000000000000000000000BADBAD\n")
    result = sandbox.run("on_create.sh", "docker")
    assert result.returncode != 0
    assert "step docker: FAILED" in result.stderr
    log = sandbox.read("/var/log/provision/docker.log")
    assert (
        "the docker apt key from https://download.docker.com/linux/ubuntu/gpg has fingerprint "
        "'0000000000000000000000000000000000BADBAD', expected 9DC858229FC7DD38854AE2D88D81803C0EBFCD88; "
        "refusing to trust it"
    ) in log
    assert not (sandbox.root / "etc/apt/keyrings/docker.asc").exists()
    assert not (sandbox.root / "etc/apt/sources.list.d/docker.list").exists()
    assert not any("docker-ce" in a for a in sandbox.actions())


def test_a_nvidia_key_with_another_fingerprint_is_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP, gpu=True)
    (sandbox.serve / "gpgkey").write_text("FPR=C95B321B61E88C1809C4F759DDCAE044F796ECB1\n")
    result = sandbox.run("on_create.sh", "docker")
    assert result.returncode != 0
    assert "the nvidia-container-toolkit apt key from https://nvidia.github.io/libnvidia-container/gpgkey" in (
        sandbox.read("/var/log/provision/docker.log")
    )
    assert not any("nvidia-container-toolkit=" in a for a in sandbox.actions())


def tampered_git_data(tmp_path: Path, name: str) -> Path:
    data = tmp_path / "git-data"
    shutil.copytree(DATA, data)
    listing = data / f"{name}.ls-tree"
    lines = listing.read_text().splitlines(True)
    lines[0] = lines[0].replace(lines[0].split()[2], "0" * 40)  # one file's content changed
    listing.write_text("".join(lines))
    return data


def test_a_pyxis_checkout_with_changed_files_is_not_built(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "node", ips=CONTROLLER_IP)
    result = sandbox.run(
        "on_create.sh", "add_users", "enroot_pyxis", STUB_GIT_DATA=str(tampered_git_data(tmp_path, "pyxis"))
    )
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/enroot_pyxis.log")
    assert "pyxis v0.20.0 from https://github.com/NVIDIA/pyxis.git does not match its pin" in log
    assert "refusing to build it" in log
    assert not any(a.startswith("make ") for a in sandbox.actions())
    assert not (sandbox.root / "usr/local/lib/slurm/spank_pyxis.so").exists()


def test_a_pyxis_checkout_at_another_commit_is_not_built(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    result = sandbox.run("on_create.sh", "add_users", "enroot_pyxis", STUB_GIT_HEAD="f" * 40)
    assert result.returncode != 0
    assert f"(commit {'f' * 40}, tree sha256" in sandbox.read("/var/log/provision/enroot_pyxis.log")
    assert not any(a.startswith("make ") for a in sandbox.actions())


def test_tampered_nccl_tests_are_not_built(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "node", ips=WORKER_IP, gpu=True)
    result = sandbox.run("on_create.sh", "nccl_tests", STUB_GIT_DATA=str(tampered_git_data(tmp_path, "nccl-tests")))
    assert result.returncode != 0
    assert "nccl-tests v2.17.10 from https://github.com/NVIDIA/nccl-tests.git does not match its pin" in (
        sandbox.read("/var/log/provision/nccl_tests.log")
    )
    assert not (sandbox.root / "opt/mlcluster/nccl-tests").exists()


def test_nodes_without_a_gpu_build_no_nccl_tests(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=WORKER_IP)
    result = sandbox.run("on_create.sh", "nccl_tests")
    assert result.returncode == 0, result.stdout
    assert "no NVIDIA GPU on this node; nccl-tests are not built" in sandbox.read("/var/log/provision/nccl_tests.log")
    assert sandbox.actions() == []
