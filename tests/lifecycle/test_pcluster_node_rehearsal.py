"""The ParallelCluster node scripts against a realistic root: the state a job needs, and a no-op second run.

Each test runs ``run.sh`` as ParallelCluster would (as root, every step of the node's role)
on a fake node (``tests/lifecycle/pcluster_sandbox.py``) and checks what a containerized
multi-node job needs from it, as a user would find it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mlcluster.lifecycle.pcluster import NCCL_TESTS_ALL_REDUCE
from tests.lifecycle.pcluster_sandbox import (
    ALICE,
    AMAZON_LINUX,
    BOB,
    ROCKY,
    UBUNTU,
    PclusterNode,
    SigningKey,
    make_key,
    sandbox_base,
)

GPU_STEPS = ("docker", "enroot_pyxis", "nccl_efa")
#: The fake node needs real ownership: root runs the steps, ``setpriv`` drops to the users.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real chown, setpriv and root-owned folders")

MakeNode = Callable[..., PclusterNode]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    return make_key(tmp_path_factory.mktemp("gnupg") / "home", "mlcluster-test")


@pytest.fixture
def make_node(key: SigningKey) -> Iterator[MakeNode]:
    with sandbox_base() as base:
        count = iter(range(100))

        def make(**kwargs: Any) -> PclusterNode:
            return PclusterNode(base / f"node{next(count)}", key, **kwargs)

        yield make


def enroot_paths(node: PclusterNode, uid: int) -> dict[str, str]:
    """Enroot's four paths for ``uid``, expanded from the node's enroot.conf as enroot does."""
    paths = {}
    for line in node.text("etc/enroot/enroot.conf").splitlines():
        match = re.fullmatch(r"(ENROOT_(?:RUNTIME|CACHE|DATA|TEMP)_PATH) (.+)", line)
        if match:
            paths[match[1]] = match[2].replace("$(id -u)", str(uid))
    return paths


def test_compute_node_is_ready_for_a_container_job(make_node: MakeNode) -> None:
    node = make_node()
    proc = node.run("compute", *GPU_STEPS)
    assert proc.returncode == 0, proc.stderr + node.log("enroot_pyxis")

    # Roots of the per-user folders: root's, 0755, never the 1777 of /scratch.
    for root in ("run/enroot", "scratch/enroot", *(f"scratch/enroot/{r}" for r in ("cache", "data", "tmp"))):
        assert node.owner_mode(root) == (0, "0o755"), root
    assert node.owner_mode("scratch/containers") == (0, "0o755")
    conf = node.text("etc/enroot/enroot.conf")
    assert "ENROOT_RESTRICT_DEV n" in conf  # y would hide /dev/infiniband (EFA) from containers
    assert "ENROOT_TEMP_PATH /scratch/enroot/tmp/user-$(id -u)" in conf
    assert "d /run/enroot 0755 root root -" in node.text("etc/tmpfiles.d/mlcluster-enroot.conf")
    for hook in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh"):
        assert node.owner_mode(f"etc/enroot/hooks.d/{hook}") == (0, "0o755")
        assert node.text(f"etc/enroot/hooks.d/{hook}") == node.text(f"usr/share/enroot/hooks.d/{hook}")

    # The Slurm prolog (written by the head node into the shared /opt/slurm) makes alice's folders.
    made = node.user_dirs(ALICE)
    assert made.returncode == 0, made.stderr
    paths = enroot_paths(node, ALICE)
    assert set(paths) == {"ENROOT_RUNTIME_PATH", "ENROOT_CACHE_PATH", "ENROOT_DATA_PATH", "ENROOT_TEMP_PATH"}
    for path in [*paths.values(), f"/scratch/containers/user-{ALICE}"]:
        assert node.owner_mode(path.lstrip("/")) == (ALICE, "0o700"), path
    # What enroot does as alice: mkdir its paths, then mktemp in the temporary one.
    script = "set -e; " + " ".join(f'mkdir -p "$ROOT{p}";' for p in paths.values())
    script += f' mktemp -d -p "$ROOT{paths["ENROOT_TEMP_PATH"]}" && echo ok'
    as_alice = node.as_user(ALICE, script)
    assert as_alice.returncode == 0 and as_alice.stdout.strip().endswith("ok"), as_alice.stderr
    # bob cannot look into alice's folders.
    peek = node.as_user(BOB, f'ls "$ROOT{paths["ENROOT_DATA_PATH"]}"')
    assert peek.returncode != 0 and "Permission denied" in peek.stderr

    # EFA and NCCL settings reach NCCL in any process, every container, SSH sessions and login shells.
    # A non-login shell of an SSH session gets /etc/environment from pam_env; a container gets
    # environ.d/*.env from enroot: both are plain NAME=VALUE lines, read here the same way.
    for source in ("etc/environment", "etc/enroot/environ.d/50-mlcluster-efa.env"):
        shell = node.as_user(
            ALICE, f'set -a; . "$ROOT/{source}"; set +a; exec bash --norc --noprofile -c "echo $FI_PROVIDER"'
        )
        assert shell.stdout.strip() == "efa", (source, shell.stderr)
    assert "FI_PROVIDER=efa" in node.text("etc/nccl.conf").splitlines()
    assert "FI_PROVIDER=efa" in node.text("etc/environment").splitlines()
    assert node.text("etc/enroot/environ.d/50-mlcluster-efa.env") == "FI_PROVIDER=efa\n"
    assert "export FI_PROVIDER=efa" in node.text("etc/profile.d/mlcluster-nccl-efa.sh")
    assert node.text("etc/ld.so.conf.d/mlcluster-nccl-efa.conf") == "/opt/amazon/ofi-nccl/lib\n/opt/amazon/efa/lib64\n"

    # nccl-tests at the contract path, built against this node's CUDA, NCCL and MPI.
    assert NCCL_TESTS_ALL_REDUCE == "/opt/mlcluster/nccl-tests/bin/all_reduce_perf"
    assert node.owner_mode(NCCL_TESTS_ALL_REDUCE.lstrip("/")) == (0, "0o755")
    builds = [c for c in node.calls() if c.startswith("make ") and "MPI=1" in c]
    assert len(builds) == 1
    for setting in ("MPI_HOME=/opt/amazon/openmpi", "CUDA_HOME=/usr/local/cuda", "NCCL_HOME=/usr/local/cuda"):
        name, path = setting.split("=")
        assert f"{name}={node.root}{path}" in builds[0].split()
    assert "nccl-tests 2.17.6" in node.text("opt/mlcluster/nccl-tests/BUILD_INFO")

    # Containers: docker is root's only; nobody joins the docker group by default.
    assert [line for line in node.text("etc/group").splitlines() if line.startswith("docker:")] in (
        [],
        ["docker:x:990:"],
    )
    assert not any(c.startswith("usermod") for c in node.calls())
    storage = node.text("etc/containers/storage.conf")
    assert 'rootless_storage_path = "/scratch/containers/user-$UID/storage"' in storage
    assert {"docker", "podman", "enroot"} <= set((node.state / "pkgs").read_text().split())


def test_second_run_changes_nothing(make_node: MakeNode) -> None:
    node = make_node()
    assert node.run("compute", *GPU_STEPS, "neuron").returncode == 0
    assert node.user_dirs(ALICE).returncode == 0
    before = node.tree()
    first = len(node.calls())
    proc = node.run("compute", *GPU_STEPS, "neuron")
    assert proc.returncode == 0, proc.stderr
    assert node.user_dirs(ALICE).returncode == 0
    assert node.tree() == before
    again = node.calls()[first:]
    changing = [
        c
        for c in again
        if c.split()[0] in {"dnf", "curl", "git", "make", "usermod", "groupadd", "ldconfig", "scontrol"}
        or c.startswith(("systemctl enable", "systemctl start", "systemctl restart"))
    ]
    assert changing == []


def test_head_node_enables_pyxis_and_the_prolog(make_node: MakeNode) -> None:
    node = make_node(gpu=False, scratch=False)
    (node.state / "active").write_text("slurmctld\n")
    proc = node.run("head", "docker", "enroot_pyxis")
    assert proc.returncode == 0, proc.stderr
    assert "include /opt/slurm/etc/plugstack.conf.d/*" in node.text("opt/slurm/etc/plugstack.conf").splitlines()
    assert node.text("opt/slurm/etc/plugstack.conf.d/pyxis.conf") == (
        "optional /opt/slurm/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis\n"
    )
    assert "scontrol reconfigure" in node.calls()
    prolog = "opt/slurm/etc/scripts/prolog.d/50_mlcluster_user_dirs"
    assert node.owner_mode(prolog) == (0, "0o755")
    # Slurm runs the prolog as root with the job's user in SLURM_JOB_UID.
    ran = node.run_root("bash", "-c", node.text(prolog).replace("/opt/mlcluster", f"{node.root}/opt/mlcluster"))
    assert ran.returncode == 1  # no SLURM_JOB_UID: refused, not guessed
    ran = node.run_root(
        "bash", "-c", node.text(prolog).replace("/opt/mlcluster", f"{node.root}/opt/mlcluster"), SLURM_JOB_UID=str(BOB)
    )
    assert ran.returncode == 0, ran.stderr
    assert node.owner_mode(f"var/tmp/enroot/tmp/user-{BOB}") == (BOB, "0o700")  # no /scratch on this node
    # SSH sessions get their folders from pam_exec before the shell starts.
    assert "session optional pam_exec.so quiet /opt/mlcluster/bin/mlcluster-user-dirs" in node.text("etc/pam.d/sshd")
    calls = len(node.calls())
    assert node.run("head", "docker", "enroot_pyxis").returncode == 0
    assert "scontrol reconfigure" not in node.calls()[calls:]


def test_login_node_has_no_plugstack_but_gets_session_folders(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    proc = node.run("login", "docker", "enroot_pyxis")
    assert proc.returncode == 0, proc.stderr
    assert not (node.root / "opt/slurm/etc/plugstack.conf").exists()
    assert not (node.root / "opt/slurm/etc/scripts/prolog.d/50_mlcluster_user_dirs").exists()
    assert "pam_exec.so quiet /opt/mlcluster/bin/mlcluster-user-dirs" in node.text("etc/pam.d/sshd")
    made = node.run_root("bash", str(node.root / "opt/mlcluster/bin/mlcluster-user-dirs"), PAM_USER="alice")
    assert made.returncode == 0, made.stderr
    assert node.owner_mode(f"run/enroot/user-{ALICE}") == (ALICE, "0o700")


def test_docker_group_only_when_asked(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    assert node.run("compute", "docker", "docker_group").returncode == 0
    assert "docker:x:990:ec2-user" in node.text("etc/group")
    assert "WARNING: added ec2-user to the docker group (docker_group: true): ec2-user is root on this node" in (
        node.log("docker_group")
    )
    # The docker step then names every member as root-equivalent on each run.
    assert node.run("compute", "docker").returncode == 0
    assert "the docker group has members (ec2-user); each is root on this node" in node.log("docker")


def test_enroot_missing_from_the_ami_is_not_downloaded(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    (node.bin / "enroot").unlink()
    (node.state / "pkgs").write_text("")
    proc = node.run("compute", "enroot_pyxis")
    assert proc.returncode == 1
    assert "Enroot is not installed: use a ParallelCluster 3.11+ AMI" in node.log("enroot_pyxis")
    assert not any(c.startswith("curl") for c in node.calls())


def test_pyxis_is_built_from_its_pinned_commit(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    (node.root / "opt/slurm/lib/slurm/spank_pyxis.so").unlink()
    node.extra_env["STUB_GIT_FAIL_ONCE"] = "1"  # a broken first clone leaves a partial folder behind
    proc = node.run("head", "enroot_pyxis")
    assert proc.returncode == 0, proc.stderr + node.log("enroot_pyxis")
    assert "/usr/local/lib/slurm/spank_pyxis.so" in node.text("opt/slurm/etc/plugstack.conf.d/pyxis.conf")
    assert any(
        c.startswith("git clone --quiet --depth 1 --branch v0.20.0 https://github.com/NVIDIA/pyxis.git")
        for c in node.calls()
    )
    assert f"is the pinned commit {node.pinned('PYXIS_COMMIT')}" in node.log("enroot_pyxis")
    assert len([c for c in node.calls() if c.startswith("git clone")]) == 2


def test_aws_ofi_nccl_is_built_from_the_verified_release(make_node: MakeNode) -> None:
    node = make_node()
    (node.root / "opt/amazon/ofi-nccl/lib/libnccl-net.so").unlink()
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 0, proc.stderr + node.log("nccl_efa")
    assert node.text("etc/ld.so.conf.d/mlcluster-nccl-efa.conf") == "/opt/aws-ofi-nccl/lib\n/opt/amazon/efa/lib64\n"
    urls = [c.split()[-1] for c in node.calls() if c.startswith("curl ")]
    assert urls[0] == "https://github.com/aws/aws-ofi-nccl/releases/download/v1.19.0/aws-ofi-nccl-1.19.0.tar.gz"
    assert "aws-ofi-nccl 1.19.0: https://github.com/aws/aws-ofi-nccl/releases/download/v1.19.0/" in node.log("nccl_efa")


#: What NVIDIA's CUDA repositories list for NCCL's development package, in each tool's own format
#: (apt-cache(8) madison: "package | version | source"; dnf/yum list --showduplicates: "name.arch version repo").
#: The 2.27.7-1 builds are the ones public pins name (libnccl2/libnccl-dev 2.27.7-1+cuda12.4, +cuda12.9 and
#: +cuda13.0: Dockerfiles and install scripts on GitHub, and NVIDIA's redist archives nccl_2.27.7-1+cuda13.0);
#: neighbouring releases show that only the pinned NCCL counts.
APT_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages"
NCCL_BUILDS = ("2.26.5-1+cuda12.9", "2.27.7-1+cuda12.4", "2.27.7-1+cuda12.9", "2.27.7-1+cuda13.0", "2.28.3-1+cuda12.8")
MADISON = "".join(f" libnccl-dev | {v} | {APT_REPO}\n" for v in reversed(NCCL_BUILDS))
DNF_LIST = "Available Packages\n" + "".join(f"libnccl-devel.x86_64    {v}    cuda-rhel9-x86_64\n" for v in NCCL_BUILDS)


def nccl_node(make_node: MakeNode, os_release: str, cuda: str, driver: str | None) -> PclusterNode:
    """A node without NCCL, with CUDA ``cuda`` (version.json), a driver for CUDA ``driver`` (nvidia-smi's header;
    None: nvidia-smi prints nothing) and the repository's NCCL builds."""
    node = make_node(os_release=os_release)
    (node.root / "usr/local/cuda/include/nccl.h").unlink()
    (node.root / "usr/local/cuda/version.json").write_text(
        '{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "' + cuda + '"\n   },\n'
        '   "cuda_cccl" : {\n      "version" : "12.9.27"\n   }\n}\n'
    )
    listing = node.state / "package-versions"
    listing.write_text(MADISON if os_release == UBUNTU else DNF_LIST)
    node.extra_env["STUB_PACKAGE_VERSIONS"] = str(listing)
    if driver is not None:
        (node.bin / "nvidia-smi.gpu").write_text(
            "#!/bin/sh\n"
            "echo '+-----------------------------------------------------------------------------------------+'\n"
            f"echo '| NVIDIA-SMI 570.172.08             Driver Version: 570.172.08     CUDA Version: {driver}     |'\n"
        )
    return node


@pytest.mark.parametrize(
    ("os_release", "cuda", "driver", "build"),
    [
        (AMAZON_LINUX, "12.9.1", None, "12.9"),  # published for the toolkit's own CUDA
        (UBUNTU, "12.9.1", "12.9", "12.9"),
        (UBUNTU, "12.8.1", "12.8", "12.4"),  # none for 12.8; 12.9 is newer than the driver: the nearest older one
        (UBUNTU, "12.8.1", "13.0", "12.9"),  # a newer driver takes the nearest, 12.9
        (AMAZON_LINUX, "12.6.3", "12.6", "12.4"),
        (UBUNTU, "13.0.2", "13.0", "13.0"),  # CUDA 13: never a 12.x build
    ],
)
def test_nccl_is_the_published_build_nearest_the_nodes_cuda_within_its_driver(
    make_node: MakeNode, os_release: str, cuda: str, driver: str | None, build: str
) -> None:
    """No NCCL on the AMI: the pinned release, in the build the repository lists that is nearest the node's CUDA
    and not newer than its driver supports (nvidia-smi), runtime and headers; never the repository's newest."""
    node = nccl_node(make_node, os_release, cuda, driver)
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 1  # the stub package manager installs no files: the step says so
    installed = [line for line in (node.state / "pkgs").read_text().splitlines() if "nccl" in line]
    if os_release == UBUNTU:
        assert installed == [f"libnccl2=2.27.7-1+cuda{build}", f"libnccl-dev=2.27.7-1+cuda{build}"]
    else:
        assert installed == [f"libnccl-2.27.7-1+cuda{build}", f"libnccl-devel-2.27.7-1+cuda{build}"]
    assert "NCCL 2.27.7-1 installed but NCCL (nccl.h and libnccl.so) is not under" in node.log("nccl_efa")
    nearest = f"has no build for CUDA {cuda.rsplit('.', 1)[0]}: using the nearest"
    assert (nearest in node.log("nccl_efa")) == (build != cuda.rsplit(".", 1)[0])


@pytest.mark.parametrize(("cuda", "driver"), [("12.2.2", "12.2"), ("12.9.1", "12.2"), ("11.8.0", "12.4")])
def test_no_fitting_nccl_build_skips_nccl_tests_naming_the_builds_offered(
    make_node: MakeNode, cuda: str, driver: str
) -> None:
    """CUDA 12.2 (no 12.x build that old), a driver older than every build, CUDA 11: a warning naming what the
    repository offers; nccl-tests are not built, the rest of the step still runs."""
    node = nccl_node(make_node, UBUNTU, cuda, driver)
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 0, proc.stderr
    major_minor = cuda.rsplit(".", 1)[0]
    assert (
        f"no build of libnccl-dev 2.27.7-1 fits CUDA {major_minor} (driver: up to CUDA {driver}); the repositories "
        "offer it for CUDA: 12.4, 12.9, 13.0; nccl-tests not installed at /opt/mlcluster/nccl-tests/bin"
    ) in node.log("nccl_efa")
    assert not [line for line in (node.state / "pkgs").read_text().splitlines() if "nccl" in line]
    assert not (node.root / "opt/mlcluster/nccl-tests").exists()
    assert "FI_PROVIDER=efa" in node.text("etc/nccl.conf")  # the plugin and environment are still set up


def test_no_nccl_in_any_repository_says_none(make_node: MakeNode) -> None:
    node = nccl_node(make_node, AMAZON_LINUX, "12.4.1", None)
    (node.state / "package-versions").write_text("")
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 0, proc.stderr
    assert "offer it for CUDA: none; nccl-tests not installed" in node.log("nccl_efa")


@pytest.mark.parametrize(
    ("os_release", "manager_file"),
    [(UBUNTU, "etc/apt/sources.list.d/neuron.list"), (ROCKY, "etc/yum.repos.d/neuron.repo")],
)
def test_neuron_sdk_at_pinned_versions_with_a_verified_key(
    make_node: MakeNode, os_release: str, manager_file: str
) -> None:
    node = make_node(os_release=os_release, gpu=False)
    proc = node.run("compute", "neuron")
    assert proc.returncode == 0, proc.stderr + node.log("neuron")
    versions = {p.name: p.read_text().strip() for p in (node.state / "versions").iterdir()}
    assert versions == {
        "aws-neuronx-dkms": "2.26.5.0",
        "aws-neuronx-runtime-lib": "2.30.51.0",
        "aws-neuronx-collectives": "2.30.59.0",
        "aws-neuronx-tools": "2.28.23.0",
    }
    assert "Neuron SDK 2.28.0 system packages ready" in node.log("neuron")
    repo = node.text(manager_file)
    if os_release == UBUNTU:
        assert "signed-by=/etc/apt/keyrings/neuron.gpg" in repo
        key_file = node.root / "etc/apt/keyrings/neuron.gpg"
        assert key_file.read_bytes()[:1] != b"-"  # dearmored for apt
    else:
        assert "gpgkey=file:///etc/pki/rpm-gpg/mlcluster-neuron.asc" in repo and "gpgcheck=1" in repo
        assert node.text("etc/pki/rpm-gpg/mlcluster-neuron.asc").startswith("-----BEGIN PGP PUBLIC KEY BLOCK")
    # Again: the installed key still has the pinned fingerprint, so nothing is fetched or installed.
    calls = len(node.calls())
    assert node.run("compute", "neuron").returncode == 0
    assert [c for c in node.calls()[calls:] if c.startswith(("curl", "dnf", "apt-get"))] == []


def test_rhel_docker_ce_and_nvidia_keys_are_verified(make_node: MakeNode) -> None:
    node = make_node(os_release=ROCKY)
    proc = node.run("compute", "docker")
    assert proc.returncode == 0, proc.stderr + node.log("docker")
    assert "gpgkey=file:///etc/pki/rpm-gpg/mlcluster-docker-ce.asc" in node.text("etc/yum.repos.d/docker-ce.repo")
    toolkit = node.text("etc/yum.repos.d/nvidia-container-toolkit.repo")
    assert (
        "repo_gpgcheck=1" in toolkit
        and "gpgkey=file:///etc/pki/rpm-gpg/mlcluster-nvidia-container-toolkit.asc" in toolkit
    )
    assert all("http" not in line for line in toolkit.splitlines() if line.startswith("gpgkey"))


@pytest.mark.parametrize(
    ("os_release", "unavailable"),
    [('NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2"\n', ""), (None, "spal-release")],
    ids=["alinux2", "alinux2023-without-spal"],
)
def test_no_rootless_podman_package_is_said_not_failed(
    make_node: MakeNode, os_release: str | None, unavailable: str
) -> None:
    node = make_node(gpu=False, **({"os_release": os_release} if os_release else {}))
    node.extra_env["STUB_UNAVAILABLE"] = unavailable
    proc = node.run("compute", "docker")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: rootless Podman is not packaged for Amazon Linux" in node.log("docker")
    assert "podman" not in (node.state / "pkgs").read_text().split()
    assert not (node.root / "etc/containers/storage.conf").exists()


def test_alinux2023_gets_podman_from_spal(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    assert node.run("compute", "docker").returncode == 0
    installed = (node.state / "pkgs").read_text().split()
    assert installed.index("spal-release") < installed.index("podman")


@pytest.mark.parametrize("os_release", [UBUNTU, ROCKY], ids=["ubuntu2204", "rocky9"])
def test_other_operating_systems_run_every_step_once(make_node: MakeNode, os_release: str) -> None:
    node = make_node(os_release=os_release)
    proc = node.run("compute", *GPU_STEPS, "neuron")
    assert proc.returncode == 0, proc.stderr
    assert node.user_dirs(ALICE).returncode == 0
    assert node.owner_mode(f"scratch/enroot/tmp/user-{ALICE}") == (ALICE, "0o700")
    assert node.owner_mode(NCCL_TESTS_ALL_REDUCE.lstrip("/")) == (0, "0o755")
    before = node.tree()
    calls = len(node.calls())
    assert node.run("compute", *GPU_STEPS, "neuron").returncode == 0
    assert node.tree() == before
    assert [c for c in node.calls()[calls:] if c.startswith(("curl", "dnf", "apt-get", "make", "git"))] == []
