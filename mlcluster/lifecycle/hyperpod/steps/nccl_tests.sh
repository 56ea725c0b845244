#!/usr/bin/env bash
# Step nccl_tests (GPU workers): build NVIDIA's nccl-tests, pinned by commit and by the SHA-256 of
# its file list, against the node's CUDA, NCCL and Amazon's Open MPI, into
# /opt/mlcluster/nccl-tests/bin (the operator's smoke test runs .../bin/all_reduce_perf). Nodes
# without a GPU skip it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

NCCL_TESTS_VERSION=v2.17.10
NCCL_TESTS_URL=https://github.com/NVIDIA/nccl-tests.git
NCCL_TESTS_COMMIT=c379e19a711e011f2086b0001deb3d590e4b46f4
NCCL_TESTS_TREE_SHA256=26030ba0012236eafe943b5c076ef4dd393745994ab00e9adf2805a966da2657
PREFIX=/opt/mlcluster/nccl-tests
CUDA_HOME=/usr/local/cuda
MPI_HOME=/opt/amazon/openmpi

# The NCCL the AMI ships: the first folder holding include/nccl.h.
nccl_home() {
  local candidate
  for candidate in /opt/nccl/build "$CUDA_HOME" /usr; do
    if [[ -f $MLC_ROOT$candidate/include/nccl.h ]]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

main() {
  local stamp="$STATE_DIR/nccl-tests.version" nccl build
  if ! is_gpu_node; then
    log "no NVIDIA GPU on this node; nccl-tests are not built"
    return 0
  fi
  if [[ -x $MLC_ROOT$PREFIX/bin/all_reduce_perf && -f $stamp && $(<"$stamp") == "$NCCL_TESTS_COMMIT" ]]; then
    log "nccl-tests $NCCL_TESTS_VERSION is installed"
    return 0
  fi
  nccl=$(nccl_home) || die "no NCCL found (include/nccl.h in /opt/nccl/build, $CUDA_HOME or /usr); the HyperPod DLAMI ships one"
  [[ -d $MLC_ROOT$MPI_HOME ]] || die "Open MPI is not at $MPI_HOME; the HyperPod DLAMI ships it with EFA"
  apt_install git make
  build=$(mktemp -d "$TMP_DIR/nccl-tests.XXXXXX")
  git_pinned "nccl-tests $NCCL_TESTS_VERSION" "$NCCL_TESTS_URL" "$NCCL_TESTS_COMMIT" "$NCCL_TESTS_TREE_SHA256" \
    "$build/nccl-tests"
  make -C "$build/nccl-tests" -j "$(nproc)" MPI=1 MPI_HOME="$MPI_HOME" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$nccl" \
    BUILDDIR="$build/out"
  rm -rf "$MLC_ROOT$PREFIX.new"
  mkdir -p "$MLC_ROOT${PREFIX%/*}"
  mkdir -p "$MLC_ROOT$PREFIX.new"
  cp -a "$build/out" "$MLC_ROOT$PREFIX.new/bin"
  rm -rf "$MLC_ROOT$PREFIX" "$build"
  mv --no-target-directory "$MLC_ROOT$PREFIX.new" "$MLC_ROOT$PREFIX"
  [[ -x $MLC_ROOT$PREFIX/bin/all_reduce_perf ]] || die "the build produced no $PREFIX/bin/all_reduce_perf"
  install_file "$stamp" 644 <<<"$NCCL_TESTS_COMMIT"
  log "nccl-tests $NCCL_TESTS_VERSION installed in $PREFIX/bin"
}

main "$@"
