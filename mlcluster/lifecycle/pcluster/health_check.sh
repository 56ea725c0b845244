#!/usr/bin/env bash
# Step health_check (compute nodes): install mlcluster's node health tool and Slurm's HealthCheckProgram.
#
# - /usr/local/bin/mlcluster-health: the tiered checks (the HyperPod lifecycle's health.sh, uploaded
#   next to these scripts; `mlcluster health ENV` runs it through srun).
# - /etc/mlcluster/health.env: what it expects on this node (GPUs, EFA devices, Neuron devices), from
#   the instance type IMDS reports and HEALTH_EXPECTATIONS below (the table of
#   mlcluster.lifecycle.hyperpod.plan; a test keeps the two equal). Other types expect nothing. A type
#   in MLCLUSTER_NO_EFA (run.sh --no-efa: its compute resource has `efa: false`) expects no EFA device,
#   so the EFA checks skip instead of draining every node. When IMDS cannot be read the step warns and
#   expects nothing (the checks then skip; the node still boots) rather than failing the bootstrap.
# - /etc/logrotate.d/mlcluster-health: /var/log/mlcluster/health.log rotated by size (the rule of the
#   HyperPod log_rotation step; slurmd runs the check every 5 minutes).
# - /usr/local/sbin/mlcluster-health-check: the program the rendered slurm.conf names as
#   HealthCheckProgram (SlurmSettings.CustomSlurmSettings; ParallelCluster allows it, unlike Prolog).
#   slurmd runs it as root every HealthCheckInterval and when it starts; a node failing a critical
#   quick check is drained with the failed checks as its reason (`scontrol show node`).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE="$(dirname "${BASH_SOURCE[0]}")"
readonly HERE
readonly IMDS=http://169.254.169.254/latest
# instance type: "GPUs EFA-devices Neuron-devices" (EC2 DescribeInstanceTypes; see plan.HEALTH_EXPECTATIONS).
declare -A HEALTH_EXPECTATIONS=(
  [p4d.24xlarge]="8 4 0"
  [p4de.24xlarge]="8 4 0"
  [p5.48xlarge]="8 32 0"
  [p5e.48xlarge]="8 32 0"
  [p5en.48xlarge]="8 16 0"
  [p6-b200.48xlarge]="8 8 0"
  [trn1.32xlarge]="0 8 16"
  [trn1n.32xlarge]="0 16 16"
  [trn2.48xlarge]="0 16 16"
)

# imds_get PATH FILE: IMDSv2 (a session token first), PATH's value into FILE.
imds_get() {
  local token="$2.token"
  curl -fsS --connect-timeout 5 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" \
    -o "${token}" "${IMDS}/api/token" || return 1
  curl -fsS --connect-timeout 5 -H "X-aws-ec2-metadata-token: $(<"${token}")" -o "$2" "${IMDS}/$1"
}

[[ -f "${HERE}/health.sh" ]] || die "${HERE}/health.sh is missing; it is uploaded next to the node scripts"
put_file /usr/local/bin/mlcluster-health 0755 <"${HERE}/health.sh"

work="$(work_dir)"
trap 'rm -rf "${work}"' EXIT
if retry imds_get meta-data/instance-type "${work}/instance-type"; then
  instance_type="$(<"${work}/instance-type")"
  [[ "${instance_type}" =~ ^[a-z0-9-]+\.[a-z0-9]+$ ]] || die "IMDS gave an instance type that is not one: '${instance_type}'"
  read -r gpus efa neuron <<<"${HEALTH_EXPECTATIONS[${instance_type}]:-0 0 0}"
else
  instance_type="an instance type IMDS did not give"
  gpus=0 efa=0 neuron=0
  warn "cannot read this node's instance type from IMDS: mlcluster-health expects no GPU, EFA or Neuron device (its checks skip); rerun this step once IMDS answers"
fi
if ((efa > 0)) && [[ ",${MLCLUSTER_NO_EFA:-}," == *",${instance_type},"* ]]; then
  log "EFA is off for ${instance_type} in this queue (efa: false): mlcluster-health expects no EFA device"
  efa=0
fi
put_file /etc/mlcluster/health.env 0644 <<EOF
# Written by mlcluster (health_check) for ${instance_type}: what mlcluster-health expects.
MLC_EXPECT_GPUS=${gpus}
MLC_EXPECT_EFA=${efa}
MLC_EXPECT_NEURON=${neuron}
EOF

put_file /usr/local/sbin/mlcluster-health-check 0755 <<'EOF'
#!/bin/sh
# Slurm's HealthCheckProgram (written by mlcluster, health_check): the quick checks; a node that
# fails a critical one is drained, the failed checks in its reason (scontrol show node). slurmd
# starts it with an empty environment: PATH is set here (and again by mlcluster-health).
PATH=/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
exec /usr/local/bin/mlcluster-health --tier quick --drain
EOF
put_file /etc/logrotate.d/mlcluster-health 0644 <<'EOF'
# Written by mlcluster (health_check step).
/var/log/mlcluster/health.log {
    size 10M
    rotate 5
    compress
    delaycompress
    missingok
    notifempty
    nomail
}
EOF
log "mlcluster-health expects ${gpus} GPUs, ${efa} EFA devices, ${neuron} Neuron devices on ${instance_type}"
