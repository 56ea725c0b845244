"""A fake ParallelCluster node for rehearsing the node scripts (``mlcluster/lifecycle/pcluster``).

``PclusterNode`` builds a root folder that looks like a node from a ParallelCluster AMI
(Enroot with its extra hooks, Pyxis, EFA with libfabric and Open MPI, aws-ofi-nccl, CUDA
and NCCL, a 1777 ``/scratch`` of instance store, ``/opt/slurm`` with its prolog folder),
a copy of the node scripts whose ``pins.sh`` trusts the harness's own artifacts and test
key, and stub commands for what would change this machine: package managers, systemd,
git, make, ldconfig, curl (serving files from ``downloads`` by name), the account tools
(editing the fake ``/etc/passwd`` and ``/etc/group``). Real coreutils, ``chown``, ``stat``,
``tar``, ``sha256sum`` and ``gpg`` run as usual, so ownership and modes on disk are real
and an unprivileged user (``setpriv``) can try to plant things between runs.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mlcluster.lifecycle.exporters import EXPORTER_SCRIPTS
from mlcluster.lifecycle.pcluster import ENTRY_SCRIPT, PCLUSTER_DIR

#: Unprivileged users of the fake node (numeric ids only: nothing is added to this machine).
ALICE = 2001
BOB = 2002
#: The uid and gid the useradd stub gives the exporters' system user.
EXPORTER = 995

AMAZON_LINUX = 'NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2023"\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
ROCKY = 'NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.4"\n'

LOG = 'printf "%s\\n" "${0##*/} $*" >>"$STUB_LOG"\n'
#: ``listed LINE FILE``: LINE is a whole line of FILE (``grep -qxF`` without a process), for the stubs' state.
LISTED = """listed() {
  local line
  [ -f "$2" ] || return 1
  while IFS= read -r line || [ -n "$line" ]; do [ "$line" = "$1" ] && return 0; done <"$2"
  return 1
}
"""

STUBS: dict[str, str] = {
    "rpm": """[ "$1" = -q ] || exit 2
for name do :; done
listed "$name" "$STUB_STATE/pkgs" || exit 1
if [ "$2" = --qf ]; then cat "$STUB_STATE/versions/$name" 2>/dev/null || echo 1.0; fi
""",
    "dpkg-query": """for name do :; done
listed "$name" "$STUB_STATE/pkgs" || exit 1
case "$*" in
  *Version*) cat "$STUB_STATE/versions/$name" 2>/dev/null || printf 1.0 ;;
  *) echo "install ok installed" ;;
esac
""",
    "dpkg": "echo amd64\n",
    # madison and --showduplicates list the versions a repository offers: the file STUB_PACKAGE_VERSIONS, in the
    # tool's own format (none when unset).
    "apt-cache": 'if [[ $1 == madison ]]; then cat "${STUB_PACKAGE_VERSIONS:-/dev/null}"; exit; fi\n'
    '[[ " ${STUB_UNAVAILABLE:-} " != *" ${*: -1} "* ]]\n',
    "dnf": """if [[ " $* " == *" --showduplicates "* ]]; then cat "${STUB_PACKAGE_VERSIONS:-/dev/null}"; exit; fi
if [[ " $* " == *" list "* ]]; then [[ " ${STUB_UNAVAILABLE:-} " != *" ${*: -1} "* ]]; exit; fi
skip=0
for a in "$@"; do
  if ((skip)); then skip=0; continue; fi
  case "$a" in
    -o) skip=1 ;;
    -*|install|update) ;;
    *)
      name="$a" version=""
      if [[ "$a" =~ ^(.+)[-=]([0-9][0-9.]*)\\*$ ]]; then name="${BASH_REMATCH[1]}"; version="${BASH_REMATCH[2]}"; fi
      if [[ " ${STUB_FAIL_PACKAGE:-} " == *" $name "* ]]; then echo "stub: no package $name" >&2; exit 1; fi
      echo "$name" >>"$STUB_STATE/pkgs"
      if [[ -n "$version" ]]; then mkdir -p "$STUB_STATE/versions"; echo "$version" >"$STUB_STATE/versions/$name"; fi
      case "$name" in enroot) ln -sf "$STUB_BIN/enroot.pkg" "$STUB_BIN/enroot" ;; esac
      ;;
  esac
done
""",
    "systemctl": """for unit do :; done
case "$1" in
  is-enabled) listed "$unit" "$STUB_STATE/enabled" ;;
  is-active) listed "$unit" "$STUB_STATE/active" ;;
  enable) echo "$unit" >>"$STUB_STATE/enabled" ;;
  start|restart) echo "$unit" >>"$STUB_STATE/active" ;;
esac
""",
    "getent": """case "$1" in passwd | group) ;; *) exit 2 ;; esac
awk -F: -v key="$2" '$1 == key || $3 == key { print; found = 1 } END { exit !found }' "$MLCLUSTER_ROOT/etc/$1"
""",
    "groupadd": 'echo "$1:x:990:" >>"$MLCLUSTER_ROOT/etc/group"\n',
    "useradd": f"""name="${{*: -1}}"
grep -q "^$name:" "$MLCLUSTER_ROOT/etc/passwd" && {{ echo "useradd: user '$name' already exists" >&2; exit 9; }}
echo "$name:x:{EXPORTER}:{EXPORTER}::/nonexistent:/usr/sbin/nologin" >>"$MLCLUSTER_ROOT/etc/passwd"
echo "$name:x:{EXPORTER}:" >>"$MLCLUSTER_ROOT/etc/group"
""",
    "docker": """for image do :; done
images="$STUB_STATE/images"
case "$1" in
  inspect) listed "$image" "$images" ;;
  pull) echo "$image" >>"$images" ;;
esac
""",
    "usermod": """group="$2" user="$3"
sed -i -e "/^${group}:.*:$/ s/$/${user}/" -e "t" -e "/^${group}:/ s/$/,${user}/" "$MLCLUSTER_ROOT/etc/group"
""",
    "curl": """out="" url="${*: -1}"
while (($#)); do [[ "$1" == -o ]] && out="$2"; shift; done
name="${url##*/}"
[[ -f "$STUB_DOWNLOADS/$name" ]] || { echo "curl stub: 404 $url" >&2; exit 22; }
cp "$STUB_DOWNLOADS/$name" "$out"
if [[ -n "${STUB_CURL_HOOK:-}" ]]; then "$STUB_CURL_HOOK" "$out"; fi
""",
    "git": """if [[ "$1" == -C && "$3" == rev-parse ]]; then echo "$STUB_GIT_HEAD"; exit 0; fi
dir="${*: -1}"
[[ -e "$dir" ]] && { echo "fatal: destination path '$dir' already exists" >&2; exit 128; }
mkdir -p "$dir"
if [[ -n "${STUB_GIT_FAIL_ONCE:-}" && ! -e "$STUB_STATE/git-failed" ]]; then
  touch "$STUB_STATE/git-failed"; echo "fatal: early EOF" >&2; exit 128
fi
echo "stub pyxis checkout" >"$dir/README"
""",
    "make": """dir="." destdir="" install=0 mpi=0
while (($#)); do
  case "$1" in
    -C) dir="$2"; shift ;;
    DESTDIR=*) destdir="${1#DESTDIR=}" ;;
    install) install=1 ;;
    MPI=1) mpi=1 ;;
  esac
  shift
done
if ((mpi)); then
  mkdir -p "$dir/build"
  for t in all_reduce_perf all_gather_perf broadcast_perf; do printf '#!/bin/sh\\necho %s\\n' "$t" >"$dir/build/$t"; chmod 755 "$dir/build/$t"; done
elif ((install)) && [[ -f "$dir/README" ]]; then
  mkdir -p "$destdir/usr/local/lib/slurm"; echo so >"$destdir/usr/local/lib/slurm/spank_pyxis.so"
elif ((install)); then
  mkdir -p "$destdir/opt/aws-ofi-nccl/lib"; echo so >"$destdir/opt/aws-ofi-nccl/lib/libnccl-net.so"
fi
""",
    "ldconfig": "",
    "scontrol": "",
    "sleep": "",
    "aws": 'src="${*: -2:1}"\ncp "$STUB_S3_DIR/${src##*/}" "${*: -1}"\n',
    "enroot.pkg": "exit 0\n",
    "nvidia-smi.gpu": "exit 0\n",
}
STUBS["yum"] = STUBS["dnf"]
STUBS["apt-get"] = STUBS["dnf"]
#: The stubs written in POSIX shell, run by /bin/sh (dash starts in about half of bash's time); the others need bash.
SH_STUBS = frozenset(
    {"rpm", "dpkg-query", "dpkg", "systemctl", "getent", "groupadd", "docker", "usermod", "ldconfig", "scontrol"}
    | {"sleep", "enroot.pkg", "nvidia-smi.gpu"}
)

ENROOT_HOOK = "#!/bin/bash\n# enroot's {name} (test copy)\n"


@dataclass(frozen=True)
class SigningKey:
    """An OpenPGP public key made for the tests: its armored text and fingerprint."""

    armored: bytes
    fingerprint: str


def make_key(home: Path, name: str) -> SigningKey:
    """A new ed25519 key in its own GnuPG home (about a second)."""
    home.mkdir(parents=True, mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    uid = f"{name} <{name}@example.com>"
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-keys", uid], env=env, check=True, capture_output=True, text=True
    ).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    armored = subprocess.run(["gpg", "--batch", "--armor", "--export", uid], env=env, check=True, capture_output=True)
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)
    return SigningKey(armored.stdout, fingerprint)


def source_tarball(top: str, files: dict[str, str]) -> bytes:
    """A .tar.gz with ``files`` (executable when they start with ``#!``) under ``top/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mode = 0o755 if text.startswith("#!") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


#: What the harness serves for the pinned downloads (by the URL's last path segment).
OFI_TARBALL = source_tarball("aws-ofi-nccl-1.19.0", {"configure": '#!/bin/sh\necho configured "$@" > configured.txt\n'})
NCCL_TESTS_TARBALL = source_tarball("nccl-tests-2.17.6", {"Makefile": "# nccl-tests (test copy)\n"})
NODE_EXPORTER_TARBALL = source_tarball(
    "node_exporter-1.8.2.linux-amd64", {"node_exporter": "#!/bin/sh\necho node_exporter (test copy)\n"}
)


@contextmanager
def sandbox_base() -> Iterator[Path]:
    """A fresh folder every user can traverse (pytest's own tmp folders are root-only), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="mlcluster-pcluster-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def manifest_args(folder: Path) -> list[str]:
    """A ``run.sh`` manifest for the files of ``folder`` as they are now: ``--sha256 NAME=HEX`` for each file
    run.sh may fetch (what the deploy renders for a queue)."""
    args: list[str] = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.is_symlink() or path.name == ENTRY_SCRIPT or path.suffix == ".pyc":
            continue
        if path.name != "__init__.py":
            args += ["--sha256", f"{path.name}={sha256(path.read_bytes())}"]
    return args


class PclusterNode:
    """One fake ParallelCluster node: run ``run.sh`` in it, plant things as a user, look at the result."""

    def __init__(
        self, base: Path, key: SigningKey, *, os_release: str = AMAZON_LINUX, gpu: bool = True, scratch: bool = True
    ) -> None:
        self.base = base
        self.root = base / "root"
        self.bin = base / "bin"
        self.state = base / "state"
        self.downloads = base / "downloads"
        self.scripts = base / "scripts"
        self.stub_log = base / "calls.log"
        self.key = key
        for folder in (self.bin, self.state, self.downloads):
            folder.mkdir(parents=True)
        self.extra_env: dict[str, str] = {}
        #: The manifest arguments run() passes; None: the one the deploy would render for ``scripts`` as they are.
        self.manifest: list[str] | None = None
        self._build_root(os_release, scratch)
        self._build_bin(gpu)
        self._build_scripts()
        self.serve("aws-ofi-nccl-1.19.0.tar.gz", OFI_TARBALL)
        self.serve("v2.17.6.tar.gz", NCCL_TESTS_TARBALL)
        self.serve("node_exporter-1.8.2.linux-amd64.tar.gz", NODE_EXPORTER_TARBALL)
        for name in ("gpgkey", "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB", "gpg"):
            self.serve(name, key.armored)

    # ------------------------------------------------------------ building

    def add(self, relative: str, content: str = "", mode: int = 0o644) -> Path:
        """Write a root-owned file of the fake node."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
        return path

    def _build_root(self, os_release: str, scratch: bool) -> None:
        self.root.mkdir()
        self.root.chmod(0o755)
        self.add("etc/os-release", os_release)
        self.add(
            "etc/passwd",
            "root:x:0:0::/root:/bin/bash\nec2-user:x:1000:1000::/home/ec2-user:/bin/bash\n"
            f"alice:x:{ALICE}:{ALICE}::/home/alice:/bin/bash\nbob:x:{BOB}:{BOB}::/home/bob:/bin/bash\n",
        )
        self.add("etc/group", f"root:x:0:\nec2-user:x:1000:\nalice:x:{ALICE}:\nbob:x:{BOB}:\n")
        self.add("etc/pam.d/sshd", "#%PAM-1.0\nsession include password-auth\n")
        self.add("etc/environment", "")
        if scratch:  # ParallelCluster's instance-store mount: world-writable, sticky
            (self.root / "scratch").mkdir()
            (self.root / "scratch").chmod(0o1777)
        (self.root / "run").mkdir()
        (self.root / "var/tmp").mkdir(parents=True)
        (self.root / "var/tmp").chmod(0o1777)
        for hook in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh"):
            self.add(f"usr/share/enroot/hooks.d/{hook}", ENROOT_HOOK.format(name=hook), 0o755)
        self.add("etc/enroot/enroot.conf", "# packaged default\n")
        self.add("opt/amazon/efa/bin/fi_info", "#!/bin/sh\n", 0o755)
        self.add("opt/amazon/efa/lib64/libfabric.so.1")
        self.add("opt/amazon/openmpi/bin/mpicc", "#!/bin/sh\n", 0o755)
        self.add("opt/amazon/ofi-nccl/lib/libnccl-net.so")
        self.add("usr/local/cuda/bin/nvcc", "#!/bin/sh\n", 0o755)
        self.add("usr/local/cuda/include/nccl.h", "/* nccl */\n")
        self.add("usr/local/cuda/lib64/libnccl.so.2")
        self.add("opt/slurm/lib/slurm/spank_pyxis.so")
        self.add("opt/slurm/include/slurm/spank.h", "/* spank */\n")
        self.add("opt/slurm/etc/scripts/prolog.d/90_pcluster_health_check_manager", "#!/bin/bash\n", 0o755)

    def _build_bin(self, gpu: bool) -> None:
        for name, body in STUBS.items():
            path = self.bin / name
            path.write_text(("#!/bin/sh\n" if name in SH_STUBS else "#!/bin/bash\n") + LOG + LISTED + body)
            path.chmod(0o755)
        (self.bin / "enroot").symlink_to(self.bin / "enroot.pkg")  # the AMI ships Enroot
        (self.state / "pkgs").write_text("enroot\n")
        if gpu:
            (self.bin / "nvidia-smi").symlink_to(self.bin / "nvidia-smi.gpu")

    def _build_scripts(self) -> None:
        shutil.copytree(PCLUSTER_DIR, self.scripts, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
        for shared in EXPORTER_SCRIPTS:  # uploaded to the same prefix from the shared folder
            shutil.copy2(shared, self.scripts / shared.name)
        self.pin(
            OFI_NCCL_SHA256=sha256(OFI_TARBALL),
            NCCL_TESTS_SHA256=sha256(NCCL_TESTS_TARBALL),
            NEURON_KEY_FINGERPRINT=self.key.fingerprint,
            DOCKER_KEY_FINGERPRINT_RHEL=self.key.fingerprint,
            NVIDIA_CONTAINER_KEY_FINGERPRINT=self.key.fingerprint,
        )
        pins = self.scripts / "pins.sh"
        text, count = re.subn(r"\[amd64\]=[0-9a-f]{64}", f"[amd64]={sha256(NODE_EXPORTER_TARBALL)}", pins.read_text())
        assert count == 1
        pins.write_text(text)

    def pin(self, **values: str) -> None:
        """Replace pins in the node's copy of ``pins.sh`` (the harness's artifacts instead of the real ones)."""
        path = self.scripts / "pins.sh"
        text = path.read_text()
        for name, value in values.items():
            text, count = re.subn(rf"^{name}=.*$", f"{name}={value}", text, flags=re.M)
            assert count == 1, name
        path.write_text(text)

    def pinned(self, name: str) -> str:
        """A value of the node's ``pins.sh``."""
        match = re.search(rf"^{name}=(.*)$", (self.scripts / "pins.sh").read_text(), flags=re.M)
        assert match, name
        return match.group(1)

    def serve(self, name: str, data: bytes) -> None:
        """What curl returns for any URL whose last path segment is ``name``."""
        (self.downloads / name).write_bytes(data)

    # ------------------------------------------------------------ running

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.base),
            "LANG": "C.UTF-8",
            "MLCLUSTER_ROOT": str(self.root),
            "MLCLUSTER_RETRY_ATTEMPTS": "2",
            "MLCLUSTER_RETRY_DELAY": "0",
            "STUB_LOG": str(self.stub_log),
            "STUB_STATE": str(self.state),
            "STUB_BIN": str(self.bin),
            "STUB_DOWNLOADS": str(self.downloads),
            "STUB_S3_DIR": str(self.scripts),
            "STUB_GIT_HEAD": self.pinned("PYXIS_COMMIT"),
            **self.extra_env,
        }

    def run(self, role: str, *steps: str, source: str | None = None) -> subprocess.CompletedProcess[str]:
        """``run.sh --role ROLE --source <scripts> STEP...`` as ParallelCluster runs it (as root)."""
        command = ["bash", str(self.scripts / "run.sh"), "--role", role, "--source", source or str(self.scripts)]
        return subprocess.run(
            [*command, *(self.manifest if self.manifest is not None else manifest_args(self.scripts)), *steps],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def run_root(self, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A command as root with the node's environment (e.g. the prolog the head node wrote)."""
        return subprocess.run(
            list(command), env={**self.env(), **env}, capture_output=True, text=True, timeout=60, check=False
        )

    def as_user(self, uid: int, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``bash -c SCRIPT`` as an unprivileged user (setpriv), with ROOT set to the node's root."""
        command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "bash", "-c", script]
        return subprocess.run(
            command,
            env={"PATH": "/usr/bin:/bin", "ROOT": str(self.root), "HOME": "/nonexistent", **env},
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def user_dirs(self, who: str | int) -> subprocess.CompletedProcess[str]:
        """The installed mlcluster-user-dirs for ``who``, as the Slurm prolog runs it."""
        helper = self.root / "opt/mlcluster/bin/mlcluster-user-dirs"
        return self.run_root("bash", str(helper), SLURM_JOB_UID=str(who))

    # ------------------------------------------------------------ looking

    def calls(self) -> list[str]:
        return self.stub_log.read_text().splitlines() if self.stub_log.exists() else []

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()

    def log(self, step: str) -> str:
        return self.text(f"var/log/mlcluster/{step}.log")

    def owner_mode(self, relative: str) -> tuple[int, str]:
        """(owner uid, octal mode) of a path of the node, without following a link."""
        info = (self.root / relative).lstat()
        return info.st_uid, oct(stat.S_IMODE(info.st_mode))

    def tree(self) -> dict[str, str]:
        """Every path under the root (logs and scratch work folders aside): content hash, owner, mode."""
        out = {}
        for path in sorted(self.root.rglob("*")):
            relative = str(path.relative_to(self.root))
            if relative.startswith(("var/log/", "var/lib/mlcluster/work/")):
                continue
            info = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if kind == "file" else ""
            out[relative] = f"{kind} {info.st_uid} {oct(stat.S_IMODE(info.st_mode))} {digest}"
        return out
