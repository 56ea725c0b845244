#!/usr/bin/env bash
# Step install_tools: keep a copy of the lifecycle scripts in /opt/mlcluster/lifecycle (HyperPod's
# download folder is temporary), so a step can be re-run later with
# `sudo bash /opt/mlcluster/lifecycle/on_create.sh STEP`, and install precheck.sh as
# /usr/local/bin/mlcluster-precheck for `srun -N <n> mlcluster-precheck`, and backup.sh as
# /usr/local/sbin/mlcluster-backup (the controller's state to S3 before patching; see README.md),
# and health.sh as /usr/local/bin/mlcluster-health with what it expects on this instance type in
# /etc/mlcluster/health.env, and /usr/local/sbin/mlcluster-health-check, Slurm's HealthCheckProgram
# (the quick tier; a node failing a critical check is drained with the reason).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

main() {
  keep_lifecycle_copy
  install_file "$MLC_ROOT/usr/local/bin/mlcluster-precheck" 755 <"$MLC_LIFECYCLE_DIR/precheck.sh"
  install_file "$MLC_ROOT/usr/local/sbin/mlcluster-backup" 755 <"$MLC_LIFECYCLE_DIR/backup.sh"
  install_file "$MLC_ROOT/usr/local/bin/mlcluster-health" 755 <"$MLC_LIFECYCLE_DIR/health.sh"
  install_from "$MLC_ROOT/etc/mlcluster/health.env" 644 "" plan health-env --instance-type "${MLC_INSTANCE_TYPE:?}"
  install_file "$MLC_ROOT/usr/local/sbin/mlcluster-health-check" 755 <<'EOF'
#!/bin/sh
# Slurm's HealthCheckProgram (written by mlcluster, install_tools): the quick checks; a node that
# fails a critical one is drained, the failed checks in its reason (scontrol show node). slurmd
# starts it with an empty environment: PATH is set here (and again by mlcluster-health).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
exec /usr/local/bin/mlcluster-health --tier quick --drain
EOF
}

main "$@"
