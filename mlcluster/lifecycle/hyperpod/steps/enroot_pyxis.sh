#!/usr/bin/env bash
# Step enroot_pyxis: install Enroot (container runtime) with all its paths on local NVMe, build
# the Pyxis Slurm plugin (srun --container-image) against HyperPod's Slurm, and register it in
# plugstack.conf. Runs on every node: srun loads the plugin wherever jobs are submitted.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

ENROOT_VERSION=3.5.0
PYXIS_VERSION=v0.20.0
# Pyxis is built from source pinned by commit and by the SHA-256 of its file list with content hashes.
PYXIS_URL=https://github.com/NVIDIA/pyxis.git
PYXIS_COMMIT=424563865a491f2d8f3c396a095d18db81f1fb07
PYXIS_TREE_SHA256=22ce2d3878bc580531b327aae2ec2163c36018a5cde5da4eb02cc4ae7d052133
PYXIS_SO=/usr/local/lib/slurm/spank_pyxis.so
PYXIS_CONF_REAL=$SLURM_ETC_REAL/plugstack.conf.d/pyxis.conf

install_enroot() {
  local have want="$ENROOT_VERSION-1" arch download file
  # shellcheck disable=SC2016  # ${Version} is a dpkg-query field
  have=$(dpkg-query -W -f='${Version}' enroot 2>/dev/null) || have=""
  if [[ $have == "$want" ]]; then
    log "enroot $want is installed"
    return 0
  fi
  apt_install squashfs-tools parallel fuse-overlayfs squashfuse curl
  arch=$(dpkg --print-architecture)
  download=$(mktemp -d "$TMP_DIR/enroot.XXXXXX")
  for file in "enroot_${want}_$arch.deb" "enroot+caps_${want}_$arch.deb"; do
    retry 5 "download $file" curl -fsSL -o "$download/$file" \
      "https://github.com/NVIDIA/enroot/releases/download/v$ENROOT_VERSION/$file"
  done
  apt_update
  retry 5 "install enroot $want" apt-get "${APT_OPTIONS[@]}" install \
    "$download/enroot_${want}_$arch.deb" "$download/enroot+caps_${want}_$arch.deb"
  rm -rf "$download"
}

# Enroot's runtime, cache, data and temp folders: one 0700 folder per user, owned by the user, under
# root-owned 0755 roots, so no user can pre-create or link another user's folder. A tmpfiles.d
# rule makes them again at boot (local NVMe is empty after a stop and start).
ENROOT_FOLDERS=(runtime cache data tmp)

configure_enroot() {
  local root folder user uid gid tmpfiles
  root=$(local_root)
  # Quoted $(id -u) and ${HOME} are expanded by enroot for each user, not here.
  install_file "$MLC_ROOT/etc/enroot/enroot.conf" 644 <<EOF
# Written by mlcluster (enroot_pyxis step): container data lives on $root, not the root volume,
# in per-user folders the lifecycle creates (0700, owned by the user).
ENROOT_RUNTIME_PATH        $root/enroot/runtime/user-\$(id -u)
ENROOT_CACHE_PATH          $root/enroot/cache/user-\$(id -u)
ENROOT_DATA_PATH           $root/enroot/data/user-\$(id -u)
ENROOT_TEMP_PATH           $root/enroot/tmp/user-\$(id -u)
ENROOT_CONFIG_PATH         \${HOME}/.config/enroot
ENROOT_SQUASH_OPTIONS      -comp lzo -noI -noD -noF -noX -no-duplicates
ENROOT_ROOTFS_WRITABLE     yes
ENROOT_MOUNT_HOME          no
ENROOT_RESTRICT_DEV        no
EOF
  mkdir -p "$MLC_ROOT$root"
  ensure_root_dir "$MLC_ROOT$root/enroot" 755
  tmpfiles="# Written by mlcluster (enroot_pyxis step): per-user Enroot folders, made again at boot."
  tmpfiles+=$'\n'"d $root/enroot 0755 root root -"
  for folder in "${ENROOT_FOLDERS[@]}"; do
    ensure_root_dir "$MLC_ROOT$root/enroot/$folder" 755
    tmpfiles+=$'\n'"d $root/enroot/$folder 0755 root root -"
    for user in $(cluster_users); do
      uid=$(id_of "$user")
      gid=$(passwd_field "$user" 4)
      MLC_FORCE_MODE=true ensure_user_dir "$user" "$MLC_ROOT$root/enroot/$folder/user-$uid" 700
      tmpfiles+=$'\n'"d $root/enroot/$folder/user-$uid 0700 $uid $gid -"
    done
  done
  install_file "$MLC_ROOT/etc/tmpfiles.d/mlcluster-enroot.conf" 644 <<<"$tmpfiles"
}

install_pyxis() {
  local stamp="$STATE_DIR/pyxis.version" build
  if [[ -f $MLC_ROOT$PYXIS_SO && -f $stamp && $(<"$stamp") == "$PYXIS_VERSION" ]]; then
    log "pyxis $PYXIS_VERSION is installed"
    return 0
  fi
  apt_install git make gcc
  build=$(mktemp -d "$TMP_DIR/pyxis.XXXXXX")
  git_pinned "pyxis $PYXIS_VERSION" "$PYXIS_URL" "$PYXIS_COMMIT" "$PYXIS_TREE_SHA256" "$build/pyxis"
  # CPPFLAGS from the environment (not the command line): the Makefile appends it to its own flags.
  CPPFLAGS="-I$MLC_ROOT/opt/slurm/include" make -C "$build/pyxis" -j "$(nproc)" install DESTDIR="$MLC_ROOT"
  rm -rf "$build"
  install_file "$stamp" 644 <<<"$PYXIS_VERSION"
}

configure_slurm() {
  install_file "$MLC_ROOT$PYXIS_CONF_REAL" 644 <<<"required $PYXIS_SO"
  install_from "$SLURM_ETC/plugstack.conf" keep "" \
    plan slurm-conf --missing-ok --conf "$SLURM_ETC/plugstack.conf" --include "$PYXIS_CONF_REAL"
  # Without device constraints, containers can see the wrong GPU IDs (NVIDIA/pyxis#47).
  if [[ -f $SLURM_ETC/cgroup.conf ]]; then
    install_from "$SLURM_ETC/cgroup.conf" keep "" \
      plan slurm-conf --conf "$SLURM_ETC/cgroup.conf" --set ConstrainDevices=yes
  fi
}

main() {
  install_enroot
  configure_enroot
  install_pyxis
  configure_slurm
}

main "$@"
