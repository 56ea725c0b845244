#!/usr/bin/env bash
# Step mount_openzfs: mount the FSx for OpenZFS volume the environment declares (NFS 4.2) at its
# mount point (/home by default) and record it in /etc/fstab for reboots. Without OpenZFS in the
# provisioning parameters there is nothing to do.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

FSTAB_OPTIONS=nfsvers=4.2,nconnect=16,_netdev,x-systemd.automount,x-systemd.requires=network-online.target

main() {
  if [[ -z $MLC_OPENZFS_DNS_NAME ]]; then
    log "no FSx for OpenZFS volume is declared; nothing to mount"
    return 0
  fi
  local source="$MLC_OPENZFS_DNS_NAME:$MLC_OPENZFS_VOLUME_PATH" target="$MLC_ROOT$MLC_OPENZFS_MOUNT_POINT" info
  if info=$(mount_info "$target"); then
    [[ $info == "$source nfs"* ]] || die "$MLC_OPENZFS_MOUNT_POINT is already mounted from '$info', expected '$source nfs4'"
    log "$MLC_OPENZFS_MOUNT_POINT is already mounted from $source"
  else
    apt_install nfs-common
    retry 10 "resolve $MLC_OPENZFS_DNS_NAME" getent hosts "$MLC_OPENZFS_DNS_NAME" >/dev/null
    mkdir -p "$target"
    retry 6 "mount $source at $MLC_OPENZFS_MOUNT_POINT" mount -t nfs -o nfsvers=4.2,nconnect=16 "$source" "$target"
  fi
  install_from "$MLC_ROOT/etc/fstab" keep "" plan fstab --fstab "$MLC_ROOT/etc/fstab" \
    --entry "$source $MLC_OPENZFS_MOUNT_POINT nfs $FSTAB_OPTIONS 0 0" --mountpoint "$MLC_OPENZFS_MOUNT_POINT"
  log "$MLC_OPENZFS_MOUNT_POINT is FSx for OpenZFS from $source"
}

main "$@"
