#!/usr/bin/env bash
# Step identify_node: find this node's role (controller, login, worker) and the controller's
# address from HyperPod's resource_config.json, and write them with the feature switches to
# /etc/mlcluster/node.env for the other steps.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

main() {
  local resource_config=${SAGEMAKER_RESOURCE_CONFIG_PATH:-$MLC_ROOT/opt/ml/config/resource_config.json} addresses
  retry 10 "wait for $resource_config" test -s "$resource_config" ||
    die "$resource_config is missing; HyperPod writes it on every cluster node"
  addresses=$(hostname -I)
  log "this node's addresses: $addresses"
  install_from "$NODE_ENV" 644 "" plan identify \
    --resource-config "$resource_config" \
    --provisioning "$MLC_LIFECYCLE_DIR/provisioning_parameters.json" \
    --features "$MLC_LIFECYCLE_DIR/mlcluster_features.json" \
    --addresses "$addresses"
  cat "$NODE_ENV" >&2
}

main "$@"
