#!/usr/bin/env bash
# Enroot and Pyxis: `srun --container-image=...` for containerized Slurm jobs.
#
# ParallelCluster 3.11+ AMIs ship both but leave Pyxis disabled; older or
# custom AMIs get Enroot from its release packages and Pyxis built against
# the cluster's Slurm headers. Every node gets an enroot.conf that keeps
# container layers and root file systems on local storage (NVMe /scratch when
# present) and runtime state in /run. /opt/slurm is shared from the head
# node, so only the head node writes the Slurm plugin stack (Pyxis as an
# optional plugin, so a node without it still runs plain jobs).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENROOT_VERSION="${MLCLUSTER_ENROOT_VERSION:-3.5.0}"
PYXIS_VERSION="${MLCLUSTER_PYXIS_VERSION:-0.20.0}"
ROLE="${MLCLUSTER_NODE_ROLE:?MLCLUSTER_NODE_ROLE must be head, compute or login}"
PYXIS_CANDIDATES=(/opt/slurm/lib/slurm/spank_pyxis.so /usr/local/lib/slurm/spank_pyxis.so)

install_enroot() {
  if pkg_is_installed enroot; then
    return 0
  fi
  local tmp arch base="https://github.com/NVIDIA/enroot/releases/download/v${ENROOT_VERSION}"
  tmp="$(mktemp -d)"
  if [[ "$(os_family)" == ubuntu ]]; then
    pkg_install squashfs-tools jq
    arch="$(dpkg --print-architecture)"
    fetch "${base}/enroot_${ENROOT_VERSION}-1_${arch}.deb" "${tmp}/enroot.deb"
    fetch "${base}/enroot+caps_${ENROOT_VERSION}-1_${arch}.deb" "${tmp}/enroot+caps.deb"
    pkg_install_files "${tmp}/enroot.deb" "${tmp}/enroot+caps.deb"
  else
    pkg_install squashfs-tools jq
    arch="$(uname -m)"
    fetch "${base}/enroot-${ENROOT_VERSION}-1.el8.${arch}.rpm" "${tmp}/enroot.rpm"
    fetch "${base}/enroot+caps-${ENROOT_VERSION}-1.el8.${arch}.rpm" "${tmp}/enroot+caps.rpm"
    pkg_install_files "${tmp}/enroot.rpm" "${tmp}/enroot+caps.rpm"
  fi
  rm -rf "${tmp}"
  pkg_is_installed enroot || die "enroot ${ENROOT_VERSION} did not install"
}

pyxis_path() {
  local candidate
  for candidate in "${PYXIS_CANDIDATES[@]}"; do
    if [[ -f "${ROOT}${candidate}" ]]; then
      echo "${candidate}"
      return 0
    fi
  done
  return 1
}

install_pyxis() {
  pyxis_path >/dev/null && return 0
  [[ -f "${ROOT}/opt/slurm/include/slurm/spank.h" ]] \
    || die "Pyxis is not installed and the Slurm headers (/opt/slurm/include) to build it are missing"
  pkg_install git gcc make
  local tmp
  tmp="$(mktemp -d)"
  retry git clone --quiet --depth 1 --branch "v${PYXIS_VERSION}" https://github.com/NVIDIA/pyxis.git "${tmp}/pyxis"
  make -C "${tmp}/pyxis" CPPFLAGS="-I ${ROOT}/opt/slurm/include" prefix=/usr/local
  make -C "${tmp}/pyxis" install prefix=/usr/local DESTDIR="${ROOT}"
  rm -rf "${tmp}"
  pyxis_path >/dev/null || die "Pyxis ${PYXIS_VERSION} built but spank_pyxis.so is not in ${PYXIS_CANDIDATES[*]}"
  log "installed Pyxis ${PYXIS_VERSION}"
  CHANGED=1
}

configure_enroot() {
  local storage
  storage="$(local_storage)"
  ensure_dir /run/enroot 1777
  ensure_dir /run/pyxis 1777
  ensure_dir "${storage}/enroot" 1777
  put_file /etc/tmpfiles.d/mlcluster-enroot.conf 0644 <<'EOF'
# Written by mlcluster: runtime folders for Enroot and Pyxis, recreated at boot.
d /run/enroot 1777 root root -
d /run/pyxis 1777 root root -
EOF
  # The $(id -u) and $(id -g) below are expanded by enroot for each user.
  put_file /etc/enroot/enroot.conf 0644 <<EOF
# Written by mlcluster: container layers and root file systems on local storage.
ENROOT_RUNTIME_PATH /run/enroot/user-\$(id -u)
ENROOT_CACHE_PATH ${storage}/enroot/group-\$(id -g)/cache
ENROOT_DATA_PATH ${storage}/enroot/user-\$(id -u)/data
ENROOT_TEMP_PATH ${storage}/enroot/user-\$(id -u)/tmp
ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates
ENROOT_MOUNT_HOME y
ENROOT_RESTRICT_DEV y
ENROOT_ROOTFS_WRITABLE y
EOF
}

configure_plugstack() {
  local so="$1"
  ensure_line "include /opt/slurm/etc/plugstack.conf.d/*" /opt/slurm/etc/plugstack.conf
  put_file /opt/slurm/etc/plugstack.conf.d/pyxis.conf 0644 <<<"optional ${so} runtime_path=/run/pyxis"
}

CHANGED=0
install_enroot
install_pyxis
configure_enroot
so="$(pyxis_path)"
if [[ "${ROLE}" == head ]]; then
  configure_plugstack "${so}"
  if ((CHANGED)) && service_active slurmctld; then
    scontrol reconfigure
    log "Slurm reconfigured with Pyxis"
  fi
elif [[ "${ROLE}" == compute ]] && ((CHANGED)) && service_active slurmd; then
  systemctl restart slurmd
fi
log "enroot and pyxis ready (${so})"
