#!/usr/bin/env bash
# Install the metrics collector on the head node (ParallelCluster) or the controller (HyperPod).
#
#   collector_install.sh --files DIR
#
# DIR holds the files mlcluster rendered at synth time (collector.yml, collector_targets.json)
# and the target refresher (collector_targets.py). This script:
#   - installs Prometheus 2.54.1 (agent mode) from its GitHub release, used only when the
#     tarball's SHA-256 is the one pinned below; a mismatch stops here with nothing installed;
#   - runs it as the unprivileged system user mlc-collector (no shell, no home), listening on
#     127.0.0.1:9090 only, its write-ahead log on the local root volume (/var/lib/mlcluster-collector/wal);
#   - installs a timer that runs the refresher every minute as mlc-collector: it rewrites the
#     file_sd target files (/var/lib/mlcluster-collector/targets) from Slurm's node list.
# Every write is made only when the content differs, so a second run changes nothing.
# Giving mlc-collector the instance metadata service (SigV4 needs the instance role's
# credentials) is the calling step's job: the two backends restrict IMDS differently.
#
# Environment: MLCLUSTER_ROOT (prefix for every path; tests), MLCLUSTER_RETRY_ATTEMPTS,
# MLCLUSTER_RETRY_DELAY (seconds, doubled per retry).
set -euo pipefail

# Prometheus 2.54.1 release tarballs (github.com/prometheus/prometheus/releases/tag/v2.54.1).
# SHA-256 as published in the release's sha256sums.txt and pinned by, independently,
# polymathrobotics/oci (prometheus/prometheus/docker-bake.hcl: both architectures), a
# TypeScript binary manifest that installs Prometheus (both architectures) and an Alpine
# Dockerfile (amd64).
PROMETHEUS_VERSION=2.54.1
PROMETHEUS_URL_BASE=https://github.com/prometheus/prometheus/releases/download/v2.54.1
PROMETHEUS_SHA256_AMD64=31715ef65e8a898d0f97c8c08c03b6b9afe485ac84e1698bcfec90fc6e62924f
PROMETHEUS_SHA256_ARM64=3d9946ca730f2679bbd63e9d40e559a0ba227a638d237e723af1a99bd7098263

ROOT="${MLCLUSTER_ROOT:-}"
USER_NAME=mlc-collector
HOME_DIR=/opt/mlcluster/collector
BIN_DIR="${HOME_DIR}/bin"
CONFIG_DIR=/etc/mlcluster/collector
STATE_DIR=/var/lib/mlcluster-collector
UNIT_DIR=/etc/systemd/system
SERVICE=mlcluster-collector
TARGETS=mlcluster-collector-targets
# The collector's memory bound (systemd MemoryMax), as a share of the node's memory (systemd takes a
# percentage of the physical memory): on a small controller a fixed 4G would leave slurmctld and
# MariaDB too little, on a large one it would cut the collector short of its sample limits.
COLLECTOR_MEMORY_MAX=25%
WORK_DIR="${ROOT}/var/lib/mlcluster/work"
CHANGED=0
UNITS_CHANGED=0

log() {
  printf '%s [collector] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

die() {
  log "ERROR: $*"
  exit 1
}

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

# put PATH MODE < content: write PATH (under ROOT, root-owned) when its content or mode differs.
put() {
  local path="${ROOT}$1" mode="$2" tmp
  mkdir -p "$(dirname "${path}")"
  tmp="$(mktemp "${path}.XXXXXX")"
  cat >"${tmp}"
  if [[ -f "${path}" && ! -L "${path}" ]] && cmp -s "${tmp}" "${path}" && [[ "$(stat -c %a "${path}")" == "${mode#0}" ]]; then
    rm -f "${tmp}"
    return 0
  fi
  chmod "${mode}" "${tmp}"
  mv -f "${tmp}" "${path}"
  log "wrote $1"
  CHANGED=1
}

# fetch_verified URL SHA256 FILE: download URL (HTTPS only, retried) to FILE; stop unless its SHA-256 is SHA256.
fetch_verified() {
  local url="$1" want="$2" file="$3" got
  [[ "${want}" =~ ^[0-9a-f]{64}$ ]] || die "no pinned SHA-256 for ${url} (got '${want}'); not downloaded"
  retry curl -fsSL --proto '=https' --connect-timeout 20 -o "${file}" "${url}" || die "cannot download ${url}"
  got="$(sha256sum "${file}" | cut -d' ' -f1)"
  if [[ "${got}" != "${want}" ]]; then
    rm -f "${file}"
    die "SHA-256 mismatch for ${url}: expected ${want}, got ${got}; not installed"
  fi
  log "${url} has the pinned SHA-256 ${want}"
}

architecture() {
  case "$(uname -m)" in
    x86_64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) die "unsupported architecture '$(uname -m)'; Prometheus is pinned for x86_64 and aarch64" ;;
  esac
}

# ensure_user: the collector's system user. An account of that name that is not a system account
# (a cluster user from lifecycle.users, a directory user) is refused: adopting it would let its owner
# run the collector, own its state and reach the instance role the collector signs with.
ensure_user() {
  local entry uid shell
  if entry="$(getent passwd "${USER_NAME}")"; then
    uid="$(cut -d: -f3 <<<"${entry}")"
    shell="$(cut -d: -f7 <<<"${entry}")"
    if ! [[ "${uid}" =~ ^[0-9]+$ ]] || ((uid == 0 || uid >= 1000)) || [[ "${shell}" != */nologin && "${shell}" != */false ]]; then
      die "${USER_NAME} exists as uid ${uid} with shell ${shell}, not as a system account (uid 1-999, no login shell); it would run the collector and reach the instance role: give that user another name, then run again"
    fi
    return 0
  fi
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "${USER_NAME}"
  log "created system user ${USER_NAME}"
  CHANGED=1
}

install_prometheus() {
  local arch want name marker work
  arch="$(architecture)"
  if [[ "${arch}" == amd64 ]]; then want="${PROMETHEUS_SHA256_AMD64}"; else want="${PROMETHEUS_SHA256_ARM64}"; fi
  name="prometheus-${PROMETHEUS_VERSION}.linux-${arch}"
  marker="${ROOT}${HOME_DIR}/VERSION"
  if [[ -x "${ROOT}${BIN_DIR}/prometheus" && -f "${marker}" && "$(cat "${marker}")" == "${name} ${want}" ]]; then
    log "Prometheus ${PROMETHEUS_VERSION} is installed"
    return 0
  fi
  mkdir -p "${WORK_DIR}"
  chmod 0700 "${WORK_DIR}"
  work="$(mktemp -d "${WORK_DIR}/XXXXXX")"
  # The pin is named on each call, so a reader (and tests/lifecycle/test_downloads_pinned.py) sees it.
  if [[ "${arch}" == amd64 ]]; then
    fetch_verified "${PROMETHEUS_URL_BASE}/${name}.tar.gz" "${PROMETHEUS_SHA256_AMD64}" "${work}/${name}.tar.gz"
  else
    fetch_verified "${PROMETHEUS_URL_BASE}/${name}.tar.gz" "${PROMETHEUS_SHA256_ARM64}" "${work}/${name}.tar.gz"
  fi
  tar -xzf "${work}/${name}.tar.gz" -C "${work}" "${name}/prometheus" || die "${name}.tar.gz holds no ${name}/prometheus"
  put "${BIN_DIR}/prometheus" 0755 <"${work}/${name}/prometheus"
  printf '%s %s\n' "${name}" "${want}" >"${marker}"
  rm -rf "${work}"
  log "installed Prometheus ${PROMETHEUS_VERSION} (${arch}) at ${BIN_DIR}/prometheus"
  CHANGED=1
}

# state_dir PATH MODE UID GID: a folder owned by the collector inside the root-owned STATE_DIR.
# Root only ever creates or fixes it by path while its parent is root's; a link there stops the step.
state_dir() {
  local path="${ROOT}$1" mode="$2" uid="$3" gid="$4"
  [[ ! -L "${path}" ]] || die "$1 is a link; someone else made it: remove it, then run again"
  if [[ ! -d "${path}" ]]; then
    mkdir -m "${mode}" "${path}"
    chown "${uid}:${gid}" "${path}"
    log "created $1 (${USER_NAME}, ${mode})"
    CHANGED=1
  elif [[ "$(stat -c '%u:%g %a' "${path}")" != "${uid}:${gid} ${mode#0}" ]]; then
    chown "${uid}:${gid}" "${path}"
    chmod "${mode}" "${path}"
    log "set $1 to ${USER_NAME}, ${mode}"
    CHANGED=1
  fi
}

install_files() {
  local files="$1" uid gid
  put "${CONFIG_DIR}/prometheus.yml" 0644 <"${files}/collector.yml"
  put "${CONFIG_DIR}/collector_targets.json" 0644 <"${files}/collector_targets.json"
  put "${BIN_DIR}/${TARGETS}" 0755 <"${files}/collector_targets.py"
  uid="$(getent passwd "${USER_NAME}" | cut -d: -f3)"
  gid="$(getent passwd "${USER_NAME}" | cut -d: -f4)"
  [[ -n "${uid}" && -n "${gid}" ]] || die "cannot find the uid and gid of ${USER_NAME}"
  [[ ! -L "${ROOT}${STATE_DIR}" ]] || die "${STATE_DIR} is a link; remove it, then run again"
  mkdir -p "${ROOT}${STATE_DIR}"
  chmod 0755 "${ROOT}${STATE_DIR}"
  [[ "$(stat -c %u "${ROOT}${STATE_DIR}")" == "$(id -u)" ]] || die "${STATE_DIR} is not root's; remove it, then run again"
  state_dir "${STATE_DIR}/wal" 0700 "${uid}" "${gid}"
  state_dir "${STATE_DIR}/targets" 0755 "${uid}" "${gid}"
}

unit() {
  local before="${CHANGED}"
  CHANGED=0
  put "${UNIT_DIR}/$1" 0644
  ((CHANGED)) && UNITS_CHANGED=1
  ((CHANGED)) || CHANGED="${before}"
}

install_units() {
  local hardening
  hardening="NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
CapabilityBoundingSet=
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"
  unit "${SERVICE}.service" <<EOF
# Written by mlcluster: the metrics collector (Prometheus ${PROMETHEUS_VERSION} in agent mode).
[Unit]
Description=mlcluster metrics collector: scrapes the cluster's exporters, remote-writes to Amazon Managed Service for Prometheus
Wants=network-online.target
After=network-online.target

[Service]
User=${USER_NAME}
Group=${USER_NAME}
ExecStart=${BIN_DIR}/prometheus --enable-feature=agent --config.file=${CONFIG_DIR}/prometheus.yml --storage.agent.path=${STATE_DIR}/wal --web.listen-address=127.0.0.1:9090
ExecReload=/bin/kill -HUP \$MAINPID
Restart=always
RestartSec=10
ReadWritePaths=${STATE_DIR}/wal
# Bounded: a flood of samples ends in this service's OOM kill, not slurmctld's or MariaDB's.
MemoryMax=${COLLECTOR_MEMORY_MAX}
${hardening}

[Install]
WantedBy=multi-user.target
EOF
  unit "${TARGETS}.service" <<EOF
# Written by mlcluster: rewrite the collector's file_sd target files from Slurm's node list.
[Unit]
Description=mlcluster metrics collector: scrape targets from Slurm's node list

[Service]
Type=oneshot
User=${USER_NAME}
Group=${USER_NAME}
Environment=PATH=/opt/slurm/bin:/usr/bin:/bin
ExecStart=/usr/bin/python3 ${BIN_DIR}/${TARGETS} --config ${CONFIG_DIR}/collector_targets.json
ReadWritePaths=${STATE_DIR}/targets
MemoryMax=256M
${hardening}
EOF
  unit "${TARGETS}.timer" <<EOF
# Written by mlcluster: refresh the collector's scrape targets every minute.
[Unit]
Description=mlcluster metrics collector: refresh scrape targets from Slurm's node list

[Timer]
OnBootSec=1min
OnUnitActiveSec=1min
AccuracySec=10s

[Install]
WantedBy=timers.target
EOF
}

main() {
  local files=""
  while (($#)); do
    case "$1" in
      --files)
        (($# >= 2)) || die "usage: collector_install.sh --files DIR"
        files="$2"
        shift 2
        ;;
      *) die "unknown argument '$1'; usage: collector_install.sh --files DIR" ;;
    esac
  done
  [[ -n "${files}" ]] || die "usage: collector_install.sh --files DIR"
  local file
  for file in collector.yml collector_targets.json collector_targets.py; do
    [[ -f "${files}/${file}" ]] || die "${files}/${file} is missing; it is uploaded with the node scripts when observability.prometheus is on"
  done
  ensure_user
  install_prometheus
  install_files "${files}"
  install_units
  if ((UNITS_CHANGED)); then
    systemctl daemon-reload
  fi
  systemctl is-enabled --quiet "${TARGETS}.timer" || systemctl enable --now "${TARGETS}.timer"
  systemctl start "${TARGETS}.service" || log "WARNING: the first target refresh failed (is slurmctld up?); the timer retries every minute"
  if ! systemctl is-enabled --quiet "${SERVICE}.service"; then
    systemctl enable "${SERVICE}.service"
  fi
  if ! systemctl is-active --quiet "${SERVICE}.service"; then
    systemctl start "${SERVICE}.service"
  elif ((CHANGED || UNITS_CHANGED)); then
    systemctl restart "${SERVICE}.service"
  fi
  if ((CHANGED || UNITS_CHANGED)); then log "collector installed"; else log "collector already installed; nothing changed"; fi
}

main "$@"
