#!/usr/bin/env bash
# Step imds (controller and login nodes): only root may reach the instance metadata service, so
# users' processes cannot take the instance role's credentials. An iptables rule on OUTPUT rejects
# connections to 169.254.169.254 from every other user (owner match); a oneshot systemd unit puts
# the rule back at every boot. Root keeps IMDS for HyperPod's agents and the lifecycle steps.
# One exception is added by the collector step, when it runs: the metrics collector's user
# (mlc-collector) signs its remote writes with the instance role (steps/collector.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

RULE=(OUTPUT --destination 169.254.169.254 --protocol tcp --match owner ! --uid-owner 0 --jump REJECT)
UNIT=mlcluster-imds-root-only

main() {
  command -v iptables >/dev/null 2>&1 || apt_install iptables
  if iptables --wait --check "${RULE[@]}" 2>/dev/null; then
    log "IMDS is already limited to root"
  else
    iptables --wait --insert "${RULE[@]}"
    log "IMDS limited to root (iptables ${RULE[*]})"
  fi
  install_file "$SYSTEMD_DIR/$UNIT.service" 644 <<EOF_UNIT
# Written by mlcluster (imds step): only root may reach the instance metadata service.
[Unit]
Description=mlcluster: instance metadata service for root only
After=network-pre.target
Before=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'iptables --wait --check ${RULE[*]} 2>/dev/null || iptables --wait --insert ${RULE[*]}'

[Install]
WantedBy=multi-user.target
EOF_UNIT
  if [[ $FILE_CHANGED == true ]]; then
    systemctl daemon-reload
  fi
  if ! systemctl is-enabled --quiet "$UNIT"; then
    systemctl enable "$UNIT"
  fi
}

main "$@"
