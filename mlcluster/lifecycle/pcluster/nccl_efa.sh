#!/usr/bin/env bash
# NCCL over EFA: the aws-ofi-nccl plugin and the environment that selects it.
#
# ParallelCluster AMIs carry the EFA software (libfabric in /opt/amazon/efa);
# recent EFA installers also bundle aws-ofi-nccl in /opt/amazon/ofi-nccl.
# Without it, the pinned aws-ofi-nccl release is built against libfabric and
# CUDA into /opt/aws-ofi-nccl. The libraries go on the loader path of every
# process (ld.so.conf.d), and login shells get FI_PROVIDER=efa.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OFI_NCCL_VERSION="${MLCLUSTER_OFI_NCCL_VERSION:-1.13.0}"
OFI_NCCL_PREFIX=/opt/aws-ofi-nccl
OFI_CANDIDATES=(/opt/amazon/ofi-nccl "${OFI_NCCL_PREFIX}")

# lib_dir PREFIX PATTERN: PREFIX/lib64 or PREFIX/lib, whichever holds a file matching PATTERN.
lib_dir() {
  local dir
  for dir in "$1/lib64" "$1/lib"; do
    if compgen -G "${ROOT}${dir}/$2" >/dev/null; then
      echo "${dir}"
      return 0
    fi
  done
  return 1
}

ofi_lib_dir() {
  local prefix
  for prefix in "${OFI_CANDIDATES[@]}"; do
    lib_dir "${prefix}" "libnccl-net*.so" && return 0
  done
  return 1
}

build_ofi_nccl() {
  [[ -d "${ROOT}/usr/local/cuda" ]] || die "aws-ofi-nccl is missing and CUDA (/usr/local/cuda) to build it is not installed"
  if [[ "$(os_family)" == ubuntu ]]; then
    pkg_install gcc make libhwloc-dev
  else
    pkg_install gcc make hwloc-devel
  fi
  local tmp
  tmp="$(mktemp -d)"
  fetch "https://github.com/aws/aws-ofi-nccl/releases/download/v${OFI_NCCL_VERSION}-aws/aws-ofi-nccl-${OFI_NCCL_VERSION}.tar.gz" \
    "${tmp}/aws-ofi-nccl.tar.gz"
  tar -xzf "${tmp}/aws-ofi-nccl.tar.gz" -C "${tmp}"
  (
    cd "${tmp}/aws-ofi-nccl-${OFI_NCCL_VERSION}"
    ./configure --prefix="${OFI_NCCL_PREFIX}" --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \
      --enable-platform-aws
    make -j "$(nproc)"
    make install DESTDIR="${ROOT}"
  )
  rm -rf "${tmp}"
  log "built aws-ofi-nccl ${OFI_NCCL_VERSION} into ${OFI_NCCL_PREFIX}"
}

[[ -x "${ROOT}/opt/amazon/efa/bin/fi_info" ]] \
  || die "the EFA software is not installed (/opt/amazon/efa/bin/fi_info); use a ParallelCluster AMI or a custom AMI built with the EFA installer"
efa_lib="$(lib_dir /opt/amazon/efa "libfabric.so*")" || die "libfabric not found under /opt/amazon/efa/lib64 or /opt/amazon/efa/lib"

if ! ofi_lib="$(ofi_lib_dir)"; then
  build_ofi_nccl
  ofi_lib="$(ofi_lib_dir)" || die "aws-ofi-nccl ${OFI_NCCL_VERSION} built but no libnccl-net*.so under ${OFI_NCCL_PREFIX}"
fi

CHANGED=0
put_file /etc/ld.so.conf.d/mlcluster-nccl-efa.conf 0644 <<EOF
${ofi_lib}
${efa_lib}
EOF
if ((CHANGED)); then
  ldconfig
fi
put_file /etc/profile.d/mlcluster-nccl-efa.sh 0644 <<'EOF'
# Written by mlcluster: NCCL uses EFA through libfabric and the aws-ofi-nccl plugin.
export FI_PROVIDER=efa
EOF
log "NCCL EFA plugin ready (${ofi_lib}, libfabric ${efa_lib})"
