#!/usr/bin/env bash
# Step observability (observability.prometheus.enabled): the metrics exporters the controller's collector
# scrapes, as systemd services of the unprivileged system user mlc-exporter (no home, no login shell).
#
# Every node: the Prometheus node exporter 1.8.2 (port 9100) from its release tarball, used only with
# the pinned SHA-256, its textfile collector reading /var/lib/mlcluster-exporters/textfile (root's
# folder, a subfolder only mlc-exporter writes). Nodes with an EFA device: a timer writes the EFA port
# counters there; the controller: a timer writes Slurm's node and job counts there. GPU nodes with
# Docker: NVIDIA's DCGM exporter (port 9400), its image pinned by digest, run with mlc-exporter's uid
# and no capabilities in its container. Trainium and Inferentia nodes: neuron-monitor from
# aws-neuronx-tools at the version ParallelCluster's neuron step pins, piped into its Prometheus front end
# (port 9410). Ports and metric names: mlcluster/exporters.py.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

NODE_EXPORTER_VERSION=1.8.2
NODE_EXPORTER_URL=https://github.com/prometheus/node_exporter/releases/download/v1.8.2
# The release tarballs' SHA-256, as pinned in several independent public repositories.
declare -A NODE_EXPORTER_SHA256=([amd64]=6809dd0b3ec45fd6e992c19071d6b5253aed3ead7bf0686885a51d85c6643c66 [arm64]=627382b9723c642411c33f48861134ebe893e70a63bcc8b3fc0619cd0bfac4be)
# Pinned by digest: the linux/amd64 manifest of 4.5.2-4.8.1-ubuntu22.04 (DCGM 4.5.2, Hopper and
# Blackwell), as published by NVIDIA's registry; a pull whose content differs fails in Docker itself.
DCGM_IMAGE=nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04@sha256:a7ad6547d4546eaf4dd5d6b4c0b4db4101e63ef7dc3cdff7f42b767d2c60b706
DCGM_CONTAINER=mlcluster-dcgm-exporter
# Neuron nodes: aws-neuronx-tools of Neuron SDK 2.28.0 (the version ParallelCluster's neuron step pins), from
# the Neuron repository whose key has this fingerprint ("Amazon AWS Neuron <neuron-maintainers@amazon.com>"),
# and prometheus_client 0.20.0 for its Prometheus front end: the PyPI wheel's SHA-256 as pinned by Spack
# (py-prometheus-client) and in pip-compile lock files.
NEURON_TOOLS_VERSION=2.28.23.0
NEURON_KEY_URL=https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
NEURON_KEY_FINGERPRINT=00FA2C1079260870A76D2C285749CAD8646D9185
NEURON_BIN=/opt/aws/neuron/bin
PROMETHEUS_CLIENT_WHEEL=prometheus_client-0.20.0-py3-none-any.whl
PROMETHEUS_CLIENT_URL=https://files.pythonhosted.org/packages/c7/98/745b810d822103adca2df8decd4c0bbe839ba7ad3511af3f0d09692fc0f0/prometheus_client-0.20.0-py3-none-any.whl
PROMETHEUS_CLIENT_SHA256=cde524a85bce83ca359cc837f28b8c0db5cac7aa653a588fd7e84ba061c329e7
PYTHON_DIR=/opt/mlcluster/python
NODE_EXPORTER_DIR=/opt/mlcluster/node_exporter-$NODE_EXPORTER_VERSION
# The exporters' layout (EXPORTER_USER, TEXTFILE_DIR, BIN_DIR, DCGM_COUNTERS) and units, shared with ParallelCluster.
# shellcheck source-path=SCRIPTDIR/../../exporters source=exporter_units.sh
. "$MLC_LIFECYCLE_DIR/exporter_units.sh"

# fetch_verified NAME URL SHA256 FILE : download URL to FILE; stop the step unless its SHA-256 is the pinned one.
fetch_verified() {
  local name=$1 url=$2 want=$3 file=$4 got
  [[ $want =~ ^[0-9a-f]{64}$ ]] || die "$name: no pinned SHA-256 for $url (got '$want'); not downloaded"
  retry 5 "download $name" curl -fsSL --proto '=https' -o "$file" "$url"
  got=$(sha256sum "$file" | cut -d' ' -f1)
  if [[ $got != "$want" ]]; then
    rm -f "$file"
    die "$name: SHA-256 mismatch for $url: expected $want, got $got; not installed"
  fi
  log "$name: $url has the pinned SHA-256 $want"
}

exporter_user() {
  local entry problem
  if entry=$(getent passwd "$EXPORTER_USER"); then
    problem=$(exporter_account_problem "$entry")
    [[ -z $problem ]] || die "$problem"
  else
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$EXPORTER_USER"
    log "created the system user $EXPORTER_USER (no home, no login shell)"
  fi
}

install_node_exporter() {
  local arch dir=$MLC_ROOT$NODE_EXPORTER_DIR work tarball
  arch=$(dpkg --print-architecture)
  [[ -n ${NODE_EXPORTER_SHA256[$arch]:-} ]] || die "node exporter: no pinned release for architecture $arch; allowed: amd64, arm64"
  if [[ -x $dir/node_exporter && -f $dir/.tarball-sha256 && $(<"$dir/.tarball-sha256") == "${NODE_EXPORTER_SHA256[$arch]}" ]]; then
    log "node exporter $NODE_EXPORTER_VERSION is installed"
    return 0
  fi
  work=$(mktemp -d "$TMP_DIR/node-exporter.XXXXXX")
  tarball=node_exporter-$NODE_EXPORTER_VERSION.linux-$arch.tar.gz
  fetch_verified "node exporter $NODE_EXPORTER_VERSION" "$NODE_EXPORTER_URL/$tarball" "${NODE_EXPORTER_SHA256[$arch]}" "$work/$tarball"
  tar -xzf "$work/$tarball" -C "$work" --no-same-owner
  mkdir -p "$dir"
  chmod 755 "$dir"
  cp "$work/${tarball%.tar.gz}/node_exporter" "$dir/node_exporter.new"
  chmod 755 "$dir/node_exporter.new"
  mv -f "$dir/node_exporter.new" "$dir/node_exporter"
  install_file "$dir/.tarball-sha256" 644 <<<"${NODE_EXPORTER_SHA256[$arch]}"
  rm -rf "$work"
  log "installed node exporter $NODE_EXPORTER_VERSION ($arch) in $NODE_EXPORTER_DIR"
}

# unit NAME < CONTENT : write the systemd unit NAME (and reload systemd when it changed).
unit() {
  install_file "$SYSTEMD_DIR/$1" 644
  if [[ $FILE_CHANGED == true ]]; then
    systemctl daemon-reload
  fi
}

node_exporter() {
  install_node_exporter
  unit mlcluster-node-exporter.service < <(node_exporter_unit "$NODE_EXPORTER_VERSION" "$NODE_EXPORTER_DIR")
  converge_service mlcluster-node-exporter "$SYSTEMD_DIR/mlcluster-node-exporter.service" \
    "$MLC_ROOT$NODE_EXPORTER_DIR/node_exporter"
}

# textfile_timer NAME SCRIPT WHAT FAMILIES : install SCRIPT as mlcluster-NAME-metrics and run it every
# 15 seconds as the exporter user, writing into the textfile folder.
textfile_timer() {
  local name=$1 script=$2 what=$3 families=$4 bin
  bin=$BIN_DIR/mlcluster-$name-metrics
  mkdir -p "$MLC_ROOT$BIN_DIR"
  install_file "$MLC_ROOT$bin" 755 <"$MLC_LIFECYCLE_DIR/$script"
  unit "mlcluster-$name-metrics.service" < <(textfile_service_unit "$name" "$what" "$families")
  unit "mlcluster-$name-metrics.timer" < <(textfile_timer_unit "$name" "$what")
  converge_service "mlcluster-$name-metrics.timer" "$SYSTEMD_DIR/mlcluster-$name-metrics.service" \
    "$SYSTEMD_DIR/mlcluster-$name-metrics.timer" "$MLC_ROOT$bin"
}

# has_efa : an InfiniBand device of this node belongs to the efa driver.
has_efa() {
  local driver
  for driver in "$MLC_ROOT"/sys/class/infiniband/*/device/driver; do
    if [[ $(readlink "$driver" || true) == */efa ]]; then
      return 0
    fi
  done
  return 1
}

dcgm_exporter() {
  local ids
  ids=$(ids_of "$EXPORTER_USER")
  install_file "$MLC_ROOT$DCGM_COUNTERS" 644 <"$MLC_LIFECYCLE_DIR/dcgm_counters.csv"
  # The container of the older lifecycle (root in Docker, --cap-add SYS_ADMIN) gives way to the unit's.
  if docker inspect "$DCGM_CONTAINER" >/dev/null 2>&1 && [[ ! -e $SYSTEMD_DIR/mlcluster-dcgm-exporter.service ]]; then
    docker rm --force "$DCGM_CONTAINER" >/dev/null
    log "removed the $DCGM_CONTAINER container the older lifecycle started as root"
  fi
  if ! docker inspect --type image "$DCGM_IMAGE" >/dev/null 2>&1; then
    retry 5 "pull $DCGM_IMAGE" docker pull --quiet "$DCGM_IMAGE"
  fi
  unit mlcluster-dcgm-exporter.service < <(dcgm_exporter_unit "$ids" "$DCGM_IMAGE")
  converge_service mlcluster-dcgm-exporter "$SYSTEMD_DIR/mlcluster-dcgm-exporter.service" "$MLC_ROOT$DCGM_COUNTERS"
}

# neuron_tools : aws-neuronx-tools at the pinned version, from the Neuron repository (key checked by fingerprint).
neuron_tools() {
  local have codename
  # shellcheck disable=SC2016  # ${Version} is a dpkg-query field
  have=$(dpkg-query -W -f='${Version}' aws-neuronx-tools 2>/dev/null) || have=""
  if [[ $have == "$NEURON_TOOLS_VERSION" || $have == "$NEURON_TOOLS_VERSION"[-.]* ]]; then
    log "aws-neuronx-tools $have is installed"
    return 0
  fi
  codename=$(sed -n 's/^VERSION_CODENAME=//p' "$MLC_ROOT/etc/os-release" | tr -d '"')
  apt_key neuron "$NEURON_KEY_URL" "$NEURON_KEY_FINGERPRINT"
  install_file "$MLC_ROOT/etc/apt/sources.list.d/neuron.list" 644 \
    <<<"deb [signed-by=/etc/apt/keyrings/neuron.asc] https://apt.repos.neuron.amazonaws.com $codename main"
  if [[ $FILE_CHANGED == true ]]; then
    APT_UPDATED=false
  fi
  apt_update
  retry 5 "install aws-neuronx-tools $NEURON_TOOLS_VERSION" apt-get "${APT_OPTIONS[@]}" install --allow-downgrades \
    "aws-neuronx-tools=$NEURON_TOOLS_VERSION*"
}

neuron_monitor() {
  local wheel=$PYTHON_DIR/$PROMETHEUS_CLIENT_WHEEL work
  neuron_tools
  [[ -f $MLC_ROOT$NEURON_BIN/neuron-monitor-prometheus.py ]] ||
    die "$NEURON_BIN/neuron-monitor-prometheus.py is missing; aws-neuronx-tools $NEURON_TOOLS_VERSION ships it"
  if [[ ! -f $MLC_ROOT$wheel ]]; then
    work=$(mktemp -d "$TMP_DIR/prometheus-client.XXXXXX")
    fetch_verified prometheus_client "$PROMETHEUS_CLIENT_URL" "$PROMETHEUS_CLIENT_SHA256" "$work/$PROMETHEUS_CLIENT_WHEEL"
    mkdir -p "$MLC_ROOT$PYTHON_DIR"
    chmod 644 "$work/$PROMETHEUS_CLIENT_WHEEL"
    mv -f "$work/$PROMETHEUS_CLIENT_WHEEL" "$MLC_ROOT$wheel"
    rm -rf "$work"
    log "installed $PROMETHEUS_CLIENT_WHEEL in $PYTHON_DIR"
  fi
  unit mlcluster-neuron-monitor.service < <(neuron_monitor_unit "$wheel" "$NEURON_BIN")
  converge_service mlcluster-neuron-monitor "$SYSTEMD_DIR/mlcluster-neuron-monitor.service" "$MLC_ROOT$wheel"
}

main() {
  exporter_user
  # The Ubuntu package the older lifecycle installed would hold port 9100.
  if systemctl is-enabled --quiet prometheus-node-exporter; then
    systemctl disable --now prometheus-node-exporter
    log "disabled the Ubuntu prometheus-node-exporter service: mlcluster's pinned node exporter takes port 9100"
  fi
  ensure_root_dir "$MLC_ROOT$EXPORTERS_DIR" 755
  ensure_user_dir "$EXPORTER_USER" "$MLC_ROOT$TEXTFILE_DIR" 755
  node_exporter
  if has_efa; then
    textfile_timer efa efa_metrics.sh "EFA port counters" AF_UNIX
  fi
  # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
  if [[ $MLC_ROLE == controller ]]; then
    textfile_timer slurm slurm_metrics.sh "Slurm node and job counts" "AF_UNIX AF_INET AF_INET6"
  fi
  if is_gpu_node; then
    if is_true "$MLC_DOCKER"; then
      dcgm_exporter
    else
      warn "the DCGM exporter runs in Docker, which is off (docker: false); GPU metrics are not exported"
    fi
  fi
  # Trainium and Inferentia: the Neuron driver's devices.
  if compgen -G "$MLC_ROOT/dev/neuron[0-9]*" >/dev/null; then
    neuron_monitor
  fi
  log "exporters ready as $EXPORTER_USER"
}

main "$@"
