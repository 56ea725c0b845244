"""Issue 17, item 8 for the HyperPod steps: downloads are pinned and verified before use.

Repository keys are checked by fingerprint; Enroot, Pyxis and nccl-tests by commit and by the SHA-256
of their file list (``git ls-tree -r``, which carries every file's content hash), and Enroot's
submodules by the commits that list records. A tampered download stops the step with a message
naming the artifact, and nothing of it is installed or built.
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
    assert not any(a.startswith("make ") and "/pyxis" in a for a in sandbox.actions())
    assert not (sandbox.root / "usr/local/lib/slurm/spank_pyxis.so").exists()


def test_a_pyxis_checkout_at_another_commit_is_not_built(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    result = sandbox.run("on_create.sh", "add_users", "enroot_pyxis", STUB_GIT_HEAD="f" * 40, STUB_GIT_HEAD_FOR="pyxis")
    assert result.returncode != 0
    log = sandbox.read("/var/log/provision/enroot_pyxis.log")
    assert f"pyxis v0.20.0 from https://github.com/NVIDIA/pyxis.git does not match its pin (commit {'f' * 40}" in log
    assert not any(a.startswith("make ") and "/pyxis" in a for a in sandbox.actions())


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


# ---------------------------------------------------------------- Enroot, built from its pinned commit

ENROOT_COMMIT = "bd51f53b6fa954805ae3e1985c5dc7594ff66d05"  # what tag v4.1.2 of NVIDIA/enroot points to
ENROOT_TREE = "a28ff51efd779c5ee2a633e9cc2ef373ac6f1dca76832499ec0e28817a870463"
ENROOT_SUBMODULES = {  # the gitlinks of that tree
    "deps/linux-headers": "c79004ad7f82165c86396b11bc6958ee53febb63",
    "deps/makeself": "5742be6410bfad2c619fb1e98bf795e8fa0913c7",
    "deps/musl": "0784374d561435f7c787a555aeab8ede699ed298",
}
ENROOT_TOOLS = ("enroot", "enroot-mksquashovlfs", "enroot-aufs2ovlfs")


def index(actions: list[str], prefix: str) -> int:
    return next(i for i, action in enumerate(actions) if action.startswith(prefix))


def enroot_run(sandbox: Sandbox, **env: str) -> tuple[int, str]:
    result = sandbox.run("on_create.sh", "add_users", "enroot_pyxis", **env)
    return result.returncode, sandbox.read("/var/log/provision/enroot_pyxis.log")


def assert_no_enroot_installed(sandbox: Sandbox) -> None:
    actions = sandbox.actions()
    assert not any(a.startswith("make ") and "/enroot " in a for a in actions)
    assert not any(a.startswith("setcap ") for a in actions)
    assert not any(a.startswith("curl ") for a in actions)  # no fallback download of the .deb either
    for tool in ENROOT_TOOLS:
        assert not (sandbox.root / "usr/bin" / tool).exists()
    assert not (sandbox.root / "var/lib/mlcluster/enroot.version").exists()


def test_enroot_is_built_from_its_pinned_commit_and_submodules_with_the_release_caps(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    code, log = enroot_run(sandbox)
    assert code == 0, log
    actions = sandbox.actions()
    clone = index(actions, "git clone --quiet --no-checkout https://github.com/NVIDIA/enroot.git ")
    checkout = index(actions, "git -C ")
    assert clone < checkout and actions[checkout].endswith(f"/enroot checkout --quiet --detach {ENROOT_COMMIT}")
    assert f"enroot 4.1.2 verified at {ENROOT_COMMIT} (tree sha256 {ENROOT_TREE})" in log
    assert any(a.endswith("/enroot config submodule.deps/musl.url https://git.musl-libc.org/git/musl") for a in actions)
    for path, commit in ENROOT_SUBMODULES.items():
        assert f"enroot 4.1.2: submodule {path} verified at {commit}" in log
    build, install = (a for a in actions if a.startswith("make ") and "/enroot " in a)
    layout = "prefix= exec_prefix=/usr datarootdir=/usr/share"
    assert build.startswith("make CPPFLAGS=-DALLOW_SPECULATION -DINHERIT_FDS -C ") and build.endswith(f" {layout}")
    assert install.endswith(f" install {layout} DESTDIR={sandbox.root}")
    assert index(actions, "git -C ") < actions.index(build) < actions.index(install)
    # What `make setcap` and the enroot+caps package grant, after the install.
    assert [a for a in actions if a.startswith("setcap ")] == [
        f"setcap cap_sys_admin+pe {sandbox.root}/usr/bin/enroot-mksquashovlfs",
        f"setcap cap_sys_admin,cap_mknod+pe {sandbox.root}/usr/bin/enroot-aufs2ovlfs",
    ]
    assert sandbox.read("/var/lib/mlcluster/enroot.version") == f"4.1.2 {ENROOT_COMMIT}\n"
    assert not any(a.startswith("curl ") for a in actions)


def test_an_enroot_checkout_with_changed_files_is_refused_and_nothing_installed(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "node", ips=CONTROLLER_IP)
    code, log = enroot_run(sandbox, STUB_GIT_DATA=str(tampered_git_data(tmp_path, "enroot")))
    assert code != 0
    assert (
        f"enroot 4.1.2 from https://github.com/NVIDIA/enroot.git does not match its pin (commit {ENROOT_COMMIT}" in log
    )
    assert f"expected {ENROOT_COMMIT}, {ENROOT_TREE}); refusing to build it" in log
    assert_no_enroot_installed(sandbox)


def test_an_enroot_checkout_at_another_commit_is_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    code, log = enroot_run(sandbox, STUB_GIT_HEAD="f" * 40, STUB_GIT_HEAD_FOR="enroot")
    assert code != 0
    assert f"enroot 4.1.2 from https://github.com/NVIDIA/enroot.git does not match its pin (commit {'f' * 40}" in log
    assert_no_enroot_installed(sandbox)


def test_an_enroot_submodule_at_another_commit_is_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    code, log = enroot_run(sandbox, STUB_SUBMODULE_HEAD="e" * 40)
    assert code != 0
    commit = ENROOT_SUBMODULES["deps/linux-headers"]
    assert (
        f"enroot 4.1.2: submodule deps/linux-headers is at commit {'e' * 40}, not {commit} as the pinned tree "
        "records; refusing to build it"
    ) in log
    assert_no_enroot_installed(sandbox)


def test_an_unreachable_enroot_repository_is_retried_then_stops_the_step(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    code, log = enroot_run(sandbox, STUB_FAIL="git")
    assert code != 0
    assert "clone enroot 4.1.2: attempt 1/3 failed, retrying in 0s" in log
    assert "clone enroot 4.1.2: still failing after 3 attempt(s), giving up" in log
    assert_no_enroot_installed(sandbox)


def test_a_second_run_rebuilds_nothing_and_only_restores_lost_capabilities(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    assert enroot_run(sandbox)[0] == 0
    done = len(sandbox.actions())
    code, log = enroot_run(sandbox)
    assert code == 0
    assert sandbox.actions()[done:] == []
    assert f"enroot 4.1.2 ({ENROOT_COMMIT}) is installed" in log
    # Someone cleared a capability (setcap -r): the next run grants it again, without a rebuild.
    (sandbox.state / f"caps/{str(sandbox.root / 'usr/bin/enroot-aufs2ovlfs').replace('/', '_')}").unlink()
    done = len(sandbox.actions())
    assert enroot_run(sandbox)[0] == 0
    assert sandbox.actions()[done:] == [f"setcap cap_sys_admin,cap_mknod+pe {sandbox.root}/usr/bin/enroot-aufs2ovlfs"]


def test_a_packaged_enroot_is_removed_before_the_pinned_build(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.state / "dpkg").mkdir()
    (sandbox.state / "dpkg/enroot").write_text("3.4.1-1\n")  # an older .deb; no enroot+caps
    code, log = enroot_run(sandbox)
    assert code == 0, log
    actions = sandbox.actions()
    remove = next(i for i, a in enumerate(actions) if a.startswith("apt-get ") and " remove " in a)
    assert actions[remove].endswith(" remove enroot")
    build, install = (i for i, a in enumerate(actions) if a.startswith("make ") and "/enroot " in a)
    assert build < remove < install  # removed only once the verified build is ready to install
    assert "removing the packaged enroot before installing the pinned build" in log
    assert not (sandbox.state / "dpkg/enroot").exists()


def test_a_packaged_enroot_stays_when_the_pinned_build_cannot_be_fetched(tmp_path: Path) -> None:
    # A node of the older lifecycle keeps a working Enroot when the pinned source is unreachable (or fails its
    # pin, or does not build): the package is removed only once the verified build is ready to install.
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.state / "dpkg").mkdir()
    (sandbox.state / "dpkg/enroot").write_text("3.4.1-1\n")
    code, log = enroot_run(sandbox, STUB_FAIL="git")
    assert code != 0
    assert "clone enroot 4.1.2: still failing after 3 attempt(s), giving up" in log
    assert not any(a.startswith("apt-get ") and " remove " in a for a in sandbox.actions())
    assert (sandbox.state / "dpkg/enroot").read_text() == "3.4.1-1\n"


def test_the_pinned_enroot_accepts_the_digest_pinned_images_smoke_hands_pyxis() -> None:
    """Enroot parses `REGISTRY#IMAGE@sha256:...` only from v4.0.0 on (NVIDIA/enroot f380b11, docker::_parse_uri);
    3.5.0 calls it an invalid reference, so the smoke test's container step could never start."""
    import re

    from mlcluster.cli.smoke import DEFAULT_NCCL_IMAGE, DIGEST_PINNED
    from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR

    script = (HYPERPOD_DIR / "steps/enroot_pyxis.sh").read_text()
    version = re.search(r"^ENROOT_VERSION=(\d+)\.(\d+)\.(\d+)$", script, re.M)
    assert version is not None
    assert tuple(int(part) for part in version.groups()) >= (4, 0, 0)
    # the form enroot 4 reads: [USER@]REGISTRY#IMAGE@sha256:<64 hex>
    assert re.fullmatch(r"[^#/@]+#[a-z0-9._/-]+@sha256:[0-9a-f]{64}", DEFAULT_NCCL_IMAGE)
    assert DIGEST_PINNED.match(DEFAULT_NCCL_IMAGE)
