# shellcheck shell=bash
# shellcheck disable=SC2034 # CHANGED is read by the step scripts that source this file
# Helpers shared by the ParallelCluster node scripts (sourced, never run).
#
# Every file path goes through ${ROOT} (MLCLUSTER_ROOT, empty on a real node)
# so tests can run the scripts against a scratch directory with stub
# commands on PATH. Writes are idempotent: a file is replaced only when its
# content differs, and CHANGED=1 records that something was written.

ROOT="${MLCLUSTER_ROOT:-}"
CHANGED=0
# Downloads and builds happen in fresh folders under here: root-only, unlike /tmp.
WORK_DIR="${ROOT}/var/lib/mlcluster/work"

# shellcheck source=pins.sh
. "${BASH_SOURCE[0]%/*}/pins.sh" # the steps source this file by a path with a folder

# log MESSAGE...: a timestamped line (UTC) on stderr (run.sh appends it to the step log).
log() {
  TZ=UTC0 printf '%(%Y-%m-%dT%H:%M:%SZ)T [%s] %s\n' -1 "${MLCLUSTER_STEP:-node-scripts}" "$*" >&2
}

# make_parent PATH: the folder PATH is in, made when missing (no process when it is there).
make_parent() {
  local parent="${1%/*}"
  [[ -d "${parent:-/}" ]] || mkdir -p "${parent}"
}

# die MESSAGE...: log the reason and stop the step.
die() {
  log "ERROR: $*"
  exit 1
}

# retry COMMAND...: run COMMAND until it succeeds, doubling the pause between
# attempts (network downloads, package mirrors, apt locks and DNS are flaky
# while a node boots).
retry() {
  local attempts="${MLCLUSTER_RETRY_ATTEMPTS:-5}" delay="${MLCLUSTER_RETRY_DELAY:-5}" n=1
  until "$@"; do
    if ((n >= attempts)); then
      log "giving up after ${n} attempts: $*"
      return 1
    fi
    log "attempt ${n} of ${attempts} failed, retrying in ${delay}s: $*"
    sleep "${delay}"
    n=$((n + 1))
    delay=$((delay * 2))
  done
}

# os_release KEY: the value of KEY in /etc/os-release, unquoted (read by bash itself: steps ask often).
os_release() {
  local key value
  while IFS='=' read -r key value || [[ -n "${key}" ]]; do
    [[ "${key}" == "$1" ]] && printf '%s\n' "${value//\"/}"
    key=""
  done <"${ROOT}/etc/os-release"
  return 0
}

# os_family: amzn, ubuntu or rhel (RHEL and Rocky), the three package worlds.
os_family() {
  local id
  id="$(os_release ID)"
  case "${id}" in
    amzn) echo amzn ;;
    ubuntu) echo ubuntu ;;
    rhel | rocky) echo rhel ;;
    *) die "unsupported operating system '${id}' (from /etc/os-release); expected amzn, ubuntu, rhel or rocky" ;;
  esac
}

# pkg_manager: apt, dnf or yum (Amazon Linux 2 only).
pkg_manager() {
  case "$(os_family)" in
    ubuntu) echo apt ;;
    amzn) if [[ "$(os_release VERSION_ID)" == "2" ]]; then echo yum; else echo dnf; fi ;;
    rhel) echo dnf ;;
  esac
}

# default_user: the OS's default login user (the docker_group step's member).
default_user() {
  case "$(os_release ID)" in
    ubuntu) echo ubuntu ;;
    rocky) echo rocky ;;
    *) echo ec2-user ;;
  esac
}

# pkg_is_installed NAME: true when the package NAME is installed.
pkg_is_installed() {
  if [[ "$(pkg_manager)" == apt ]]; then
    # shellcheck disable=SC2016 # ${Status} is dpkg-query's field, not a shell variable
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
  else
    rpm -q "$1" >/dev/null 2>&1
  fi
}

# pkg_available NAME: true when a configured repository offers the package NAME.
pkg_available() {
  if [[ "$(pkg_manager)" == apt ]]; then
    apt-cache show "$1" >/dev/null 2>&1
  else
    "$(pkg_manager)" -q list --available "$1" >/dev/null 2>&1
  fi
}

# pkg_install NAME...: install the packages that are missing, with retries.
pkg_install() {
  local missing=() name manager
  for name in "$@"; do
    pkg_is_installed "${name}" || missing+=("${name}")
  done
  ((${#missing[@]})) || return 0
  manager="$(pkg_manager)"
  log "installing ${missing[*]}"
  case "${manager}" in
    apt)
      retry apt-get -o DPkg::Lock::Timeout=600 -q update
      retry env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q install -y "${missing[@]}"
      ;;
    *) retry "${manager}" -q install -y "${missing[@]}" ;;
  esac
  CHANGED=1
}

# warn MESSAGE...: log a warning and go on.
warn() {
  log "WARNING: $*"
}

# work_dir: a new empty folder only root can enter, for one download or build.
work_dir() {
  install -d -m 0700 "${WORK_DIR}"
  mktemp -d "${WORK_DIR}/XXXXXX"
}

# download URL FILE: fetch URL (HTTPS only) to FILE, with retries. Callers verify what they got.
download() {
  retry curl -fsSL --proto '=https' --connect-timeout 20 -o "$2" "$1"
}

# fetch_verified NAME URL SHA256 FILE: download URL to FILE and stop the step
# unless its SHA-256 is the pinned one.
fetch_verified() {
  local name="$1" url="$2" want="$3" file="$4" got
  [[ "${want}" =~ ^[0-9a-f]{64}$ ]] || die "${name}: no pinned SHA-256 for ${url} (got '${want}'); not downloaded"
  download "${url}" "${file}" || die "${name}: cannot download ${url}"
  got="$(sha256sum "${file}" | cut -d' ' -f1)"
  if [[ "${got}" != "${want}" ]]; then
    rm -f "${file}"
    die "${name}: SHA-256 mismatch for ${url}: expected ${want}, got ${got}; not installed"
  fi
  log "${name}: ${url} has the pinned SHA-256 ${want}"
}

# key_fingerprints FILE: the fingerprint of each primary key in the OpenPGP key FILE, one a line.
key_fingerprints() {
  local home
  home="$(work_dir)"
  GNUPGHOME="${home}" gpg --batch --quiet --with-colons --show-keys "$1" 2>/dev/null \
    | awk -F: '$1 == "pub" { primary = 1; next } $1 == "fpr" && primary { print $10; primary = 0 }' || true
  rm -rf "${home}"
}

# fetch_key NAME URL FINGERPRINT PATH [binary]: install a package repository's
# signing key at PATH (under ROOT), armored or, with "binary", dearmored for
# apt's signed-by. The key is used only when it is exactly one key with the
# pinned fingerprint; an installed key that still matches is kept as is.
fetch_key() {
  local name="$1" url="$2" want="$3" path="$4" format="${5:-armored}" tmp got
  [[ "${want}" =~ ^[0-9A-F]{40}$ ]] || die "${name}: no pinned key fingerprint for ${url} (got '${want}')"
  if [[ -f "${ROOT}${path}" && ! -L "${ROOT}${path}" && "$(key_fingerprints "${ROOT}${path}")" == "${want}" ]]; then
    return 0
  fi
  tmp="$(work_dir)"
  download "${url}" "${tmp}/key" || die "${name}: cannot download the repository key ${url}"
  got="$(key_fingerprints "${tmp}/key" | paste -sd, -)"
  if [[ "${got}" != "${want}" ]]; then
    rm -rf "${tmp}"
    die "${name}: repository key fingerprint mismatch for ${url}: expected ${want}, got ${got:-no key}; repository not added"
  fi
  if [[ "${format}" == binary ]]; then
    gpg --batch --yes --dearmor -o "${tmp}/key.gpg" "${tmp}/key"
    mv -f "${tmp}/key.gpg" "${tmp}/key"
  fi
  make_parent "${ROOT}${path}"
  install -m 0644 "${tmp}/key" "${ROOT}${path}"
  rm -rf "${tmp}"
  log "${name}: installed repository key ${want} at ${path}"
  CHANGED=1
}

# clone_fresh URL TAG DIR: one attempt at a shallow clone of TAG into an empty DIR.
clone_fresh() {
  rm -rf "$3"
  git clone --quiet --depth 1 --branch "$2" "$1" "$3"
}

# clone_verified NAME URL TAG COMMIT DIR: clone TAG of the git repository URL
# into DIR and stop the step unless the tag is the pinned commit.
clone_verified() {
  local name="$1" url="$2" tag="$3" want="$4" dir="$5" got
  [[ "${want}" =~ ^[0-9a-f]{40}$ ]] || die "${name}: no pinned commit for ${url} ${tag} (got '${want}')"
  retry clone_fresh "${url}" "${tag}" "${dir}" || die "${name}: cannot clone ${url} ${tag}"
  got="$(git -C "${dir}" rev-parse HEAD)"
  [[ "${got}" == "${want}" ]] || die "${name}: ${url} tag ${tag} is commit ${got}, expected ${want}; not built"
  log "${name}: ${url} ${tag} is the pinned commit ${want}"
}

# put_file PATH MODE < content: write PATH (under ROOT) when its content (text) differs, atomically.
# Both contents are compared in bash (a step's second run starts no process here).
put_file() {
  local path="${ROOT}$1" mode="$2" tmp content="" current=""
  if IFS= read -r -d '' content; then
    die "put_file $1: the content has a NUL byte (text only)"
  fi
  if [[ -f "${path}" ]] && ! IFS= read -r -d '' current <"${path}" && [[ "${current}" == "${content}" ]]; then
    return 0
  fi
  make_parent "${path}"
  tmp="$(mktemp "${path}.XXXXXX")"
  printf '%s' "${content}" >"${tmp}"
  chmod "${mode}" "${tmp}"
  mv -f "${tmp}" "${path}"
  log "wrote $1"
  CHANGED=1
}

# ensure_line LINE PATH: append LINE to PATH (under ROOT) unless it is there.
ensure_line() {
  local path="${ROOT}$2"
  make_parent "${path}"
  if [[ -f "${path}" ]] && grep -qxF -- "$1" "${path}"; then
    return 0
  fi
  printf '%s\n' "$1" >>"${path}"
  log "added '$1' to $2"
  CHANGED=1
}

# ensure_root_dir PATH MODE: PATH (under ROOT) as a folder owned by root with
# MODE. An existing PATH that is a link, not a folder or not root's was made
# by someone else (a user, under a world-writable parent such as /scratch):
# the step stops rather than adopt it.
ensure_root_dir() {
  local path="${ROOT}$1" mode="$2" info owner
  if [[ -L "${path}" ]] || { [[ -e "${path}" ]] && [[ ! -d "${path}" ]]; }; then
    die "$1 is a link or not a folder; someone else made it: remove it (and check what it points to), then run again"
  fi
  if [[ -d "${path}" ]]; then
    info="$(stat -c '%u %a' "${path}")"
    owner="${info% *}"
    if [[ "${owner}" != "${EUID}" ]]; then
      die "$1 is owned by uid ${owner}, not root; someone made it before this step: remove it (and check what it holds), then run again"
    fi
    if [[ "${info#* }" != "${mode#0}" ]]; then
      # "00": GNU chmod keeps a folder's setuid/setgid bits on a plain numeric mode (0755 leaves 2755).
      chmod "00${mode#0}" "${path}"
      log "set $1 to mode ${mode}"
      CHANGED=1
    fi
    return 0
  fi
  make_parent "${path}"
  mkdir -m "${mode}" "${path}"
  log "created $1 (root, ${mode})"
  CHANGED=1
}

# service_active NAME: true when the systemd unit NAME is running.
service_active() {
  systemctl is-active --quiet "$1"
}

# has_nvidia_gpu: true when an NVIDIA driver sees at least one GPU.
has_nvidia_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

# local_storage: /scratch when ParallelCluster mounted instance-store NVMe there, else /var/tmp.
local_storage() {
  if [[ -d "${ROOT}/scratch" ]]; then echo /scratch; else echo /var/tmp; fi
}

# register_user_dirs NAME ROOT...: have mlcluster-user-dirs make each user's
# 0700 folder under every ROOT (root-owned, made by the caller) before the
# user's job (Slurm prolog, written by the head node into the shared
# /opt/slurm) or SSH session (pam_exec, head and login nodes) starts.
register_user_dirs() {
  local name="$1" helper=/opt/mlcluster/bin/mlcluster-user-dirs
  shift
  put_file "/etc/mlcluster/user-dirs.d/${name}.conf" 0644 < <(printf '%s\n' "$@")
  put_file "${helper}" 0755 <"${BASH_SOURCE[0]%/*}/user_dirs.sh"
  case "${MLCLUSTER_NODE_ROLE:-}" in
    head)
      # ParallelCluster's slurm.conf runs every script in prolog.d as root before each job.
      put_file /opt/slurm/etc/scripts/prolog.d/50_mlcluster_user_dirs 0755 <<EOF
#!/bin/bash
# Written by mlcluster: the job user's container folders, made by root before the job starts.
[ -x ${helper} ] || exit 0
exec ${helper} "\${SLURM_JOB_UID}"
EOF
      ;;
  esac
  case "${MLCLUSTER_NODE_ROLE:-}" in
    head | login)
      if [[ -f "${ROOT}/etc/pam.d/sshd" ]]; then
        ensure_line "session optional pam_exec.so quiet ${helper}" /etc/pam.d/sshd
      else
        warn "/etc/pam.d/sshd is missing; users get their ${name} folders here only from a job"
      fi
      ;;
  esac
}
