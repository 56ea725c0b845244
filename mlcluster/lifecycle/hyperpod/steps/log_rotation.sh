#!/usr/bin/env bash
# Step log_rotation: rotate the Slurm daemons' logs, and the log of mlcluster-health (health.sh, run
# by slurmd every 5 minutes), by size so they cannot fill the root volume.
# SIGUSR2 makes slurmctld, slurmd and slurmdbd reopen their log files after a rotation; mlcluster-health
# opens its log for every line, so a rename needs nothing more.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

main() {
  install_file "$MLC_ROOT/etc/logrotate.d/mlcluster-slurm" 644 <<'CONF'
# Written by mlcluster (log_rotation step).
/var/log/slurm/*.log {
    size 100M
    rotate 5
    compress
    delaycompress
    missingok
    notifempty
    nomail
    sharedscripts
    postrotate
        for daemon in slurmctld slurmd slurmdbd; do pkill -x --signal SIGUSR2 "$daemon" || true; done
    endscript
}
CONF
  install_file "$MLC_ROOT/etc/logrotate.d/mlcluster-health" 644 <<'CONF'
# Written by mlcluster (log_rotation step).
/var/log/mlcluster/health.log {
    size 10M
    rotate 5
    compress
    delaycompress
    missingok
    notifempty
    nomail
}
CONF
}

main "$@"
