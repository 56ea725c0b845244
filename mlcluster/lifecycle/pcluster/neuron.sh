#!/usr/bin/env bash
# AWS Neuron SDK system packages for Trainium and Inferentia nodes, at the pinned release.
#
# Adds the Neuron package repository with its signing key (used only when it
# has the pinned fingerprint; pins.sh), then installs the kernel headers for
# the running kernel and the Neuron driver (DKMS), runtime, collectives
# (EFA-based multi-node communication) and tools at the exact versions of
# the Neuron SDK release pinned in pins.sh, and puts the Neuron tools on login
# shells' PATH. Framework wheels (torch-neuronx, neuronx-cc) belong in each
# user's Python environment, at the versions of the same release.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# neuron_installed NAME VERSION: true when package NAME is installed at VERSION (any build suffix).
neuron_installed() {
  local have
  if [[ "$(pkg_manager)" == apt ]]; then
    # shellcheck disable=SC2016 # ${Version} is dpkg-query's field, not a shell variable
    have="$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null)" || return 1
  else
    have="$(rpm -q --qf '%{VERSION}' "$1" 2>/dev/null)" || return 1
  fi
  [[ "${have}" == "$2" || "${have}" == "$2"-* || "${have}" == "$2".* ]]
}

kernel="$(uname -r)"
specs=()
for pinned in "${NEURON_PACKAGE_VERSIONS[@]}"; do
  name="${pinned%%=*}"
  version="${pinned#*=}"
  neuron_installed "${name}" "${version}" && continue
  if [[ "$(os_family)" == ubuntu ]]; then specs+=("${name}=${version}*"); else specs+=("${name}-${version}*"); fi
done

if [[ "$(os_family)" == ubuntu ]]; then
  keyring=/etc/apt/keyrings/neuron.gpg
  fetch_key "Neuron repository" "${NEURON_KEY_URL_APT}" "${NEURON_KEY_FINGERPRINT}" "${keyring}" binary
  codename="$(os_release VERSION_CODENAME)"
  [[ -n "${codename}" ]] || die "VERSION_CODENAME is missing from /etc/os-release"
  put_file /etc/apt/sources.list.d/neuron.list 0644 \
    <<<"deb [signed-by=${keyring}] https://apt.repos.neuron.amazonaws.com ${codename} main"
  pkg_install "linux-headers-${kernel}"
else
  key=/etc/pki/rpm-gpg/mlcluster-neuron.asc
  fetch_key "Neuron repository" "${NEURON_KEY_URL_YUM}" "${NEURON_KEY_FINGERPRINT}" "${key}"
  put_file /etc/yum.repos.d/neuron.repo 0644 <<EOF
[neuron]
name=Neuron YUM Repository
baseurl=https://yum.repos.neuron.amazonaws.com
enabled=1
metadata_expire=0
gpgcheck=1
gpgkey=file://${key}
EOF
  pkg_install "kernel-devel-${kernel}" "kernel-headers-${kernel}"
fi
if ((${#specs[@]})); then
  log "installing Neuron SDK ${NEURON_SDK_VERSION}: ${specs[*]}"
  if [[ "$(pkg_manager)" == apt ]]; then
    retry apt-get -o DPkg::Lock::Timeout=600 -q update
    retry env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q install -y \
      --allow-downgrades "${specs[@]}"
  else
    retry "$(pkg_manager)" -q install -y "${specs[@]}"
  fi
fi
for pinned in "${NEURON_PACKAGE_VERSIONS[@]}"; do
  neuron_installed "${pinned%%=*}" "${pinned#*=}" || die "${pinned%%=*} ${pinned#*=} (Neuron SDK ${NEURON_SDK_VERSION}) did not install"
done

put_file /etc/profile.d/mlcluster-neuron.sh 0644 <<'EOF'
# Written by mlcluster: the Neuron tools (neuron-top, neuron-ls) on PATH.
case ":${PATH}:" in
  *:/opt/aws/neuron/bin:*) ;;
  *) export PATH="/opt/aws/neuron/bin:${PATH}" ;;
esac
EOF
log "Neuron SDK ${NEURON_SDK_VERSION} system packages ready"
