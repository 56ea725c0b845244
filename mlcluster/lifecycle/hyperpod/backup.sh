#!/usr/bin/env bash
# mlcluster-backup: save or restore the Slurm controller's state (slurmctld's StateSaveLocation and,
# with local accounting, the slurm_acct_db database) to or from S3, before and after patching.
# Installed on every node as /usr/local/sbin/mlcluster-backup; it runs on the controller only.
#
#   mlcluster-backup backup  s3://BUCKET/PREFIX
#   mlcluster-backup restore s3://BUCKET/PREFIX
#
# backup stops slurmctld for the copy (running jobs go on; slurmd keeps them) and starts it again,
# dumps the database, and uploads slurmctld-state.tar.gz, accounting.sql.gz (local accounting only)
# and, last, SHA256SUMS. restore downloads them, checks every file against SHA256SUMS, stops
# slurmctld, puts the state and the database back, and starts slurmdbd and slurmctld. Both can run
# again: a second backup replaces the objects, a second restore gives the same state.
# Exit codes: 0 done, 1 failed (the message says where), 2 bad usage.
set -euo pipefail

MLC_LIFECYCLE_DIR=${MLC_LIFECYCLE_DIR:-/opt/mlcluster/lifecycle}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$MLC_LIFECYCLE_DIR/lib.sh"
MLC_STEP=mlcluster-backup

STATE_ARCHIVE=slurmctld-state.tar.gz
DATABASE_DUMP=accounting.sql.gz
SUMS=SHA256SUMS
DATABASE=slurm_acct_db

usage() {
  printf 'usage: mlcluster-backup backup|restore s3://BUCKET/PREFIX\n' >&2
  exit 2
}

# state_location : slurmctld's StateSaveLocation from slurm.conf.
state_location() {
  local location
  location=$(sed -n 's/^[[:space:]]*StateSaveLocation[[:space:]]*=[[:space:]]*//Ip' "$SLURM_ETC/slurm.conf" | tail -1)
  [[ -n $location ]] || die "slurm.conf has no StateSaveLocation; run the start_slurm step first"
  printf '%s\n' "$location"
}

local_accounting() {
  [[ ${MLC_ACCOUNTING_MODE:-none} == local ]]
}

s3_put() {
  retry 5 "upload $1 to $2" aws s3 cp --only-show-errors "$1" "$2"
}

s3_get() {
  retry 5 "download $1" aws s3 cp --only-show-errors "$1" "$2"
}

restart_slurmctld() {
  retry 3 "start slurmctld" systemctl start slurmctld
}

# WORK is a root-only folder for the files in transit; slurmctld is started again on any exit
# while RESTART_ON_EXIT is true (a failed copy never leaves it stopped).
WORK=""
RESTART_ON_EXIT=false
cleanup() {
  if [[ -n $WORK ]]; then
    rm -rf "$WORK"
  fi
  if [[ $RESTART_ON_EXIT == true ]]; then
    restart_slurmctld
  fi
}

backup() {
  local uri=$1 work=$WORK location
  location=$(state_location)
  log "stopping slurmctld to copy its state from $location (running jobs continue)"
  RESTART_ON_EXIT=true
  systemctl stop slurmctld
  tar --create --gzip --file "$work/$STATE_ARCHIVE" --directory "$MLC_ROOT$location" .
  RESTART_ON_EXIT=false
  restart_slurmctld
  if local_accounting; then
    mysqldump --single-transaction --databases "$DATABASE" | gzip >"$work/$DATABASE_DUMP"
  fi
  (cd "$work" && sha256sum -- *.gz >"$SUMS")
  local file
  for file in "$work"/*.gz "$work/$SUMS"; do
    s3_put "$file" "$uri/${file##*/}"
  done
  log "backup complete: $uri ($(wc -l <"$work/$SUMS") files)"
}

restore() {
  local uri=$1 work=$WORK location name staging
  location=$(state_location)
  s3_get "$uri/$SUMS" "$work/$SUMS"
  while read -r _ name; do
    [[ $name == "$STATE_ARCHIVE" || $name == "$DATABASE_DUMP" ]] || die "$uri/$SUMS lists '$name', which is not a backup file"
    s3_get "$uri/$name" "$work/$name"
  done <"$work/$SUMS"
  (cd "$work" && sha256sum --check --strict --quiet "$SUMS") ||
    die "the backup in $uri does not match its $SUMS; nothing was restored"
  [[ -f $work/$STATE_ARCHIVE ]] || die "$uri has no $STATE_ARCHIVE"
  log "stopping slurmctld to restore its state into $location"
  RESTART_ON_EXIT=true
  systemctl stop slurmctld
  staging=$(mktemp -d "$MLC_ROOT${location%/*}/.restore.XXXXXX")
  tar --extract --gzip --file "$work/$STATE_ARCHIVE" --directory "$staging"
  chown --reference="$MLC_ROOT$location" "$staging"
  chmod --reference="$MLC_ROOT$location" "$staging"
  mv --no-target-directory "$MLC_ROOT$location" "$staging.old"
  mv --no-target-directory "$staging" "$MLC_ROOT$location"
  rm -rf "$staging.old"
  if [[ -f $work/$DATABASE_DUMP ]]; then
    local_accounting || die "$uri holds an accounting database, but this controller has no local accounting"
    gunzip --stdout "$work/$DATABASE_DUMP" | mysql --protocol=socket --user=root
    systemctl restart slurmdbd
  fi
  RESTART_ON_EXIT=false
  restart_slurmctld
  log "restore complete from $uri"
}

main() {
  (($# == 2)) || usage
  local command=$1 uri=${2%/}
  [[ $uri =~ ^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^[:space:]]*)?$ ]] || {
    printf 'mlcluster-backup: %s is not an S3 location; allowed: s3://BUCKET/PREFIX\n' "$2" >&2
    usage
  }
  [[ -n $MLC_ROOT || $EUID -eq 0 ]] || die "run mlcluster-backup as root"
  load_node_env
  # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
  [[ $MLC_ROLE == controller ]] || die "this is a $MLC_ROLE node; run mlcluster-backup on the controller"
  mkdir -p "$TMP_DIR"
  chmod 700 "$TMP_DIR"
  WORK=$(mktemp -d "$TMP_DIR/$command.XXXXXX")
  trap cleanup EXIT
  case $command in
    backup) backup "$uri" ;;
    restore) restore "$uri" ;;
    *) usage ;;
  esac
}

main "$@"
