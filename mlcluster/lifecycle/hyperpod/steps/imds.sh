#!/usr/bin/env bash
# Step imds (controller and login nodes): only root may reach the instance metadata service, so
# users' processes cannot take the instance role's credentials. An iptables rule on OUTPUT rejects
# connections to 169.254.169.254 from every other user (owner match), and an ip6tables rule does
# the same for the IPv6 endpoint fd00:ec2::254 when the kernel has IPv6; a oneshot systemd unit
# puts the rules back at every boot, before the network and before any user session, sshd, cron,
# at or slurmd can start a user's process. Root keeps IMDS for HyperPod's agents and the lifecycle steps.
# One exception is added by the collector step, when it runs: the metrics collector's user
# (mlc-collector) signs its remote writes with the instance role over IPv4 (steps/collector.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

RULE=(OUTPUT --destination 169.254.169.254 --protocol tcp --match owner ! --uid-owner 0 --jump REJECT)
RULE6=(OUTPUT --destination fd00:ec2::254 --protocol tcp --match owner ! --uid-owner 0 --jump REJECT)
# The kernel lists IPv6 addresses here only when IPv6 is on (it is absent with ipv6.disable=1).
IPV6_MARK=/proc/net/if_inet6
UNIT=mlcluster-imds-root-only

# restrict TOOL RULE... : insert RULE with TOOL (iptables or ip6tables) unless it is there.
restrict() {
  local tool=$1
  shift
  if "$tool" --wait --check "$@" 2>/dev/null; then
    log "IMDS is already limited to root ($tool)"
  else
    "$tool" --wait --insert "$@"
    log "IMDS limited to root ($tool $*)"
  fi
}

main() {
  if ! command -v iptables >/dev/null 2>&1 || ! command -v ip6tables >/dev/null 2>&1; then
    apt_install iptables
  fi
  restrict iptables "${RULE[@]}"
  if [[ -e $MLC_ROOT$IPV6_MARK ]]; then
    command -v ip6tables >/dev/null 2>&1 ||
      die "IPv6 is on but ip6tables is missing (package iptables); the IPv6 metadata endpoint would stay open to users"
    restrict ip6tables "${RULE6[@]}"
  else
    log "IPv6 is off on this node ($IPV6_MARK is absent): the IPv6 metadata endpoint is unreachable, no ip6tables rule"
  fi
  install_file "$SYSTEMD_DIR/$UNIT.service" 644 <<EOF_UNIT
# Written by mlcluster (imds step): only root may reach the instance metadata service (IPv4 and IPv6).
[Unit]
Description=mlcluster: instance metadata service for root only
# A firewall unit in systemd's own terms (systemd.special(7), network-pre.target): ordered before the
# network comes up, and before anything that starts a non-root process (logins, sshd, cron, at, slurmd).
# systemd-user-sessions requires it: if the rules cannot be put back, users cannot log in.
DefaultDependencies=no
Wants=network-pre.target
After=local-fs.target systemd-modules-load.service
Before=network-pre.target systemd-user-sessions.service ssh.service cron.service atd.service slurmd.service
Before=shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'iptables --wait --check ${RULE[*]} 2>/dev/null || iptables --wait --insert ${RULE[*]}'
ExecStart=/bin/sh -c '[ ! -e $IPV6_MARK ] || ip6tables --wait --check ${RULE6[*]} 2>/dev/null || ip6tables --wait --insert ${RULE6[*]}'

[Install]
WantedBy=multi-user.target
RequiredBy=systemd-user-sessions.service
EOF_UNIT
  enable_boot_unit "$UNIT"
}

main "$@"
