#!/usr/bin/env bash
# NCCL over EFA: the aws-ofi-nccl plugin, the environment that selects EFA, and nccl-tests.
#
# ParallelCluster AMIs carry the EFA software (libfabric and Open MPI under
# /opt/amazon) and bundle aws-ofi-nccl in /opt/amazon/ofi-nccl. Without it,
# the pinned aws-ofi-nccl release (pins.sh, SHA-256 checked) is built against
# libfabric and CUDA into /opt/aws-ofi-nccl. The libraries go on the loader
# path of every process (ld.so.conf.d). FI_PROVIDER=efa reaches:
#   - every NCCL process, batch or interactive (/etc/nccl.conf, read by NCCL at init),
#   - every container Enroot or Pyxis starts (/etc/enroot/environ.d),
#   - SSH sessions, login or not (/etc/environment, read by pam_env),
#   - login shells (/etc/profile.d).
# nccl-tests (pinned, SHA-256 checked) is built against this node's CUDA,
# NCCL and MPI into /opt/mlcluster/nccl-tests/bin, so a first job can prove
# the fabric with /opt/mlcluster/nccl-tests/bin/all_reduce_perf.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OFI_NCCL_PREFIX=/opt/aws-ofi-nccl
OFI_CANDIDATES=(/opt/amazon/ofi-nccl "${OFI_NCCL_PREFIX}")
CUDA_HOME=/usr/local/cuda
MPI_HOME=/opt/amazon/openmpi
NCCL_CANDIDATES=(/opt/nccl/build /usr/local/cuda /usr)
NCCL_TESTS_PREFIX=/opt/mlcluster/nccl-tests
EFA_ENV=(FI_PROVIDER=efa)

# lib_dir PREFIX PATTERN: PREFIX/lib64, PREFIX/lib or PREFIX/lib/<multiarch>, whichever holds a file matching PATTERN.
lib_dir() {
  local dir
  for dir in "$1/lib64" "$1/lib" "$1/lib/$(uname -m)-linux-gnu"; do
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
  [[ -d "${ROOT}${CUDA_HOME}" ]] || die "aws-ofi-nccl is missing and CUDA (${CUDA_HOME}) to build it is not installed"
  if [[ "$(os_family)" == ubuntu ]]; then
    pkg_install gcc g++ make libhwloc-dev
  else
    pkg_install gcc gcc-c++ make hwloc-devel
  fi
  local tmp
  tmp="$(work_dir)"
  fetch_verified "aws-ofi-nccl ${OFI_NCCL_VERSION}" "${OFI_NCCL_URL}" "${OFI_NCCL_SHA256}" "${tmp}/aws-ofi-nccl.tar.gz"
  tar -xzf "${tmp}/aws-ofi-nccl.tar.gz" -C "${tmp}"
  (
    cd "${tmp}/aws-ofi-nccl-${OFI_NCCL_VERSION}"
    ./configure --prefix="${OFI_NCCL_PREFIX}" --with-libfabric=/opt/amazon/efa --with-cuda="${CUDA_HOME}" \
      --enable-platform-aws
    make -j "$(nproc)"
    make install DESTDIR="${ROOT}"
  )
  rm -rf "${tmp}"
  log "built aws-ofi-nccl ${OFI_NCCL_VERSION} into ${OFI_NCCL_PREFIX}"
}

# nccl_home: the first NCCL installation with both its header and its library.
nccl_home() {
  local prefix
  for prefix in "${NCCL_CANDIDATES[@]}"; do
    if [[ -f "${ROOT}${prefix}/include/nccl.h" ]] && lib_dir "${prefix}" "libnccl.so*" >/dev/null; then
      echo "${prefix}"
      return 0
    fi
  done
  return 1
}

# cuda_version: the node's CUDA as major.minor, from CUDA's version.json (11.1 and later), else nvcc.
cuda_version() {
  local version
  version="$(sed -n 's/.*"version" *: *"\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' "${ROOT}${CUDA_HOME}/version.json" 2>/dev/null | head -n 1)"
  if [[ -z "${version}" ]]; then
    version="$("${ROOT}${CUDA_HOME}/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')"
  fi
  [[ -n "${version}" ]] && echo "${version}"
}

# NVIDIA publishes each NCCL release for a few CUDA minors only: the package version is
# <NCCL>+cuda<major>.<minor> (libnccl2 / libnccl-dev 2.27.7-1+cuda12.9 on apt, libnccl / libnccl-devel on
# dnf and yum), and 2.27.7-1 exists for CUDA 12.4, 12.9 and 13.0, not for every toolkit an AMI carries.
# The build is chosen from what the repositories list, not composed from the AMI's CUDA.

# nccl_builds PACKAGE: the CUDA versions (major.minor) the repositories offer PACKAGE at NCCL_PACKAGE_VERSION
# for, one a line, oldest first (`apt-cache madison`: "name | version | source"; `dnf|yum list
# --showduplicates`: "name.arch version repository").
nccl_builds() {
  local versions
  if [[ "$(pkg_manager)" == apt ]]; then
    versions="$(apt-cache madison "$1" 2>/dev/null | awk -F'|' 'NF >= 3 {gsub(/ /, "", $2); print $2}')"
  else
    versions="$("$(pkg_manager)" -q list --showduplicates --available "$1" 2>/dev/null | awk 'NF >= 2 {print $2}')"
  fi
  sed -n "s/^${NCCL_PACKAGE_VERSION//./\\.}+cuda\([0-9][0-9]*\.[0-9][0-9]*\)$/\1/p" <<<"${versions}" | sort -u -V
}

# driver_cuda: the newest CUDA the NVIDIA driver supports (nvidia-smi's header: "CUDA Version: 12.8").
driver_cuda() {
  local version
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  version="$(timeout 60 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1)"
  [[ -n "${version}" ]] && echo "${version}"
}

# pick_cuda_build CUDA LIMIT: of the builds on stdin (major.minor, oldest first), the one of CUDA's major
# nearest CUDA that is not newer than LIMIT (what the driver supports: a newer build fails at init with
# "unhandled cuda error"); the older one on a tie. Nothing, status 1, when none fits.
pick_cuda_build() {
  local major="${1%%.*}" minor="${1#*.}" limit_major="${2%%.*}" limit_minor="${2#*.}" build distance best="" best_distance=""
  while read -r build; do
    [[ "${build}" =~ ^([0-9]+)\.([0-9]+)$ ]] || continue
    ((BASH_REMATCH[1] == major)) || continue
    ((BASH_REMATCH[1] < limit_major || (BASH_REMATCH[1] == limit_major && BASH_REMATCH[2] <= limit_minor))) || continue
    distance=$((BASH_REMATCH[2] > minor ? BASH_REMATCH[2] - minor : minor - BASH_REMATCH[2]))
    if [[ -z "${best_distance}" ]] || ((distance < best_distance)); then
      best="${build}" best_distance="${distance}"
    fi
  done
  [[ -n "${best}" ]] && echo "${best}"
}

# install_nccl_package: NCCL's runtime and development packages at the pinned release, the build for the
# CUDA nearest this node's (NVIDIA's CUDA repository, which ParallelCluster configures) that its driver
# supports. Returns 1, with a warning naming the builds offered, when none fits: nccl-tests are then not built.
install_nccl_package() {
  local cuda limit runtime=libnccl devel=libnccl-devel sep=- builds offered build version
  cuda="$(cuda_version)" || die "cannot read the CUDA version (${CUDA_HOME}/version.json or nvcc --version)"
  limit="$(driver_cuda)" || limit="${cuda}"
  if [[ "$(os_family)" == ubuntu ]]; then
    runtime=libnccl2 devel=libnccl-dev sep='='
  fi
  builds="$(nccl_builds "${devel}")"
  offered="${builds//$'\n'/, }"
  if ! build="$(pick_cuda_build "${cuda}" "${limit}" <<<"${builds}")"; then
    warn "no NCCL on this node (nccl.h and libnccl.so under ${NCCL_CANDIDATES[*]}) and no build of ${devel} ${NCCL_PACKAGE_VERSION} fits CUDA ${cuda} (driver: up to CUDA ${limit}); the repositories offer it for CUDA: ${offered:-none}; nccl-tests not installed at ${NCCL_TESTS_PREFIX}/bin"
    return 1
  fi
  version="${NCCL_PACKAGE_VERSION}+cuda${build}"
  if [[ "${build}" != "${cuda}" ]]; then
    log "NCCL ${NCCL_PACKAGE_VERSION} has no build for CUDA ${cuda}: using the nearest the driver supports (up to CUDA ${limit}), ${version}"
  fi
  log "installing NCCL ${version} (${runtime}, ${devel})"
  pkg_install "${runtime}${sep}${version}" "${devel}${sep}${version}"
}

install_nccl_tests() {
  local nccl build_info tmp
  [[ -x "${ROOT}${CUDA_HOME}/bin/nvcc" ]] || die "nccl-tests needs CUDA (${CUDA_HOME}/bin/nvcc), which is not installed"
  [[ -x "${ROOT}${MPI_HOME}/bin/mpicc" ]] || die "nccl-tests needs MPI (${MPI_HOME}, from the EFA installer), which is not installed"
  if ! nccl="$(nccl_home)"; then
    install_nccl_package || return 0
    nccl="$(nccl_home)" || die "NCCL ${NCCL_PACKAGE_VERSION} installed but NCCL (nccl.h and libnccl.so) is not under ${NCCL_CANDIDATES[*]}"
  fi
  build_info="nccl-tests ${NCCL_TESTS_VERSION} ${NCCL_TESTS_SHA256} CUDA_HOME=${CUDA_HOME} NCCL_HOME=${nccl} MPI_HOME=${MPI_HOME}"
  if [[ -x "${ROOT}${NCCL_TESTS_PREFIX}/bin/all_reduce_perf" ]] \
    && [[ "$(cat "${ROOT}${NCCL_TESTS_PREFIX}/BUILD_INFO" 2>/dev/null)" == "${build_info}" ]]; then
    return 0
  fi
  tmp="$(work_dir)"
  fetch_verified "nccl-tests ${NCCL_TESTS_VERSION}" "${NCCL_TESTS_URL}" "${NCCL_TESTS_SHA256}" "${tmp}/nccl-tests.tar.gz"
  tar -xzf "${tmp}/nccl-tests.tar.gz" -C "${tmp}"
  make -C "${tmp}/nccl-tests-${NCCL_TESTS_VERSION}" -j "$(nproc)" MPI=1 MPI_HOME="${ROOT}${MPI_HOME}" \
    CUDA_HOME="${ROOT}${CUDA_HOME}" NCCL_HOME="${ROOT}${nccl}"
  [[ -x "${tmp}/nccl-tests-${NCCL_TESTS_VERSION}/build/all_reduce_perf" ]] \
    || die "nccl-tests ${NCCL_TESTS_VERSION} built but build/all_reduce_perf is missing"
  install -d -m 0755 "${ROOT}${NCCL_TESTS_PREFIX}/bin"
  install -m 0755 "${tmp}/nccl-tests-${NCCL_TESTS_VERSION}/build/"*_perf "${ROOT}${NCCL_TESTS_PREFIX}/bin/"
  rm -rf "${tmp}"
  put_file "${NCCL_TESTS_PREFIX}/BUILD_INFO" 0644 <<<"${build_info}"
  log "installed nccl-tests ${NCCL_TESTS_VERSION} in ${NCCL_TESTS_PREFIX}/bin (NCCL ${nccl}, MPI ${MPI_HOME})"
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
put_file /etc/enroot/environ.d/50-mlcluster-efa.env 0644 < <(printf '%s\n' "${EFA_ENV[@]}")
put_file /etc/profile.d/mlcluster-nccl-efa.sh 0644 < <(
  echo "# Written by mlcluster: NCCL uses EFA through libfabric and the aws-ofi-nccl plugin."
  printf 'export %s\n' "${EFA_ENV[@]}"
)
for setting in "${EFA_ENV[@]}"; do
  ensure_line "${setting}" /etc/nccl.conf
  ensure_line "${setting}" /etc/environment
done
install_nccl_tests
log "NCCL EFA plugin ready (${ofi_lib}, libfabric ${efa_lib}); nccl-tests in ${NCCL_TESTS_PREFIX}/bin"
