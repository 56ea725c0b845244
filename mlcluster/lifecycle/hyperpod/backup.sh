#!/usr/bin/env bash
# mlcluster-backup: save or restore the Slurm controller's state (slurmctld's StateSaveLocation and,
# with local accounting, the slurm_acct_db database) to or from S3, before and after patching.
# Installed on every node as /usr/local/sbin/mlcluster-backup; it runs on the controller only.
#
#   mlcluster-backup backup  s3://BUCKET/PREFIX KMS_KEY_ARN
#   mlcluster-backup restore s3://BUCKET/PREFIX FILE=SHA256 [FILE=SHA256]
#     (the digests from the journal or from mlcluster's state or output; the bucket's SHA256SUMS only when
#     neither exists, after a controller replacement, and then trusting whoever can write the prefix)
#   mlcluster-backup scheduled s3://BUCKET/PREFIX KMS_KEY_ARN
#
# scheduled is the daily copy (the scheduled_backup step's timer runs it): it does NOT stop slurmctld, so
# submissions are never refused. It copies StateSaveLocation as it is: slurmctld writes each state file
# as FILE.new, then unlink(FILE), link(FILE.old), unlink(FILE), link(FILE.new, FILE) - not one rename
# (SchedMD's state_save.c / job_mgr.c) - so a tar in that window can find no FILE at all. Every
# '*_state' file present before the tar must be in the archive; one missing is an archive made in that
# window, and it is made again (the retry loop), never uploaded. Each file archived is one whole save,
# but two files may come from saves a few seconds apart (a job started between them may be in one and
# not the other); slurmctld reconciles that against the nodes when it starts from it. A state folder
# with no job_state at all (a new controller before its restore ran) is not copied: an empty state
# never overwrites a weekday's copy. The database is
# dumped with mysqldump --single-transaction (one consistent InnoDB snapshot, no lock). The files go to
# PREFIX/<weekday>/ (Mon..Sun, UTC): seven copies rotate by overwriting, so nothing needs a lifecycle
# rule to delete old ones (the bucket is versioned; overwritten copies stay as noncurrent versions).
# A SHA256SUMS file is uploaded last beside them, and the digests are logged to the journal too (the
# journal is lost with the controller: a restore from a daily copy rests on SHA256SUMS, which whoever can
# write the prefix can rewrite; see docs/reference/security.md). A run that died half-way leaves a
# weekday whose files disagree with its SHA256SUMS; the bucket's noncurrent versions recover it.
#
# All three verbs take one lock (/run/mlcluster-backup.lock, flock): a daily copy that finds backup or
# restore running skips (exit 0, logged) rather than dump a database in the middle of restore's RENAME
# TABLE; backup and restore wait for it up to MLC_BACKUP_LOCK_WAIT_SECONDS (default 1800) and then fail.
#
# backup stops slurmctld for the copy (running jobs go on; slurmd keeps them) and starts it again,
# dumps the database, uploads slurmctld-state.tar.gz and accounting.sql.gz (local accounting only)
# with SSE-KMS under KMS_KEY_ARN (the bucket policy refuses any other upload), and prints one line per file, "MLCLUSTER_SHA256 <sha256> <file>". The digests are not stored next
# to the files: `mlcluster patch` keeps them in its own state and hands them back to restore, so a
# file changed in the bucket is refused. restore downloads the files named, checks each against its
# digest, refuses an archive with anything but plain files and folders (absolute or '..' paths,
# links, devices, setuid/setgid bits), all before it changes anything; then it stops slurmctld,
# extracts the state into a staging folder without the archive's owners and modes, loads the dump
# into a scratch database (slurm_acct_db_mlcrestore) as a MariaDB account made for the load with
# privileges on that scratch database alone (no FILE: no INTO OUTFILE or LOAD_FILE; no CREATE USER,
# GRANT or other databases; dropped afterwards) and with the client's --sandbox (no `\!` shell
# escapes). Only once the whole dump loaded does one RENAME TABLE statement (atomic in MariaDB) swap
# every table of the scratch database into slurm_acct_db, and then the staged state in; a failed
# load drops the scratch database and leaves slurm_acct_db and the state as they were. The dump is
# made without --databases, so it names no database (no CREATE DATABASE or USE) and loads wherever
# it is pointed. It starts slurmdbd and slurmctld again.
# Both can run again: a second backup replaces the objects, a second restore gives the same state.
# Exit codes: 0 done, 1 failed (the message says where), 2 bad usage.
set -euo pipefail

MLC_LIFECYCLE_DIR=${MLC_LIFECYCLE_DIR:-/opt/mlcluster/lifecycle}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$MLC_LIFECYCLE_DIR/lib.sh"
MLC_STEP=mlcluster-backup

STATE_ARCHIVE=slurmctld-state.tar.gz
DATABASE_DUMP=accounting.sql.gz
DATABASE=slurm_acct_db
# The dump is loaded into SCRATCH_DATABASE; the tables it replaces wait in OLD_DATABASE for the one
# statement of the swap. Both are dropped afterwards (and before: a run that died leaves none behind).
SCRATCH_DATABASE=${DATABASE}_mlcrestore
OLD_DATABASE=${DATABASE}_mlcold
# The account the dump is loaded as (created for the load, dropped after it).
RESTORE_ACCOUNT=mlcluster_restore
# Files restore writes are root's alone until they are handed to slurmctld's owner.
umask 077

usage() {
  cat >&2 <<'EOF_USAGE'
usage: mlcluster-backup backup|scheduled s3://BUCKET/PREFIX KMS_KEY_ARN | restore s3://BUCKET/PREFIX FILE=SHA256...
restore's FILE=SHA256 digests should come from the journal (the daily copy's "restore with:" line in
journalctl -u mlcluster-backup-scheduled) or from mlcluster (patch state or its output). The bucket's
SHA256SUMS is a last resort, after a controller replacement took the journal: whoever can write the prefix
can rewrite that file together with the copy it vouches for (docs/reference/security.md, daily copies).
EOF_USAGE
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

# The largest object one PutObject takes: 5 GiB (Amazon S3 User Guide, "Uploading objects"). A multipart
# upload is no way around it here: the bucket policy denies every s3:PutObject request without the SSE-KMS
# header, and UploadPart requests (s3:PutObject) carry none. MLC_S3_PUT_MAX_BYTES only lowers it.
S3_PUT_LIMIT=5368709120
S3_PUT_MAX_BYTES=${MLC_S3_PUT_MAX_BYTES:-$S3_PUT_LIMIT}
if ! [[ $S3_PUT_MAX_BYTES =~ ^[0-9]+$ ]] || ((S3_PUT_MAX_BYTES > S3_PUT_LIMIT)); then
  S3_PUT_MAX_BYTES=$S3_PUT_LIMIT
fi

# check_sizes FILE... : every file fits one PutObject; else stop before anything is uploaded, naming the
# file, its size and the limit (the weekday's or the patch's earlier copy stays as it was).
check_sizes() {
  local file size
  for file in "$@"; do
    size=$(stat -c %s -- "$file")
    if ((size > S3_PUT_MAX_BYTES)); then
      die "${file##*/} is $size bytes; one upload to the backup bucket takes at most $S3_PUT_MAX_BYTES bytes" \
        "(S3's single-PUT limit, 5 GiB; the bucket takes no multipart uploads). Nothing was uploaded." \
        "Make it smaller: purge old accounting records (slurmdbd.conf PurgeJobAfter, PurgeStepAfter) or" \
        "move accounting to a managed database (storage.accounting, accounting.mode managed)"
    fi
  done
}

# s3_put FILE s3://BUCKET/KEY KMS_KEY_ARN : one PutObject (no multipart upload) naming SSE-KMS and the key,
# as the bucket policy requires.
s3_put() {
  local path=${2#s3://}
  retry 5 "upload $1 to $2" aws s3api put-object --bucket "${path%%/*}" --key "${path#*/}" --body "$1" \
    --server-side-encryption aws:kms --ssekms-key-id "$3" --output text --query ETag >/dev/null
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
STAGING=""
DROP_ACCOUNT=false
DROP_SCRATCH=false
cleanup() {
  if [[ $DROP_ACCOUNT == true ]]; then
    root_sql "DROP USER IF EXISTS '$RESTORE_ACCOUNT'@'localhost';" || log "could not drop the MariaDB account $RESTORE_ACCOUNT"
  fi
  if [[ $DROP_SCRATCH == true ]]; then
    root_sql "DROP DATABASE IF EXISTS \`$SCRATCH_DATABASE\`;" || log "could not drop the scratch database $SCRATCH_DATABASE"
  fi
  if [[ -n $STAGING ]]; then
    rm -rf "$STAGING"
  fi
  if [[ -n $WORK ]]; then
    rm -rf "$WORK"
  fi
  if [[ $RESTART_ON_EXIT == true ]]; then
    restart_slurmctld
  fi
}

backup() {
  local uri=$1 key_arn=$2 work=$WORK location
  location=$(state_location)
  log "stopping slurmctld to copy its state from $location (running jobs continue)"
  RESTART_ON_EXIT=true
  systemctl stop slurmctld
  tar --create --gzip --file "$work/$STATE_ARCHIVE" --directory "$MLC_ROOT$location" .
  RESTART_ON_EXIT=false
  restart_slurmctld
  if local_accounting; then
    mysqldump --single-transaction "$DATABASE" | gzip >"$work/$DATABASE_DUMP"
  fi
  local file sums=()
  check_sizes "$work"/*.gz
  for file in "$work"/*.gz; do
    s3_put "$file" "$uri/${file##*/}" "$key_arn"
    sums+=("MLCLUSTER_SHA256 $(sha256sum <"$file" | cut -d' ' -f1) ${file##*/}")
  done
  log "backup complete: $uri (${#sums[@]} files)"
  # Last, on stdout: the operator's command keeps these and hands them back to restore.
  printf '%s\n' "${sums[@]}"
}

# archive_live FOLDER ARCHIVE : tar FOLDER (slurmctld running) into ARCHIVE; fail when the tar failed or
# when a '*_state' file present before it is not in the archive (made while slurmctld had unlinked it).
archive_live() {
  local folder=$1 archive=$2 file listing
  # job_state always (scheduled checked the folder is not a fresh one: only FILE.old there is the window).
  local -a before=(job_state)
  for file in "$folder"/*_state; do
    [[ -f $file && ${file##*/} != job_state ]] && before+=("${file##*/}")
  done
  # GNU tar exits 1 when a file changed while it was read (slurmctld saved meanwhile): try again.
  tar --create --gzip --warning=no-file-changed --file "$archive" --directory "$folder" . || return 1
  listing=$(tar --list --gzip --file "$archive") || return 1
  for file in "${before[@]}"; do
    if ! grep -qxF -- "./$file" <<<"$listing"; then
      log "the archive lacks $file (slurmctld was replacing it); archiving again"
      return 1
    fi
  done
}

# scheduled s3://BUCKET/PREFIX KMS_KEY_ARN : the daily copy, slurmctld left running (see the header).
scheduled() {
  local uri key_arn=$2 work=$WORK location
  uri=$1/$(date -u +%a)
  location=$(state_location)
  if [[ ! -e $MLC_ROOT$location/job_state && ! -e $MLC_ROOT$location/job_state.old ]]; then
    log "$location has no job_state (freshly initialised?); this daily copy is skipped so it cannot overwrite $uri"
    return 0
  fi
  log "copying slurmctld's state from $location without stopping it"
  retry 5 "archive $location" archive_live "$MLC_ROOT$location" "$work/$STATE_ARCHIVE" || die "could not archive $location"
  if local_accounting; then
    mysqldump --single-transaction "$DATABASE" | gzip >"$work/$DATABASE_DUMP"
  fi
  local file
  check_sizes "$work"/*.gz
  (cd "$work" && sha256sum -- *.gz >SHA256SUMS)
  for file in "$work"/*.gz "$work/SHA256SUMS"; do
    s3_put "$file" "$uri/${file##*/}" "$key_arn"
  done
  log "scheduled copy complete: $uri; restore with: mlcluster-backup restore $uri $(awk '{printf "%s%s=%s", sep, $2, $1; sep=" "}' "$work/SHA256SUMS")"
  publish_copy_metric
}

# publish_copy_metric : one data point (1) of the metric the Observability stack's alarm reads: a day without
# one (a failed run, a stopped timer, a lost controller) sets the alarm off. A metric that cannot be put fails
# the run (systemd tries again), so the copy is never reported only in the journal. Except AccessDenied: the
# grant is gone because lifecycle.scheduled_backup was turned off (and the alarm with it) while this timer still
# runs; the copy did reach S3, so the run succeeds with a warning instead of failing and retrying every day.
publish_copy_metric() {
  [[ -n ${MLC_SCHEDULED_BACKUP_CLUSTER:-} && -n ${MLC_SCHEDULED_BACKUP_NAMESPACE:-} && -n ${MLC_SCHEDULED_BACKUP_METRIC:-} && -n ${MLC_SCHEDULED_BACKUP_REGION:-} ]] ||
    die "node.env has no MLC_SCHEDULED_BACKUP_CLUSTER, _NAMESPACE, _METRIC or _REGION: the copy is in S3 but its metric was not published"
  retry 5 "publish $MLC_SCHEDULED_BACKUP_METRIC" put_copy_metric 1 ||
    die "the copy is in S3 but $MLC_SCHEDULED_BACKUP_METRIC was not published (the alarm will go off); this run fails so systemd tries again"
  if [[ $COPY_METRIC_DENIED == true ]]; then
    warn "the copy is in S3 but this node may no longer publish $MLC_SCHEDULED_BACKUP_METRIC (AccessDenied): if lifecycle.scheduled_backup was turned off, stop this timer: systemctl disable --now mlcluster-backup-scheduled.timer"
  fi
}

# check_archive FILE : refuse a state archive with anything restore would not have written: members
# that are not plain files or folders (links, devices, fifos), setuid/setgid bits, absolute paths or
# '..' components. GNU tar lists one member per line and escapes newlines in names.
check_archive() {
  local archive=$1 mode name
  while read -r mode _; do
    [[ $mode == [-d]* ]] || die "the state archive has a member of type '${mode:0:1}'; nothing was restored (only files and folders are)"
    [[ ${mode:3:1} != [sS] && ${mode:6:1} != [sS] ]] || die "the state archive has a setuid/setgid member ($mode); nothing was restored"
  done < <(tar --list --verbose --gzip --file "$archive")
  while IFS= read -r name; do
    [[ $name != /* ]] || die "the state archive has an absolute path '$name'; nothing was restored"
    [[ /$name/ != */../* ]] || die "the state archive has a '..' path '$name'; nothing was restored"
  done < <(tar --list --gzip --file "$archive")
}

# check_dump_client : the dump is loaded in the client's sandbox mode (no `\!`, no file access); refuse a client without it.
check_dump_client() {
  local help
  help=$(mysql --help 2>/dev/null) || true # not `| grep -q`: grep's early exit would fail the pipe (pipefail)
  [[ $help == *--sandbox* ]] ||
    die "this MariaDB client has no --sandbox (10.5.25, 10.6.18, 10.11.8 and later have it); nothing was restored"
}

# root_sql SQL : run SQL as MariaDB's root (unix socket).
root_sql() {
  mysql --protocol=socket --user=root --batch --execute "$1"
}

# load_dump FILE : load a gzipped dump into the scratch database as an account limited to it. The
# account's password is random and lives only in a root-only option file for this one load.
load_dump() {
  local dump=$1 password options=$WORK/restore.cnf
  password=$(head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1)
  DROP_ACCOUNT=true
  DROP_SCRATCH=true
  root_sql "DROP DATABASE IF EXISTS \`$SCRATCH_DATABASE\`;
DROP DATABASE IF EXISTS \`$OLD_DATABASE\`;
CREATE DATABASE \`$SCRATCH_DATABASE\`;
CREATE OR REPLACE USER '$RESTORE_ACCOUNT'@'localhost' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON \`${SCRATCH_DATABASE//_/\\_}\`.* TO '$RESTORE_ACCOUNT'@'localhost';"
  printf '[client]\npassword=%s\n' "$password" >"$options"
  # --sandbox: a `\!` (shell) or file line in the dump is an error, not a command run as root; the
  # account has no FILE, CREATE USER, GRANT or SUPER privilege and no other database (slurm_acct_db
  # included: a statement that names it is refused, not loaded into it). The grant escapes `_`, which
  # a database-level grant reads as a wildcard. Dumps of the earlier backup.sh were made with
  # --databases: the two whole lines mysqldump writes for that (CREATE DATABASE, USE) are dropped so
  # those backups still restore into the scratch database; any other mention of it stays and is refused.
  gunzip --stdout "$dump" |
    sed -E "/^CREATE DATABASE \/\*!32312 IF NOT EXISTS\*\/ \`$DATABASE\`( [^;]*)?;\$/d; /^USE \`$DATABASE\`;\$/d" |
    mysql --defaults-extra-file="$options" --sandbox --protocol=socket --user="$RESTORE_ACCOUNT" "$SCRATCH_DATABASE" ||
    die "loading the accounting dump failed (output above); $DATABASE and the controller's state were left as they were"
  root_sql "DROP USER IF EXISTS '$RESTORE_ACCOUNT'@'localhost';"
  DROP_ACCOUNT=false
}

# swap_database : in one RENAME TABLE statement (all or nothing), move every table of the accounting
# database aside and every table of the scratch database in; then drop both leftovers. The statement
# is built by the server from information_schema, each name quoted as an identifier.
swap_database() {
  root_sql "CREATE DATABASE IF NOT EXISTS \`$DATABASE\`;
CREATE DATABASE \`$OLD_DATABASE\`;
SET SESSION group_concat_max_len = 4194304;
SELECT CONCAT('RENAME TABLE ', GROUP_CONCAT(pair ORDER BY step, name SEPARATOR ', ')) INTO @swap FROM (
  SELECT 1 AS step, table_name AS name, CONCAT('\`$DATABASE\`.\`', REPLACE(table_name, '\`', '\`\`'), '\` TO \`$OLD_DATABASE\`.\`', REPLACE(table_name, '\`', '\`\`'), '\`') AS pair
    FROM information_schema.tables WHERE table_schema = '$DATABASE' AND table_type = 'BASE TABLE'
  UNION ALL
  SELECT 2, table_name, CONCAT('\`$SCRATCH_DATABASE\`.\`', REPLACE(table_name, '\`', '\`\`'), '\` TO \`$DATABASE\`.\`', REPLACE(table_name, '\`', '\`\`'), '\`')
    FROM information_schema.tables WHERE table_schema = '$SCRATCH_DATABASE' AND table_type = 'BASE TABLE'
) AS pairs;
SET @swap = COALESCE(@swap, 'DO 0');
PREPARE swap FROM @swap;
EXECUTE swap;
DEALLOCATE PREPARE swap;" || die "swapping the restored tables into $DATABASE failed (output above); $DATABASE was left as it was"
  DROP_SCRATCH=false
  root_sql "DROP DATABASE IF EXISTS \`$OLD_DATABASE\`; DROP DATABASE IF EXISTS \`$SCRATCH_DATABASE\`;" ||
    log "the previous accounting tables are left in $OLD_DATABASE (could not drop it)"
}

restore() {
  local uri=$1 work=$WORK location name digest staging
  shift
  location=$(state_location)
  local -A wanted=()
  for name in "$@"; do
    digest=${name#*=}
    name=${name%%=*}
    [[ $name == "$STATE_ARCHIVE" || $name == "$DATABASE_DUMP" ]] || usage
    [[ $digest =~ ^[0-9a-f]{64}$ ]] || usage
    wanted[$name]=$digest
  done
  [[ -n ${wanted[$STATE_ARCHIVE]:-} ]] || usage
  for name in "${!wanted[@]}"; do
    s3_get "$uri/$name" "$work/$name"
    [[ $(sha256sum <"$work/$name" | cut -d' ' -f1) == "${wanted[$name]}" ]] ||
      die "$uri/$name is not the file the backup wrote (its SHA-256 differs); nothing was restored"
  done
  check_archive "$work/$STATE_ARCHIVE"
  if [[ -n ${wanted[$DATABASE_DUMP]:-} ]]; then
    local_accounting || die "$uri holds an accounting database, but this controller has no local accounting"
    check_dump_client
  fi
  log "stopping slurmctld to restore its state into $location"
  RESTART_ON_EXIT=true
  systemctl stop slurmctld
  staging=$(mktemp -d "$MLC_ROOT${location%/*}/.restore.XXXXXX")
  STAGING=$staging
  tar --extract --gzip --no-same-owner --no-same-permissions --file "$work/$STATE_ARCHIVE" --directory "$staging"
  # Everything in it is root's and private (umask 077); slurmctld's owner gets it, links are not followed.
  chown --recursive --no-dereference --reference="$MLC_ROOT$location" "$staging"
  chmod --reference="$MLC_ROOT$location" "$staging"
  # The database first: if its load fails, the state is not swapped (the staging folder goes).
  if [[ -n ${wanted[$DATABASE_DUMP]:-} ]]; then
    load_dump "$work/$DATABASE_DUMP"
    swap_database
    systemctl restart slurmdbd
  fi
  mv --no-target-directory "$MLC_ROOT$location" "$staging.old"
  mv --no-target-directory "$staging" "$MLC_ROOT$location"
  STAGING=""
  rm -rf "$staging.old"
  RESTART_ON_EXIT=false
  restart_slurmctld
  log "restore complete from $uri"
}

# take_lock COMMAND : hold /run/mlcluster-backup.lock until this process exits (see the header).
take_lock() {
  local lock=$MLC_ROOT/run/mlcluster-backup.lock wait=${MLC_BACKUP_LOCK_WAIT_SECONDS:-1800}
  mkdir -p "${lock%/*}"
  exec 9>>"$lock"
  if [[ $1 == scheduled ]]; then
    flock --nonblock 9 || {
      log "another mlcluster-backup is running; this daily copy is skipped"
      exit 0
    }
  else
    flock --wait "$wait" 9 ||
      die "another mlcluster-backup held $lock for ${wait}s (a daily copy, backup or restore); nothing was changed, run $1 again"
  fi
}

main() {
  (($# >= 2)) || usage
  local command=$1 uri=${2%/}
  case $command in
    backup | scheduled)
      (($# == 3)) || usage
      [[ $3 =~ ^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]{36}$ ]] || usage
      ;;
    restore) (($# >= 3 && $# <= 4)) || usage ;;
    *) usage ;;
  esac
  [[ $uri =~ ^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9._/-]+$ && /$uri/ != */../* ]] || {
    printf 'mlcluster-backup: %s is not an S3 location; allowed: s3://BUCKET/PREFIX of letters, digits, . _ - /\n' "$2" >&2
    usage
  }
  [[ -n $MLC_ROOT || $EUID -eq 0 ]] || die "run mlcluster-backup as root"
  load_node_env
  # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
  [[ $MLC_ROLE == controller ]] || die "this is a $MLC_ROLE node; run mlcluster-backup on the controller"
  mkdir -p "$TMP_DIR"
  chmod 700 "$TMP_DIR"
  take_lock "$command"
  WORK=$(mktemp -d "$TMP_DIR/$command.XXXXXX")
  trap cleanup EXIT
  case $command in
    backup) backup "$uri" "$3" ;;
    scheduled) scheduled "$uri" "$3" ;;
    restore) restore "$uri" "${@:3}" ;;
    *) usage ;;
  esac
}

main "$@"
