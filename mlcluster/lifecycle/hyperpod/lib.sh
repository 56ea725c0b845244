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

# put_copy_metric VALUE : one data point of the controller's daily-copy metric (node.env's namespace, metric,
# cluster dimension and region: the AWS CLI on a node has no default region). AccessDenied (the grant was removed
# when lifecycle.scheduled_backup was turned off, while the controller's timer still runs) sets
# COPY_METRIC_DENIED=true and returns 0, so a retry loop stops; any other failure returns 1.
COPY_METRIC_DENIED=false
put_copy_metric() {
  local err
  if err=$(aws cloudwatch put-metric-data --region "$MLC_SCHEDULED_BACKUP_REGION" \
    --namespace "$MLC_SCHEDULED_BACKUP_NAMESPACE" --metric-name "$MLC_SCHEDULED_BACKUP_METRIC" \
    --dimensions "ClusterName=$MLC_SCHEDULED_BACKUP_CLUSTER" --value "$1" --unit Count 2>&1 >/dev/null); then
    return 0
  fi
  printf '%s\n' "$err" >&2
  [[ $err == *"(AccessDenied"* ]] || return 1
  COPY_METRIC_DENIED=true
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

# mount_has OPTION DIR : whether DIR's mount (the last one /proc/mounts lists for it) has OPTION.
mount_has() {
  local mounts="$MLC_ROOT/proc/mounts"
  [[ -f $mounts ]] || return 1
  awk -v option="$1" -v target="$2" '$2 == target { options = "," $4 "," } END { exit index(options, "," option ",") == 0 }' "$mounts"
}

# enable_boot_unit UNIT: after install_file wrote UNIT's file, reload systemd if the file changed
# (FILE_CHANGED) and enable UNIT at boot unless it already is.
enable_boot_unit() {
  if [[ $FILE_CHANGED == true ]]; then
    systemctl daemon-reload
  fi
  if ! systemctl is-enabled --quiet "$1"; then
    systemctl enable "$1"
  fi
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

# ---- Users' files: root never follows what a user can plant ---------------------------------
# Root works by path only in folders no user can change: root-owned and not writable by group or
# others (or sticky, where users cannot rename or delete root's entries). Inside a folder a user
# owns, the work runs as that user (as_user), so a planted link reaches only what she can reach.

# as_user USER COMMAND... : run COMMAND with USER's uid and gid and no supplementary groups.
as_user() {
  local entry uid gid
  entry=$(getent passwd "$1") || die "there is no user $1"
  IFS=: read -r _ _ uid gid _ <<<"$entry"
  shift
  setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
}

# Where the lifecycle scripts stay after node creation (HyperPod's download folder is temporary): the
# installed tools (mlcluster-accounting-secret, a re-run of one step) source lib.sh and run plan.py here.
TOOLS_DIR=/opt/mlcluster/lifecycle

# keep_lifecycle_copy : copy this folder's scripts to TOOLS_DIR (root's files; scripts 755, the rest 644).
# install_tools does it for every node; a step whose installed tool runs before install_tools (the
# accounting step's slurmdbd ExecStartPre) does it first. Root's tools source lib.sh from there, so
# /opt/mlcluster and TOOLS_DIR are root's folders (ensure_root_dir: a link or another owner's folder found
# there, planted before the first run, is moved aside) in /opt, which only root can change.
keep_lifecycle_copy() {
  local file relative mode
  ensure_root_dir "$MLC_ROOT${TOOLS_DIR%/*}" 755 replace
  ensure_root_dir "$MLC_ROOT$TOOLS_DIR" 755 replace
  while IFS= read -r -d '' file; do
    relative=${file#"$MLC_LIFECYCLE_DIR"/}
    mode=644
    if [[ $file == *.sh ]]; then
      mode=755
    fi
    install_file "$MLC_ROOT$TOOLS_DIR/$relative" "$mode" <"$file"
  done < <(find "$MLC_LIFECYCLE_DIR" -type f ! -name '*.pyc' ! -name '*.mlcluster.*' -print0 | sort -z)
}

# owner_mode PATH : print "UID MODE" of PATH itself (a link is not followed).
owner_mode() {
  stat -c '%u %a' -- "$1"
}

# dir_is_safe DIR : DIR is a real folder owned by root that other users cannot rename entries in
# (not writable by group or others, or sticky).
dir_is_safe() {
  local uid mode
  [[ -d $1 && ! -L $1 ]] || return 1
  read -r uid mode <<<"$(owner_mode "$1")"
  [[ $uid == 0 ]] || return 1
  ((8#$mode & 8#1000)) || ((!(8#$mode & 8#022)))
}

# unsafe_parent REAL : print the first folder above REAL (a path on the node, /opt/slurm/etc: /opt/slurm, then
# /opt; "/" is the image's), under MLC_ROOT, that dir_is_safe refuses; print nothing when each is safe. Whoever
# can rename entries in one of them can swap what lies below for a link between a check and its use.
# A folder above REAL may be a link of root's: HyperPod's images ship /opt/slurm-<version> folders and a
# /opt/slurm link to the active one (AWS's HyperPod lifecycle scripts, base-config hotfix "fallback to
# Slurm 24": `ln -sfn /opt/slurm-24.11 /opt/slurm`). Its own folder is checked next in the loop, so nobody
# else can replace the link; its target (one level, absolute or relative) and the target's folders are
# checked like the rest.
unsafe_parent() {
  local real=$1 target
  while real=${real%/*} && [[ -n $real ]]; do
    if [[ -L $MLC_ROOT$real ]]; then
      if [[ $(stat -c %u -- "$MLC_ROOT$real") != 0 ]]; then
        printf '%s\n' "$MLC_ROOT$real"
        return 0
      fi
      target=$(readlink -- "$MLC_ROOT$real")
      [[ $target == /* ]] || target=${real%/*}/$target
      if ! dir_is_safe "$MLC_ROOT$target"; then
        printf '%s\n' "$MLC_ROOT$target"
        return 0
      fi
      target=$(unsafe_parent "$target")
      if [[ -n $target ]]; then
        printf '%s\n' "$target"
        return 0
      fi
    elif ! dir_is_safe "$MLC_ROOT$real"; then
      printf '%s\n' "$MLC_ROOT$real"
      return 0
    fi
  done
}

# move_aside PATH WHY : rename PATH out of the way (root renames the entry, never follows it) and log.
move_aside() {
  local aside
  aside="$1.mlcluster-moved-aside.$(date +%s).$RANDOM$RANDOM"
  mv --no-target-directory -- "$1" "$aside"
  warn "$1 $2; moved it aside to $aside"
}

# ensure_root_dir DIR MODE [replace] : DIR is a folder owned by root with MODE. A link, a file or a folder
# someone else owns is moved aside (logged) and DIR made again with a plain mkdir. A folder of root's that
# group or others could write is set to MODE (logged): it may hold data (homes, the controller's state) or be
# a mount point, which cannot be renamed. With "replace" (a folder root fills from scratch each run, its tools)
# it is moved aside instead: what others put there (a link, a folder of theirs) would otherwise stay.
ensure_root_dir() {
  local dir=$1 mode=$2 kind=${3:-keep} uid current
  dir_is_safe "${dir%/*}" || die "${dir%/*} can be changed by other users; refusing to create $dir in it"
  if [[ -L $dir ]]; then
    move_aside "$dir" "is a link"
  elif [[ -e $dir && ! -d $dir ]]; then
    move_aside "$dir" "is not a folder"
  elif [[ -d $dir ]]; then
    read -r uid current <<<"$(owner_mode "$dir")"
    if [[ $uid != 0 ]]; then
      move_aside "$dir" "is owned by uid $uid, not root"
    elif ((8#$current & 8#022)) && [[ $kind == replace ]]; then
      # Root's, but others could write it: what they put there (a link, a folder of theirs) would stay.
      move_aside "$dir" "is root's but writable by group or others (mode $current)"
    elif [[ $current != "$mode" ]]; then
      # "00": GNU chmod keeps a folder's setuid/setgid bits on a plain numeric mode (755 leaves 2755).
      chmod "00$mode" "$dir"
      log "set $dir to mode $mode"
    fi
  fi
  if [[ ! -e $dir ]]; then
    mkdir -m "$mode" -- "$dir"
    log "created $dir (root, $mode)"
  fi
}

# ensure_user_dir USER DIR MODE : DIR, in a root-owned folder no user can write, is a real folder
# owned by USER. A link or a folder owned by someone else is moved aside (logged); a missing one
# is made with a plain mkdir and handed to USER. Sets DIR_CREATED=true|false. MODE applies to a
# new folder, and is set (as USER) on an existing one when MLC_FORCE_MODE=true.
DIR_CREATED=false
ensure_user_dir() {
  local user=$1 dir=$2 mode=$3 parent=${2%/*} uid gid entry owner current
  entry=$(getent passwd "$user") || die "there is no user $user"
  IFS=: read -r _ _ uid gid _ <<<"$entry"
  DIR_CREATED=false
  # The parent is a real folder owned by root, writable by root alone and not sticky (one stat).
  if [[ ! -d $parent || -L $parent ]] || { read -r owner current <<<"$(owner_mode "$parent")" &&
    [[ $owner != 0 ]] || ((8#$current & 8#1022)); }; then
    die "$parent must be a root-owned folder that no other user can write; refusing to create $dir in it"
  fi
  if [[ -L $dir ]]; then
    move_aside "$dir" "is a link"
  elif [[ -e $dir && ! -d $dir ]]; then
    move_aside "$dir" "is not a folder"
  elif [[ -d $dir ]]; then
    read -r owner current <<<"$(owner_mode "$dir")"
    if [[ $owner != "$uid" ]]; then
      move_aside "$dir" "is owned by uid $owner, not $user ($uid)"
    elif [[ ${MLC_FORCE_MODE:-false} == true && $current != "$mode" ]]; then
      as_user "$user" chmod "00$mode" -- "$dir"
      log "set $dir to mode $mode (as $user)"
    fi
  fi
  if [[ ! -e $dir ]]; then
    mkdir -m "$mode" -- "$dir"
    chown "$uid:$gid" -- "$dir"
    DIR_CREATED=true
    log "created $dir ($user, $mode)"
  fi
}

# user_install USER DEST MODE < CONTENT : as USER, write DEST (in a folder USER owns) through a
# temporary file and a rename, only when content or mode differ. A link at DEST is replaced, not
# followed. Sets FILE_CHANGED=true|false.
user_install() {
  local result
  # shellcheck disable=SC2016  # the script runs in the user's shell
  result=$(as_user "$1" bash -c '
    set -eu
    dest=$1 mode=$2
    tmp=$(mktemp "${dest%/*}/.mlcluster.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f $dest && ! -L $dest && $(stat -c %a "$dest") == "$mode" ]] && cmp -s "$tmp" "$dest"; then
      rm -f "$tmp"
      echo same
    else
      mv -f --no-target-directory "$tmp" "$dest"
      echo changed
    fi' _ "$2" "$3") || die "could not write $2 as $1"
  FILE_CHANGED=false
  if [[ $result == changed ]]; then
    FILE_CHANGED=true
    log "wrote $2 (as $1)"
  fi
}

# passwd_field USER FIELDS : print FIELDS (field numbers, comma-separated, as cut -f takes them) of
# USER's passwd entry, joined by ":"; fails with a message when there is none. Split by bash itself:
# the steps call it for every user and folder.
passwd_field() {
  local entry fields=() wanted=() field out=()
  entry=$(getent passwd "$1") || die "there is no user $1 (the add_users step creates the cluster users)"
  IFS=: read -r -a fields <<<"$entry"
  IFS=, read -r -a wanted <<<"$2"
  for field in "${wanted[@]}"; do
    out+=("${fields[field - 1]:-}")
  done
  local IFS=:
  printf '%s\n' "${out[*]}"
}

# id_of USER : USER's uid.
id_of() {
  passwd_field "$1" 3
}

# ids_of USER : "uid:gid" of USER (numbers, so chown never depends on name lookups).
ids_of() {
  passwd_field "$1" 3,4
}

# controller_data_dir : print (and make, root 0755) the controller's folder for what must outlive
# its root volume (slurmctld state, the accounting database): on HyperPod's secondary EBS volume
# (/opt/sagemaker) when it is mounted, else on FSx for Lustre. Patching replaces the root volume.
controller_data_dir() {
  local dir
  if mount_info "$MLC_ROOT/opt/sagemaker" >/dev/null; then
    dir=/opt/sagemaker/mlcluster
  else
    ensure_root_dir "$FSX/.mlcluster" 755
    dir=$FSX_MOUNT/.mlcluster/controller
  fi
  ensure_root_dir "$MLC_ROOT$dir" 755
  printf '%s\n' "$dir"
}

# move_contents FROM TO : copy FROM's files into TO once, when TO is still empty (a daemon's data
# moving off the root volume; FROM and TO belong to a service account, not a cluster user).
move_contents() {
  if [[ -d $1 && ! -L $1 && -z $(find "$2" -mindepth 1 -maxdepth 1 -print -quit) ]] &&
    [[ -n $(find "$1" -mindepth 1 -maxdepth 1 -print -quit) ]]; then
    # Each entry, not "$1/.": the target folder keeps its own owner and mode.
    find "$1" -mindepth 1 -maxdepth 1 -exec cp -a -t "$2" -- {} +
    log "copied ${1#"$MLC_ROOT"} to ${2#"$MLC_ROOT"}"
  fi
}

# ---- Downloads: every one pinned and verified before use ------------------------------------

# apt_key NAME URL FINGERPRINT : install the repository key for NAME at /etc/apt/keyrings/NAME.asc,
# only when the key's primary fingerprint is FINGERPRINT. A mismatch stops the step, naming the key.
apt_key() {
  local name=$1 url=$2 want=$3 key="$MLC_ROOT/etc/apt/keyrings/$1.asc" download got
  if [[ -s $key ]] && [[ $(key_fingerprint "$key") == "$want" ]]; then
    return 0
  fi
  apt_install ca-certificates curl gnupg
  mkdir -p "$MLC_ROOT/etc/apt/keyrings"
  download=$(mktemp "$TMP_DIR/key.XXXXXX")
  retry 5 "download the $name apt key" curl -fsSL -o "$download" "$url"
  got=$(key_fingerprint "$download")
  if [[ $got != "$want" ]]; then
    rm -f "$download"
    die "the $name apt key from $url has fingerprint '${got:-none}', expected $want; refusing to trust it"
  fi
  install_file "$key" 644 <"$download"
  rm -f "$download"
  log "$name apt key verified: $want"
}

# key_fingerprint FILE : the primary key fingerprint of an OpenPGP key file.
key_fingerprint() {
  local home
  home=$(mktemp -d "$TMP_DIR/gnupg.XXXXXX")
  GNUPGHOME=$home gpg --batch --show-keys --with-colons "$1" 2>/dev/null |
    awk -F: '$1 == "pub" { primary = 1; next } $1 == "fpr" && primary { print $10; exit }'
  rm -rf "$home"
}

# git_pinned NAME URL COMMIT TREE_SHA256 DEST : clone URL into DEST at COMMIT and check it: HEAD is
# COMMIT and the SHA-256 of `git ls-tree -r --full-tree HEAD` (every path with its content hash) is
# TREE_SHA256. A mismatch stops the step, naming NAME.
git_pinned() {
  local name=$1 url=$2 commit=$3 tree=$4 dest=$5 head digest
  rm -rf "$dest"
  retry 5 "clone $name" git clone --quiet --no-checkout "$url" "$dest"
  git -C "$dest" checkout --quiet --detach "$commit" || die "$name: commit $commit is not in $url"
  head=$(git -C "$dest" rev-parse HEAD)
  digest=$(git -C "$dest" ls-tree -r --full-tree HEAD | sha256sum | cut -d' ' -f1)
  if [[ $head != "$commit" || $digest != "$tree" ]]; then
    die "$name from $url does not match its pin (commit $head, tree sha256 $digest; expected $commit, $tree); refusing to build it"
  fi
  log "$name verified at $commit (tree sha256 $tree)"
}

# git_submodules_pinned NAME DEST [PATH=URL...] : check out the submodules of DEST (a git_pinned
# checkout) at the commits its tree records, and check each one. Those commits are gitlink entries
# of the tree whose SHA-256 git_pinned checked, so they are pinned with it; git fetches them by id
# and fails when the remote lacks them. PATH=URL fetches a submodule from another address of the
# same repository than .gitmodules names: the commit check makes the address a matter of reach,
# not of trust. A submodule at another commit stops the step, naming it.
git_submodules_pinned() {
  local name=$1 dest=$2 override _mode type commit path head
  shift 2
  git -C "$dest" submodule --quiet init
  for override in "$@"; do
    git -C "$dest" config "submodule.${override%%=*}.url" "${override#*=}"
  done
  retry 5 "fetch the submodules of $name" git -C "$dest" submodule --quiet update
  while read -r _mode type commit path; do
    [[ $type == commit ]] || continue
    head=$(git -C "$dest/$path" rev-parse HEAD 2>/dev/null) || head=none
    if [[ $head != "$commit" ]]; then
      die "$name: submodule $path is at commit $head, not $commit as the pinned tree records; refusing to build it"
    fi
    log "$name: submodule $path verified at $commit"
  done < <(git -C "$dest" ls-tree -r --full-tree HEAD)
}
