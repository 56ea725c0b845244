#!/usr/bin/env bash
# Opt-in only: the OS's default user joins the `docker` group, which is root on this node.
#
# Runs only when the environment file sets
# cluster.pcluster.node_scripts.docker_group: true (synth warns that it is
# root-equivalent). By default users build images with rootless Podman (the
# docker step) and run them with Enroot and Pyxis.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

user="$(default_user)"
grep -q "^${user}:" "${ROOT}/etc/passwd" || die "the default user ${user} does not exist on this node"
grep -q '^docker:' "${ROOT}/etc/group" || groupadd docker
if ! awk -F: -v u="${user}" '$1 == "docker" { n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) found = 1 }
    END { exit !found }' "${ROOT}/etc/group"; then
  usermod -aG docker "${user}"
  warn "added ${user} to the docker group (docker_group: true): ${user} is root on this node"
fi
log "docker group ready"
