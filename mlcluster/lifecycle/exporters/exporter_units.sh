# shellcheck shell=bash
# shellcheck disable=SC2034 # the layout is read by the backend scripts that source this file
# The metrics exporters' layout and systemd units, shared by ParallelCluster's exporters.sh and
# HyperPod's steps/observability.sh (sourced, never run). It only prints text: each backend writes
# the units, creates the user and folders, and restarts services with its own lib.sh, so this file
# needs nothing from either.

# The unprivileged system user every exporter runs as, and where the exporters keep their files.
EXPORTER_USER=mlc-exporter
EXPORTERS_DIR=/var/lib/mlcluster-exporters
TEXTFILE_DIR="${EXPORTERS_DIR}/textfile"
BIN_DIR=/opt/mlcluster/bin
DCGM_COUNTERS=/etc/mlcluster/dcgm-counters.csv

# exporter_account_problem PASSWD_ENTRY: why an existing account named EXPORTER_USER (its passwd line)
# must not be adopted as the exporters' user; prints nothing when it may. Only a system account
# (uid 1-999) without a login shell is adopted: a cluster user from lifecycle.users or a directory
# user of that name would otherwise own the exporters, their textfile folder and the metrics the
# collector trusts (the same rule as the collector's mlc-collector).
exporter_account_problem() {
  local uid shell
  IFS=: read -r _ _ uid _ _ _ shell <<<"$1"
  if ! [[ $uid =~ ^[0-9]+$ ]] || ((uid == 0 || uid >= 1000)) || [[ $shell != */nologin && $shell != */false ]]; then
    printf '%s exists as uid %s with shell %s, not as a system account (uid 1-999, no login shell); it would run the exporters and own the metrics: give that user another name, then run again\n' \
      "$EXPORTER_USER" "$uid" "$shell"
  fi
}

# exporter_hardening: what every exporter unit gets: no privileges, a read-only system, no other users' files.
exporter_hardening() {
  cat <<'EOF_HARDENING'
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
CapabilityBoundingSet=
AmbientCapabilities=
SystemCallArchitectures=native
EOF_HARDENING
}

# node_exporter_unit VERSION DIR: mlcluster-node-exporter.service, the node exporter in DIR on port 9100.
node_exporter_unit() {
  local version="$1" dir="$2"
  cat <<EOF_UNIT
# Written by mlcluster: the Prometheus node exporter ${version} for the collector (port 9100).
[Unit]
Description=Prometheus node exporter ${version} (mlcluster)
After=network-online.target
Wants=network-online.target

[Service]
User=${EXPORTER_USER}
Group=${EXPORTER_USER}
ExecStart=${dir}/node_exporter --web.listen-address=:9100 --collector.textfile.directory=${TEXTFILE_DIR}
Restart=on-failure
RestartSec=5
PrivateDevices=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
$(exporter_hardening)

[Install]
WantedBy=multi-user.target
EOF_UNIT
}

# textfile_service_unit NAME WHAT FAMILIES: mlcluster-NAME-metrics.service, one run of
# BIN_DIR/mlcluster-NAME-metrics as the exporter user, allowed the address FAMILIES.
textfile_service_unit() {
  local name="$1" what="$2" families="$3"
  cat <<EOF_UNIT
# Written by mlcluster: ${what} for the node exporter's textfile collector.
[Unit]
Description=${what} for the node exporter (mlcluster)

[Service]
Type=oneshot
User=${EXPORTER_USER}
Group=${EXPORTER_USER}
Environment=PATH=/opt/slurm/bin:/usr/bin:/bin
ExecStart=${BIN_DIR}/mlcluster-${name}-metrics ${TEXTFILE_DIR}
ReadWritePaths=${TEXTFILE_DIR}
PrivateDevices=yes
RestrictAddressFamilies=${families}
$(exporter_hardening)
EOF_UNIT
}

# textfile_timer_unit NAME WHAT: mlcluster-NAME-metrics.timer, the service every 15 seconds.
textfile_timer_unit() {
  local name="$1" what="$2"
  cat <<EOF_UNIT
# Written by mlcluster: runs mlcluster-${name}-metrics.service every 15 seconds.
[Unit]
Description=${what} every 15 seconds (mlcluster)

[Timer]
OnBootSec=30
OnUnitActiveSec=15
AccuracySec=1

[Install]
WantedBy=timers.target
EOF_UNIT
}

# dcgm_exporter_unit IDS IMAGE: mlcluster-dcgm-exporter.service, the DCGM exporter IMAGE in Docker
# as uid:gid IDS (the exporter user's) on port 9400.
dcgm_exporter_unit() {
  local ids="$1" image="$2" container=mlcluster-dcgm-exporter
  cat <<EOF_UNIT
# Written by mlcluster: NVIDIA's DCGM exporter for the collector (port 9400).
# Docker's client needs root (the Docker socket is root-equivalent), so this unit is root's; the exporter
# in the container runs as ${EXPORTER_USER} (${ids}) with no capabilities, a read-only root and
# no-new-privileges. It reads the GPUs through NVML (the device nodes the NVIDIA runtime passes in):
# the fields of ${DCGM_COUNTERS} need no root; DCGM's profiling fields (not used) would need CAP_SYS_ADMIN.
[Unit]
Description=NVIDIA DCGM exporter (mlcluster)
After=docker.service
Requires=docker.service

[Service]
ExecStartPre=-/usr/bin/docker rm --force ${container}
ExecStart=/usr/bin/docker run --rm --name ${container} --user ${ids} --cap-drop ALL --security-opt no-new-privileges --read-only --tmpfs /tmp --gpus all --network host --volume ${DCGM_COUNTERS}:/etc/dcgm-exporter/mlcluster.csv:ro ${image} -f /etc/dcgm-exporter/mlcluster.csv -a :9400
ExecStop=/usr/bin/docker stop ${container}
Restart=on-failure
RestartSec=10
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
EOF_UNIT
}

# neuron_monitor_unit WHEEL NEURON_BIN: mlcluster-neuron-monitor.service, neuron-monitor piped into
# its Prometheus front end (prometheus_client from WHEEL) on port 9410.
neuron_monitor_unit() {
  local wheel="$1" neuron_bin="$2"
  cat <<EOF_UNIT
# Written by mlcluster: neuron-monitor piped into its Prometheus front end for the collector (port 9410).
[Unit]
Description=AWS Neuron monitor for Prometheus (mlcluster)
After=network-online.target
Wants=network-online.target

[Service]
User=${EXPORTER_USER}
Group=${EXPORTER_USER}
Environment=PYTHONPATH=${wheel}
ExecStart=/bin/bash -c 'set -o pipefail; ${neuron_bin}/neuron-monitor | /usr/bin/python3 ${neuron_bin}/neuron-monitor-prometheus.py --port 9410'
Restart=always
RestartSec=10
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
$(exporter_hardening)

[Install]
WantedBy=multi-user.target
EOF_UNIT
}
