#!/usr/bin/env bash
# Step lustre_efa: when the FSx for Lustre file system is EFA-enabled and this node's instance
# group reaches it over EFA (both decided at synth, in node.env), set the Lustre client's network
# (LNet) up over the node's EFA devices, now and at every boot, before mount_fsx mounts /fsx.
#
# What AWS requires of an EFA client (FSx for Lustre user guide, "Working with EFA-enabled file
# systems" and "Configuring EFA clients",
# https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html): a Nitro v4 or newer
# instance type with EFA (not trn2), Ubuntu 22.04 or newer with kernel 6.8 or newer, the EFA driver
# and the Lustre client's EFA modules (the HyperPod DLAMI ships both), then LNet configured over
# TCP and EFA. A node that should use EFA and cannot stops here with the reason: it never falls
# back to a TCP-only mount silently. A node whose instance type has no EFA for Lustre mounts over
# TCP (ENA), which EFA-enabled file systems accept, and says so.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

UNIT=mlcluster-lustre-efa
SCRIPT=/usr/local/sbin/mlcluster-lustre-efa
CONFIG=$ETC_DIR/lustre-efa.env
MIN_KERNEL=6.8

# efa_devices : the RDMA devices whose driver is efa (the guide's "View available EFA devices").
efa_devices() {
  local device driver
  for device in "$MLC_ROOT"/sys/class/infiniband/*; do
    [[ -e $device/device/driver ]] || continue
    driver=$(readlink -f "$device/device/driver")
    [[ ${driver##*/} == efa ]] || continue
    printf '%s\n' "${device##*/}"
  done
}

# tcp_interface : the interface holding this node's cluster address (the one slurmd and NFS use).
tcp_interface() {
  ip -brief -4 address show | awk -v address="$MLC_ADDRESS" '{
    for (i = 3; i <= NF; i++) if (index($i, address "/") == 1) { print $1; found = 1; exit }
  } END { exit !found }'
}

kernel_at_least() {
  local release
  release=$(uname -r)
  printf '%s\n%s\n' "$1" "${release%%-*}" | sort -V -C
}

main() {
  if ! is_true "$MLC_FSX_EFA"; then
    log "the FSx for Lustre file system is not EFA-enabled: Lustre runs over TCP"
    return 0
  fi
  if ! is_true "$MLC_LUSTRE_EFA"; then
    log "the file system is EFA-enabled, but instance type ${MLC_INSTANCE_TYPE:-unknown} of group $MLC_GROUP" \
      "has no EFA for FSx for Lustre (Nitro v4 or newer with EFA, not trn2): this node mounts it over TCP (ENA)"
    return 0
  fi
  local release devices=() chosen=() interface
  release=$(uname -r)
  kernel_at_least "$MIN_KERNEL" ||
    die "EFA for FSx for Lustre needs Linux $MIN_KERNEL or newer (Ubuntu 22.04 or newer); this node runs $release." \
      "Use a HyperPod AMI with that kernel, or turn storage.lustre.efa_enabled off; refusing to mount over TCP only"
  mapfile -t devices < <(efa_devices)
  ((${#devices[@]} > 0)) ||
    die "no EFA device (/sys/class/infiniband/*, driver efa) on this ${MLC_INSTANCE_TYPE:-node}; EFA was asked for" \
      "(group $MLC_GROUP); check the instance's EFA interfaces and the efa driver; refusing to mount over TCP only"
  command -v lnetctl >/dev/null ||
    die "the Lustre client is not installed (no lnetctl); HyperPod's DLAMI ships it"
  modinfo kefalnd >/dev/null 2>&1 ||
    die "the Lustre client has no EFA network driver (kernel module kefalnd) for kernel $release;" \
      "install the FSx Lustre client modules for this kernel; refusing to mount over TCP only"
  interface=$(tcp_interface) || die "no network interface holds this node's address $MLC_ADDRESS"
  mapfile -t chosen < <(plan efa-interfaces --instance-type "$MLC_INSTANCE_TYPE" "${devices[@]}")
  log "EFA devices: ${devices[*]}; LNet uses ${chosen[*]} (instance type $MLC_INSTANCE_TYPE) and TCP on $interface"

  install_file "$CONFIG" 644 <<EOF_CONFIG
# Written by mlcluster (lustre_efa step); read by $SCRIPT at every boot.
MLC_LNET_TCP_INTERFACE=$interface
MLC_LNET_EFA_INTERFACES="${chosen[*]}"
EOF_CONFIG
  # The ksocklnd credits of the guides' tuned clients, read when the module loads (at boot).
  install_file "$MLC_ROOT/etc/modprobe.d/mlcluster-lustre-efa.conf" 644 <<'EOF_MODPROBE'
# Written by mlcluster (lustre_efa step): LNet socket credits for FSx for Lustre.
options ksocklnd credits=2560
EOF_MODPROBE
  install_file "$MLC_ROOT$SCRIPT" 755 <"$MLC_LIFECYCLE_DIR/lnet_efa.sh"
  install_file "$SYSTEMD_DIR/$UNIT.service" 644 <<EOF_UNIT
# Written by mlcluster (lustre_efa step): LNet over EFA before /fsx is mounted, at every boot.
[Unit]
Description=mlcluster: LNet over EFA for FSx for Lustre
Requires=network-online.target
After=network-online.target
Before=remote-fs-pre.target
Wants=remote-fs-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$SCRIPT

[Install]
WantedBy=multi-user.target
EOF_UNIT
  enable_boot_unit "$UNIT"
  "$MLC_ROOT$SCRIPT" || die "LNet over EFA could not be set up (see the lines above); refusing to mount over TCP only"
}

main "$@"
