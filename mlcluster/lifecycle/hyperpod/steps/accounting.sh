#!/usr/bin/env bash
# Step accounting (controller): Slurm accounting through slurmdbd, with either a local MariaDB
# (database, user and a random password created once) or a remote MySQL-compatible database
# whose username and password come from a Secrets Manager secret. Credentials never reach the
# logs or a command line. With a remote database the secret may be rotated: the step installs
# /usr/local/sbin/mlcluster-accounting-secret (accounting_secret.sh), runs it before every start of
# slurmdbd (a systemd drop-in) and every few minutes from a timer, which restarts slurmdbd when the
# secret's credentials changed.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
load_node_env

SLURMDBD_CONF="$SLURM_ETC/slurmdbd.conf"
DATABASE=slurm_acct_db

# The password of an earlier run's local database, so a re-run keeps database and config in step.
local_password() {
  if [[ -f $SLURMDBD_CONF ]] && grep -qx 'StorageHost=localhost' "$SLURMDBD_CONF"; then
    sed -n 's/^StoragePass=//p' "$SLURMDBD_CONF"
  fi
}

# create_database PASSWORD : the SQL goes through stdin, so the password is not in ps output.
create_database() {
  mysql --protocol=socket --user=root <<SQL
CREATE DATABASE IF NOT EXISTS $DATABASE;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$1';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$1';
GRANT ALL ON $DATABASE.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
}

# slurmdbd_conf HOST PORT USER PASSWORD : print slurmdbd.conf.
slurmdbd_conf() {
  cat <<CONF
# Written by mlcluster (accounting step). Holds the database password: keep it mode 600.
AuthType=auth/munge
DbdHost=$(hostname -s)
DbdPort=6819
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$1
StoragePort=$2
StorageUser=$3
StoragePass=$4
StorageLoc=$DATABASE
CONF
  if [[ -n ${5:-} ]]; then
    printf 'StorageParameters=SSL_CA=%s\n' "$5"
  fi
}

# The Amazon RDS root CAs (rds-ca-roots.pem, pinned in the package and checked by on_create.sh's
# manifest, never read from a bucket a user can write), for slurmdbd to verify the server's certificate.
# slurmdbd verifies the certificate's CHAIN only, not its name: Slurm sets the CA with mysql_ssl_set
# and never turns on MariaDB Connector/C's host check (MYSQL_OPT_SSL_VERIFY_SERVER_CERT). Any
# certificate a trusted root signed is accepted for the endpoint, so the step installs only the
# endpoint's own region's roots (RSA2048, RSA4096, ECC384 G1): a database in another region, or
# another customer's database in that region, still passes. TLS stops passive reading; the
# endpoint's name is not verified.
RDS_CA_REAL=/etc/mlcluster/rds-ca-roots.pem
RDS_HOST='\.([a-z]{2}(-[a-z]+)+-[0-9]+)\.rds\.amazonaws\.com(\.cn)?$'

# region_roots REGION : the bundle on stdin, with only the certificates whose comment line names
# "Amazon RDS REGION Root CA ..." (each comment line names the certificate after it).
region_roots() {
  awk -v want="# Amazon RDS $1 Root CA " '
    /^# / { keep = (index($0, want) == 1) }
    keep { print }
  '
}

# rds_ca HOST : install the RDS roots and print their path when HOST is an RDS/Aurora endpoint of a region
# the bundle covers; print nothing (with a warning) otherwise: the server still requires TLS
# (require_secure_transport on the managed database), but slurmdbd then does not check whose certificate it is.
rds_ca() {
  local region
  if [[ ! $1 =~ $RDS_HOST ]]; then
    warn "$1 is not an Amazon RDS endpoint: slurmdbd.conf gets no SSL_CA (add the server's CA by hand to verify it)"
    return 0
  fi
  region=${BASH_REMATCH[1]}
  if ! grep -q "^# Amazon RDS $region Root CA " "$MLC_LIFECYCLE_DIR/rds-ca-roots.pem"; then
    warn "rds-ca-roots.pem has no root CA for $region: slurmdbd.conf gets no SSL_CA (TLS unverified by the client)"
    return 0
  fi
  install_file "$MLC_ROOT$RDS_CA_REAL" 644 < <(region_roots "$region" <"$MLC_LIFECYCLE_DIR/rds-ca-roots.pem")
  printf '%s\n' "$RDS_CA_REAL"
}

# The database files live off the root volume (controller_data_dir), so patching keeps them.
MARIADB_CNF=/etc/mysql/mariadb.conf.d/60-mlcluster.cnf

mariadb_datadir() {
  local data dir
  data=$(controller_data_dir)
  dir="$data/mysql"
  ensure_user_dir mysql "$MLC_ROOT$dir" 700
  if ! grep -qsxF "datadir = $dir" "$MLC_ROOT$MARIADB_CNF"; then
    if systemctl is-active --quiet mariadb; then
      systemctl stop mariadb
    fi
    move_contents "$MLC_ROOT/var/lib/mysql" "$MLC_ROOT$dir"
  fi
  install_file "$MLC_ROOT$MARIADB_CNF" 644 <<CONF
# Written by mlcluster (accounting step): the accounting database lives off the root volume.
[mysqld]
datadir = $dir
CONF
}

local_database() {
  local password
  apt_install mariadb-server
  mariadb_datadir
  converge_service mariadb "$MLC_ROOT$MARIADB_CNF"
  password=$(local_password)
  if [[ -z $password ]]; then
    password=$(plan password)
    retry 5 "create the accounting database" create_database "$password"
    log "created database $DATABASE and its user slurm"
  fi
  install_file "$SLURMDBD_CONF" 600 "$(ids_of slurm)" < <(slurmdbd_conf localhost 3306 slurm "$password")
}

SECRET_TOOL=/usr/local/sbin/mlcluster-accounting-secret
SECRET_UNIT=mlcluster-accounting-secret
SECRET_MINUTES=5
# Before a start, the secret is read at most twice, each time one AWS CLI attempt (10 s to connect, 20 s to
# read, accounting_secret.sh): about 62 s with the 2 s pause, so the fallback to the file's password runs well
# inside slurmdbd's start timeout, raised from systemd's 90 s default so slurmdbd itself still has about three minutes
# (an Aurora database resuming from zero capacity answers in about 15 s).
SECRET_START_ATTEMPTS=2
SECRET_START_TIMEOUT_SEC=240

# conf_folder_root_only : slurmdbd.conf's folder (SLURM_ETC, /opt/slurm/etc) is made root's and not
# writable by group or others, the folder mlcluster-accounting-secret requires before it reads or renames
# slurmdbd.conf as root (a slurmdbd start, the timer); it refuses any other, and slurmdbd then does not start.
# Who makes the folder: HyperPod's own image (the DLAMI installs Slurm in /opt/slurm); neither AWS's
# published base lifecycle scripts (aws-samples/awsome-distributed-training, 5.sagemaker-hyperpod/
# LifecycleScripts/base-config: setup_mariadb_accounting.sh, setup_rds_accounting.sh, headnode_setup.sh)
# nor this step create, chown or chmod it: they write files into it as root and chown slurmdbd.conf alone
# (slurm:slurm, 600). Its owner and mode are published nowhere, so the step does not assume them: a
# folder of another owner (the slurm user, say, whose daemons could then swap slurmdbd.conf for a link
# between the tool's check and its read), or one group or others can write, becomes root's with mode 0755
# (logged), as ParallelCluster's cookbook makes the same folder (config_head_node_directories.rb: root,
# root, 0755); slurm.conf there must stay readable by every Slurm user (slurm.conf(5)). Slurm only reads
# the folder; the one command that writes there as SlurmUser, `scontrol write config`, then fails, as on
# ParallelCluster. This step and the tool run on HyperPod only (ParallelCluster rotates nothing here).
# The folder is adopted in place, not moved aside as ensure_root_dir does (it holds the image's slurm.conf),
# and only under parents (/opt/slurm, /opt) of root's in which nobody else can rename root's entries (not
# writable by group or others, or sticky): otherwise whoever can rename entries there could swap the folder
# for a link after the checks and have root chmod the link's target. In a sticky parent the folder's old owner
# can still rename it until root owns it, so the step chowns it first (chown -h follows no link) and checks
# after the chown that it is a real folder of root's before chmod follows it. What the old owner left in it,
# conf_entries_root_only.
conf_folder_root_only() {
  local dir parent uid mode owner
  dir=$(dirname -- "$SLURMDBD_CONF")
  parent=$(unsafe_parent "$SLURM_ETC_REAL")
  if [[ -n $parent ]]; then
    die "$parent is not a real folder of root's that only root can change; refusing to adopt $dir below it (whoever can rename entries there could swap $dir for a link): make $parent root's and not writable by group or others"
  fi
  if [[ ! -d $dir || -L $dir ]]; then
    die "$dir is not a folder (or is a link); slurmdbd.conf must sit in a real folder of root's"
  fi
  read -r uid mode <<<"$(owner_mode "$dir")"
  if [[ $uid != 0 ]] || ((8#$mode & 8#022)); then
    # Until root owns it, the old owner may still rename $dir in a sticky parent and put a link in its place;
    # chown -h never follows one. Once the entry is root's, only root can rename it there (and in a parent
    # nobody else can write), so checked after the chown, it stays a real folder until chmod follows it.
    chown -h 0:0 -- "$dir"
    read -r owner _ <<<"$(owner_mode "$dir")"
    [[ $owner == 0 && -d $dir && ! -L $dir ]] ||
      die "$dir is not a real folder of root's after its chown (it changed into a link or vanished); refusing to chmod it"
    # GNU chmod keeps a folder's setgid bit under a numeric mode: the old group would own what root writes there.
    chmod u=rwx,go=rx,ug-s -- "$dir"
    warn "$dir was owned by uid $uid with mode $mode; made it root's (group root) with mode 755 (mlcluster-accounting-secret rewrites slurmdbd.conf there as root and refuses a folder anyone else can change)"
  fi
  conf_entries_root_only "$dir"
}

# conf_entries_root_only DIR : what an earlier owner of DIR (or anyone while group or others could write it)
# may have left there no longer reaches root's reads. DIR is root's and only root can rename its entries,
# so nothing here races. Links: slurm.conf (the step reads and rewrites it as root, slurmctld reads it) is
# refused, the step cannot make it; accounting.conf and slurmdbd.conf, which the step writes whole, are
# moved aside; other links are logged and left (this step reads none of them). A hard link (a file, not a
# folder, with more than one link) shares its inode with a file elsewhere, which chown and chmod would
# change: slurm.conf is refused, any other is moved aside (one moved aside before is logged and left; it is
# never chowned or chmodded). Each other entry of the folder itself (a file or a folder; a folder's contents
# are not walked) becomes root's without group or other write (logged), as ParallelCluster keeps the
# folder's files (root, 0644); slurmdbd.conf alone stays slurm's with mode 600, as slurmdbd requires
# (slurmdbd.conf(5)).
conf_entries_root_only() {
  local dir=$1 entry name uid mode slurm links
  local -a entries
  slurm=$(ids_of slurm)
  if [[ -L $dir/slurm.conf || ! -f $dir/slurm.conf ]]; then
    die "$dir/slurm.conf is a link or not a regular file; refusing to read it as root (the image writes a plain file there)"
  fi
  links=$(stat -c %h -- "$dir/slurm.conf")
  if ((links > 1)); then
    die "$dir/slurm.conf has $links hard links; refusing to read it as root or change the file they share (the image writes a plain file there)"
  fi
  # Listed before any rename, so an entry moved aside here is not met again in the same pass.
  mapfile -d '' entries < <(find "$dir" -mindepth 1 -maxdepth 1 -print0)
  for entry in "${entries[@]}"; do
    name=${entry##*/}
    if [[ -L $entry ]]; then
      case $name in
        accounting.conf | slurmdbd.conf) move_aside "$entry" "is a link (the accounting step writes a plain file)" ;;
        *) warn "$entry is a link; left as it is (the accounting step does not read it)" ;;
      esac
      continue
    fi
    links=$(stat -c %h -- "$entry")
    if [[ ! -d $entry ]] && ((links > 1)); then
      # A link made after the check above (by whoever may link to slurm.conf) is still refused, never moved aside.
      [[ $name == slurm.conf ]] &&
        die "$entry has $links hard links; refusing to read it as root or change the file they share (the image writes a plain file there)"
      if [[ $name == *.mlcluster-moved-aside.* ]]; then
        warn "$entry has $links hard links; left as it is (moved aside before, the accounting step does not read it)"
      else
        move_aside "$entry" "has $links hard links (root would change the file they share)"
      fi
      continue
    fi
    read -r uid mode <<<"$(owner_mode "$entry")"
    if [[ $name == slurmdbd.conf && -f $entry ]]; then
      if [[ $uid != "${slurm%%:*}" || $mode != 600 ]]; then
        chown -h "$slurm" -- "$entry"
        chmod 600 -- "$entry"
        warn "$entry was owned by uid $uid with mode $mode; made it slurm's with mode 600"
      fi
    elif [[ $uid != 0 ]] || ((8#$mode & 8#022)); then
      chown -h 0 -- "$entry"
      chmod go-w -- "$entry"
      warn "$entry was owned by uid $uid with mode $mode; made it root's without group or other write"
    fi
  done
}

# remote_database : slurmdbd.conf with the secret's username and password (plan checks both can sit in
# the file), then the tool, the drop-in and the timer that keep them equal to the secret after rotation.
remote_database() {
  local secret draft ca
  conf_folder_root_only
  secret=$(retry 5 "read the database secret $MLC_ACCOUNTING_SECRET_ARN" aws secretsmanager get-secret-value \
    --region "$MLC_ACCOUNTING_SECRET_REGION" --secret-id "$MLC_ACCOUNTING_SECRET_ARN" \
    --query SecretString --output text)
  ca=$(rds_ca "$MLC_ACCOUNTING_HOST")
  draft=$(mktemp "$TMP_DIR/slurmdbd.conf.XXXXXX")
  slurmdbd_conf "$MLC_ACCOUNTING_HOST" "$MLC_ACCOUNTING_PORT" "" "" "$ca" >"$draft"
  install_from "$SLURMDBD_CONF" 600 "$(ids_of slurm)" plan slurmdbd-credentials --conf "$draft" <<<"$secret"
  rm -f "$draft"
  secret_refresh
}

# secret_refresh : install mlcluster-accounting-secret, run it before each start of slurmdbd (the "+"
# runs it as root even when the unit names another User=; bounded as SECRET_START_* say) and every
# SECRET_MINUTES minutes.
secret_refresh() {
  local changed=false
  # The tool sources lib.sh and runs plan.py from the kept copy, and slurmdbd starts (below) before
  # install_tools runs on a new controller.
  keep_lifecycle_copy
  install_file "$MLC_ROOT$SECRET_TOOL" 755 <"$MLC_LIFECYCLE_DIR/accounting_secret.sh"
  install_file "$SYSTEMD_DIR/slurmdbd.service.d/mlcluster-secret.conf" 644 <<UNIT
# Written by mlcluster (accounting step): slurmdbd logs in with the secret's current password.
[Service]
ExecStartPre=+/usr/bin/env MLC_MAX_ATTEMPTS=$SECRET_START_ATTEMPTS AWS_MAX_ATTEMPTS=1 $SECRET_TOOL refresh
TimeoutStartSec=$SECRET_START_TIMEOUT_SEC
UNIT
  changed=$FILE_CHANGED
  install_file "$SYSTEMD_DIR/$SECRET_UNIT.service" 644 <<UNIT
# Written by mlcluster (accounting step): after a rotation of the accounting secret, restart slurmdbd with it.
[Unit]
Description=mlcluster: apply a rotated accounting database secret to slurmdbd
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
ExecStart=$SECRET_TOOL watch
StandardOutput=journal
StandardError=journal
UNIT
  if [[ $FILE_CHANGED == true ]]; then
    changed=true
  fi
  install_file "$SYSTEMD_DIR/$SECRET_UNIT.timer" 644 <<UNIT
# Written by mlcluster (accounting step).
[Unit]
Description=mlcluster: check the accounting database secret every $SECRET_MINUTES minutes

[Timer]
OnBootSec=${SECRET_MINUTES}min
OnUnitActiveSec=${SECRET_MINUTES}min

[Install]
WantedBy=timers.target
UNIT
  if [[ $FILE_CHANGED == true ]]; then
    changed=true
  fi
  FILE_CHANGED=$changed
  enable_boot_unit "$SECRET_UNIT.timer"
  if ! systemctl is-active --quiet "$SECRET_UNIT.timer"; then
    retry 3 "start $SECRET_UNIT.timer" systemctl start "$SECRET_UNIT.timer"
  fi
  log "slurmdbd reads the accounting secret before each start and every $SECRET_MINUTES minutes"
}

main() {
  wait_for_slurm_conf
  case $MLC_ACCOUNTING_MODE in
    local) local_database ;;
    remote) remote_database ;;
    *) die "accounting mode '$MLC_ACCOUNTING_MODE' has nothing to set up; allowed here: local, remote" ;;
  esac
  install_file "$SLURM_ETC/accounting.conf" 644 <<CONF
# Written by mlcluster (accounting step); included from slurm.conf.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$MLC_CONTROLLER_ADDRESS
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
CONF
  install_from "$SLURM_ETC/slurm.conf" keep "" \
    plan slurm-conf --conf "$SLURM_ETC/slurm.conf" --include "$SLURM_ETC_REAL/accounting.conf"
  converge_service slurmdbd "$SLURMDBD_CONF"
}

main "$@"
