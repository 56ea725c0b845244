#!/usr/bin/env bash
# Step enroot_pyxis: build Enroot (container runtime) from its pinned commit, with all its paths on
# local NVMe, build the Pyxis Slurm plugin (srun --container-image) against HyperPod's Slurm, and
# register it in plugstack.conf. Runs on every node: srun loads the plugin wherever jobs are submitted.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

# Enroot 4.x: Enroot accepts an image pinned by digest (`REGISTRY#IMAGE@sha256:...`, what `mlcluster
# smoke` hands Pyxis) only from v4.0.0 on (NVIDIA/enroot commit f380b11 and the digest forms of
# docker::_parse_uri); 3.5.0 refuses it as an invalid reference. Same submodules and build as 3.5.0.
# Enroot is built from source at the commit of tag v4.1.2 (a lightweight tag on NVIDIA/enroot),
# pinned by commit and by the SHA-256 of its file list with content hashes: NVIDIA publishes no
# checksum for its release .deb files, and none could be confirmed from two public sources. Its
# three submodules (deps/makeself, deps/musl, deps/linux-headers) are pinned by the commits that
# tree records (gitlinks, covered by ENROOT_TREE_SHA256); git_submodules_pinned checks each one.
# musl's .gitmodules address is git:// (unencrypted, port 9418 often closed): the same repository
# is fetched over https; the commit check is what makes it trusted.
ENROOT_VERSION=4.1.2
ENROOT_URL=https://github.com/NVIDIA/enroot.git
ENROOT_COMMIT=bd51f53b6fa954805ae3e1985c5dc7594ff66d05
ENROOT_TREE_SHA256=a28ff51efd779c5ee2a633e9cc2ef373ac6f1dca76832499ec0e28817a870463
ENROOT_SUBMODULE_URLS=(deps/musl=https://git.musl-libc.org/git/musl)
# The layout of NVIDIA's .deb (pkg/deb/rules): /usr/bin, /usr/lib/enroot, /etc/enroot, /usr/share/enroot.
ENROOT_LAYOUT=(prefix= exec_prefix=/usr datarootdir=/usr/share)
# The standard flavour's compile flags (pkg/debbuild), as the enroot .deb was built.
ENROOT_CPPFLAGS="-DALLOW_SPECULATION -DINHERIT_FDS"
# What `make setcap` (and the enroot+caps package) grants, so users can import and convert images.
ENROOT_CAPS=("enroot-mksquashovlfs=cap_sys_admin+pe" "enroot-aufs2ovlfs=cap_sys_admin,cap_mknod+pe")

PYXIS_VERSION=v0.20.0
# Pyxis is built from source pinned by commit and by the SHA-256 of its file list with content hashes.
PYXIS_URL=https://github.com/NVIDIA/pyxis.git
PYXIS_COMMIT=424563865a491f2d8f3c396a095d18db81f1fb07
PYXIS_TREE_SHA256=22ce2d3878bc580531b327aae2ec2163c36018a5cde5da4eb02cc4ae7d052133
PYXIS_SO=/usr/local/lib/slurm/spank_pyxis.so
PYXIS_CONF_REAL=$SLURM_ETC_REAL/plugstack.conf.d/pyxis.conf

install_enroot() {
  local stamp="$STATE_DIR/enroot.version" want="$ENROOT_VERSION $ENROOT_COMMIT" build package packaged=()
  # Run-time dependencies: the Depends and Recommends of NVIDIA's .deb, and the optional fuse tools.
  apt_install curl gawk jq squashfs-tools parallel zstd bsdmainutils pigz fuse-overlayfs squashfuse
  if [[ -x $MLC_ROOT/usr/bin/enroot && -f $stamp && $(<"$stamp") == "$want" ]]; then
    log "enroot $ENROOT_VERSION ($ENROOT_COMMIT) is installed"
    return 0
  fi
  # Build dependencies (doc/installation.md of v4.1.2, unchanged since v3.5.0).
  apt_install git gcc make libcap2-bin libtool automake libmd-dev
  build=$(mktemp -d "$TMP_DIR/enroot.XXXXXX")
  git_pinned "enroot $ENROOT_VERSION" "$ENROOT_URL" "$ENROOT_COMMIT" "$ENROOT_TREE_SHA256" "$build/enroot"
  git_submodules_pinned "enroot $ENROOT_VERSION" "$build/enroot" "${ENROOT_SUBMODULE_URLS[@]}"
  # Built without DESTDIR first: the enroot script records its configuration folder at build time.
  CPPFLAGS="$ENROOT_CPPFLAGS" make -C "$build/enroot" "${ENROOT_LAYOUT[@]}"
  # A packaged Enroot (from an older lifecycle or the image) owns the same files and would take them back.
  # It goes only now, with the verified build ready: a source that cannot be fetched, fails its pin or does
  # not build stops the step above and leaves the node its working Enroot.
  for package in enroot+caps enroot; do
    if is_installed "$package"; then
      packaged+=("$package")
    fi
  done
  if ((${#packaged[@]} > 0)); then
    log "removing the packaged ${packaged[*]} before installing the pinned build"
    retry 5 "remove ${packaged[*]}" apt-get "${APT_OPTIONS[@]}" remove "${packaged[@]}"
  fi
  CPPFLAGS="$ENROOT_CPPFLAGS" make -C "$build/enroot" install "${ENROOT_LAYOUT[@]}" DESTDIR="$MLC_ROOT"
  rm -rf "$build"
  install_file "$stamp" 644 <<<"$want"
  log "enroot $ENROOT_VERSION built from $ENROOT_COMMIT and installed"
}

# The capabilities `make setcap` sets (what the enroot+caps package does), set again when missing.
grant_enroot_caps() {
  local item tool caps
  for item in "${ENROOT_CAPS[@]}"; do
    tool="$MLC_ROOT/usr/bin/${item%%=*}" caps=${item#*=}
    if ! setcap -v "$caps" "$tool" >/dev/null 2>&1; then
      setcap "$caps" "$tool"
      log "granted $caps to ${tool#"$MLC_ROOT"}"
    fi
  done
}

# Enroot's runtime, cache, data and temp folders: one 0700 folder per user, owned by the user, under
# root-owned 0755 roots, so no user can pre-create or link another user's folder. A tmpfiles.d
# rule makes them again at boot (local NVMe is empty after a stop and start).
ENROOT_FOLDERS=(runtime cache data tmp)

configure_enroot() {
  local root folder users user ids uid gid tmpfiles
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
  users=$(cluster_users)
  for folder in "${ENROOT_FOLDERS[@]}"; do
    ensure_root_dir "$MLC_ROOT$root/enroot/$folder" 755
    tmpfiles+=$'\n'"d $root/enroot/$folder 0755 root root -"
    for user in $users; do
      ids=$(ids_of "$user")
      uid=${ids%%:*} gid=${ids#*:}
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
  grant_enroot_caps
  configure_enroot
  install_pyxis
  configure_slurm
}

main "$@"
