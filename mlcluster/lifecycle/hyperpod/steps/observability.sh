#!/usr/bin/env bash
# Step observability: the Prometheus node exporter (port 9100) on every node, and NVIDIA's DCGM
# exporter container (port 9400) on GPU nodes when Docker is on.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

# Pinned by digest: the linux/amd64 manifest of 4.5.2-4.8.1-ubuntu22.04 (DCGM 4.5.2, Hopper and
# Blackwell), as published by NVIDIA's registry; a pull whose content differs fails in Docker itself.
DCGM_IMAGE=nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04@sha256:a7ad6547d4546eaf4dd5d6b4c0b4db4101e63ef7dc3cdff7f42b767d2c60b706
DCGM_CONTAINER=mlcluster-dcgm-exporter

dcgm_exporter() {
  if docker inspect "$DCGM_CONTAINER" >/dev/null 2>&1; then
    log "container $DCGM_CONTAINER exists"
    return 0
  fi
  retry 5 "pull $DCGM_IMAGE" docker pull --quiet "$DCGM_IMAGE"
  docker run --detach --name "$DCGM_CONTAINER" --restart unless-stopped \
    --gpus all --net host --cap-add SYS_ADMIN "$DCGM_IMAGE"
  log "started $DCGM_CONTAINER on port 9400"
}

main() {
  apt_install prometheus-node-exporter
  converge_service prometheus-node-exporter
  if is_gpu_node; then
    if is_true "$MLC_DOCKER"; then
      dcgm_exporter
    else
      warn "the DCGM exporter runs in Docker, which is off (docker: false); GPU metrics are not exported"
    fi
  fi
}

main "$@"
