#!/usr/bin/env bash
# Step wait_controller (workers and login nodes): wait until slurmctld answers on the controller.
# slurmd in configless mode fetches its config from there, and the controller creates the shared
# homes and SSH keys before it starts slurmctld, so they exist once it answers. The controller can
# take long (a large group, a slow mirror); the wait lasts controller_wait_minutes (by default as
# long as mlcluster waits for the cluster to be created), polling every MLC_POLL_SECONDS.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

main() {
  local target="$MLC_CONTROLLER_ADDRESS:$SLURMCTLD_PORT" poll=${MLC_POLL_SECONDS:-15}
  local limit=${MLC_CONTROLLER_WAIT_SECONDS:-$((MLC_CONTROLLER_WAIT_MINUTES * 60))}
  local deadline=$((SECONDS + limit)) next_note=0
  log "waiting up to ${limit}s for slurmctld at $target"
  until port_open "$MLC_CONTROLLER_ADDRESS" "$SLURMCTLD_PORT"; do
    if ((SECONDS >= deadline)); then
      die "slurmctld at $target did not answer within ${limit}s; see /var/log/provision/*.log on the controller"
    fi
    if ((SECONDS >= next_note)); then
      log "slurmctld at $target does not answer yet; $((deadline - SECONDS))s left"
      next_note=$((SECONDS + 300))
    fi
    sleep "$poll"
  done
  log "slurmctld answers at $target"
}

main "$@"
