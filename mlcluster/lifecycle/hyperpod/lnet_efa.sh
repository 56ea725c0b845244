#!/usr/bin/env bash
# mlcluster-lustre-efa: bring LNet (the Lustre client's network layer) up over EFA, so FSx for
# Lustre traffic of an EFA-enabled file system uses the node's EFA devices. The lustre_efa step
# installs it as /usr/local/sbin/mlcluster-lustre-efa, runs it once, and enables
# mlcluster-lustre-efa.service, which runs it at every boot before the /fsx automount (LNet's
# dynamic configuration does not survive a reboot).
#
# The commands are the ones AWS documents for EFA clients: the FSx for Lustre user guide,
# "Configuring EFA clients" (https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html:
# `lnetctl net add --net efa --if <device> --peer-credits 32`, one per interface), and the Amazon EKS
# user guide, "Optimize Amazon FSx for Lustre performance on nodes (EFA)"
# (https://docs.aws.amazon.com/eks/latest/userguide/fsx-csi-tuning-efa.html: modprobe lnet, kefalnd
# ipif_name=<TCP interface> and ksocklnd; lnetctl lnet configure; a tcp net on that interface; the
# efa nets; `lnetctl set discovery 1`; `lnetctl udsp add --src efa --priority 0`; modprobe lustre).
# It reads the interfaces from /etc/mlcluster/lustre-efa.env, which the step writes. Running it
# again on a configured node changes nothing; it exits 1, naming what is missing, when LNet does
# not end up with one EFA interface per configured device.
set -euo pipefail

ROOT=${MLC_ROOT:-}
CONFIG=$ROOT/etc/mlcluster/lustre-efa.env
PEER_CREDITS=32

say() {
  printf 'mlcluster-lustre-efa: %s\n' "$*" >&2
}

fail() {
  say "ERROR: $*"
  exit 1
}

# net_show NET : LNet's YAML for one net, empty when LNet is down. Read whole, never piped into
# grep -q: under pipefail an early-exiting grep would turn a match into a failure.
net_show() {
  lnetctl net show --net "$1" 2>/dev/null || true
}

efa_nid_count() {
  grep -c '@efa' <<<"$(net_show efa)" || true
}

main() {
  [[ -f $CONFIG ]] || fail "$CONFIG is missing; run the lifecycle step lustre_efa first"
  # shellcheck source=/dev/null
  . "$CONFIG"
  local efa=() count device
  read -ra efa <<<"${MLC_LNET_EFA_INTERFACES:-}"
  [[ -n ${MLC_LNET_TCP_INTERFACE:-} && ${#efa[@]} -gt 0 ]] ||
    fail "$CONFIG names no TCP interface or no EFA interface"
  count=$(efa_nid_count)
  if ((count >= ${#efa[@]})); then
    say "LNet already uses $count EFA interface(s); nothing to do"
    return 0
  fi
  modprobe lnet
  modprobe kefalnd "ipif_name=$MLC_LNET_TCP_INTERFACE"
  modprobe ksocklnd
  lnetctl lnet configure
  # The tcp net on the node's own interface carries the mount (the file system's DNS name is a tcp
  # NID); it is replaced only when it is not there yet, never under a mounted file system.
  if ! grep -qw -- "$MLC_LNET_TCP_INTERFACE" <<<"$(net_show tcp)"; then
    lnetctl net del --net tcp 2>/dev/null || true
    lnetctl net add --net tcp --if "$MLC_LNET_TCP_INTERFACE"
  fi
  for device in "${efa[@]}"; do
    if ! grep -qw -- "$device" <<<"$(net_show efa)"; then
      lnetctl net add --net efa --if "$device" --peer-credits "$PEER_CREDITS"
    fi
  done
  lnetctl set discovery 1
  # Prefer EFA for all traffic. A run that stopped half-way may have added the rule already: lnetctl
  # then answers EALREADY ("Operation already in progress"), which is the state wanted.
  local udsp
  if ! udsp=$(lnetctl udsp add --src efa --priority 0 2>&1); then
    [[ $udsp == *"already in progress"* ]] || fail "lnetctl udsp add --src efa --priority 0: $udsp"
    say "the EFA preference rule (UDSP) is already there"
  fi
  modprobe lustre
  count=$(efa_nid_count)
  ((count == ${#efa[@]})) ||
    fail "LNet shows $count EFA interface(s), expected ${#efa[@]} (${efa[*]}); see 'lnetctl net show' and dmesg"
  say "LNet uses EFA on ${efa[*]} and TCP on $MLC_LNET_TCP_INTERFACE"
}

main "$@"
