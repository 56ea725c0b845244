#!/usr/bin/env bash
# Enroot and Pyxis: `srun --container-image=...` for containerized Slurm jobs.
#
# ParallelCluster AMIs (3.11 and later, and custom AMIs built from them) ship
# Enroot and Pyxis but leave Pyxis disabled. Enroot comes with the image: the
# cookbook installs it when the AMI is built (aws-parallelcluster-cookbook,
# aws-parallelcluster-platform recipes/install.rb, resource `enroot`: NVIDIA's
# enroot and enroot+caps packages from ParallelCluster's regional artifacts
# bucket, archives/dependencies/enroot/), only when the build enables NVIDIA
# software, as the official AMIs do; no recipe installs it at node boot. So the
# image is what Enroot is trusted through, and it is never downloaded here (a
# custom AMI built without NVIDIA software stops this step with a message).
# Pyxis is built from its pinned commit only when the AMI lacks it. Every node gets:
#
# - an enroot.conf whose runtime, cache, data and temporary folders are
#   per-user folders under root-owned 0755 roots (/run/enroot, and
#   <local>/enroot/{cache,data,tmp} on NVMe /scratch when present), made 0700
#   for the user by mlcluster-user-dirs before the job (Slurm prolog, compute
#   nodes) or session (pam_exec at SSH login, head and login nodes) starts;
#   enroot itself never creates ENROOT_TEMP_PATH.
# - ENROOT_RESTRICT_DEV n: with y, containers see only a minimal /dev and lose
#   the EFA devices (/dev/infiniband), so NCCL falls back to TCP.
# - Enroot's Slurm PMI and PyTorch hooks (shipped in /usr/share/enroot/hooks.d,
#   off by default), so MPI and torch.distributed find their ranks in a container.
#
# /opt/slurm is shared from the head node, so only the head node writes the
# Slurm plugin stack (Pyxis as an optional plugin, so a node without it still
# runs plain jobs) and the prolog.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROLE="${MLCLUSTER_NODE_ROLE:?MLCLUSTER_NODE_ROLE must be head, compute or login}"
PYXIS_CANDIDATES=(/opt/slurm/lib/slurm/spank_pyxis.so /usr/local/lib/slurm/spank_pyxis.so)
ENROOT_HOOKS=(50-slurm-pmi.sh 50-slurm-pytorch.sh)

require_enroot() {
  command -v enroot >/dev/null 2>&1 || pkg_is_installed enroot \
    || die "Enroot is not installed: use a ParallelCluster 3.11+ AMI or a custom AMI built from one (they ship Enroot); mlcluster does not install packages it cannot verify"
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
  tmp="$(work_dir)"
  clone_verified "Pyxis ${PYXIS_VERSION}" "${PYXIS_GIT_URL}" "v${PYXIS_VERSION}" "${PYXIS_COMMIT}" "${tmp}/pyxis"
  make -C "${tmp}/pyxis" CPPFLAGS="-I ${ROOT}/opt/slurm/include" prefix=/usr/local
  make -C "${tmp}/pyxis" install prefix=/usr/local DESTDIR="${ROOT}"
  rm -rf "${tmp}"
  pyxis_path >/dev/null || die "Pyxis ${PYXIS_VERSION} built but spank_pyxis.so is not in ${PYXIS_CANDIDATES[*]}"
  log "installed Pyxis ${PYXIS_VERSION}"
  CHANGED=1
}

configure_enroot() {
  local storage="$1" root
  ensure_root_dir /run/enroot 0755
  ensure_root_dir /run/pyxis 0755
  ensure_root_dir "${storage}/enroot" 0755
  for root in cache data tmp; do
    ensure_root_dir "${storage}/enroot/${root}" 0755
  done
  # /run/pyxis: Pyxis makes it 0755 and the per-user folders in it itself (as root).
  put_file /etc/tmpfiles.d/mlcluster-enroot.conf 0644 <<'EOF'
# Written by mlcluster: root-owned runtime roots for Enroot and Pyxis, recreated at boot.
d /run/enroot 0755 root root -
d /run/pyxis 0755 root root -
EOF
  # The $(id -u) below is expanded by enroot for each user.
  put_file /etc/enroot/enroot.conf 0644 <<EOF
# Written by mlcluster: per-user folders (made 0700 by mlcluster-user-dirs) on local storage.
ENROOT_RUNTIME_PATH /run/enroot/user-\$(id -u)
ENROOT_CACHE_PATH ${storage}/enroot/cache/user-\$(id -u)
ENROOT_DATA_PATH ${storage}/enroot/data/user-\$(id -u)
ENROOT_TEMP_PATH ${storage}/enroot/tmp/user-\$(id -u)
ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates
ENROOT_MOUNT_HOME y
# n: containers keep the host's /dev, including the EFA devices in /dev/infiniband.
ENROOT_RESTRICT_DEV n
ENROOT_ROOTFS_WRITABLE y
EOF
  ensure_root_dir /etc/enroot/environ.d 0755
  ensure_root_dir /etc/enroot/hooks.d 0755
  local hook
  for hook in "${ENROOT_HOOKS[@]}"; do
    if [[ -f "${ROOT}/usr/share/enroot/hooks.d/${hook}" ]]; then
      put_file "/etc/enroot/hooks.d/${hook}" 0755 <"${ROOT}/usr/share/enroot/hooks.d/${hook}"
    else
      warn "Enroot's ${hook} hook is not in /usr/share/enroot/hooks.d; containers will not see Slurm's PMI/PyTorch settings"
    fi
  done
}

configure_slurm() {
  local so="$1"
  ensure_line "include /opt/slurm/etc/plugstack.conf.d/*" /opt/slurm/etc/plugstack.conf
  put_file /opt/slurm/etc/plugstack.conf.d/pyxis.conf 0644 <<<"optional ${so} runtime_path=/run/pyxis"
}

CHANGED=0
require_enroot
install_pyxis
storage="$(local_storage)"
configure_enroot "${storage}"
register_user_dirs enroot /run/enroot "${storage}/enroot/cache" "${storage}/enroot/data" "${storage}/enroot/tmp"
so="$(pyxis_path)"
if [[ "${ROLE}" == head ]]; then
  configure_slurm "${so}"
  if ((CHANGED)) && service_active slurmctld; then
    scontrol reconfigure
    log "Slurm reconfigured with Pyxis"
  fi
elif [[ "${ROLE}" == compute ]] && ((CHANGED)) && service_active slurmd; then
  systemctl restart slurmd
fi
log "enroot and pyxis ready (${so})"
