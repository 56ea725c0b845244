#!/usr/bin/env bash
# SageMaker HyperPod OnCreate entrypoint for mlcluster Slurm nodes (Ubuntu).
#
# HyperPod runs it as root on every node from the folder it downloaded the lifecycle S3 prefix
# into. It finds this node's role (steps/identify_node.sh), asks plan.py which steps that role
# runs, and runs each steps/<step>.sh in order. Each step is idempotent and logs to
# /var/log/provision/<step>.log (and the console, which HyperPod sends to CloudWatch). The first
# failing step stops the run with a message naming it.
#
# Usage: on_create.sh            every step this node's role needs
#        on_create.sh STEP...    identify the node again, then only the named steps (a re-run
#                                after a fix; the scripts stay in /opt/mlcluster/lifecycle)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MLC_LIFECYCLE_DIR=$HERE
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

say() {
  log "$@" 2>&1 | tee -a "$LOG_DIR/on_create.log" >&2
}

# run_step NAME : run steps/NAME.sh with its output to the console and /var/log/provision/NAME.log.
run_step() {
  local name=$1 log_file="$LOG_DIR/$1.log" status=0
  say "step $name: start (log: $log_file)"
  printf '=== %(%Y-%m-%dT%H:%M:%S%z)T step %s\n' -1 "$name" >>"$log_file"
  MLC_STEP=$name bash "$HERE/steps/$name.sh" 2>&1 | tee -a "$log_file" || status=$?
  if ((status != 0)); then
    say "step $name: FAILED (exit code $status); the run stops here. Details: $log_file"
    exit "$status"
  fi
  say "step $name: done"
}

known_steps() {
  local file
  for file in "$HERE"/steps/*.sh; do
    basename "$file" .sh
  done
}

main() {
  if [[ -z $MLC_ROOT && $EUID -ne 0 ]]; then
    die "run on_create.sh as root"
  fi
  mkdir -p "$LOG_DIR" "$ETC_DIR" "$STATE_DIR" "$TMP_DIR"
  exec 9>"$STATE_DIR/on_create.lock"
  flock -n 9 || die "another on_create.sh is running (lock: $STATE_DIR/on_create.lock)"

  local step steps=()
  for step in "$@"; do
    if [[ ! -f $HERE/steps/$step.sh || $step == identify_node ]]; then
      die "unknown step '$step'; allowed: $(known_steps | grep -vx identify_node | tr '\n' ' ')"
    fi
  done

  say "mlcluster lifecycle: start in $HERE"
  run_step identify_node
  load_node_env
  if (($# > 0)); then
    steps=("$@")
  else
    local planned
    # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
    planned=$(plan steps --role "$MLC_ROLE" --features "$HERE/mlcluster_features.json")
    mapfile -t steps <<<"$planned"
  fi
  say "node $MLC_INSTANCE_NAME ($MLC_ADDRESS) is a $MLC_ROLE in group $MLC_GROUP; steps: ${steps[*]}"
  for step in "${steps[@]}"; do
    run_step "$step"
  done
  say "mlcluster lifecycle: all ${#steps[@]} steps done"
}

main "$@"
