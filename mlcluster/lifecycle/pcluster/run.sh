#!/usr/bin/env bash
# Entry point ParallelCluster runs as OnNodeConfigured on every node of an mlcluster cluster.
#
#   run.sh --role head|compute|login --source s3://BUCKET/PREFIX/|DIR
#          --sha256 NAME=HEX... [--no-efa TYPE[,TYPE...]] [STEP...]
#   run.sh --role head|login --source s3://BUCKET/PREFIX/|DIR [STEP...]
#
# --no-efa: the EFA-capable instance types of this queue whose compute resource has EFA off
# (mlcluster.pcluster.render.efa_off_types); the health_check step expects no EFA device on them.
# Steps see it as MLCLUSTER_NO_EFA.
#
# Steps: docker, docker_group, enroot_pyxis, nccl_efa, neuron, exporters, collector, health_check. They always run in that
# order, whatever order they are given in; with no STEP arguments the list
# comes from MLCLUSTER_STEPS (spaces or commas). The step scripts and their
# support files (lib.sh, pins.sh, user_dirs.sh) are copied from --source (an S3 prefix, read with
# the node's role, or a local folder); the exporters step also gets EXPORTER_FILES (the units, textfile
# collectors and DCGM fields, shared with HyperPod) and the collector step COLLECTOR_FILES (its
# installer and target refresher) and GENERATED_FILES (the configuration the stack rendered and
# uploaded at deploy time), and
# the health_check step HEALTH_FILES (the node health tool, shared with HyperPod).
#
# Compute nodes run nothing that was not checked. Every file fetched must have the SHA-256 given by its
# --sha256 argument: the arguments come from the cluster configuration, which only the deploy writes,
# not from the bucket the files come from.
#
# Head and login nodes run without a manifest (no --sha256: bucket-trusted; --bucket-trusted says so
# explicitly): every file is fetched and trusted because only the deploy role may write the script
# bucket. ParallelCluster refuses any change to the CustomActions of the head node and the login pools
# on update (UpdatePolicy.UNSUPPORTED), so their arguments must not change with each release of these
# scripts or each deploy-time value, nor differ from the form clusters deployed before the manifest
# existed (--role, --source, the steps); a queue's may (its update policy is the queue update strategy).
#
# Either way the files are copied into a new root-only folder and checked there (a missing file, a
# link or anything but a regular file is refused before any step runs, and so is a changed one when
# there is a manifest), and that folder becomes /opt/mlcluster/node-scripts, which then holds exactly
# those files: a file of the source that the step list does not name is never copied, so no step can
# run or read it. Each step logs to /var/log/mlcluster/STEP.log; the first
# step that fails stops the run, and the error names it. Every step is
# idempotent, so running this again changes nothing.
#
# Environment: MLCLUSTER_ROOT (prefix for every path; tests), MLCLUSTER_STEPS,
# MLCLUSTER_RETRY_ATTEMPTS and MLCLUSTER_RETRY_DELAY (seconds, doubled per retry).
set -euo pipefail

readonly KNOWN_STEPS=(docker docker_group enroot_pyxis nccl_efa neuron exporters collector health_check)
readonly SUPPORT_FILES=(lib.sh pins.sh user_dirs.sh)
readonly EXPORTER_FILES=(exporter_units.sh efa_metrics.sh slurm_metrics.sh dcgm_counters.csv)
readonly COLLECTOR_FILES=(collector_install.sh collector_targets.py)
readonly GENERATED_FILES=(collector.yml collector_targets.json)
readonly HEALTH_FILES=(health.sh)
ROOT="${MLCLUSTER_ROOT:-}"
LOG_DIR="${ROOT}/var/log/mlcluster"
RUN_LOG="${LOG_DIR}/run.log"

say() {
  local line
  TZ=UTC0 printf -v line '%(%Y-%m-%dT%H:%M:%SZ)T [run] %s' -1 "$*"
  printf '%s\n' "${line}" >&2
  printf '%s\n' "${line}" >>"${RUN_LOG}"
}

fail() {
  say "ERROR: $*"
  exit 1
}

usage() {
  echo "usage: run.sh --role head|compute|login --source s3://BUCKET/PREFIX/|DIR --sha256 NAME=HEX... [--no-efa TYPE[,TYPE...]] [STEP...]" >&2
  echo "       run.sh --role head|login --source s3://BUCKET/PREFIX/|DIR [--bucket-trusted] [STEP...]" >&2
  echo "steps: ${KNOWN_STEPS[*]}" >&2
  exit 2
}

retry() {
  local attempts="${MLCLUSTER_RETRY_ATTEMPTS:-5}" delay="${MLCLUSTER_RETRY_DELAY:-5}" n=1
  until "$@"; do
    ((n >= attempts)) && return 1
    say "attempt ${n} of ${attempts} failed, retrying in ${delay}s: $*"
    sleep "${delay}"
    n=$((n + 1))
    delay=$((delay * 2))
  done
}

role=""
source_uri=""
no_efa=""
requested=()
sha256_args=()
bucket_trusted=0
while (($#)); do
  case "$1" in
    --role)
      (($# >= 2)) || usage
      role="$2"
      shift 2
      ;;
    --source)
      (($# >= 2)) || usage
      source_uri="$2"
      shift 2
      ;;
    --sha256)
      (($# >= 2)) || usage
      sha256_args+=("$2")
      shift 2
      ;;
    --bucket-trusted)
      bucket_trusted=1
      shift
      ;;
    --no-efa)
      (($# >= 2)) || usage
      no_efa="$2"
      shift 2
      ;;
    -h | --help) usage ;;
    -*)
      echo "run.sh: unknown option '$1'" >&2
      usage
      ;;
    *)
      requested+=("$1")
      shift
      ;;
  esac
done

# The log folder gets root's run log, step logs and lock: it must be this user's (root's on a node), writable
# by no group or other, and not a link, or another user could plant a link there and have root write through
# it. Checked before anything is written into it (say() appends to run.log), so a refusal goes to stderr only.
# Made under umask 022 (0755 folders): root's umask may be 0002, and the check below would refuse a folder
# it made group-writable.
(umask 022 && mkdir -p -- "${LOG_DIR}")
log_info="$(stat -c '%u %a' -- "${LOG_DIR}")" || { echo "run.sh: cannot read ${LOG_DIR}" >&2; exit 1; }
if [[ ! -d "${LOG_DIR}" || -L "${LOG_DIR}" || "${log_info%% *}" != "${EUID}" ]] \
  || (((8#${log_info#* } & 8#022) != 0)); then
  echo "run.sh: ERROR: ${LOG_DIR} must be a folder of uid ${EUID} that no group or other may write, not a link (owner and mode: ${log_info}); refusing to run" >&2
  exit 1
fi
case "${role}" in
  head | compute | login) ;;
  *) fail "--role must be head, compute or login (got '${role}')" ;;
esac
[[ -z "${no_efa}" || "${no_efa}" =~ ^[a-z0-9-]+\.[a-z0-9]+(,[a-z0-9-]+\.[a-z0-9]+)*$ ]] \
  || fail "--no-efa takes instance types separated by commas (got '${no_efa}')"
[[ -n "${source_uri}" ]] || fail "--source is required: the S3 prefix or folder holding the step scripts"
if [[ "${role}" != compute ]] && ((${#sha256_args[@]} == 0)); then
  bucket_trusted=1
fi
if ((bucket_trusted)); then
  [[ "${role}" != compute ]] \
    || fail "--bucket-trusted is for head and login nodes; compute nodes always check the --sha256 manifest"
  ((${#sha256_args[@]} == 0)) \
    || fail "--bucket-trusted takes no --sha256: the files come from the bucket, unchecked"
fi
if ((${#requested[@]} == 0)) && [[ -n "${MLCLUSTER_STEPS:-}" ]]; then
  read -r -a requested <<<"${MLCLUSTER_STEPS//,/ }"
fi

for step in "${requested[@]}"; do
  known=0
  for candidate in "${KNOWN_STEPS[@]}"; do
    [[ "${step}" == "${candidate}" ]] && known=1
  done
  ((known)) || fail "unknown step '${step}'; allowed: ${KNOWN_STEPS[*]}"
done

steps=()
for candidate in "${KNOWN_STEPS[@]}"; do
  for step in "${requested[@]}"; do
    if [[ "${step}" == "${candidate}" ]]; then
      steps+=("${candidate}")
      break
    fi
  done
done

# The manifest from the arguments: NAME -> SHA-256 of a fetched file.
declare -A SHA256=()
for entry in "${sha256_args[@]}"; do
  [[ "${entry}" =~ ^([A-Za-z0-9_][A-Za-z0-9_.-]*)=([0-9a-f]{64})$ ]] \
    || fail "--sha256 '${entry:0:80}' is not NAME=HEX (a file name and 64 lowercase hex digits)"
  SHA256["${BASH_REMATCH[1]}"]="${BASH_REMATCH[2]}"
done

# One run at a time: ParallelCluster runs this once, an operator may run it again.
# Opened for appending: a lock file that already exists is never truncated.
exec 9>>"${LOG_DIR}/run.lock"
flock -w 900 9 || fail "another run.sh holds ${LOG_DIR}/run.lock"

files=("${SUPPORT_FILES[@]}" "${steps[@]/%/.sh}")
[[ " ${steps[*]} " == *" exporters "* ]] && files+=("${EXPORTER_FILES[@]}")
[[ " ${steps[*]} " == *" health_check "* ]] && files+=("${HEALTH_FILES[@]}")
[[ " ${steps[*]} " == *" collector "* ]] && files+=("${COLLECTOR_FILES[@]}" "${GENERATED_FILES[@]}")
if ((!bucket_trusted)); then
  for file in "${files[@]}"; do
    [[ -n "${SHA256[${file}]:-}" ]] \
      || fail "${file} has no --sha256 in the arguments (the cluster configuration mlcluster renders gives one for every file); refusing to run"
  done
fi

# A new root-only folder (mktemp -d: 0700) next to the one the steps run from; nothing else writes there.
script_dir="${ROOT}/opt/mlcluster/node-scripts"
(umask 022 && mkdir -p -- "${script_dir%/*}") # 0755 under any umask of root's, as the log folder
# The folder that holds the checked copy must be this user's (root's on a node) and writable by no group or
# other, and not a link: whoever could write there could swap the checked folder before it runs.
parent_info="$(stat -c '%u %a' -- "${script_dir%/*}")" || fail "cannot read ${script_dir%/*}"
if [[ ! -d "${script_dir%/*}" || -L "${script_dir%/*}" || "${parent_info%% *}" != "${EUID}" ]] \
  || (((8#${parent_info#* } & 8#022) != 0)); then
  fail "${script_dir%/*} must be a folder of uid ${EUID} that no group or other may write, not a link (owner and mode: ${parent_info}); refusing to run"
fi
staging="$(mktemp -d "${script_dir}.new.XXXXXX")"
trap 'rm -rf "${staging}" "${staging}.old"' EXIT
for file in "${files[@]}"; do
  if [[ "${source_uri}" == s3://* ]]; then
    retry aws s3 cp --only-show-errors "${source_uri%/}/${file}" "${staging}/${file}" \
      || fail "cannot download ${source_uri%/}/${file}; check the node role's S3 read access"
  else
    source_file="${source_uri%/}/${file}"
    [[ -f "${source_file}" && ! -L "${source_file}" ]] \
      || fail "${source_file} is missing or not a regular file (a link is refused); refusing to run"
    cp -- "${source_file}" "${staging}/${file}"
  fi
  [[ -f "${staging}/${file}" && ! -L "${staging}/${file}" ]] || fail "${file} is missing after the copy; refusing to run"
  ((bucket_trusted)) && continue
  actual="$(sha256sum <"${staging}/${file}")"
  actual="${actual%% *}"
  [[ "${actual}" == "${SHA256[${file}]}" ]] \
    || fail "checksum mismatch for ${file} (expected ${SHA256[${file}]}, found ${actual}): it was changed after mlcluster uploaded it; refusing to run"
done
if ((bucket_trusted)); then
  say "fetched ${#files[@]} files from ${source_uri} (head or login node, bucket-trusted: no manifest)"
else
  say "checked ${#files[@]} files against their SHA-256"
fi
chmod 0755 "${staging}"
chmod 0755 "${staging}"/*
# The checked folder takes the place of the old one (two renames; the old one goes).
if [[ -e "${script_dir}" || -L "${script_dir}" ]]; then
  mv --no-target-directory "${script_dir}" "${staging}.old"
fi
mv --no-target-directory "${staging}" "${script_dir}"
rm -rf "${staging}.old"

say "role ${role}; steps: ${steps[*]:-none}"
for step in "${steps[@]}"; do
  script="${script_dir}/${step}.sh"
  [[ -f "${script}" ]] || fail "step '${step}': ${script} is missing"
  say "step ${step}: starting"
  status=0
  MLCLUSTER_STEP="${step}" MLCLUSTER_NODE_ROLE="${role}" MLCLUSTER_NO_EFA="${no_efa}" bash "${script}" >>"${LOG_DIR}/${step}.log" 2>&1 || status=$?
  if ((status != 0)); then
    tail -n 20 "${LOG_DIR}/${step}.log" >&2 || true
    fail "step '${step}' failed with exit code ${status}; see /var/log/mlcluster/${step}.log"
  fi
  say "step ${step}: done"
done
say "all steps done"
