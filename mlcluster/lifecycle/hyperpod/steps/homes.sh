#!/usr/bin/env bash
# Step homes: every cluster user (ubuntu and the shared users) gets a home at $MLC_HOME_ROOT/<user>,
# the same on every node: OpenZFS (when the environment declares it) or /fsx/home, else local /home.
#
# The home root is a root-owned 0755 folder, so no user can pre-create or link another user's home
# there. A home is made with a plain mkdir and handed to its user; an existing one that is a link
# or not owned by its user is moved aside with a log line and made again. The user's files are
# copied in *as the user* (from the local home, else /etc/skel).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

# populate USER FROM TO : as USER, copy the files of FROM (a local home or /etc/skel) into TO.
populate() {
  # shellcheck disable=SC2016  # runs in the user's shell
  as_user "$1" bash -c 'cp -R --preserve=timestamps -- "$1/." "$2/"' _ "$2" "$3" ||
    warn "$1: could not copy all of $2 into $3"
}

main() {
  local user home target source
  ensure_root_dir "$MLC_ROOT$MLC_HOME_ROOT" 755
  for user in $(cluster_users); do
    home=$(getent passwd "$user" | cut -d: -f6)
    target="$MLC_HOME_ROOT/$user"
    ensure_user_dir "$user" "$MLC_ROOT$target" 750
    if [[ $DIR_CREATED == true ]]; then
      source="$MLC_ROOT/etc/skel"
      if [[ $home != "$target" && -d $MLC_ROOT$home && ! -L $MLC_ROOT$home ]]; then
        source="$MLC_ROOT$home"
      fi
      populate "$user" "$source" "$MLC_ROOT$target"
      log "$user: created $target from ${source#"$MLC_ROOT"}"
    fi
    if [[ $home != "$target" ]]; then
      usermod --home "$target" "$user"
      log "$user: home set to $target"
    fi
  done
}

main "$@"
