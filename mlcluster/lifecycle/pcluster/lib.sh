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

# log MESSAGE...: a timestamped line on stderr (run.sh appends it to the step log).
log() {
  printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${MLCLUSTER_STEP:-node-scripts}" "$*" >&2
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

# os_release KEY: the value of KEY in /etc/os-release, unquoted.
os_release() {
  sed -n "s/^$1=//p" "${ROOT}/etc/os-release" | tr -d '"'
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

# default_user: the OS's default login user, which gets the docker group.
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

# pkg_install_files FILE...: install local .rpm/.deb files with the package manager.
pkg_install_files() {
  local manager
  manager="$(pkg_manager)"
  log "installing $*"
  if [[ "${manager}" == apt ]]; then
    retry env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q install -y "$@"
  else
    retry "${manager}" -q install -y "$@"
  fi
  CHANGED=1
}

# fetch URL FILE: download URL to the local path FILE, with retries.
fetch() {
  retry curl -fsSL --connect-timeout 20 -o "$2" "$1"
}

# put_file PATH MODE < content: write PATH (under ROOT) when its content differs.
put_file() {
  local path="${ROOT}$1" mode="$2" tmp
  mkdir -p "$(dirname "${path}")"
  tmp="$(mktemp "${path}.XXXXXX")"
  cat >"${tmp}"
  if [[ -f "${path}" ]] && cmp -s "${tmp}" "${path}"; then
    rm -f "${tmp}"
    return 0
  fi
  chmod "${mode}" "${tmp}"
  mv -f "${tmp}" "${path}"
  log "wrote $1"
  CHANGED=1
}

# ensure_line LINE PATH: append LINE to PATH (under ROOT) unless it is there.
ensure_line() {
  local path="${ROOT}$2"
  mkdir -p "$(dirname "${path}")"
  if [[ -f "${path}" ]] && grep -qxF -- "$1" "${path}"; then
    return 0
  fi
  printf '%s\n' "$1" >>"${path}"
  log "added '$1' to $2"
  CHANGED=1
}

# ensure_dir PATH MODE: create PATH (under ROOT) with MODE.
ensure_dir() {
  install -d -m "$2" "${ROOT}$1"
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
