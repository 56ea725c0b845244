#!/usr/bin/env bash
# Runtime pre-check for mlcluster HyperPod nodes: run it on the nodes before real workloads,
#   srun -N <n> mlcluster-precheck            (installed by on_create.sh on every node)
#   srun -N <n> bash /fsx/precheck.sh [--user NAME]
# One PASS, FAIL or SKIP line per check, each FAIL with its mitigation; exits 1 if any check fails.
# --user NAME checks NAME's home (default: the user running it; root is skipped).
set -uo pipefail

MLC_ROOT="${MLC_ROOT:-}"
SLURM_ETC="$MLC_ROOT/opt/slurm/etc"
LOCAL_VOLUMES=(/opt/dlami/nvme /opt/sagemaker)
RERUN="sudo bash /opt/mlcluster/lifecycle/on_create.sh"
HOST=$(hostname -s 2>/dev/null || echo unknown-host)
FAILURES=0

pass() {
  printf '%s PASS %s: %s\n' "$HOST" "$1" "$2"
}

fail() {
  printf '%s FAIL %s: %s. Mitigation: %s\n' "$HOST" "$1" "$2" "$3"
  FAILURES=$((FAILURES + 1))
}

skip() {
  printf '%s SKIP %s: %s\n' "$HOST" "$1" "$2"
}

on_local_volume() {
  local volume
  for volume in "${LOCAL_VOLUMES[@]}"; do
    if [[ $1 == "$volume"/* ]]; then
      return 0
    fi
  done
  return 1
}

check_docker() {
  if command -v docker >/dev/null 2>&1; then
    pass docker_installed "$(command -v docker)"
  else
    fail docker_installed "docker is not on PATH" "$RERUN docker"
  fi
}

check_enroot_runtime_path() {
  local path
  if ! command -v enroot >/dev/null 2>&1; then
    fail enroot_runtime_path "enroot is not installed" "$RERUN enroot_pyxis start_slurm"
    return
  fi
  path=$(awk '$1 == "ENROOT_RUNTIME_PATH" { sub(/^[ \t]*ENROOT_RUNTIME_PATH[ \t]+/, ""); path = $0 } END { print path }' \
    "$MLC_ROOT/etc/enroot/enroot.conf" 2>/dev/null)
  if on_local_volume "$path"; then
    pass enroot_runtime_path "$path"
  else
    fail enroot_runtime_path "ENROOT_RUNTIME_PATH is '${path:-the default}', not on local NVMe or /opt/sagemaker" \
      "check that /opt/dlami/nvme is mounted (systemctl status dlami-nvme), then $RERUN enroot_pyxis start_slurm"
  fi
}

# Docker's data root without the docker socket (root:docker 0660): the users who run this are not
# in the docker group (docker_group defaults to false). It reads what the docker step wrote,
# /etc/docker/daemon.json (0644), and asks systemd, which answers anyone, whether the daemon runs.
# Without a "data-root" key docker uses /var/lib/docker (dockerd's documented default).
daemon_data_root() {
  python3 - "$MLC_ROOT/etc/docker/daemon.json" <<'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
except FileNotFoundError:
    config = {}
except (OSError, ValueError) as err:
    print(err)
    sys.exit(1)
root = config.get("data-root", "/var/lib/docker") if isinstance(config, dict) else None
if not isinstance(root, str) or not root:
    print("its data-root is not a path")
    sys.exit(1)
print(root)
PY
}

check_docker_data_root() {
  local root
  if ! systemctl is-active --quiet docker; then
    fail docker_data_root "the docker service is not active" \
      "find the cause with 'sudo systemctl status docker', then sudo systemctl restart docker, then $RERUN docker"
  elif ! root=$(daemon_data_root 2>&1); then
    fail docker_data_root "cannot read docker's data root from /etc/docker/daemon.json ($root)" "$RERUN docker"
  elif on_local_volume "$root"; then
    pass docker_data_root "$root"
  else
    fail docker_data_root "docker's data root is $root, not on local NVMe or /opt/sagemaker" \
      "check that /opt/dlami/nvme is mounted (systemctl status dlami-nvme), then $RERUN docker"
  fi
}

check_fsx() {
  local info
  info=$(awk -v target="$MLC_ROOT/fsx" '$2 == target { print $1 " " $3 }' "$MLC_ROOT/proc/mounts" 2>/dev/null)
  if [[ $info == *" lustre" ]]; then
    pass fsx_mounted "/fsx is Lustre from ${info% lustre}"
  else
    fail fsx_mounted "/fsx is not a Lustre mount${info:+ (found: $info)}" \
      "$RERUN mount_fsx; if the mount fails, check the FSx file system and its security group (TCP 988)"
  fi
}

check_pyxis() {
  local files=() file plugin=""
  for file in "$SLURM_ETC/plugstack.conf" "$SLURM_ETC"/plugstack.conf.d/*; do
    if [[ -f $file ]]; then
      files+=("$file")
    fi
  done
  if ((${#files[@]} > 0)); then
    plugin=$(awk '$1 ~ /^(required|optional)$/ && $2 ~ /spank_pyxis\.so$/ { print $2; exit }' "${files[@]}")
  fi
  if [[ -z $plugin ]]; then
    fail pyxis_plugin "no spank_pyxis.so line in $SLURM_ETC/plugstack.conf or plugstack.conf.d" \
      "$RERUN enroot_pyxis start_slurm"
  elif [[ ! -f $MLC_ROOT$plugin ]]; then
    fail pyxis_plugin "plugstack.conf names $plugin, which does not exist" "$RERUN enroot_pyxis start_slurm"
  else
    pass pyxis_plugin "$plugin in plugstack"
  fi
}

check_slurmd() {
  if systemctl is-active --quiet slurmd; then
    pass slurmd_running "slurmd is active"
  else
    fail slurmd_running "slurmd is not active" \
      "find the cause with 'sudo systemctl status slurmd' and 'sudo journalctl -xeu slurmd', then 'sudo systemctl start slurmd'"
  fi
}

check_home() {
  local user=$1 home root
  if [[ $user == root ]]; then
    skip home_shared "root's home stays local; pass --user NAME to check a user"
    return
  fi
  root=$(sed -n 's/^MLC_HOME_ROOT=//p' "$MLC_ROOT/etc/mlcluster/node.env" 2>/dev/null)
  home=$(getent passwd "$user" | cut -d: -f6)
  if [[ -n $root && $home == "$root/$user" && -d $MLC_ROOT$home && ! -L $MLC_ROOT$home ]] &&
    [[ $(stat -c %u "$MLC_ROOT$home") == $(getent passwd "$user" | cut -d: -f3) ]]; then
    pass home_shared "$user's home is $home"
  else
    fail home_shared "$user's home is '${home:-unknown}', not a folder of $user's at ${root:-the shared home root}/$user" \
      "$RERUN homes ssh_keys"
  fi
}

check_nvidia_cli() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    skip nvidia_container_cli "no NVIDIA GPU on this node"
  elif command -v nvidia-container-cli >/dev/null 2>&1; then
    pass nvidia_container_cli "$(command -v nvidia-container-cli)"
  else
    fail nvidia_container_cli "nvidia-container-cli is not installed" \
      "$RERUN docker (it installs the NVIDIA container toolkit on GPU nodes)"
  fi
}

main() {
  local user=${SUDO_USER:-$(id -un)}
  while (($# > 0)); do
    case $1 in
      --user)
        user=${2:?--user needs a user name}
        shift 2
        ;;
      *)
        echo "usage: precheck.sh [--user NAME]" >&2
        exit 2
        ;;
    esac
  done
  check_docker
  check_enroot_runtime_path
  check_docker_data_root
  check_fsx
  check_pyxis
  check_slurmd
  check_home "$user"
  check_nvidia_cli
  if ((FAILURES > 0)); then
    printf '%s: %d check(s) failed\n' "$HOST" "$FAILURES"
    exit 1
  fi
  printf '%s: all checks passed\n' "$HOST"
}

main "$@"
