#!/usr/bin/env bash
# Step wait_controller (workers and login nodes): wait until slurmctld answers on the controller.
# slurmd in configless mode fetches its config from there, and the controller creates the shared
# homes and SSH keys on /fsx before it starts slurmctld, so they exist once it answers.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

main() {
  local target="$MLC_CONTROLLER_ADDRESS:$SLURMCTLD_PORT"
  retry 90 "wait for slurmctld at $target" port_open "$MLC_CONTROLLER_ADDRESS" "$SLURMCTLD_PORT" ||
    die "slurmctld at $target does not answer; see /var/log/provision/*.log on the controller"
  log "slurmctld answers at $target"
}

main "$@"
