#!/usr/bin/env bash
# Step home_on_fsx: give the ubuntu user and the shared users their home at /fsx/<user>, so
# every node sees the same home. /fsx is writable here (mount_fsx waited for it). The first node
# copies the local home there; the others only point the user at it. The local copy stays.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

# create_shared_home USER TARGET : copy the local home (or /etc/skel) to TARGET in one rename,
# so a node that looks at the same moment sees either no home or a complete one.
create_shared_home() {
  local user=$1 target=$2 staging
  staging=$(mktemp -d "$FSX/.mlcluster-home-$user.XXXXXX")
  if [[ -d $MLC_ROOT$USER_HOME ]]; then
    cp -a "$MLC_ROOT$USER_HOME/." "$staging/"
  else
    cp -a "$MLC_ROOT/etc/skel/." "$staging/"
  fi
  chmod 750 "$staging"
  chown -R "$USER_UID:$USER_GID" "$staging"
  if mv -T "$staging" "$MLC_ROOT$target" 2>/dev/null; then
    log "created $target from $USER_HOME"
  else
    rm -rf "$staging"
    log "another node created $target first"
  fi
}

main() {
  local user target
  for user in $(cluster_users); do
    target="$FSX_MOUNT/$user"
    user_info "$user"
    if [[ $USER_HOME == "$target" ]]; then
      log "$user: home is $target"
      continue
    fi
    if [[ ! -d $MLC_ROOT$target ]]; then
      create_shared_home "$user" "$target"
    fi
    usermod --home "$target" "$user"
    log "$user: home set to $target"
  done
}

main "$@"
