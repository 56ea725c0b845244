#!/usr/bin/env bash
# Step ssh_keys: SSH between the nodes for every cluster user, the same on every node.
#
# - One ed25519 key pair per user in the key store /fsx/.mlcluster/ssh/<user>: root-owned, 0700,
#   so no user can plant or read an entry. The first node generates a pair; the others reuse it.
# - The pair goes into the user's ~/.ssh and its public key into authorized_keys, written *as the
#   user* (a link planted in ~/.ssh reaches only what the user could reach anyway).
# - One host key pair for the whole cluster, kept in the store and installed as every node's
#   ed25519 host key, and a system-wide known_hosts entry for the cluster's addresses and names,
#   so `ssh <node>` asks no questions and works on nodes that join later.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

STORE_TOP="$FSX/.mlcluster"
KEY_STORE="$STORE_TOP/ssh"
HOST_KEY=/etc/ssh/ssh_host_ed25519_key

# store_pair NAME COMMENT : the key store entry NAME holds a pair (generated once, published with
# one rename so another node never sees half a pair).
store_pair() {
  local entry="$KEY_STORE/$1" staging
  ensure_root_dir "$entry" 700
  if [[ -s $entry/id_ed25519 && -s $entry/id_ed25519.pub ]]; then
    return 0
  fi
  staging=$(mktemp -d "$KEY_STORE/.staging.XXXXXX")
  ssh-keygen -q -t ed25519 -N "" -C "$2" -f "$staging/id_ed25519"
  mv -f "$staging/id_ed25519" "$staging/id_ed25519.pub" "$entry/"
  rmdir "$staging"
  log "$1: generated a key pair in the key store"
}

# user_ssh_dir USER HOME : as USER, make ~/.ssh a real 0700 folder (a link or file there is moved aside).
user_ssh_dir() {
  # shellcheck disable=SC2016  # runs in the user's shell
  as_user "$1" bash -c '
    set -eu
    dir=$1/.ssh
    if [[ -L $dir || (-e $dir && ! -d $dir) ]]; then
      aside="$dir.mlcluster-moved-aside.$(date +%s)"
      mv --no-target-directory "$dir" "$aside"
      echo "WARNING: $dir was a link or a file; moved it aside to $aside" >&2
    fi
    mkdir -p -m 700 "$dir"
    chmod 700 "$dir"' _ "$2"
}

# authorize USER HOME PUBLIC_KEY : as USER, add the key to authorized_keys once (a link there is
# replaced by a real file, never written through).
authorize() {
  # shellcheck disable=SC2016  # runs in the user's shell
  as_user "$1" bash -c '
    set -eu
    file=$1/.ssh/authorized_keys key=$2
    if [[ -f $file && ! -L $file ]] && grep -qxF -- "$key" "$file"; then
      exit 0
    fi
    tmp=$(mktemp "$1/.ssh/.mlcluster.XXXXXX")
    if [[ -f $file && ! -L $file ]]; then
      cat -- "$file" >"$tmp"
    elif [[ -L $file ]]; then
      echo "WARNING: $file was a link; replaced it with a file" >&2
    fi
    printf "%s\n" "$key" >>"$tmp"
    chmod 600 "$tmp"
    mv -f --no-target-directory "$tmp" "$file"
    echo "authorized the cluster key in $file" >&2' _ "$2" "$3"
}

install_user_key() {
  local user=$1 home
  home=$(getent passwd "$user" | cut -d: -f6)
  [[ -d $MLC_ROOT$home && ! -L $MLC_ROOT$home ]] || die "$user's home $home is missing; run the homes step first"
  store_pair "$user" "$user@mlcluster"
  user_ssh_dir "$user" "$MLC_ROOT$home"
  user_install "$user" "$MLC_ROOT$home/.ssh/id_ed25519" 600 <"$KEY_STORE/$user/id_ed25519"
  user_install "$user" "$MLC_ROOT$home/.ssh/id_ed25519.pub" 644 <"$KEY_STORE/$user/id_ed25519.pub"
  authorize "$user" "$MLC_ROOT$home" "$(<"$KEY_STORE/$user/id_ed25519.pub")"
}

# The cluster's addresses and host names as known_hosts patterns: the node's /16 and its ip-a-b-* names.
host_patterns() {
  local a b _rest
  IFS=. read -r a b _rest <<<"$MLC_ADDRESS"
  printf 'ip-%s-%s-*,%s.%s.*' "$a" "$b" "$a" "$b"
}

install_host_key() {
  local changed=false
  store_pair .host "mlcluster-host"
  install_file "$MLC_ROOT$HOST_KEY" 600 <"$KEY_STORE/.host/id_ed25519"
  [[ $FILE_CHANGED == false ]] || changed=true
  install_file "$MLC_ROOT$HOST_KEY.pub" 644 <"$KEY_STORE/.host/id_ed25519.pub"
  [[ $FILE_CHANGED == false ]] || changed=true
  install_file "$MLC_ROOT/etc/ssh/ssh_known_hosts" 644 <<<"$(host_patterns) $(cut -d' ' -f1,2 "$KEY_STORE/.host/id_ed25519.pub")"
  if [[ $changed == true ]] && systemctl is-active --quiet ssh; then
    systemctl restart ssh
  fi
}

main() {
  local user
  ensure_root_dir "$STORE_TOP" 755
  ensure_root_dir "$KEY_STORE" 700
  install_host_key
  for user in $(cluster_users); do
    install_user_key "$user"
  done
}

main "$@"
