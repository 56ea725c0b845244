#!/usr/bin/env bash
# Step scheduled_backup (controller): a daily second copy of slurmctld's state and, with local
# accounting, the slurm_acct_db database, to the cluster's patch backup bucket under
# <prefix>/<weekday>/ (seven rotating copies; see `mlcluster-backup scheduled` in backup.sh).
# A systemd timer (daily, spread over an hour, caught up after downtime: Persistent) starts a oneshot
# service that runs /usr/local/sbin/mlcluster-backup as root; its output goes to the journal
# (journalctl -u mlcluster-backup-scheduled), and a failed run is started again 15 minutes later,
# at most 4 starts in 6 hours. The bucket, prefix and key come from mlcluster_features.json (node.env), whose
# copy on_create.sh checks: no value is read from a place a user or job can write.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

UNIT=mlcluster-backup-scheduled

main() {
  [[ -n ${MLC_SCHEDULED_BACKUP_URI:-} && -n ${MLC_SCHEDULED_BACKUP_KEY_ARN:-} ]] ||
    die "node.env has no MLC_SCHEDULED_BACKUP_URI or MLC_SCHEDULED_BACKUP_KEY_ARN (mlcluster_features.json scheduled_backup)"
  [[ -n ${MLC_SCHEDULED_BACKUP_CLUSTER:-} && -n ${MLC_SCHEDULED_BACKUP_NAMESPACE:-} && -n ${MLC_SCHEDULED_BACKUP_METRIC:-} && -n ${MLC_SCHEDULED_BACKUP_REGION:-} ]] ||
    die "node.env has no MLC_SCHEDULED_BACKUP_CLUSTER, _NAMESPACE, _METRIC or _REGION (mlcluster_features.json scheduled_backup)"
  install_file "$SYSTEMD_DIR/$UNIT.service" 644 <<EOF_UNIT
# Written by mlcluster (scheduled_backup step): the daily copy of the controller's Slurm state.
[Unit]
Description=mlcluster: daily copy of slurmctld's state and the accounting database to S3
After=network-online.target slurmctld.service mariadb.service
Wants=network-online.target
# A failed run is tried again (Restart=on-failure, 15 minutes apart), at most 4 starts in 6 hours: a
# day that failed has left the window before the next day's run, which the limit never refuses.
StartLimitIntervalSec=6h
StartLimitBurst=4

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/mlcluster-backup scheduled $MLC_SCHEDULED_BACKUP_URI $MLC_SCHEDULED_BACKUP_KEY_ARN
Restart=on-failure
RestartSec=15min
StandardOutput=journal
StandardError=journal
Nice=10
IOSchedulingClass=idle
EOF_UNIT
  local service_changed=$FILE_CHANGED
  install_file "$SYSTEMD_DIR/$UNIT.timer" 644 <<EOF_UNIT
# Written by mlcluster (scheduled_backup step).
[Unit]
Description=mlcluster: start the daily copy of the controller's Slurm state

[Timer]
OnCalendar=daily
RandomizedDelaySec=1h
Persistent=true

[Install]
WantedBy=timers.target
EOF_UNIT
  if [[ $service_changed == true ]]; then
    FILE_CHANGED=true
  fi
  enable_boot_unit "$UNIT.timer"
  if ! systemctl is-active --quiet "$UNIT.timer"; then
    retry 3 "start $UNIT.timer" systemctl start "$UNIT.timer"
  fi
  # The seed: one data point now starts the alarm's two-day clock at node creation (the first copy runs only
  # after the next midnight plus up to an hour, and Persistent= does not start a timer that never ran).
  retry 5 "seed $MLC_SCHEDULED_BACKUP_METRIC" put_copy_metric 1 ||
    die "could not publish the first $MLC_SCHEDULED_BACKUP_METRIC data point (cloudwatch:PutMetricData in $MLC_SCHEDULED_BACKUP_NAMESPACE)"
  if [[ $COPY_METRIC_DENIED == true ]]; then
    die "this node may not publish $MLC_SCHEDULED_BACKUP_METRIC (AccessDenied): the controller group's role lacks cloudwatch:PutMetricData in $MLC_SCHEDULED_BACKUP_NAMESPACE"
  fi
  log "daily copy scheduled to $MLC_SCHEDULED_BACKUP_URI/<weekday>/ (journalctl -u $UNIT)"
}

main "$@"
