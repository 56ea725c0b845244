#!/usr/bin/env bash
# Step docker: install Docker (from Docker's apt repository, unless the AMI has it), put its data
# root and temp folder on local NVMe so images cannot fill the root volume, add the NVIDIA
# container toolkit on GPU nodes, and let the cluster users run docker.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

DAEMON_JSON="$MLC_ROOT/etc/docker/daemon.json"
DROP_IN="$SYSTEMD_DIR/docker.service.d/mlcluster.conf"
KEYRINGS=/etc/apt/keyrings

# add_apt_source NAME KEY_URL LINE : the repository's key (armored, as apt reads .asc keys) and
# its sources.list line, written only when missing or different.
add_apt_source() {
  local name=$1 key_url=$2 line=$3 key="$MLC_ROOT$KEYRINGS/$1.asc"
  mkdir -p "$MLC_ROOT$KEYRINGS"
  if [[ ! -s $key ]]; then
    apt_install ca-certificates curl
    retry 5 "download the $name apt key" curl -fsSL -o "$key.download" "$key_url"
    chmod 644 "$key.download"
    mv -f "$key.download" "$key"
  fi
  install_file "$MLC_ROOT/etc/apt/sources.list.d/$name.list" 644 <<<"$line"
  if [[ $FILE_CHANGED == true ]]; then
    APT_UPDATED=false
  fi
}

install_docker() {
  if command -v docker >/dev/null 2>&1; then
    log "docker is installed"
    return 0
  fi
  local codename arch
  codename=$(sed -n 's/^VERSION_CODENAME=//p' "$MLC_ROOT/etc/os-release" | tr -d '"')
  arch=$(dpkg --print-architecture)
  add_apt_source docker https://download.docker.com/linux/ubuntu/gpg \
    "deb [arch=$arch signed-by=$KEYRINGS/docker.asc] https://download.docker.com/linux/ubuntu $codename stable"
  apt_install docker-ce docker-ce-cli containerd.io
}

install_nvidia_toolkit() {
  if command -v nvidia-container-cli >/dev/null 2>&1; then
    log "the NVIDIA container toolkit is installed"
    return 0
  fi
  # shellcheck disable=SC2016  # $(ARCH) is expanded by apt, not the shell
  add_apt_source nvidia-container-toolkit https://nvidia.github.io/libnvidia-container/gpgkey \
    "deb [signed-by=$KEYRINGS/nvidia-container-toolkit.asc] https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /"
  apt_install nvidia-container-toolkit
  nvidia-ctk runtime configure --runtime=docker
}

configure_data_root() {
  local root
  root=$(local_root)
  mkdir -p "$MLC_ROOT$root/docker/data-root" "$MLC_ROOT$root/docker/tmp"
  install_from "$DAEMON_JSON" 644 "" plan docker-daemon --current "$DAEMON_JSON" --data-root "$root/docker/data-root"
  install_file "$DROP_IN" 644 <<EOF
# Written by mlcluster (docker step): docker's temporary files go next to its data root.
[Service]
Environment="DOCKER_TMPDIR=$root/docker/tmp"
EOF
  if [[ $FILE_CHANGED == true ]]; then
    systemctl daemon-reload
  fi
}

in_group() {
  local members
  members=$(getent group "$2" | cut -d: -f4)
  [[ ,$members, == *",$1,"* ]]
}

add_docker_users() {
  local user
  if ! getent group docker >/dev/null; then
    warn "there is no docker group; only root can run docker"
    return 0
  fi
  for user in $(cluster_users); do
    if ! in_group "$user" docker; then
      usermod --append --groups docker "$user"
      log "added $user to the docker group"
    fi
  done
}

main() {
  install_docker
  if is_gpu_node; then
    install_nvidia_toolkit
  fi
  configure_data_root
  converge_service docker "$DAEMON_JSON" "$DROP_IN"
  add_docker_users
}

main "$@"
