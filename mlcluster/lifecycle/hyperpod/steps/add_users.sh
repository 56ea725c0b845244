#!/usr/bin/env bash
# Step add_users: create the shared POSIX users of mlcluster_features.json with the same UID
# (and a group with GID = UID) on every node, so files on /fsx have one owner cluster-wide.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

ensure_group() {
  local name=$1 gid=$2 existing
  if existing=$(getent group "$name"); then
    [[ $(cut -d: -f3 <<<"$existing") == "$gid" ]] ||
      die "group $name exists with GID $(cut -d: -f3 <<<"$existing"), expected $gid (the user's UID)"
    return 0
  fi
  if existing=$(getent group "$gid"); then
    die "GID $gid belongs to group ${existing%%:*}; give user $name another uid in mlcluster_features.json"
  fi
  groupadd --gid "$gid" "$name"
}

ensure_user() {
  local name=$1 uid=$2 existing
  ensure_group "$name" "$uid"
  if existing=$(getent passwd "$name"); then
    [[ $(cut -d: -f3 <<<"$existing") == "$uid" ]] ||
      die "user $name exists with UID $(cut -d: -f3 <<<"$existing"), but mlcluster_features.json says $uid"
    log "user $name ($uid) exists"
    return 0
  fi
  if existing=$(getent passwd "$uid"); then
    die "UID $uid belongs to user ${existing%%:*}; give user $name another uid in mlcluster_features.json"
  fi
  useradd --uid "$uid" --gid "$uid" --no-create-home --home-dir "$MLC_HOME_ROOT/$name" --shell /bin/bash "$name"
  log "created user $name ($uid)"
}

main() {
  local entry
  for entry in $MLC_USERS; do
    ensure_user "${entry%%:*}" "${entry##*:}"
  done
}

main "$@"
