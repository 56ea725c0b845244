#!/usr/bin/env bash
# Step docker: install Docker (from Docker's apt repository, unless the AMI has it), put its data
# root and temp folder on local NVMe so images cannot fill the root volume, add the NVIDIA
# container toolkit on GPU nodes. Users get rootless Podman to build images; the docker group
# (root-equivalent) only when docker_group is true.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

DAEMON_JSON="$MLC_ROOT/etc/docker/daemon.json"
DROP_IN="$SYSTEMD_DIR/docker.service.d/mlcluster.conf"
KEYRINGS=/etc/apt/keyrings

# Repository keys, by fingerprint (a mismatch stops the step), and the toolkit's pinned version.
DOCKER_KEY_URL=https://download.docker.com/linux/ubuntu/gpg
DOCKER_KEY_FINGERPRINT=9DC858229FC7DD38854AE2D88D81803C0EBFCD88
NVIDIA_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
NVIDIA_KEY_FINGERPRINT=C95B321B61E88C1809C4F759DDCAE044F796ECB0
NVIDIA_TOOLKIT_VERSION=1.17.8-1

# add_apt_source NAME KEY_URL FINGERPRINT LINE : the repository's verified key and its sources.list line.
add_apt_source() {
  apt_key "$1" "$2" "$3"
  install_file "$MLC_ROOT/etc/apt/sources.list.d/$1.list" 644 <<<"$4"
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
  add_apt_source docker "$DOCKER_KEY_URL" "$DOCKER_KEY_FINGERPRINT" \
    "deb [arch=$arch signed-by=$KEYRINGS/docker.asc] https://download.docker.com/linux/ubuntu $codename stable"
  apt_install docker-ce docker-ce-cli containerd.io
}

install_nvidia_toolkit() {
  local have
  # shellcheck disable=SC2016  # ${Version} is a dpkg-query field
  have=$(dpkg-query -W -f='${Version}' nvidia-container-toolkit 2>/dev/null) || have=""
  if [[ $have == "$NVIDIA_TOOLKIT_VERSION" ]]; then
    log "the NVIDIA container toolkit $have is installed"
    return 0
  fi
  add_apt_source nvidia-container-toolkit "$NVIDIA_KEY_URL" "$NVIDIA_KEY_FINGERPRINT" \
    "deb [signed-by=$KEYRINGS/nvidia-container-toolkit.asc] https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /"
  apt_update
  retry 5 "install nvidia-container-toolkit $NVIDIA_TOOLKIT_VERSION" apt-get "${APT_OPTIONS[@]}" install \
    --allow-downgrades "nvidia-container-toolkit=$NVIDIA_TOOLKIT_VERSION" \
    "nvidia-container-toolkit-base=$NVIDIA_TOOLKIT_VERSION" "libnvidia-container-tools=${NVIDIA_TOOLKIT_VERSION}" \
    "libnvidia-container1=${NVIDIA_TOOLKIT_VERSION}"
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

# The docker group is root on this node (a member can mount / into a container): users join it only
# when docker_group is true, and leave it when it is false (a re-run after the setting changed).
docker_group() {
  local user
  if ! getent group docker >/dev/null; then
    return 0
  fi
  for user in $(cluster_users); do
    if is_true "$MLC_DOCKER_GROUP" && ! in_group "$user" docker; then
      usermod --append --groups docker "$user"
      warn "added $user to the docker group (docker_group: true), which is root-equivalent on this node"
    elif ! is_true "$MLC_DOCKER_GROUP" && in_group "$user" docker; then
      gpasswd --delete "$user" docker
      log "removed $user from the docker group (docker_group: false)"
    fi
  done
}

# next_subid FILE : the first subordinate ID after every range already in FILE (at least 100000).
next_subid() {
  awk -F: 'BEGIN { next_id = 100000 } NF == 3 && $2 + $3 > next_id { next_id = $2 + $3 } END { print next_id }' "$1"
}

# Rootless Podman for building images as oneself: subordinate IDs for each user, and image storage
# on local NVMe in a per-user 0700 folder under a root-owned parent.
rootless_podman() {
  local root user file start
  apt_install podman uidmap slirp4netns fuse-overlayfs
  for file in "$MLC_ROOT/etc/subuid" "$MLC_ROOT/etc/subgid"; do
    [[ -f $file ]] || install_file "$file" 644 </dev/null
    for user in $(cluster_users); do
      if ! grep -q "^$user:" "$file"; then
        start=$(next_subid "$file")
        install_file "$file" 644 < <(cat "$file" && printf '%s:%s:65536\n' "$user" "$start")
        log "$user: subordinate IDs $start-$((start + 65535)) in ${file#"$MLC_ROOT"}"
      fi
    done
  done
  root=$(local_root)
  mkdir -p "$MLC_ROOT$root"
  ensure_root_dir "$MLC_ROOT$root/containers" 755
  for user in $(cluster_users); do
    MLC_FORCE_MODE=true ensure_user_dir "$user" "$MLC_ROOT$root/containers/user-$(id_of "$user")" 700
  done
  install_file "$MLC_ROOT/etc/containers/storage.conf" 644 <<EOF_CONF
# Written by mlcluster (docker step): rootless Podman keeps each user's images on local NVMe.
[storage]
driver = "overlay"

[storage.options]
rootless_storage_path = "$root/containers/user-\$UID"
EOF_CONF
}

main() {
  install_docker
  if is_gpu_node; then
    install_nvidia_toolkit
  fi
  configure_data_root
  converge_service docker "$DAEMON_JSON" "$DROP_IN"
  docker_group
  if is_true "$MLC_ROOTLESS_PODMAN"; then
    rootless_podman
  fi
}

main "$@"
