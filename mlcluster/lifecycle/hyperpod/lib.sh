# shellcheck shell=bash disable=SC2034  # the variables here are used by the scripts that source it
# Shared helpers for the mlcluster HyperPod lifecycle scripts. Sourced, never run.
#
# Every path the scripts touch is "$MLC_ROOT/<real path>". MLC_ROOT is empty on a node;
# the tests set it to a temporary folder and put stub commands first on PATH. Paths written
# *into* files (fstab, slurm.conf, enroot.conf, passwd) are real paths, without the prefix.

MLC_ROOT="${MLC_ROOT:-}"
MLC_LIFECYCLE_DIR="${MLC_LIFECYCLE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
LOG_DIR="$MLC_ROOT/var/log/provision"
ETC_DIR="$MLC_ROOT/etc/mlcluster"
STATE_DIR="$MLC_ROOT/var/lib/mlcluster"
TMP_DIR="$STATE_DIR/tmp"
NODE_ENV="$ETC_DIR/node.env"
FSX_MOUNT=/fsx
FSX="$MLC_ROOT$FSX_MOUNT"
SLURM_ETC_REAL=/opt/slurm/etc
SLURM_ETC="$MLC_ROOT$SLURM_ETC_REAL"
SYSTEMD_DIR="$MLC_ROOT/etc/systemd/system"
SLURMCTLD_PORT="${MLC_SLURMCTLD_PORT:-6817}"
APT_OPTIONS=(-y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
export MLC_ROOT MLC_LIFECYCLE_DIR DEBIAN_FRONTEND=noninteractive
PATH="$PATH:/opt/slurm/bin:/opt/slurm/sbin"

# Log lines go to stderr, so command substitutions only ever capture data; on_create.sh
# sends both streams of a step to its log file and the console.
log() {
  printf '%(%Y-%m-%dT%H:%M:%S%z)T [%s] %s\n' -1 "${MLC_STEP:-on_create}" "$*" >&2
}

warn() {
  log "WARNING: $*"
}

die() {
  log "ERROR: $*"
  exit 1
}

# Run the Python half (JSON parsing, decisions, config-file edits).
plan() {
  python3 "$MLC_LIFECYCLE_DIR/plan.py" "$@"
}

# Load /etc/mlcluster/node.env (written by identify_node).
load_node_env() {
  [[ -f $NODE_ENV ]] || die "$NODE_ENV is missing; run on_create.sh, which writes it first (step identify_node)"
  # shellcheck source=/dev/null
  . "$NODE_ENV"
}

is_true() {
  [[ $1 == true ]]
}

# retry ATTEMPTS WHAT COMMAND... : run COMMAND until it succeeds, with exponential backoff
# (MLC_RETRY_DELAY seconds, doubling, at most MLC_RETRY_MAX_DELAY). MLC_MAX_ATTEMPTS caps ATTEMPTS.
retry() {
  local attempts=$1 what=$2
  shift 2
  local cap=${MLC_MAX_ATTEMPTS:-$attempts} delay=${MLC_RETRY_DELAY:-2} max_delay=${MLC_RETRY_MAX_DELAY:-60} n=1
  if ((attempts > cap)); then
    attempts=$cap
  fi
  until "$@"; do
    if ((n >= attempts)); then
      log "$what: still failing after $n attempt(s), giving up"
      return 1
    fi
    log "$what: attempt $n/$attempts failed, retrying in ${delay}s"
    sleep "$delay"
    n=$((n + 1))
    delay=$((delay * 2))
    if ((delay > max_delay)); then
      delay=$max_delay
    fi
  done
}

# install_file DEST MODE [OWNER] < CONTENT : write DEST only when its content or mode differs.
# MODE "keep" keeps an existing file's mode (644 for a new file). OWNER (uid:gid or names) is
# set on new content only. Sets FILE_CHANGED=true|false so callers restart a service only after
# a real change. Never pipe into it (a pipeline runs it in a subshell and FILE_CHANGED is lost).
FILE_CHANGED=false
install_file() {
  local dest=$1 mode=$2 owner=${3:-} content="" current="" tmp
  IFS= read -r -d '' content || true
  if [[ $mode == keep ]]; then
    mode=644
    if [[ -f $dest ]]; then
      mode=$(stat -c %a "$dest")
    fi
  fi
  if [[ -f $dest ]]; then
    IFS= read -r -d '' current <"$dest" || true
    if [[ $current == "$content" && $(stat -c %a "$dest") == "$mode" ]]; then
      FILE_CHANGED=false
      return 0
    fi
  fi
  if [[ ! -d ${dest%/*} ]]; then
    mkdir -p "${dest%/*}"
  fi
  tmp=$(mktemp "$dest.mlcluster.XXXXXX")
  printf '%s' "$content" >"$tmp"
  chmod "$mode" "$tmp"
  if [[ -n $owner ]]; then
    chown "$owner" "$tmp"
  fi
  mv -f "$tmp" "$dest"
  FILE_CHANGED=true
  log "wrote $dest"
}

# install_from DEST MODE OWNER COMMAND... : install_file with COMMAND's output, but only when
# COMMAND succeeds (a failed edit must never leave an empty config file behind).
install_from() {
  local dest=$1 mode=$2 owner=$3 out
  shift 3
  out=$(mktemp "$TMP_DIR/output.XXXXXX")
  if ! "$@" >"$out"; then
    rm -f "$out"
    die "could not produce $dest (command: $*)"
  fi
  install_file "$dest" "$mode" "$owner" <"$out"
  rm -f "$out"
}

is_installed() {
  local status
  # shellcheck disable=SC2016  # ${Status} is a dpkg-query field, not a shell variable
  status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
  [[ $status == "install ok installed" ]]
}

APT_UPDATED=false
apt_update() {
  if [[ $APT_UPDATED == false ]]; then
    retry 5 "apt-get update" apt-get "${APT_OPTIONS[@]}" update
    APT_UPDATED=true
  fi
}

# apt_install PACKAGE... : install the packages that are not installed yet (apt lock and
# mirror hiccups are retried with backoff).
apt_install() {
  local missing=() package
  for package in "$@"; do
    if ! is_installed "$package"; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  apt_update
  log "installing ${missing[*]}"
  retry 5 "apt-get install ${missing[*]}" apt-get "${APT_OPTIONS[@]}" install "${missing[@]}"
}

# mount_info PATH : print "SOURCE TYPE" of the file system mounted at PATH; fail when none is.
mount_info() {
  local mounts="$MLC_ROOT/proc/mounts"
  [[ -f $mounts ]] || return 1
  awk -v target="$1" '$2 == target { info = $1 " " $3; found = 1 } END { if (found) print info; exit !found }' "$mounts"
}

# converge_service UNIT [CONFIG_FILE...] : enable UNIT, start it when stopped, restart it when
# running but one of its config files changed since the last run (hash kept in STATE_DIR).
converge_service() {
  local unit=$1
  shift
  local stamp="$STATE_DIR/$unit.config.sha256" current="none" previous="" file existing=()
  for file in "$@"; do
    if [[ -e $file ]]; then
      existing+=("$file")
    fi
  done
  if ((${#existing[@]} > 0)); then
    current=$(sha256sum -- "${existing[@]}" | sha256sum | cut -d' ' -f1)
  fi
  if [[ -f $stamp ]]; then
    previous=$(<"$stamp")
  fi
  if ! systemctl is-enabled --quiet "$unit"; then
    systemctl enable "$unit"
  fi
  if ! systemctl is-active --quiet "$unit"; then
    retry 3 "start $unit" systemctl start "$unit"
  elif [[ $current != "$previous" ]]; then
    log "$unit configuration changed, restarting it"
    retry 3 "restart $unit" systemctl restart "$unit"
  fi
  install_file "$stamp" 644 <<<"$current"
}

# Print the folder for container data on this node: local NVMe, else HyperPod's secondary EBS
# volume, else a folder on the root volume (with a warning: images may fill it).
LOCAL_ROOT_FALLBACK=/opt/mlcluster-local
local_root() {
  local chosen
  wait_for_nvme
  chosen=$(plan local-root --mounts "$MLC_ROOT/proc/mounts" --root "$MLC_ROOT")
  if [[ -z $chosen ]]; then
    warn "no local NVMe (/opt/dlami/nvme) or /opt/sagemaker volume is mounted;" \
      "container data goes to the root volume at $LOCAL_ROOT_FALLBACK"
    chosen=$LOCAL_ROOT_FALLBACK
  fi
  printf '%s\n' "$chosen"
}

# The DLAMI formats and mounts instance-store NVMe in dlami-nvme.service; wait for it to finish
# so we do not put container data on the root volume by racing it.
wait_for_nvme() {
  if [[ -e $MLC_ROOT/lib/systemd/system/dlami-nvme.service || -e $SYSTEMD_DIR/dlami-nvme.service ]]; then
    retry 8 "wait for dlami-nvme.service" systemctl is-active --quiet dlami-nvme.service ||
      warn "dlami-nvme.service is not active; NVMe may be unavailable"
  fi
}

is_gpu_node() {
  command -v nvidia-smi >/dev/null 2>&1
}

# port_open HOST PORT : can we open a TCP connection?
port_open() {
  # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
  timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# Users who get /fsx homes and SSH keys: the AMI's ubuntu user (when present) and the shared users.
cluster_users() {
  if getent passwd ubuntu >/dev/null; then
    echo ubuntu
  fi
  local entry
  for entry in ${MLC_USERS:-}; do
    echo "${entry%%:*}"
  done
}

# user_info USER : set USER_UID, USER_GID and USER_HOME from the user's passwd entry.
user_info() {
  local entry
  entry=$(getent passwd "$1") || die "there is no user $1"
  IFS=: read -r _ _ USER_UID USER_GID _ USER_HOME _ <<<"$entry"
}

# Wait for the slurm.conf HyperPod's agent writes on the controller (it names the controller address).
wait_for_slurm_conf() {
  retry 30 "wait for $SLURM_ETC/slurm.conf naming $MLC_CONTROLLER_ADDRESS" \
    grep -qsF -- "$MLC_CONTROLLER_ADDRESS" "$SLURM_ETC/slurm.conf"
}
