"""A fake HyperPod node for the lifecycle script tests.

The tests run as root: ``chown`` and ``setpriv`` are the real tools, so files get real owners and
the steps' work as a user (``setpriv``) really runs with that user's uid. ``as_user`` lets a test
plant links and folders as an unprivileged user before a run.

``Sandbox`` builds a root folder (``MLC_ROOT``) that looks like a fresh HyperPod Ubuntu node,
a copy of the lifecycle folder with the two generated JSON files, and stub commands that
record the calls which change the system (one line per call in ``actions.log``) and keep a
little state (services, packages, containers) so a second run can see what the first did.

PATH holds only the stubs and links to a short list of harmless real tools: a command the
scripts use without a stub fails with "command not found" instead of touching this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlcluster.lifecycle.exporters import EXPORTER_SCRIPTS
from mlcluster.lifecycle.hyperpod import (
    ENTRYPOINT,
    GENERATED_MARK,
    HYPERPOD_DIR,
    MANIFEST_MARK,
    generated_copies,
    manifest,
    render_on_create,
)

#: Real tools the scripts and stubs may use; nothing here changes the machine outside the sandbox.
SAFE_TOOLS = (
    *("awk", "basename", "bash", "cat", "chmod", "cmp", "cp", "cut", "date", "dirname", "env", "find", "flock"),
    *("grep", "head", "id", "ln", "ls", "mkdir", "mktemp", "mv", "nproc", "readlink", "rm", "sed", "sha256sum"),
    *("sleep", "sort", "stat", "tail", "tee", "timeout", "touch", "tr", "wc", "chown", "setpriv", "rmdir"),
    *("tar", "gzip", "gunzip", "printf", "base64"),
)

#: The nodes' python3 is the distribution's (Ubuntu's /usr/bin/python3): plan.py needs only the
#: standard library. Debian's here starts in a third of the time of a virtualenv's base interpreter
#: (whose site-packages .pth files import certifi at every start); without it, the test's own one.
NODE_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else os.path.realpath(sys.executable)

CONTROLLER_IP = "10.1.0.10"
WORKER_IP = "10.1.0.20"
LOGIN_IP = "10.1.0.30"

FEATURES: dict[str, object] = {
    "users": [{"name": "alice", "uid": 2001}, {"name": "bob", "uid": 2002}],
    "accounting": {"mode": "local", "endpoint": None, "secret_arn": None},
    "docker": True,
    "enroot_pyxis": True,
    "home_on_fsx": True,
    "observability": False,
}

PROVISIONING: dict[str, object] = {
    "version": "1.0.0",
    "workload_manager": "slurm",
    "controller_group": "controller-machine",
    "login_group": "login-group",
    "worker_groups": [{"instance_group_name": "worker-group-1", "partition_name": "p5"}],
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mountname": "abcdefgh",
}

#: Test data: the real ``git ls-tree -r`` listings of the pinned Enroot, Pyxis and nccl-tests commits.
DATA = Path(__file__).parent / "data"

#: The generated files HyperPodLifecycle uploads beside the scripts (on_create.sh's GENERATED_FILES).
GENERATED = ("mlcluster_features.json", "provisioning_parameters.json", "collector.yml", "collector_targets.json")

FSX_SOURCE = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh"


def resource_config(controller_ip: str = CONTROLLER_IP) -> dict[str, object]:
    """What HyperPod writes to /opt/ml/config/resource_config.json (the parts the scripts read)."""

    def group(name: str, *ips: str) -> dict[str, object]:
        return {
            "Name": name,
            "InstanceType": "ml.p5.48xlarge",
            "Instances": [
                {"InstanceName": f"{name}-{i}", "AgentIpAddress": f"172.16.0.{i}", "CustomerIpAddress": ip}
                for i, ip in enumerate(ips, start=1)
            ],
        }

    return {
        "ClusterConfig": {"ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc", "ClusterName": "ml"},
        "InstanceGroups": [
            group("controller-machine", controller_ip),
            group("login-group", LOGIN_IP),
            group("worker-group-1", WORKER_IP, "10.1.0.21"),
        ],
    }


PRELUDE = r"""#!/bin/bash
set -u
: "${MLC_ROOT:?the stubs only work inside a sandbox root}"
name=${0##*/}
act() { printf '%s\n' "$name $*" >>"$STUB_ACTIONS"; }
if [[ " ${STUB_FAIL:-} " == *" $name "* ]]; then
  echo "$name: simulated failure" >&2
  exit 1
fi
"""

#: iptables and ip6tables alike: rules kept one per line in STUB_STATE/<name>.rules (--check, --insert).
FIREWALL_STUB = r"""
rules=$STUB_STATE/$name.rules
touch "$rules"
args=()
for a in "$@"; do [[ $a == --wait ]] || args+=("$a"); done
rule="${args[*]:1}"
case ${args[0]} in
  --check) grep -qxF -- "$rule" "$rules" ;;
  --insert) act "$@"; echo "$rule" >>"$rules" ;;
  *) exit 2 ;;
esac
"""

#: Stub commands that are always on PATH.
STUBS: dict[str, str] = {
    "hostname": r"""
case ${1:-} in
  -I) echo "$STUB_IPS" ;;
  *) echo "$STUB_HOSTNAME" ;;
esac
""",
    # passwd and group: the entries whose name or id is the key, read by bash itself (no process).
    "getent": r"""
case $1 in
  passwd | group)
    found=1
    while IFS= read -r line; do
      IFS=: read -r entry_name _ entry_id _ <<<"$line"
      if [[ $entry_name == "$2" || $entry_id == "$2" ]]; then printf '%s\n' "$line"; found=0; fi
    done <"$MLC_ROOT/etc/$1"
    exit $found ;;
  hosts) echo "10.1.200.1 $2" ;;
  *) exit 2 ;;
esac
""",
    "mount": r"""
act "$@"
type="" opts=""
while getopts t:o: opt; do
  case $opt in t) type=$OPTARG ;; o) opts=$OPTARG ;; esac
done
shift $((OPTIND - 1))
if [[ $opts == remount,bind,* ]]; then
  # The mount point's flags change: the options of its line, not a new mount.
  awk -v target="$1" -v flags="${opts#remount,bind,}" \
    '$2 == target { $4 = $4 "," flags } { print }' "$MLC_ROOT/proc/mounts" >"$MLC_ROOT/proc/mounts.new"
  mv "$MLC_ROOT/proc/mounts.new" "$MLC_ROOT/proc/mounts"
  exit 0
fi
echo "$1 $2 $type $opts 0 0" >>"$MLC_ROOT/proc/mounts"
""",
    "mount.lustre": "exit 0\n",
    "systemctl": r"""
now=false args=()
for a in "$@"; do
  case $a in --quiet | -q) ;; --now) now=true ;; *) args+=("$a") ;; esac
done
unit=${args[1]:-}
unit=${unit%.service}
on() { [[ -d $STUB_STATE/systemd/$1 ]] || mkdir -p "$STUB_STATE/systemd/$1"; : >>"$STUB_STATE/systemd/$1/$unit"; }
off() { rm -f "$STUB_STATE/systemd/$1/$unit"; }
case ${args[0]} in
  is-active) [[ -e $STUB_STATE/systemd/active/$unit ]] ;;
  is-enabled) [[ -e $STUB_STATE/systemd/enabled/$unit ]] ;;
  enable) act "$@"; on enabled; if $now; then on active; fi ;;
  disable) act "$@"; off enabled; if $now; then off active; fi ;;
  start | restart) act "$@"; on active ;;
  stop) act "$@"; off active ;;
  daemon-reload) act "$@" ;;
  *) echo "systemctl stub: unsupported: $*" >&2; exit 3 ;;
esac
""",
    "apt-get": r"""
act "$@"
args=() skip=false
for a in "$@"; do
  if $skip; then skip=false; continue; fi
  case $a in -o) skip=true ;; -*) ;; *) args+=("$a") ;; esac
done
provide() {
  local cmd
  for cmd in "${@:2}"; do
    [[ -d $STUB_STATE/bin ]] || mkdir -p "$STUB_STATE/bin"
    ln -sf "$STUB_PKGBIN/$cmd" "$STUB_STATE/bin/$cmd"
  done
}
case ${args[0]} in
  update) ;;
  install)
    for p in "${args[@]:1}"; do
      if [[ $p == *.deb ]]; then
        [[ -f $p ]] || { echo "apt-get stub: no file $p" >&2; exit 100; }
        base=${p##*/}; base=${base%.deb}; pkg=${base%%_*}; version=${base#*_}; version=${version%_*}
      else
        pkg=${p%%=*}; version=1.0-stub
        if [[ $p == *=* ]]; then version=${p#*=}; fi
      fi
      [[ -d $STUB_STATE/dpkg ]] || mkdir -p "$STUB_STATE/dpkg"
      echo "$version" >"$STUB_STATE/dpkg/$pkg"
      case $pkg in
        docker-ce) provide "$pkg" docker
          grep -q '^docker:' "$MLC_ROOT/etc/group" || echo 'docker:x:998:' >>"$MLC_ROOT/etc/group"
          # The daemon's socket as the package leaves it: root:docker 0660 (docker.socket's SocketMode).
          mkdir -p "$MLC_ROOT/run" && : >"$MLC_ROOT/run/docker.sock"
          chown 0:998 "$MLC_ROOT/run/docker.sock" && chmod 660 "$MLC_ROOT/run/docker.sock" ;;
        mariadb-server) provide "$pkg" mysql mysqldump
          grep -q '^mysql:' "$MLC_ROOT/etc/passwd" || echo 'mysql:x:402:402::/nonexistent:/bin/false' >>"$MLC_ROOT/etc/passwd"
          mkdir -p "$MLC_ROOT/var/lib/mysql" && echo ibdata >"$MLC_ROOT/var/lib/mysql/ibdata1" ;;
        enroot) provide "$pkg" enroot ;;
        nvidia-container-toolkit) provide "$pkg" nvidia-ctk nvidia-container-cli ;;
      esac
    done ;;
  remove)
    for p in "${args[@]:1}"; do
      [[ -f $STUB_STATE/dpkg/$p ]] || { echo "E: Unable to locate package $p" >&2; exit 100; }
      rm -f "$STUB_STATE/dpkg/$p" "$STUB_STATE/bin/$p"
    done ;;
  *) echo "apt-get stub: unsupported: $*" >&2; exit 100 ;;
esac
""",
    "dpkg-query": r"""
fmt="" pkg=""
for a in "$@"; do
  case $a in -f=*) fmt=${a#-f=} ;; -W) ;; *) pkg=$a ;; esac
done
[[ -f $STUB_STATE/dpkg/$pkg ]] || { echo "dpkg-query: no packages found matching $pkg" >&2; exit 1; }
case $fmt in
  *Version*) printf '%s' "$(<"$STUB_STATE/dpkg/$pkg")" ;;
  *Status*) printf 'install ok installed' ;;
esac
""",
    "dpkg": r"""
[[ $1 == --print-architecture ]] && echo amd64
""",
    "useradd": r"""
act "$@"
uid="" gid="" create=false shell=/bin/sh home="" user_group=false
while (($# > 1)); do
  case $1 in
    --system) uid=${uid:-999}; gid=${gid:-999}; shift ;;
    --user-group) user_group=true; shift ;;
    --uid) uid=$2; shift 2 ;;
    --gid) gid=$2; shift 2 ;;
    --shell) shell=$2; shift 2 ;;
    --create-home) create=true; shift ;;
    --no-create-home) shift ;;
    --home-dir) home=$2; shift 2 ;;
    *) echo "useradd stub: unsupported $1" >&2; exit 2 ;;
  esac
done
echo "$1:x:$uid:$gid::${home:-/home/$1}:$shell" >>"$MLC_ROOT/etc/passwd"
if $user_group; then echo "$1:x:$gid:" >>"$MLC_ROOT/etc/group"; fi
if $create; then mkdir -p "$MLC_ROOT/home/$1"; cp -a "$MLC_ROOT/etc/skel/." "$MLC_ROOT/home/$1/"; fi
""",
    "groupadd": r"""
act "$@"
[[ $1 == --gid ]] || exit 2
echo "$3:x:$2:" >>"$MLC_ROOT/etc/group"
""",
    "usermod": r"""
act "$@"
edit() { awk -F: -v OFS=: "$@" >"$file.new" && mv "$file.new" "$file"; }
case $1 in
  --home) file=$MLC_ROOT/etc/passwd; edit -v n="$3" -v h="$2" '$1 == n { $6 = h } { print }' "$file" ;;
  --append) file=$MLC_ROOT/etc/group
    edit -v g="$3" -v n="$4" '$1 == g { $4 = ($4 == "" ? n : $4 "," n) } { print }' "$file" ;;
  *) exit 2 ;;
esac
""",
    "gpasswd": r"""
act "$@"
[[ $1 == --delete ]] || exit 2
file=$MLC_ROOT/etc/group
awk -F: -v OFS=: -v g="$3" -v n="$2" '$1 == g { split($4, m, ","); out = ""
  for (i in m) if (m[i] != n && m[i] != "") out = (out == "" ? m[i] : out "," m[i]); $4 = out } { print }' \
  "$file" >"$file.new" && mv "$file.new" "$file"
""",
    "iptables": FIREWALL_STUB,
    "ip6tables": FIREWALL_STUB,
    "setcap": r"""
# The capabilities of each file are kept in STUB_STATE/caps (one file per path); -v compares.
verify=false
if [[ $1 == -v ]]; then verify=true; shift; fi
state=$STUB_STATE/caps/${2//\//_}
if $verify; then
  [[ -f $state && $(cat "$state") == "$1" ]]
  exit
fi
[[ -f $2 ]] || { echo "setcap: failed to set capabilities on file '$2' (No such file or directory)" >&2; exit 1; }
act "$@"
mkdir -p "$STUB_STATE/caps"
echo "$1" >"$state"
""",
    "ssh-keygen": r"""
act "$@"
file="" comment=""
while (($# > 0)); do
  case $1 in -f) file=$2; shift 2 ;; -C) comment=$2; shift 2 ;; -t | -N) shift 2 ;; *) shift ;; esac
done
echo "FAKE PRIVATE KEY $comment" >"$file"
echo "ssh-ed25519 AAAAfake $comment" >"$file.pub"
""",
    "curl": r"""
act "$@"
out="" url=""
while (($# > 0)); do
  case $1 in -o) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac
done
if [[ -f $STUB_SERVE/${url##*/} ]]; then
  cp "$STUB_SERVE/${url##*/}" "$out"
else
  echo "downloaded from $url" >"$out"
fi
""",
    "git": r"""
act "$@"
case $1 in
  clone)
    url=${*: -2:1} dest=${*: -1} name=${url##*/}
    mkdir -p "$dest"
    echo "stub checkout" >"$dest/Makefile"
    cp "$STUB_GIT_DATA/${name%.git}.ls-tree" "$dest/.stub-tree" ;;
  -C)
    dir=$2
    case $3 in
      checkout) echo "${*: -1}" >"$dir/.stub-head" ;;
      rev-parse)  # STUB_GIT_HEAD: every checkout (or only the one named STUB_GIT_HEAD_FOR) is at that commit
        if [[ -n ${STUB_GIT_HEAD:-} && ${STUB_GIT_HEAD_FOR:-${dir##*/}} == "${dir##*/}" ]]; then
          echo "$STUB_GIT_HEAD"
        else
          cat "$dir/.stub-head"
        fi ;;
      ls-tree) cat "$dir/.stub-tree" ;;
      config) echo "$4 $5" >>"$dir/.stub-config" ;;
      submodule)
        case $5 in
          init) ;;
          update)  # each gitlink of the tree, checked out at its commit (or at STUB_SUBMODULE_HEAD)
            awk '$2 == "commit" { print $3, $4 }' "$dir/.stub-tree" | while read -r commit path; do
              mkdir -p "$dir/$path"
              echo "${STUB_SUBMODULE_HEAD:-$commit}" >"$dir/$path/.stub-head"
            done ;;
          *) exit 2 ;;
        esac ;;
      *) exit 2 ;;
    esac ;;
  *) exit 2 ;;
esac
""",
    "gpg": r"""
# The stub key files hold one line FPR=<fingerprint>.
fpr=$(sed -n 's/^FPR=//p' "${*: -1}")
[[ -n $fpr ]] || exit 2
printf 'pub:-:4096:1:ABCDEF:1:::-:::scESC::::::23::0:\nfpr:::::::::%s:\n' "$fpr"
""",
    "make": r"""
act "CPPFLAGS=${CPPFLAGS:-}" "$@"
destdir="" install=false builddir="" dir=""
previous=""
for a in "$@"; do
  case $a in DESTDIR=*) destdir=${a#DESTDIR=} ;; install) install=true ;; BUILDDIR=*) builddir=${a#BUILDDIR=} ;; esac
  [[ $previous == -C ]] && dir=$a
  previous=$a
done
if [[ ${dir##*/} == enroot ]]; then
  if $install; then
    mkdir -p "$destdir/usr/bin" "$STUB_STATE/bin"
    for t in enroot enroot-mksquashovlfs enroot-aufs2ovlfs; do printf '#!/bin/sh\n' >"$destdir/usr/bin/$t"; chmod 755 "$destdir/usr/bin/$t"; done
    ln -sf "$STUB_PKGBIN/enroot" "$STUB_STATE/bin/enroot"
  fi
  exit 0
fi
if [[ -n $builddir ]]; then
  mkdir -p "$builddir/verifiable"
  for t in all_reduce_perf all_gather_perf; do printf '#!/bin/sh\n' >"$builddir/$t"; chmod 755 "$builddir/$t"; done
fi
if $install; then mkdir -p "$destdir/usr/local/lib/slurm"; echo so >"$destdir/usr/local/lib/slurm/spank_pyxis.so"; fi
""",
    "aws": r"""
if [[ "$*" == *"secretsmanager get-secret-value"* ]]; then
  printf '%s\n' "$STUB_SECRET"
  exit 0
fi
local_path() { printf '%s/s3/%s' "$STUB_STATE" "${1#s3://}"; }
if [[ $1 == s3api && $2 == put-object ]]; then
  # One PutObject, refused like the patch backup bucket's policy unless it names SSE-KMS and a key ARN.
  act "$@"
  declare -A opt=()
  args=("${@:3}")
  for ((i = 0; i < ${#args[@]}; i += 2)); do opt[${args[i]}]=${args[i + 1]}; done
  [[ ${opt[--server-side-encryption]:-} == aws:kms && ${opt[--ssekms-key-id]:-} == arn:*:kms:*:key/* ]] || {
    echo "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied" >&2
    exit 254
  }
  dst=$(local_path "s3://${opt[--bucket]}/${opt[--key]}")
  mkdir -p "$(dirname "$dst")"
  cp "${opt[--body]}" "$dst"
  exit 0
fi
if [[ $1 == cloudwatch && $2 == put-metric-data ]]; then
  # PutMetricData, refused with the error code in STUB_METRIC_ERROR (AccessDenied, Throttling, ...) while it is set.
  act "$@"
  [[ -z ${STUB_METRIC_ERROR:-} ]] || {
    echo "An error occurred ($STUB_METRIC_ERROR) when calling the PutMetricData operation: refused" >&2
    exit 254
  }
  exit 0
fi
[[ $1 == s3 && $2 == cp ]] || exit 2
act "$@"
src=${*: -2:1} dst=${*: -1}
if [[ $src == s3://* ]]; then
  [[ -f $(local_path "$src") ]] || { echo "fatal error: An error occurred (404) when calling the HeadObject operation" >&2; exit 1; }
  cp "$(local_path "$src")" "$dst"
else
  mkdir -p "$(dirname "$(local_path "$dst")")"
  cp "$src" "$(local_path "$dst")"
fi
""",
    # The Lustre client's network tools: lnetctl keeps LNet's nets in STUB_STATE/lnet (lost on a
    # "reboot": the test removes the folder), the others only record their calls.
    "lnetctl": r"""
state=$STUB_STATE/lnet nets=$STUB_STATE/lnet/nets
mkdir -p "$state" && touch "$nets"
case $1 in
  lnet) act "$@"; touch "$state/configured" ;;
  net)
    want="" iface=""
    for ((i = 3; i <= $#; i++)); do
      case ${!i} in --net) j=$((i + 1)); want=${!j} ;; --if) j=$((i + 1)); iface=${!j} ;; esac
    done
    case $2 in
      show)
        echo "net:"
        while read -r type name nid; do
          [[ -z $want || $want == "$type" ]] || continue
          printf '    - net type: %s\n      local NI(s):\n        - nid: %s\n          status: up\n' "$type" "$nid"
          printf '          interfaces:\n              0: %s\n' "$name"
        done <"$nets" ;;
      add) act "$@"
        [[ -e $state/configured ]] || { echo "add net: LNet is not configured" >&2; exit 1; }
        n=$(wc -l <"$nets")
        if [[ $want == tcp ]]; then nid=10.1.0.20@tcp; else nid="1.2.3.$n@$want"; fi
        echo "$want $iface $nid" >>"$nets" ;;
      del) act "$@"
        grep -v "^$want " "$nets" >"$nets.new" || true
        mv "$nets.new" "$nets" ;;
      *) exit 2 ;;
    esac ;;
  set) act "$@" ;;
  udsp) act "$@"
    if [[ -e $state/udsp ]]; then echo "add udsp: Operation already in progress" >&2; exit 114; fi
    touch "$state/udsp" ;;
  *) exit 2 ;;
esac
""",
    "modprobe": 'act "$@"\n',
    "modinfo": r"""
[[ " ${STUB_MISSING_MODULES:-} " != *" $1 "* ]] || { echo "modinfo: ERROR: Module $1 not found." >&2; exit 1; }
echo "filename: /lib/modules/stub/$1.ko"
""",
    "uname": r"""
[[ ${1:-} == -r ]] && echo "${STUB_KERNEL:-6.8.0-1024-aws}"
""",
    "ip": r"""
echo "lo UNKNOWN 127.0.0.1/8"
n=5
for address in $STUB_IPS; do echo "ens$n UP $address/16"; n=$((n + 1)); done
""",
    "scontrol": r"""
if [[ ${1:-} == ping && -e $STUB_STATE/systemd/active/slurmctld ]]; then
  echo "Slurmctld(primary) at ip-10-1-0-10 is UP"
else
  echo "Slurmctld(primary) at ip-10-1-0-10 is DOWN"
  exit 1
fi
""",
}

#: Commands that exist only once a package provides them (apt-get links them into STUB_STATE/bin).
PACKAGE_STUBS: dict[str, str] = {
    "docker": r"""
case $1 in
  info)
    # The client talks to the daemon over its socket: the kernel decides who may (root, group docker).
    [[ -e $STUB_STATE/systemd/active/docker && -r $MLC_ROOT/run/docker.sock && -w $MLC_ROOT/run/docker.sock ]] || {
      echo "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock" >&2
      exit 1
    }
    sed -n 's/.*"data-root": "\(.*\)".*/\1/p' "$MLC_ROOT/etc/docker/daemon.json" ;;
  inspect)
    if [[ $2 == --type ]]; then image=$4; [[ -e $STUB_STATE/docker/images/${image//\//_} ]]; else [[ -e $STUB_STATE/docker/$2 ]]; fi ;;
  pull) act "$@"
    image=${*: -1}; mkdir -p "$STUB_STATE/docker/images"; touch "$STUB_STATE/docker/images/${image//\//_}" ;;
  run) act "$@"
    while (($# > 0)); do [[ $1 == --name ]] && { mkdir -p "$STUB_STATE/docker"; touch "$STUB_STATE/docker/$2"; }; shift; done ;;
  *) exit 2 ;;
esac
""",
    "mysql": r"""
if [[ ${1:-} == --help ]]; then
  echo "  --sandbox           Disallow commands that access the file system"
  exit 0
fi
act "$@"
for arg in "$@"; do
  if [[ ${next:-} == sql ]]; then printf '%s\n' "$arg" >>"$STUB_STATE/mysql.sql"; exit 0; fi
  [[ $arg == --execute ]] && next=sql
done
cat >>"$STUB_STATE/mysql.sql"
""",
    "mysqldump": r"""
act "$@"
echo "-- dump of slurm_acct_db"
echo "CREATE DATABASE /*!32312 IF NOT EXISTS*/ slurm_acct_db;"
""",
    "enroot": "exit 0\n",
    "nvidia-ctk": 'act "$@"\n',
    "nvidia-container-cli": "exit 0\n",
    "nvidia-smi": "exit 0\n",
}

SLURM_CONF = """# Written by the HyperPod cluster agent (test copy)
ClusterName=ml
SlurmctldHost=ip-10-1-0-10({controller})
SlurmctldParameters=cloud_dns
ProctrackType=proctrack/cgroup
PartitionName=p5 Nodes=ALL Default=YES
"""

SLURMD_UNIT = """[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target

[Service]
Type=simple
ExecStart=/opt/slurm/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID

[Install]
WantedBy=multi-user.target
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


@dataclass
class Sandbox:
    """One fake node: run on_create.sh or precheck.sh in it and look at what changed."""

    base: Path
    ips: str
    features: dict[str, object] = field(default_factory=lambda: dict(FEATURES))
    controller_ip: str = CONTROLLER_IP
    gpu: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    provisioning: dict[str, object] = field(default_factory=lambda: dict(PROVISIONING))
    #: RDMA devices of the node whose driver is efa (under /sys/class/infiniband).
    efa_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # pytest keeps its temporary folders 0700, which the users the steps switch to cannot pass:
        # the node lives in a folder of its own in the system's temporary folder (TMPDIR, /tmp by
        # default, which is world-traversable), removed when the sandbox is collected.
        self.base = Path(tempfile.mkdtemp(prefix=f"mlc-{self.base.name}-"))
        self.base.chmod(0o711)
        weakref.finalize(self, shutil.rmtree, str(self.base), True)
        self.root = self.base / "root"
        self.lifecycle = self.base / "lifecycle"
        self.bin = self.base / "bin"
        self.pkgbin = self.base / "pkgbin"
        self.state = self.base / "state"
        self.actions_log = self.base / "actions.log"
        self._build_root()
        self._build_lifecycle()
        self._build_bin()
        self.actions_log.touch()
        # What the download servers answer: the repository keys with their real fingerprints.
        self.serve = self.base / "serve"
        _write(self.serve / "gpg", "FPR=9DC858229FC7DD38854AE2D88D81803C0EBFCD88\n")
        _write(self.serve / "gpgkey", "FPR=C95B321B61E88C1809C4F759DDCAE044F796ECB0\n")

    def _build_root(self) -> None:
        r = self.root
        _write(
            r / "etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n"
            "slurm:x:401:401::/var/lib/slurm:/usr/sbin/nologin\n",
        )
        _write(r / "etc/group", "root:x:0:\nubuntu:x:1000:\nslurm:x:401:\n")
        _write(r / "etc/skel/.bashrc", "# skel bashrc\n")
        _write(r / "home/ubuntu/.bashrc", "# ubuntu's bashrc\n")
        _write(r / "etc/os-release", 'NAME="Ubuntu"\nVERSION_CODENAME=jammy\n')
        _write(r / "etc/fstab", "LABEL=cloudimg-rootfs / ext4 discard,errors=remount-ro 0 1\n")
        _write(
            r / "proc/mounts",
            f"/dev/root / ext4 rw 0 0\n/dev/md0 {r}/opt/dlami/nvme ext4 rw 0 0\n"
            f"/dev/nvme1n1 {r}/opt/sagemaker ext4 rw 0 0\n",
        )
        # The kernel has IPv6 (as on HyperPod's Ubuntu): the imds step restricts the IPv6 endpoint too.
        _write(r / "proc/net/if_inet6", "00000000000000000000000000000001 01 80 10 80       lo\n")
        (r / "opt/dlami/nvme").mkdir(parents=True)
        (r / "opt/sagemaker").mkdir(parents=True)
        _write(r / "lib/systemd/system/dlami-nvme.service", "[Service]\nType=oneshot\n")
        _write(r / "opt/ml/config/resource_config.json", json.dumps(resource_config(self.controller_ip)))
        _write(r / "opt/slurm/etc/slurm.conf", SLURM_CONF.format(controller=self.controller_ip))
        _write(r / "opt/slurm/etc/cgroup.conf", "CgroupPlugin=autodetect\n")
        _write(r / "opt/slurm/include/slurm/spank.h", "/* header */\n")
        _write(r / "etc/systemd/system/slurmd.service", SLURMD_UNIT)
        _write(r / "etc/systemd/system/slurmctld.service", "[Service]\nExecStart=/opt/slurm/sbin/slurmctld -D\n")
        (self.state / "systemd/active").mkdir(parents=True)
        (self.state / "systemd/active/dlami-nvme").touch()
        efa_driver = r / "sys/bus/pci/drivers/efa"
        efa_driver.mkdir(parents=True)
        for device in self.efa_devices:
            (r / "sys/class/infiniband" / device / "device").mkdir(parents=True)
            (r / "sys/class/infiniband" / device / "device/driver").symlink_to(efa_driver)

    def _build_lifecycle(self) -> None:
        shutil.copytree(HYPERPOD_DIR, self.lifecycle, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for shared in EXPORTER_SCRIPTS:  # uploaded to the top of the prefix from the shared folder
            shutil.copy2(shared, self.lifecycle / shared.name)
        _write(self.lifecycle / "mlcluster_features.json", json.dumps(self.features) + "\n")
        _write(self.lifecycle / "provisioning_parameters.json", json.dumps(self.provisioning) + "\n")
        self.render_entrypoint()

    def generated(self) -> dict[str, str]:
        """The generated files in the lifecycle copy, by name, as HyperPodLifecycle would upload them."""
        return {name: (self.lifecycle / name).read_text() for name in GENERATED if (self.lifecycle / name).is_file()}

    def render_entrypoint(self, extra: Sequence[Path] = EXPORTER_SCRIPTS) -> None:
        """What HyperPodLifecycle uploads: on_create.sh with the checksums of the other files and copies of
        the generated ones (those in the copy now) in it."""
        _write(self.lifecycle / ENTRYPOINT, render_on_create(HYPERPOD_DIR, extra, self.generated()), 0o755)

    def _build_bin(self) -> None:
        for folder, stubs in ((self.bin, STUBS), (self.pkgbin, PACKAGE_STUBS)):
            folder.mkdir()
            for name, body in stubs.items():
                _write(folder / name, PRELUDE + body.lstrip("\n"), 0o755)
        if self.gpu:
            (self.bin / "nvidia-smi").symlink_to(self.pkgbin / "nvidia-smi")
            _write(self.root / "opt/nccl/build/include/nccl.h", "/* nccl */\n")
            (self.root / "opt/amazon/openmpi/bin").mkdir(parents=True)
        self.safe = self.base / "safe"
        self.safe.mkdir()
        for tool in SAFE_TOOLS:
            real = shutil.which(tool)
            assert real, f"{tool} is needed by the lifecycle tests"
            (self.safe / tool).symlink_to(real)
        (self.safe / "python3").symlink_to(NODE_PYTHON)

    def trust_node_exporter(self, pinned: bytes, served: bytes | None = None) -> None:
        """Pin the observability step's node exporter (amd64) to ``pinned`` and serve ``served`` (default: it).

        The real release cannot be downloaded here: the step's copy trusts the test's tarball, and the
        copy's ``on_create.sh`` is rendered again with the copy's checksums, as mlcluster renders it.
        """
        (self.serve / "node_exporter-1.8.2.linux-amd64.tar.gz").write_bytes(pinned if served is None else served)
        self.repin("steps/observability.sh", r"\[amd64\]=[0-9a-f]{64}", f"[amd64]={hashlib.sha256(pinned).hexdigest()}")

    def repin(self, script: str, pattern: str, replacement: str) -> None:
        """Replace the one match of ``pattern`` in the copy's ``script``; render ``on_create.sh`` again.

        The copy's ``on_create.sh`` gets the copy's checksums, as mlcluster renders it for what it uploads.
        """
        path = self.lifecycle / script
        text, count = re.subn(pattern, replacement, path.read_text(encoding="utf-8"), flags=re.M)
        assert count == 1, f"{script}: {pattern!r} matches {count} times"
        path.write_text(text, encoding="utf-8")
        template = (HYPERPOD_DIR / ENTRYPOINT).read_text(encoding="utf-8")
        rendered = template.replace(MANIFEST_MARK + "\n", manifest(self.lifecycle))
        rendered = rendered.replace(f"{GENERATED_MARK}\n", generated_copies(self.generated()))
        _write(self.lifecycle / ENTRYPOINT, rendered, 0o755)

    def env(self) -> dict[str, str]:
        """The whole environment of a run (nothing inherited from the test process)."""
        return {
            "PATH": f"{self.bin}:{self.state}/bin:{self.safe}",
            "HOME": str(self.base),
            "LANG": "C.UTF-8",
            "MLC_ROOT": str(self.root),
            "MLC_RETRY_DELAY": "0",
            "MLC_MAX_ATTEMPTS": "3",
            "STUB_STATE": str(self.state),
            "STUB_PKGBIN": str(self.pkgbin),
            "STUB_ACTIONS": str(self.actions_log),
            "STUB_SERVE": str(self.serve),
            "STUB_GIT_DATA": str(DATA),
            "STUB_IPS": self.ips,
            "STUB_HOSTNAME": "ip-" + self.ips.split()[0].replace(".", "-"),
            **self.extra_env,
        }

    def run(self, script: str = "on_create.sh", *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run a script of the lifecycle copy with bash, the way HyperPod does (from its folder)."""
        return subprocess.run(
            ["bash", str(self.lifecycle / script), *args],
            cwd=self.lifecycle,
            env={**self.env(), **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def as_user(self, uid: int, *command: str) -> subprocess.CompletedProcess[str]:
        """Run ``command`` as an unprivileged uid (gid = uid, no groups), the way a cluster user would."""
        return subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *command],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def run_as(self, uid: int, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a script of the lifecycle copy as ``uid`` (gid = uid, no other groups), with the node's environment.

        This is how ``srun`` starts a user's job on a node: the pre-check runs as the cluster's default
        user, who is not in the docker group.
        """
        return subprocess.run(
            [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--",
                "bash",
                str(self.lifecycle / script),
                *args,
            ],
            cwd=self.base,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def actions(self) -> list[str]:
        """Every system-changing stub call so far, in order."""
        return self.actions_log.read_text(encoding="utf-8").splitlines()

    def step_order(self) -> list[str]:
        """The steps on_create.sh started, in order, from its own log."""
        log = (self.root / "var/log/provision/on_create.log").read_text(encoding="utf-8")
        return [
            line.split("step ", 1)[1].split(":")[0]
            for line in log.splitlines()
            if line.endswith(")") and ": start (" in line
        ]

    def snapshot(self) -> dict[str, str]:
        """Content and mode of every file under the root and the stub state (logs left out)."""
        out: dict[str, str] = {}
        for top in (self.root, self.state):
            for path in sorted(top.rglob("*")):
                rel = str(path.relative_to(self.base))
                if rel.startswith("root/var/log/provision"):
                    continue
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    out[rel] = f"link:{path.readlink()}"
                elif path.is_dir():
                    out[rel] = f"dir:{stat.S_IMODE(info.st_mode):o}"
                else:
                    out[rel] = f"{stat.S_IMODE(info.st_mode):o}:" + hashlib.sha256(path.read_bytes()).hexdigest()
        return out

    def read(self, real_path: str) -> str:
        """A file of the fake node by its real path, e.g. ``/etc/fstab``."""
        return (self.root / real_path.lstrip("/")).read_text(encoding="utf-8")
