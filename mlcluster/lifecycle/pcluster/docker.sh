#!/usr/bin/env bash
# Container engines for building images: rootless Podman for every user, Docker for root.
#
# Users build and run images with rootless Podman (`podman build`, then
# `enroot import podman://IMAGE` or a registry for Pyxis jobs): it runs as
# the user, in the user's own namespaces, with its storage in a per-user
# 0700 folder on local NVMe (<local>/containers/user-UID, made by
# mlcluster-user-dirs before the user's job or SSH session). Docker is
# installed for root and services (from the OS repositories, Docker CE on
# RHEL and Rocky from Docker's repository with its key checked against the
# pinned fingerprint), with its data on local NVMe and the NVIDIA runtime on
# GPU nodes. Nobody is added to the `docker` group: membership is root on
# the node. The separate docker_group step does that when the environment
# file asks for it explicitly (cluster.pcluster.node_scripts.docker_group).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install_docker() {
  case "$(os_family)" in
    amzn) pkg_install docker ;;
    ubuntu) pkg_install docker.io ;;
    rhel)
      if ! pkg_is_installed docker-ce; then
        fetch_key "Docker CE repository" "${DOCKER_KEY_URL_RHEL}" "${DOCKER_KEY_FINGERPRINT_RHEL}" \
          /etc/pki/rpm-gpg/mlcluster-docker-ce.asc
        put_file /etc/yum.repos.d/docker-ce.repo 0644 <<'EOF'
[docker-ce-stable]
name=Docker CE Stable - $basearch
baseurl=https://download.docker.com/linux/rhel/$releasever/$basearch/stable
enabled=1
gpgcheck=1
gpgkey=file:///etc/pki/rpm-gpg/mlcluster-docker-ce.asc
EOF
      fi
      pkg_install docker-ce docker-ce-cli containerd.io
      ;;
  esac
}

install_nvidia_toolkit() {
  pkg_is_installed nvidia-container-toolkit && return 0
  if [[ "$(os_family)" == ubuntu ]]; then
    fetch_key "NVIDIA container toolkit repository" "${NVIDIA_CONTAINER_KEY_URL}" "${NVIDIA_CONTAINER_KEY_FINGERPRINT}" \
      /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg binary
    put_file /etc/apt/sources.list.d/nvidia-container-toolkit.list 0644 <<'EOF'
deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /
EOF
  else
    fetch_key "NVIDIA container toolkit repository" "${NVIDIA_CONTAINER_KEY_URL}" "${NVIDIA_CONTAINER_KEY_FINGERPRINT}" \
      /etc/pki/rpm-gpg/mlcluster-nvidia-container-toolkit.asc
    # NVIDIA signs the repository metadata (repo_gpgcheck), not each package.
    put_file /etc/yum.repos.d/nvidia-container-toolkit.repo 0644 <<'EOF'
[nvidia-container-toolkit]
name=nvidia-container-toolkit
baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch
enabled=1
repo_gpgcheck=1
gpgcheck=0
gpgkey=file:///etc/pki/rpm-gpg/mlcluster-nvidia-container-toolkit.asc
EOF
  fi
  pkg_install nvidia-container-toolkit
}

daemon_json() {
  local gpu="$1" storage="$2"
  echo "{"
  if [[ "${storage}" == /scratch ]]; then
    echo '  "data-root": "/scratch/docker",'
  fi
  if ((gpu)); then
    echo '  "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},'
  fi
  echo '  "log-driver": "json-file",'
  echo '  "log-opts": {"max-size": "100m", "max-file": "3"}'
  echo "}"
}

# install_podman STORAGE: rootless Podman with each user's image storage under STORAGE/containers.
# Amazon Linux 2023 ships Podman in SPAL (Supplementary Packages for Amazon
# Linux, enabled by the spal-release package of its core repository);
# Amazon Linux 2 has none, so users there build images off the cluster.
install_podman() {
  local storage="$1"
  case "$(os_family)" in
    ubuntu) pkg_install podman uidmap slirp4netns fuse-overlayfs ;;
    rhel) pkg_install podman shadow-utils slirp4netns fuse-overlayfs ;;
    amzn)
      if [[ "$(pkg_manager)" == yum ]] || ! { pkg_is_installed spal-release || pkg_available spal-release; }; then
        warn "rootless Podman is not packaged for Amazon Linux $(os_release VERSION_ID) (no SPAL repository); users build images elsewhere and run them with Enroot"
        return 0
      fi
      pkg_install spal-release
      pkg_install podman shadow-utils
      ;;
  esac
  ensure_root_dir "${storage}/containers" 0755
  # $UID in rootless_storage_path is expanded by Podman for each user; root keeps the defaults.
  put_file /etc/containers/storage.conf 0644 <<EOF
# Written by mlcluster: rootless image storage in a per-user 0700 folder on local storage.
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
rootless_storage_path = "${storage}/containers/user-\$UID/storage"
EOF
  register_user_dirs podman "${storage}/containers"
}

# report_docker_group: name whoever is in the docker group (root-equivalent), without changing it.
report_docker_group() {
  local members
  members="$(awk -F: '$1 == "docker" { print $4 }' "${ROOT}/etc/group")"
  if [[ -n "${members}" ]]; then
    warn "the docker group has members (${members}); each is root on this node"
  fi
}

storage="$(local_storage)"
install_docker
gpu=0
if has_nvidia_gpu; then
  gpu=1
  install_nvidia_toolkit
fi

CHANGED=0
put_file /etc/docker/daemon.json 0644 <<<"$(daemon_json "${gpu}" "${storage}")"
config_changed="${CHANGED}"

systemctl is-enabled --quiet docker || systemctl enable docker
if ! service_active docker; then
  systemctl start docker
elif ((config_changed)); then
  systemctl restart docker
fi
install_podman "${storage}"
report_docker_group
log "docker (root only) and rootless podman ready"
