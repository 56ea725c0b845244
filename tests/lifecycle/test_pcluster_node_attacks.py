"""Attacks on the ParallelCluster node scripts by a second, unprivileged user of the node.

On the fake node of ``pcluster_sandbox`` (real ``chown``, ``stat`` and ``gpg``), alice
(uid 2001, dropped to with ``setpriv``) plants links and folders before the root-run
steps and the per-user folder helper run, swaps a file during a download, and the
network serves tampered artifacts and keys. Each is refused with a message naming
what was wrong; nothing is adopted, chowned, chmodded or leaked.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lifecycle.pcluster_sandbox import (
    ALICE,
    BOB,
    NCCL_TESTS_TARBALL,
    OFI_TARBALL,
    UBUNTU,
    PclusterNode,
    SigningKey,
    make_key,
    sandbox_base,
)

#: The fake node needs real ownership: root runs the steps, ``setpriv`` drops to the users.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real chown, setpriv and root-owned folders")

MakeNode = Callable[..., PclusterNode]
SECRET = "root:$6$secret-hash:19000:0:99999:7:::\n"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[SigningKey, SigningKey]:
    """The key the node trusts (pinned) and one an attacker signs with."""
    base = tmp_path_factory.mktemp("gnupg")
    return make_key(base / "good", "mlcluster-test"), make_key(base / "evil", "attacker")


@pytest.fixture
def make_node(keys: tuple[SigningKey, SigningKey]) -> Iterator[MakeNode]:
    with sandbox_base() as base:
        count = iter(range(100))

        def make(**kwargs: Any) -> PclusterNode:
            node = PclusterNode(base / f"node{next(count)}", keys[0], **kwargs)
            node.add("etc/shadow", SECRET, 0o600)
            return node

        yield make


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_shadow_untouched(node: PclusterNode) -> None:
    assert node.text("etc/shadow") == SECRET
    assert node.owner_mode("etc/shadow") == (0, "0o600")
    leak = node.as_user(ALICE, 'cat "$ROOT/etc/shadow"')
    assert leak.returncode != 0 and "secret-hash" not in leak.stdout


def test_a_planted_folder_under_the_world_writable_scratch_is_not_adopted(make_node: MakeNode) -> None:
    node = make_node()
    # /scratch is 1777: before the first run alice makes the Enroot root and links its cache to /etc.
    plant = node.as_user(ALICE, 'mkdir "$ROOT/scratch/enroot" && ln -s "$ROOT/etc" "$ROOT/scratch/enroot/cache"')
    assert plant.returncode == 0, plant.stderr
    etc_before = node.tree()
    proc = node.run("compute", "enroot_pyxis")
    assert proc.returncode == 1
    assert (
        "/scratch/enroot is owned by uid 2001, not root; someone made it before this step: remove it "
        "(and check what it holds), then run again" in node.log("enroot_pyxis")
    )
    assert node.owner_mode("scratch/enroot") == (ALICE, "0o755")
    assert node.owner_mode("etc") == (0, "0o755")
    assert node.text("etc/enroot/enroot.conf") == "# packaged default\n"  # nothing pointed at her folder
    changed = {k for k in node.tree() if k.startswith("etc/") and node.tree()[k] != etc_before.get(k)}
    assert changed == set()
    assert_shadow_untouched(node)


def test_a_planted_link_in_place_of_a_root_is_refused(make_node: MakeNode) -> None:
    node = make_node()
    secret_dir = node.root / "root"
    secret_dir.mkdir(mode=0o700)
    plant = node.as_user(ALICE, 'ln -s "$ROOT/root" "$ROOT/scratch/enroot"')
    assert plant.returncode == 0, plant.stderr
    proc = node.run("compute", "enroot_pyxis")
    assert proc.returncode == 1
    assert "/scratch/enroot is a link or not a folder; someone else made it" in node.log("enroot_pyxis")
    assert node.owner_mode("root") == (0, "0o700")
    assert list(secret_dir.iterdir()) == []


def test_folders_left_by_an_older_world_writable_root_are_refused(make_node: MakeNode) -> None:
    node = make_node()
    # The state an older script left: /run/enroot 1777, where alice made bob's folder and a link.
    (node.root / "run/enroot").mkdir(mode=0o1777)
    (node.root / "run/enroot").chmod(0o1777)
    plant = node.as_user(
        ALICE,
        f'mkdir "$ROOT/run/enroot/user-{BOB}" && ln -s "$ROOT/etc/shadow" "$ROOT/run/enroot/user-1000"',
    )
    assert plant.returncode == 0, plant.stderr
    proc = node.run("compute", "enroot_pyxis")
    assert proc.returncode == 0, proc.stderr
    assert "set /run/enroot to mode 0755" in node.log("enroot_pyxis")
    assert node.owner_mode("run/enroot") == (0, "0o755")

    refused = node.user_dirs(BOB)
    assert refused.returncode == 1
    assert f"/run/enroot/user-{BOB} is owned by uid {ALICE}, not bob ({BOB}); refused (remove it)" in refused.stderr
    assert node.owner_mode(f"run/enroot/user-{BOB}") == (ALICE, "0o755")  # not adopted, not chowned

    linked = node.user_dirs("ec2-user")
    assert linked.returncode == 1
    assert "/run/enroot/user-1000 is a link or not a folder; refused for ec2-user (remove it)" in linked.stderr
    assert_shadow_untouched(node)


def test_a_root_folder_given_to_a_user_is_refused_by_the_folder_helper(make_node: MakeNode) -> None:
    """A root of the per-user folders that someone chowned to alice (0755, not writable by others) is refused:
    alice could rename or swap bob's folder in it."""
    node = make_node()
    assert node.run("compute", "enroot_pyxis").returncode == 0
    os.chown(node.root / "run/enroot", ALICE, ALICE)
    refused = node.user_dirs(BOB)
    assert refused.returncode == 1
    assert (
        f"/run/enroot must be root's and writable only by root (owner uid {ALICE}, mode 755); no folder made for bob"
        in refused.stderr
    )
    assert sorted(p.name for p in (node.root / "run/enroot").iterdir()) == []


def test_users_cannot_create_or_swap_anything_root_works_in(make_node: MakeNode) -> None:
    node = make_node()
    assert node.run("compute", "docker", "enroot_pyxis").returncode == 0
    assert node.user_dirs(ALICE).returncode == 0
    for attempt in (
        f'mkdir "$ROOT/run/enroot/user-{BOB}"',
        f'ln -s "$ROOT/etc" "$ROOT/scratch/enroot/tmp/user-{BOB}"',
        f'mkdir "$ROOT/scratch/containers/user-{BOB}"',
        f'mv "$ROOT/scratch/enroot/data/user-{ALICE}" "$ROOT/scratch/enroot/data/user-{BOB}"',
        'touch "$ROOT/var/lib/mlcluster/work/planted"',
        'touch "$ROOT/etc/mlcluster/user-dirs.d/evil.conf"',
    ):
        result = node.as_user(ALICE, attempt)
        assert result.returncode != 0, attempt
        assert "Permission denied" in result.stderr, attempt
    made = node.user_dirs(BOB)
    assert made.returncode == 0, made.stderr
    assert node.owner_mode(f"scratch/enroot/data/user-{BOB}") == (BOB, "0o700")


def test_a_file_swapped_during_a_download_cannot_reach_the_build(make_node: MakeNode) -> None:
    node = make_node()
    (node.root / "opt/amazon/ofi-nccl/lib/libnccl-net.so").unlink()
    record = node.base / "swap.log"
    hook = node.base / "swap.sh"
    hook.write_text(
        "#!/bin/bash\n"
        f'if setpriv --reuid={ALICE} --regid={ALICE} --clear-groups bash -c \'echo evil > "$1"\' _ "$1" 2>/dev/null; '
        f"then echo swapped >>{record}; else echo refused >>{record}; fi\n"
    )
    hook.chmod(0o755)
    node.extra_env["STUB_CURL_HOOK"] = str(hook)
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 0, proc.stderr + node.log("nccl_efa")
    assert record.read_text().split() == ["refused", "refused"]  # aws-ofi-nccl, nccl-tests
    assert node.text("etc/ld.so.conf.d/mlcluster-nccl-efa.conf").startswith("/opt/aws-ofi-nccl/lib\n")
    assert node.owner_mode("var/lib/mlcluster/work") == (0, "0o700")


@pytest.mark.parametrize(
    ("served", "artifact", "url", "missing"),
    [
        (
            "aws-ofi-nccl-1.19.0.tar.gz",
            "aws-ofi-nccl 1.19.0",
            "https://github.com/aws/aws-ofi-nccl/releases/download/v1.19.0/aws-ofi-nccl-1.19.0.tar.gz",
            "opt/aws-ofi-nccl",
        ),
        (
            "v2.17.6.tar.gz",
            "nccl-tests 2.17.6",
            "https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz",
            "opt/mlcluster/nccl-tests",
        ),
    ],
)
def test_a_tampered_download_stops_the_step(
    make_node: MakeNode, served: str, artifact: str, url: str, missing: str
) -> None:
    node = make_node()
    (node.root / "opt/amazon/ofi-nccl/lib/libnccl-net.so").unlink()
    good = OFI_TARBALL if served.startswith("aws") else NCCL_TESTS_TARBALL
    tampered = good + b"\x00trojan"
    node.serve(served, tampered)
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 1
    expected = (
        f"{artifact}: SHA-256 mismatch for {url}: expected {hashlib.sha256(good).hexdigest()}, "
        f"got {hashlib.sha256(tampered).hexdigest()}; not installed"
    )
    assert expected in node.log("nccl_efa")
    assert "step 'nccl_efa' failed" in proc.stderr
    assert not (node.root / missing).exists()
    assert not (node.root / "opt/mlcluster/nccl-tests/bin/all_reduce_perf").exists()
    leftovers = list((node.root / "var/lib/mlcluster/work").rglob("*.tar.gz"))
    assert leftovers == []


@pytest.mark.parametrize(
    ("os_release", "step", "served", "repo_file"),
    [
        (UBUNTU, "neuron", "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB", "etc/apt/sources.list.d/neuron.list"),
        (None, "neuron", "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB", "etc/yum.repos.d/neuron.repo"),
        (UBUNTU, "docker", "gpgkey", "etc/apt/sources.list.d/nvidia-container-toolkit.list"),
    ],
)
def test_a_repository_key_with_another_fingerprint_is_refused(
    make_node: MakeNode,
    keys: tuple[SigningKey, SigningKey],
    os_release: str | None,
    step: str,
    served: str,
    repo_file: str,
) -> None:
    node = make_node(**({"os_release": os_release} if os_release else {}))
    node.serve(served, keys[1].armored)
    proc = node.run("compute", step)
    assert proc.returncode == 1
    log = node.log(step)
    assert "repository key fingerprint mismatch for https://" in log
    assert f"expected {keys[0].fingerprint}, got {keys[1].fingerprint}; repository not added" in log
    assert not (node.root / repo_file).exists()
    assert not any(c.startswith(("dnf", "apt-get")) and "aws-neuronx" in c for c in node.calls())


def test_a_moved_pyxis_tag_is_not_built(make_node: MakeNode) -> None:
    node = make_node(gpu=False)
    (node.root / "opt/slurm/lib/slurm/spank_pyxis.so").unlink()
    node.extra_env["STUB_GIT_HEAD"] = "0" * 40
    proc = node.run("head", "enroot_pyxis")
    assert proc.returncode == 1
    assert (
        f"Pyxis 0.20.0: https://github.com/NVIDIA/pyxis.git tag v0.20.0 is commit {'0' * 40}, "
        f"expected {node.pinned('PYXIS_COMMIT')}; not built" in node.log("enroot_pyxis")
    )
    assert not (node.root / "usr/local/lib/slurm/spank_pyxis.so").exists()
    assert not any(c.startswith("make") for c in node.calls())


def test_no_pin_means_no_download(make_node: MakeNode) -> None:
    node = make_node()
    (node.root / "opt/amazon/ofi-nccl/lib/libnccl-net.so").unlink()
    node.pin(OFI_NCCL_SHA256="")
    proc = node.run("compute", "nccl_efa")
    assert proc.returncode == 1
    assert "aws-ofi-nccl 1.19.0: no pinned SHA-256 for https://" in node.log("nccl_efa")
    assert not any(c.startswith("curl") for c in node.calls())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no user: give a user name or uid, or run from a Slurm prolog or pam_exec"),
        ({"SLURM_JOB_UID": "4242"}, "unknown user '4242'"),
        ({"PAM_USER": "mallory"}, "unknown user 'mallory'"),
    ],
)
def test_the_folder_helper_needs_a_known_user(make_node: MakeNode, env: dict[str, str], message: str) -> None:
    node = make_node()
    assert node.run("compute", "enroot_pyxis").returncode == 0
    result = node.run_root("bash", str(node.root / "opt/mlcluster/bin/mlcluster-user-dirs"), **env)
    assert result.returncode == 1
    assert message in result.stderr
    assert sorted(p.name for p in (node.root / "run/enroot").iterdir()) == []


def test_a_setgid_root_folder_loses_the_bit_and_is_set_once(make_node: MakeNode) -> None:
    """/run/enroot left 2775 (new entries would take its group) becomes 0755, and the next run leaves it: with a
    plain `chmod 0755` GNU chmod kept the bit, so every run logged the change (and counted a change) again."""
    node = make_node()
    (node.root / "run/enroot").mkdir(mode=0o755)
    (node.root / "run/enroot").chmod(0o2775)
    proc = node.run("compute", "enroot_pyxis")
    assert proc.returncode == 0, proc.stderr
    assert "set /run/enroot to mode 0755" in node.log("enroot_pyxis")
    assert node.owner_mode("run/enroot") == (0, "0o755")
    again = node.run("compute", "enroot_pyxis")
    assert again.returncode == 0, again.stderr
    assert node.log("enroot_pyxis").count("set /run/enroot to mode 0755") == 1
