#!/usr/bin/env bash
# Step mount_fsx: mount FSx for Lustre at /fsx (and in /etc/fstab for reboots), then wait until
# it is writable, so no later step writes into an empty /fsx folder on the root volume. On a node
# that uses EFA for Lustre (step lustre_efa), LNet must have its EFA interfaces first, and a reboot
# mounts only after mlcluster-lustre-efa.service set them up again.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

SOURCE="$MLC_FSX_DNS_NAME@tcp:/$MLC_FSX_MOUNTNAME"
# nosuid,nodev: whoever can write the data bucket sets the owner, group and mode of the files a DRA
# imports (FSx applies the objects' POSIX metadata); a set-group-ID file or a device node planted that
# way must not act on a node. A /fsx an earlier run mounted without them is remounted with them (bind:
# the mount point's flags only, not the file system's).
MOUNT_OPTIONS=noatime,flock,nosuid,nodev
# After a reboot: mount once the network is up (_netdev, x-systemd.requires), and on first access
# (x-systemd.automount) so a slow file system never blocks the boot.
FSTAB_OPTIONS=$MOUNT_OPTIONS,_netdev,x-systemd.automount,x-systemd.requires=network-online.target
if is_true "$MLC_LUSTRE_EFA"; then
  # The FSx for Lustre guide's fstab entry for EFA-enabled file systems ("Mounting your Amazon FSx
  # file system automatically"): the mount requires, and comes after, the EFA configuration unit.
  FSTAB_OPTIONS+=,x-systemd.requires=mlcluster-lustre-efa.service,x-systemd.after=mlcluster-lustre-efa.service
fi

fsx_writable() {
  local probe
  [[ $(mount_info "$FSX") == "$SOURCE lustre" ]] || return 1
  # mktemp makes a new file (O_EXCL): a link a user planted under a guessable name is never followed as root.
  probe=$(mktemp -p "$FSX" .mlcluster-write-test.XXXXXXXX 2>/dev/null) && rm -f "$probe"
}

main() {
  local info
  if info=$(mount_info "$FSX"); then
    [[ $info == "$SOURCE lustre" ]] || die "$FSX is already mounted from '$info', expected '$SOURCE lustre'"
    log "$FSX is already mounted from $SOURCE"
    if ! mount_has nosuid "$FSX" || ! mount_has nodev "$FSX"; then
      retry 3 "remount $FSX nosuid,nodev" mount -o remount,bind,noatime,nosuid,nodev "$FSX"
      log "remounted $FSX nosuid,nodev (an earlier run mounted it without them)"
    fi
  else
    command -v mount.lustre >/dev/null ||
      die "the Lustre client is not installed (no mount.lustre); HyperPod's DLAMI ships it"
    if is_true "$MLC_LUSTRE_EFA" && [[ $(lnetctl net show --net efa 2>/dev/null || true) != *@efa* ]]; then
      die "this node should reach FSx for Lustre over EFA, but LNet has no EFA interface;" \
        "run the lustre_efa step first (on_create.sh lustre_efa mount_fsx); refusing to mount over TCP only"
    fi
    retry 10 "resolve $MLC_FSX_DNS_NAME" getent hosts "$MLC_FSX_DNS_NAME" >/dev/null
    mkdir -p "$FSX"
    retry 6 "mount $SOURCE at $FSX" mount -t lustre -o "$MOUNT_OPTIONS" "$SOURCE" "$FSX"
  fi
  install_from "$MLC_ROOT/etc/fstab" keep "" plan fstab --fstab "$MLC_ROOT/etc/fstab" \
    --entry "$SOURCE $FSX_MOUNT lustre $FSTAB_OPTIONS 0 0" --mountpoint "$FSX_MOUNT"
  retry 20 "wait until $FSX is writable" fsx_writable || die "$FSX is mounted but not writable"
  log "$FSX is mounted and writable"
}

main "$@"
