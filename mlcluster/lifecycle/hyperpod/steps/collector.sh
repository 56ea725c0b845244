#!/usr/bin/env bash
# Step collector (controller, when observability.prometheus is on): the metrics collector.
#
# collector_install.sh (shared with ParallelCluster, in this folder with the configuration
# mlcluster rendered) installs the pinned Prometheus agent and its target refresher as the
# unprivileged user mlc-collector. The collector signs its remote writes with the controller's
# execution role, read from the instance metadata service, which the imds step closes to every
# user but root. This step adds the one exception: an iptables ACCEPT for mlc-collector ahead
# of the imds step's REJECT, put back at every boot by a unit ordered after the imds step's.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

COLLECTOR_USER=mlc-collector
ALLOW=(OUTPUT --destination 169.254.169.254 --protocol tcp --match owner --uid-owner "$COLLECTOR_USER" --jump ACCEPT)
UNIT=mlcluster-imds-collector

main() {
  # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
  [[ $MLC_ROLE == controller ]] || die "the collector runs on the controller only (this node is a $MLC_ROLE)"
  MLCLUSTER_ROOT=$MLC_ROOT MLCLUSTER_RETRY_DELAY=${MLC_RETRY_DELAY:-5} \
    bash "$MLC_LIFECYCLE_DIR/collector_install.sh" --files "$MLC_LIFECYCLE_DIR" ||
    die "installing the collector failed (see the lines above)"
  # Inserted first in the chain, so it comes before the imds step's REJECT (inserted earlier).
  if iptables --wait --check "${ALLOW[@]}" 2>/dev/null; then
    log "$COLLECTOR_USER may already reach the instance metadata service"
  else
    iptables --wait --insert "${ALLOW[@]}"
    log "allowed $COLLECTOR_USER to reach the instance metadata service (iptables ${ALLOW[*]})"
  fi
  install_file "$SYSTEMD_DIR/$UNIT.service" 644 <<EOF_UNIT
# Written by mlcluster (collector step): the metrics collector's user may reach the instance metadata service.
[Unit]
Description=mlcluster: instance metadata service for the metrics collector
After=mlcluster-imds-root-only.service
Before=mlcluster-collector.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'iptables --wait --check ${ALLOW[*]} 2>/dev/null || iptables --wait --insert ${ALLOW[*]}'

[Install]
WantedBy=multi-user.target
EOF_UNIT
  enable_boot_unit "$UNIT"
}

main "$@"
