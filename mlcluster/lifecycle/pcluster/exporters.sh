#!/usr/bin/env bash
# Metrics exporters for the environment's Prometheus workspace (observability.prometheus.enabled),
# as systemd services of the unprivileged system user mlc-exporter (no home, no login shell).
#
# Every node: the Prometheus node exporter (port 9100) from its release tarball, used only when its
# SHA-256 is the one pinned in pins.sh, with its textfile collector reading
# /var/lib/mlcluster-exporters/textfile (root's folder, a subfolder only mlc-exporter writes).
# Nodes with an EFA device: a timer writes the EFA port counters there (mlcluster-efa-metrics).
# The head node: a timer writes Slurm's node and job counts there (mlcluster-slurm-metrics).
# GPU nodes with Docker: NVIDIA's DCGM exporter (port 9400), its image pinned by digest, run with
# mlc-exporter's uid and no capabilities in its container. Neuron nodes: neuron-monitor from
# aws-neuronx-tools (the neuron step's pinned release) piped into its Prometheus front end
# (port 9410). Ports and metric names are mlcluster/exporters.py's contract.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(dirname "${BASH_SOURCE[0]}")"
readonly HERE
# shellcheck source-path=SCRIPTDIR/../exporters source=exporter_units.sh
. "${HERE}/exporter_units.sh"
readonly NODE_EXPORTER_DIR="/opt/mlcluster/node_exporter-${NODE_EXPORTER_VERSION}"
readonly PYTHON_DIR=/opt/mlcluster/python
readonly UNIT_DIR=/etc/systemd/system
readonly NEURON_BIN=/opt/aws/neuron/bin
RELOAD=0

# ensure_exporter_user: the system user every exporter runs as.
ensure_exporter_user() {
  local entry problem
  if entry="$(getent passwd "${EXPORTER_USER}")"; then
    problem="$(exporter_account_problem "${entry}")"
    [[ -z "${problem}" ]] || die "${problem}"
    return 0
  fi
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "${EXPORTER_USER}"
  log "created the system user ${EXPORTER_USER} (no home, no login shell)"
}

# ensure_exporter_dir PATH: PATH (under ROOT, in a root-owned folder) as the exporter user's 0755 folder.
ensure_exporter_dir() {
  local path="${ROOT}$1" ids owner
  ids="$(getent passwd "${EXPORTER_USER}" | cut -d: -f3,4)"
  if [[ -L "${path}" ]] || { [[ -e "${path}" ]] && [[ ! -d "${path}" ]]; }; then
    die "$1 is a link or not a folder; someone else made it: remove it, then run again"
  fi
  if [[ ! -d "${path}" ]]; then
    mkdir -m 0755 "${path}"
    chown "${ids}" "${path}"
    log "created $1 (${EXPORTER_USER}, 0755)"
    return 0
  fi
  owner="$(stat -c %u "${path}")"
  [[ "${owner}" == "${ids%%:*}" ]] || die "$1 is owned by uid ${owner}, not ${EXPORTER_USER}; remove it, then run again"
}

# unit NAME < content: write /etc/systemd/system/NAME; sets UNIT_CHANGED when it changed.
unit() {
  CHANGED=0
  put_file "${UNIT_DIR}/$1" 0644
  UNIT_CHANGED="${CHANGED}"
  ((UNIT_CHANGED)) && RELOAD=1
  return 0
}

# converge UNIT CHANGED: UNIT enabled and running, restarted when its files changed.
converge() {
  local name="$1" changed="$2"
  if ((RELOAD)); then
    systemctl daemon-reload
    RELOAD=0
  fi
  systemctl is-enabled --quiet "${name}" || systemctl enable "${name}"
  if ! systemctl is-active --quiet "${name}"; then
    systemctl start "${name}"
    log "started ${name}"
  elif ((changed)); then
    systemctl restart "${name}"
    log "restarted ${name}: its files changed"
  fi
}

# install_node_exporter: the release binary, used only with the pinned SHA-256 of its tarball.
install_node_exporter() {
  local arch work tarball stamp="${ROOT}${NODE_EXPORTER_DIR}/.tarball-sha256"
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) die "node exporter: no pinned release for machine type $(uname -m); allowed: x86_64, aarch64" ;;
  esac
  if [[ -x "${ROOT}${NODE_EXPORTER_DIR}/node_exporter" && -f "${stamp}" ]] \
    && [[ "$(<"${stamp}")" == "${NODE_EXPORTER_SHA256[${arch}]}" ]]; then
    log "node exporter ${NODE_EXPORTER_VERSION} is installed"
    return 0
  fi
  work="$(work_dir)"
  tarball="node_exporter-${NODE_EXPORTER_VERSION}.linux-${arch}.tar.gz"
  fetch_verified "node exporter ${NODE_EXPORTER_VERSION}" "${NODE_EXPORTER_URL}/${tarball}" \
    "${NODE_EXPORTER_SHA256[${arch}]}" "${work}/${tarball}"
  tar -xzf "${work}/${tarball}" -C "${work}" --no-same-owner
  install -d -m 0755 "${ROOT}${NODE_EXPORTER_DIR}"
  install -m 0755 "${work}/${tarball%.tar.gz}/node_exporter" "${ROOT}${NODE_EXPORTER_DIR}/node_exporter"
  printf '%s\n' "${NODE_EXPORTER_SHA256[${arch}]}" >"${stamp}"
  rm -rf "${work}"
  log "installed node exporter ${NODE_EXPORTER_VERSION} (${arch}) in ${NODE_EXPORTER_DIR}"
}

node_exporter() {
  install_node_exporter
  unit mlcluster-node-exporter.service < <(node_exporter_unit "${NODE_EXPORTER_VERSION}" "${NODE_EXPORTER_DIR}")
  converge mlcluster-node-exporter.service "${UNIT_CHANGED}"
}

# textfile_timer NAME SCRIPT WHAT FAMILIES: install SCRIPT as mlcluster-NAME-metrics and run it
# every 15 seconds as the exporter user, writing into the textfile folder.
textfile_timer() {
  local name="$1" script="$2" what="$3" families="$4" changed
  CHANGED=0
  put_file "${BIN_DIR}/mlcluster-${name}-metrics" 0755 <"${HERE}/${script}"
  changed="${CHANGED}"
  unit "mlcluster-${name}-metrics.service" < <(textfile_service_unit "${name}" "${what}" "${families}")
  ((UNIT_CHANGED)) && changed=1
  unit "mlcluster-${name}-metrics.timer" < <(textfile_timer_unit "${name}" "${what}")
  ((UNIT_CHANGED)) && changed=1
  converge "mlcluster-${name}-metrics.timer" "${changed}"
}

# has_efa: an InfiniBand device of this node belongs to the efa driver.
has_efa() {
  local driver
  for driver in "${ROOT}"/sys/class/infiniband/*/device/driver; do
    [[ "$(readlink "${driver}" || true)" == */efa ]] && return 0
  done
  return 1
}

dcgm_exporter() {
  local ids changed
  if ! command -v docker >/dev/null 2>&1 || ! service_active docker; then
    warn "the DCGM exporter runs in Docker, which is not running here (node_scripts.docker_enroot_pyxis: false?); GPU metrics are not exported"
    return 0
  fi
  ids="$(getent passwd "${EXPORTER_USER}" | cut -d: -f3,4)"
  CHANGED=0
  put_file "${DCGM_COUNTERS}" 0644 <"${HERE}/dcgm_counters.csv"
  changed="${CHANGED}"
  if ! docker inspect --type image "${DCGM_EXPORTER_IMAGE}" >/dev/null 2>&1; then
    retry docker pull --quiet "${DCGM_EXPORTER_IMAGE}" >/dev/null || die "cannot pull ${DCGM_EXPORTER_IMAGE}"
  fi
  unit mlcluster-dcgm-exporter.service < <(dcgm_exporter_unit "${ids}" "${DCGM_EXPORTER_IMAGE}")
  ((UNIT_CHANGED)) && changed=1
  converge mlcluster-dcgm-exporter.service "${changed}"
}

neuron_monitor() {
  local wheel="${PYTHON_DIR}/${PROMETHEUS_CLIENT_WHEEL}" work changed=0
  [[ -f "${ROOT}${NEURON_BIN}/neuron-monitor-prometheus.py" ]] \
    || die "${NEURON_BIN}/neuron-monitor-prometheus.py is missing; aws-neuronx-tools (the neuron step) ships it"
  if [[ ! -f "${ROOT}${wheel}" ]]; then
    work="$(work_dir)"
    fetch_verified "prometheus_client" "${PROMETHEUS_CLIENT_URL}" "${PROMETHEUS_CLIENT_SHA256}" "${work}/${PROMETHEUS_CLIENT_WHEEL}"
    install -d -m 0755 "${ROOT}${PYTHON_DIR}"
    install -m 0644 "${work}/${PROMETHEUS_CLIENT_WHEEL}" "${ROOT}${wheel}"
    rm -rf "${work}"
    log "installed ${PROMETHEUS_CLIENT_WHEEL} in ${PYTHON_DIR}"
    changed=1
  fi
  unit mlcluster-neuron-monitor.service < <(neuron_monitor_unit "${wheel}" "${NEURON_BIN}")
  ((UNIT_CHANGED)) && changed=1
  converge mlcluster-neuron-monitor.service "${changed}"
}

ensure_exporter_user
ensure_root_dir "${EXPORTERS_DIR}" 0755
ensure_exporter_dir "${TEXTFILE_DIR}"
node_exporter
if has_efa; then
  textfile_timer efa efa_metrics.sh "EFA port counters" AF_UNIX
fi
if [[ "${MLCLUSTER_NODE_ROLE:-}" == head ]]; then
  textfile_timer slurm slurm_metrics.sh "Slurm node and job counts" "AF_UNIX AF_INET AF_INET6"
fi
if has_nvidia_gpu; then
  dcgm_exporter
fi
if [[ -x "${ROOT}${NEURON_BIN}/neuron-monitor" ]]; then
  neuron_monitor
fi
log "exporters ready as ${EXPORTER_USER}"
