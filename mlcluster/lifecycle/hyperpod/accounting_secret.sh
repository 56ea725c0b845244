#!/usr/bin/env bash
# mlcluster-accounting-secret: keep slurmdbd.conf's StorageUser and StoragePass equal to the remote
# accounting database's Secrets Manager secret, which rotation changes (every 30 days for the managed
# database). Installed on the controller as /usr/local/sbin/mlcluster-accounting-secret by the
# accounting step (remote and managed accounting only); runs as root.
#
#   mlcluster-accounting-secret refresh   read the secret; rewrite slurmdbd.conf when it differs
#   mlcluster-accounting-secret watch     refresh, and restart slurmdbd when the file changed
#
# refresh is slurmdbd's ExecStartPre (a drop-in): every start of slurmdbd, a reboot's included, logs in
# with the secret's current password. If the secret cannot be read then (Secrets Manager unreachable,
# access denied), slurmdbd starts with the password the file has, with a warning, as long as the file
# has one: a start must not depend on a service the old password may not need. watch runs from the
# mlcluster-accounting-secret timer (every 5 minutes): a rotation
# sets the new password in the database and then in the secret, so within one interval slurmdbd is
# restarted with it. slurmctld queues accounting records while slurmdbd is down or cannot log in
# (slurm.conf(5): MaxDBDMsgs) and sends them once it is back, so the window loses no records. A failed
# watch exits 1 and shows in `systemctl status mlcluster-accounting-secret` and the journal.
#
# The file is written through a temporary file in its folder and a rename (root-owned, mode 600,
# owner slurm as the accounting step made it); a secret whose values slurmdbd.conf cannot hold (a
# newline, '#', a space) is refused and the file left as it is. A slurmdbd.conf that is a link or not a
# regular file, or a folder that is a link, not root's, or writable by group or others, is refused too. The password reaches no log, no command
# line and no file but slurmdbd.conf. Exit codes: 0 done, 1 failed, 2 bad usage.
set -euo pipefail

MLC_LIFECYCLE_DIR=${MLC_LIFECYCLE_DIR:-/opt/mlcluster/lifecycle}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$MLC_LIFECYCLE_DIR/lib.sh"
MLC_STEP=mlcluster-accounting-secret
umask 077

SLURMDBD_CONF="$SLURM_ETC/slurmdbd.conf"

usage() {
  printf 'usage: mlcluster-accounting-secret refresh|watch\n' >&2
  exit 2
}

# read_secret : print the secret's JSON (AWSCURRENT) with the node's role; fails after a few attempts.
read_secret() {
  retry 3 "read the accounting secret $MLC_ACCOUNTING_SECRET_ARN" aws secretsmanager get-secret-value \
    --region "$MLC_ACCOUNTING_SECRET_REGION" --secret-id "$MLC_ACCOUNTING_SECRET_ARN" \
    --cli-connect-timeout 10 --cli-read-timeout 20 --query SecretString --output text
}

# has_password : slurmdbd.conf exists and names a StoragePass (a start can go on without the secret).
has_password() {
  [[ -f $SLURMDBD_CONF ]] && grep -qE '^StoragePass=.+' "$SLURMDBD_CONF"
}

# conf_is_safe : slurmdbd.conf is a regular file, not a link, in a real folder of root's that group
# and others cannot write, below parents (/opt/slurm, /opt) only root can change. Root reads the file whole and renames its copy over it: a link (or a folder
# someone else can change) would make root copy another file's contents, or write where they point.
# The folder is /opt/slurm/etc, made by HyperPod's image with an owner and mode published nowhere (AWS's
# base lifecycle scripts, aws-samples/awsome-distributed-training 5.sagemaker-hyperpod/LifecycleScripts/
# base-config, never create, chown or chmod it); the accounting step makes it root's and takes away group
# and other write before it installs this tool (conf_folder_root_only), so a real controller passes here.
conf_is_safe() {
  local dir parent uid mode
  dir=$(dirname -- "$SLURMDBD_CONF")
  parent=$(unsafe_parent "$SLURM_ETC_REAL")
  if [[ -n $parent ]]; then
    log "$parent is not a real folder of root's that only root can change (whoever can rename entries there could swap $dir for a link); refusing to touch $SLURMDBD_CONF"
    return 1
  fi
  if [[ ! -d $dir || -L $dir ]]; then
    log "$dir is not a folder (or is a link); refusing to touch $SLURMDBD_CONF"
    return 1
  fi
  read -r uid mode <<<"$(owner_mode "$dir")"
  if [[ $uid != 0 ]] || ((8#$mode & 8#022)); then
    log "$dir is owned by uid $uid with mode $mode (root's, not writable by group or others, expected); refusing to touch $SLURMDBD_CONF"
    return 1
  fi
  if [[ -L $SLURMDBD_CONF ]]; then
    log "$SLURMDBD_CONF is a symbolic link; refusing to follow it (the accounting step writes a plain file)"
    return 1
  fi
  if [[ ! -f $SLURMDBD_CONF ]]; then
    log "$SLURMDBD_CONF is missing or not a regular file; run the accounting step first (sudo bash /opt/mlcluster/lifecycle/on_create.sh accounting)"
    return 1
  fi
}

# refresh : rewrite slurmdbd.conf from the secret when it differs; sets FILE_CHANGED. Returns 1 when
# the secret cannot be read or holds values slurmdbd.conf cannot take (the file is then unchanged).
refresh() {
  local secret out owner
  FILE_CHANGED=false
  secret=$(read_secret) || return 1
  # Root's scratch folder (/var/lib/mlcluster/tmp): only root can write /var/lib/mlcluster, and a link or a
  # folder of another owner found there is moved aside before the password is written into it.
  ensure_root_dir "$TMP_DIR" 700
  out=$(mktemp "$TMP_DIR/slurmdbd.conf.XXXXXX")
  if ! plan slurmdbd-credentials --conf "$SLURMDBD_CONF" <<<"$secret" >"$out"; then
    rm -f "$out"
    log "the accounting secret was not applied; $SLURMDBD_CONF is unchanged"
    return 1
  fi
  owner=$(stat -c %u:%g "$SLURMDBD_CONF")
  install_file "$SLURMDBD_CONF" 600 "$owner" <"$out"
  rm -f "$out"
  if [[ $FILE_CHANGED == true ]]; then
    log "slurmdbd.conf now holds the accounting secret's current credentials"
  fi
}

main() {
  (($# == 1)) && [[ $1 == refresh || $1 == watch ]] || usage
  load_node_env
  [[ ${MLC_ACCOUNTING_MODE:-} == remote && -n ${MLC_ACCOUNTING_SECRET_ARN:-} ]] ||
    die "accounting mode is '${MLC_ACCOUNTING_MODE:-}' in node.env; the secret is only read for mode remote"
  # Both verbs, a start's refresh too: slurmdbd must not start from a file someone else could swap.
  conf_is_safe || die "slurmdbd.conf was not read or written"
  case $1 in
    refresh)
      if ! refresh; then
        has_password || die "slurmdbd.conf has no password and the accounting secret could not be applied"
        warn "slurmdbd starts with the password slurmdbd.conf already has"
      fi
      ;;
    watch)
      refresh || die "the accounting secret could not be applied; slurmdbd keeps running as it is"
      if [[ $FILE_CHANGED == true ]] && systemctl is-active --quiet slurmdbd; then
        log "restarting slurmdbd with the rotated credentials"
        retry 3 "restart slurmdbd" systemctl restart slurmdbd
      fi
      ;;
  esac
}

main "$@"
