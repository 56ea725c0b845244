#!/usr/bin/env bash
# Step start_slurm: slurmctld on the controller (with configless mode on, so nodes fetch their
# config from it); slurmd on workers, pointed at the controller with --conf-server; on login
# nodes slurmd is enabled once to fetch the config for the client commands. Each node sets aside
# the daemon it must not run. A daemon whose config changed since the last run is restarted.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

PLUGSTACK_FILES=("$SLURM_ETC/plugstack.conf" "$SLURM_ETC/plugstack.conf.d/pyxis.conf")
# Every slurmd runs mlcluster's quick health checks every 5 minutes, spread over the interval (CYCLE),
# in any node state; a node failing a critical check drains itself with the reason (install_tools
# installs the program on every node; slurm.conf(5): HealthCheckProgram, HealthCheckInterval,
# HealthCheckNodeState).
HEALTH_CHECK=(
  --set "HealthCheckProgram=/usr/local/sbin/mlcluster-health-check"
  --set "HealthCheckInterval=300"
  --set "HealthCheckNodeState=ANY,CYCLE"
)

# set_aside UNIT : disable UNIT and rename its unit file so nothing starts it on this node.
set_aside() {
  local unit_file="$SYSTEMD_DIR/$1.service"
  if [[ -f $unit_file ]]; then
    if systemctl is-enabled --quiet "$1"; then
      systemctl disable --now "$1"
    fi
    mv -f "$unit_file" "$unit_file.mlcluster-disabled"
    systemctl daemon-reload
    log "set aside $1.service: it does not run on a ${MLC_ROLE:?}"
  fi
}

slurmctld_up() {
  local answer
  answer=$(scontrol ping 2>&1) && [[ $answer == *"is UP"* ]]
}

# slurm_setting KEY DEFAULT : the last KEY=value of slurm.conf, or DEFAULT.
slurm_setting() {
  local value
  value=$(sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//Ip" "$SLURM_ETC/slurm.conf" | tail -1)
  printf '%s\n' "${value:-$2}"
}

# slurmctld keeps its state (jobs, reservations) off the root volume, so patching does not lose it.
state_save_location() {
  local data user old new
  data=$(controller_data_dir)
  user=$(slurm_setting SlurmUser root)
  old=$(slurm_setting StateSaveLocation "")
  new="$data/slurmctld"
  ensure_user_dir "$user" "$MLC_ROOT$new" 700
  if [[ -n $old && $old != "$new" ]]; then
    move_contents "$MLC_ROOT$old" "$MLC_ROOT$new"
  fi
  printf '%s\n' "$new"
}

start_controller() {
  local state
  wait_for_slurm_conf
  state=$(state_save_location)
  install_from "$SLURM_ETC/slurm.conf" keep "" plan slurm-conf --conf "$SLURM_ETC/slurm.conf" --configless \
    --set "StateSaveLocation=$state" "${HEALTH_CHECK[@]}"
  set_aside slurmd
  converge_service slurmctld "$SLURM_ETC/slurm.conf" "$SLURM_ETC/accounting.conf" "$SLURM_ETC/cgroup.conf" \
    "${PLUGSTACK_FILES[@]}"
  retry 30 "wait for slurmctld to answer" slurmctld_up || die "slurmctld does not answer; see /var/log/slurm/"
  log "slurmctld is up"
}

configure_slurmd() {
  install_from "$SYSTEMD_DIR/slurmd.service" keep "" \
    plan slurmd-unit --unit "$SYSTEMD_DIR/slurmd.service" --server "$MLC_CONTROLLER_ADDRESS:$SLURMCTLD_PORT"
  if [[ $FILE_CHANGED == true ]]; then
    systemctl daemon-reload
  fi
  set_aside slurmctld
}

main() {
  case $MLC_ROLE in
    controller)
      start_controller
      ;;
    worker)
      configure_slurmd
      converge_service slurmd "$SYSTEMD_DIR/slurmd.service" "${PLUGSTACK_FILES[@]}"
      ;;
    login)
      configure_slurmd
      # slurmd fetches the config into its cache, then stops: login nodes are not in slurm.conf.
      if ! systemctl is-enabled --quiet slurmd; then
        systemctl enable --now slurmd || warn "slurmd did not start; client commands may lack a config"
      fi
      ;;
    *) die "unknown role '$MLC_ROLE'" ;;
  esac
}

main "$@"
