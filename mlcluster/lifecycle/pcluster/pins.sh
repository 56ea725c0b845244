# shellcheck shell=bash
# shellcheck disable=SC2034 # read by the step scripts that source lib.sh
# Every version, checksum, commit and key fingerprint the node scripts trust (sourced by lib.sh).
#
# A download is used only when its SHA-256 matches the value here; a package
# repository is added only when its key has the fingerprint here; a source
# tree is built only when its tag is the commit here. Bump a version and its
# pin together, from a source you can cite:
#
# - aws-ofi-nccl 1.19.0: release tarball SHA-256 as pinned by Spack
#   (spack/spack-packages, packages/aws_ofi_nccl/package.py); tag v1.19.0 of
#   aws/aws-ofi-nccl (2026-04-10). Used only when the AMI lacks the plugin
#   (ParallelCluster AMIs bundle it in /opt/amazon/ofi-nccl).
# - nccl-tests 2.17.6: source archive SHA-256 as pinned by Spack
#   (packages/nccl_tests/package.py).
# - NCCL 2.27.7-1 (libnccl2 / libnccl-dev, libnccl / libnccl-devel): installed only when the AMI
#   has no NCCL, from NVIDIA's CUDA repository (the package version is <NCCL>+cuda<major.minor>,
#   e.g. 2.27.7-1+cuda12.9; each release is published for a few CUDA minors only), in the build the
#   repository lists that is nearest the node's CUDA and not newer than its driver supports
#   (nccl_efa.sh); the same NCCL release as AWS's public nccl-tests image tagged ncclv2.27.7-1.
# - Pyxis 0.20.0: the commit tag v0.20.0 of NVIDIA/pyxis points to (the version
#   ParallelCluster's cookbook installs). Built only when the AMI lacks it.
# - Neuron SDK 2.28.0 (2026-02-26): the system package versions of that
#   release; the repository key "Amazon AWS Neuron <neuron-maintainers@amazon.com>".
# - Docker's repository keys: the fingerprints Docker's install guides give
#   (Debian/Ubuntu and CentOS/RHEL keys).
# - NVIDIA's container toolkit repository key ("NVIDIA CORPORATION (Open
#   Source Projects) <cudatools@nvidia.com>").
# - Prometheus node exporter 1.8.2: the linux-amd64 and linux-arm64 release
#   tarballs' SHA-256, as pinned in several independent public repositories.
# - NVIDIA's DCGM exporter 4.5.2-4.8.1 (DCGM 4.5.2): the linux/amd64 image by
#   digest, the same image the HyperPod lifecycle runs.
# - prometheus_client 0.20.0 (for aws-neuronx-tools' neuron-monitor-prometheus.py):
#   the PyPI wheel's SHA-256, as pinned by Spack (py-prometheus-client) and in
#   pip-compile lock files.

OFI_NCCL_VERSION=1.19.0
OFI_NCCL_URL=https://github.com/aws/aws-ofi-nccl/releases/download/v1.19.0/aws-ofi-nccl-1.19.0.tar.gz
OFI_NCCL_SHA256=fd8ecd15f0de88e07b2194637938dadcf247ad3b5150651dfd0bb0c4bb32ff3c

NCCL_TESTS_VERSION=2.17.6
NCCL_TESTS_URL=https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz
NCCL_TESTS_SHA256=38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0

NCCL_PACKAGE_VERSION=2.27.7-1

PYXIS_VERSION=0.20.0
PYXIS_GIT_URL=https://github.com/NVIDIA/pyxis.git
PYXIS_COMMIT=424563865a491f2d8f3c396a095d18db81f1fb07

NEURON_SDK_VERSION=2.28.0
NEURON_PACKAGE_VERSIONS=(
  aws-neuronx-dkms=2.26.5.0
  aws-neuronx-runtime-lib=2.30.51.0
  aws-neuronx-collectives=2.30.59.0
  aws-neuronx-tools=2.28.23.0
)
NEURON_KEY_URL_APT=https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
NEURON_KEY_URL_YUM=https://yum.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
NEURON_KEY_FINGERPRINT=00FA2C1079260870A76D2C285749CAD8646D9185

DOCKER_KEY_URL_RHEL=https://download.docker.com/linux/rhel/gpg
DOCKER_KEY_FINGERPRINT_RHEL=060A61C51B558A7F742B77AAC52FEB6B621E9F35

NVIDIA_CONTAINER_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
NVIDIA_CONTAINER_KEY_FINGERPRINT=C95B321B61E88C1809C4F759DDCAE044F796ECB0

NODE_EXPORTER_VERSION=1.8.2
NODE_EXPORTER_URL=https://github.com/prometheus/node_exporter/releases/download/v1.8.2
declare -A NODE_EXPORTER_SHA256=([amd64]=6809dd0b3ec45fd6e992c19071d6b5253aed3ead7bf0686885a51d85c6643c66 [arm64]=627382b9723c642411c33f48861134ebe893e70a63bcc8b3fc0619cd0bfac4be)

DCGM_EXPORTER_IMAGE=nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04@sha256:a7ad6547d4546eaf4dd5d6b4c0b4db4101e63ef7dc3cdff7f42b767d2c60b706

PROMETHEUS_CLIENT_WHEEL=prometheus_client-0.20.0-py3-none-any.whl
PROMETHEUS_CLIENT_URL=https://files.pythonhosted.org/packages/c7/98/745b810d822103adca2df8decd4c0bbe839ba7ad3511af3f0d09692fc0f0/prometheus_client-0.20.0-py3-none-any.whl
PROMETHEUS_CLIENT_SHA256=cde524a85bce83ca359cc837f28b8c0db5cac7aa653a588fd7e84ba061c329e7
