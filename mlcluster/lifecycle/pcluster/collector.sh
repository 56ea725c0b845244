#!/usr/bin/env bash
# Step collector (head node only, when observability.prometheus is on): the metrics collector.
#
# collector_install.sh (shared with HyperPod, downloaded next to this script with the
# configuration mlcluster rendered) installs the pinned Prometheus agent and its target
# refresher as the unprivileged user mlc-collector. The collector signs its remote writes
# with the head node's instance role, which it reads from the instance metadata service;
# ParallelCluster's `HeadNode.Imds.Secured` lets only root and the cluster admins reach it,
# so the user is added to that allow-list with ParallelCluster's own imds-access.sh (its
# cookbook's parallelcluster-iptables service saves and restores the rules across reboots;
# they are saved here too, so a crash does not lose them).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

readonly COLLECTOR_USER=mlc-collector
readonly IMDS_ACCESS=/opt/parallelcluster/scripts/imds/imds-access.sh
readonly SAVE_TABLES=/usr/local/sbin/save_tables.sh
readonly IMDS_CHAIN=PARALLELCLUSTER_IMDS

[[ "${MLCLUSTER_NODE_ROLE:-}" == head ]] || die "the collector runs on the head node only (this node's role: '${MLCLUSTER_NODE_ROLE:-}')"

here="$(dirname "${BASH_SOURCE[0]}")"
bash "${here}/collector_install.sh" --files "${here}" || die "installing the collector failed (see the lines above)"

if iptables --wait --check "${IMDS_CHAIN}" --destination 169.254.169.254 --jump ACCEPT \
  --match owner --uid-owner "${COLLECTOR_USER}" 2>/dev/null; then
  log "${COLLECTOR_USER} may already reach the instance metadata service"
else
  [[ -f "${ROOT}${IMDS_ACCESS}" ]] \
    || die "${IMDS_ACCESS} is missing; ParallelCluster installs it on the head node (HeadNode.Imds.Secured): is this a ParallelCluster head node?"
  bash "${ROOT}${IMDS_ACCESS}" --allow "${COLLECTOR_USER}" || die "${IMDS_ACCESS} --allow ${COLLECTOR_USER} failed"
  if [[ -x "${ROOT}${SAVE_TABLES}" ]]; then
    "${ROOT}${SAVE_TABLES}" >/dev/null || warn "${SAVE_TABLES} failed; the rule is saved when the node shuts down"
  fi
  log "allowed ${COLLECTOR_USER} to reach the instance metadata service (${IMDS_ACCESS} --allow)"
fi
