#!/usr/bin/env bash
# AWS Neuron SDK system packages for Trainium and Inferentia nodes.
#
# Adds the Neuron package repository (signed with the Neuron GPG key), then
# installs the kernel headers for the running kernel, the Neuron driver
# (DKMS), runtime, collectives (EFA-based multi-node communication) and
# tools, and puts the Neuron tools on login shells' PATH. Framework wheels
# (torch-neuronx, neuronx-cc) belong in each user's Python environment.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NEURON_PACKAGES=(aws-neuronx-dkms aws-neuronx-runtime-lib aws-neuronx-collectives aws-neuronx-tools)
KEY_URL_YUM=https://yum.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
KEY_URL_APT=https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB

kernel="$(uname -r)"
if [[ "$(os_family)" == ubuntu ]]; then
  keyring=/etc/apt/keyrings/neuron.gpg
  if [[ ! -f "${ROOT}${keyring}" ]]; then
    tmp="$(mktemp -d)"
    fetch "${KEY_URL_APT}" "${tmp}/neuron.pub"
    mkdir -p "${ROOT}/etc/apt/keyrings"
    gpg --batch --yes --dearmor -o "${ROOT}${keyring}" "${tmp}/neuron.pub"
    rm -rf "${tmp}"
    log "installed the Neuron repository key"
  fi
  codename="$(os_release VERSION_CODENAME)"
  [[ -n "${codename}" ]] || die "VERSION_CODENAME is missing from /etc/os-release"
  put_file /etc/apt/sources.list.d/neuron.list 0644 \
    <<<"deb [signed-by=${keyring}] https://apt.repos.neuron.amazonaws.com ${codename} main"
  pkg_install "linux-headers-${kernel}" "${NEURON_PACKAGES[@]}"
else
  put_file /etc/yum.repos.d/neuron.repo 0644 <<EOF
[neuron]
name=Neuron YUM Repository
baseurl=https://yum.repos.neuron.amazonaws.com
enabled=1
metadata_expire=0
gpgcheck=1
gpgkey=${KEY_URL_YUM}
EOF
  pkg_install "kernel-devel-${kernel}" "kernel-headers-${kernel}" "${NEURON_PACKAGES[@]}"
fi

put_file /etc/profile.d/mlcluster-neuron.sh 0644 <<'EOF'
# Written by mlcluster: the Neuron tools (neuron-top, neuron-ls) on PATH.
case ":${PATH}:" in
  *:/opt/aws/neuron/bin:*) ;;
  *) export PATH="/opt/aws/neuron/bin:${PATH}" ;;
esac
EOF
log "Neuron SDK system packages ready"
