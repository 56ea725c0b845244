#!/usr/bin/env bash
# Docker engine for building and running training images.
#
# Installs Docker from the OS repositories (Docker CE on RHEL and Rocky),
# keeps its data on local NVMe (/scratch) when the node has it so images do
# not fill the root volume, rotates container logs, adds the NVIDIA runtime
# on GPU nodes and lets the default user run docker.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install_docker() {
  case "$(os_family)" in
    amzn) pkg_install docker ;;
    ubuntu) pkg_install docker.io ;;
    rhel)
      if ! pkg_is_installed docker-ce; then
        put_file /etc/yum.repos.d/docker-ce.repo 0644 <<'EOF'
[docker-ce-stable]
name=Docker CE Stable - $basearch
baseurl=https://download.docker.com/linux/rhel/$releasever/$basearch/stable
enabled=1
gpgcheck=1
gpgkey=https://download.docker.com/linux/rhel/gpg
EOF
      fi
      pkg_install docker-ce docker-ce-cli containerd.io
      ;;
  esac
}

install_nvidia_toolkit() {
  pkg_is_installed nvidia-container-toolkit && return 0
  local tmp
  tmp="$(mktemp -d)"
  if [[ "$(os_family)" == ubuntu ]]; then
    fetch https://nvidia.github.io/libnvidia-container/gpgkey "${tmp}/nvidia.key"
    mkdir -p "${ROOT}/usr/share/keyrings"
    gpg --batch --yes --dearmor -o "${ROOT}/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" "${tmp}/nvidia.key"
    put_file /etc/apt/sources.list.d/nvidia-container-toolkit.list 0644 <<'EOF'
deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /
EOF
  else
    fetch https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo "${tmp}/nvidia.repo"
    put_file /etc/yum.repos.d/nvidia-container-toolkit.repo 0644 <"${tmp}/nvidia.repo"
  fi
  rm -rf "${tmp}"
  pkg_install nvidia-container-toolkit
}

daemon_json() {
  local gpu="$1"
  echo "{"
  if [[ "$(local_storage)" == /scratch ]]; then
    echo '  "data-root": "/scratch/docker",'
  fi
  if ((gpu)); then
    echo '  "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},'
  fi
  echo '  "log-driver": "json-file",'
  echo '  "log-opts": {"max-size": "100m", "max-file": "3"}'
  echo "}"
}

install_docker
gpu=0
if has_nvidia_gpu; then
  gpu=1
  install_nvidia_toolkit
fi

CHANGED=0
put_file /etc/docker/daemon.json 0644 <<<"$(daemon_json "${gpu}")"
config_changed="${CHANGED}"

systemctl is-enabled --quiet docker || systemctl enable docker
if ! service_active docker; then
  systemctl start docker
elif ((config_changed)); then
  systemctl restart docker
fi

user="$(default_user)"
if grep -q "^${user}:" "${ROOT}/etc/passwd" 2>/dev/null; then
  grep -q '^docker:' "${ROOT}/etc/group" || groupadd docker
  if ! awk -F: -v u="${user}" '$1 == "docker" { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) found = 1 }
      END { exit !found }' "${ROOT}/etc/group"; then
    usermod -aG docker "${user}"
    log "added ${user} to the docker group"
  fi
fi
log "docker ready"
