#!/usr/bin/env bash
# Step ssh_keys: one SSH key pair per cluster user, kept in /fsx/.mlcluster/ssh/<user> and
# installed into the user's ~/.ssh (with the public key authorized), so users can ssh between
# nodes. The first node generates the pair; the others install the same one.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

KEY_STORE="$FSX/.mlcluster/ssh"

# shared_key USER OWNER : generate the pair into a staging folder and publish it with one rename.
shared_key() {
  local user=$1 owner=$2 staging
  if [[ -s $KEY_STORE/$user/id_ed25519 && -s $KEY_STORE/$user/id_ed25519.pub ]]; then
    return 0
  fi
  mkdir -p "$KEY_STORE"
  chmod 711 "$FSX/.mlcluster" "$KEY_STORE"
  staging=$(mktemp -d "$KEY_STORE/.$user.XXXXXX")
  ssh-keygen -q -t ed25519 -N "" -C "$user@mlcluster" -f "$staging/id_ed25519"
  chmod 700 "$staging"
  chown -R "$owner" "$staging"
  if mv -T "$staging" "$KEY_STORE/$user" 2>/dev/null; then
    log "$user: generated a key pair"
  else
    rm -rf "$staging"
  fi
}

install_key() {
  local user=$1 owner=$2 ssh_dir="$MLC_ROOT$USER_HOME/.ssh" public
  if [[ ! -d $ssh_dir ]]; then
    mkdir -p "$ssh_dir"
    chmod 700 "$ssh_dir"
    chown "$owner" "$ssh_dir"
  fi
  install_file "$ssh_dir/id_ed25519" 600 "$owner" <"$KEY_STORE/$user/id_ed25519"
  install_file "$ssh_dir/id_ed25519.pub" 644 "$owner" <"$KEY_STORE/$user/id_ed25519.pub"
  public=$(<"$KEY_STORE/$user/id_ed25519.pub")
  if ! grep -qsxF -- "$public" "$ssh_dir/authorized_keys"; then
    install_file "$ssh_dir/authorized_keys" 600 "$owner" < <(
      if [[ -f $ssh_dir/authorized_keys ]]; then
        cat "$ssh_dir/authorized_keys"
      fi
      printf '%s\n' "$public"
    )
  fi
}

main() {
  local user owner
  for user in $(cluster_users); do
    user_info "$user"
    owner="$USER_UID:$USER_GID"
    shared_key "$user" "$owner"
    install_key "$user" "$owner"
  done
}

main "$@"
