#!/usr/bin/env bash
# Entry point ParallelCluster runs as OnNodeConfigured on every node of an mlcluster cluster.
#
#   run.sh --role head|compute|login --source s3://BUCKET/PREFIX/|DIR [STEP...]
#
# Steps: docker, docker_group, enroot_pyxis, nccl_efa, neuron, exporters, collector, health_check. They always run in that
# order, whatever order they are given in; with no STEP arguments the list
# comes from MLCLUSTER_STEPS (spaces or commas). The step scripts and their
# support files (lib.sh, pins.sh, user_dirs.sh) are copied from --source (an S3 prefix, read with
# the node's role, or a local folder); the exporters step also gets EXPORTER_FILES (the units, textfile
# collectors and DCGM fields, shared with HyperPod), the collector step COLLECTOR_FILES (its
# installer, target refresher and the configuration mlcluster rendered) and the health_check step
# HEALTH_FILES (the node health tool, shared with HyperPod). Each step logs to /var/log/mlcluster/STEP.log; the first
# step that fails stops the run, and the error names it. Every step is
# idempotent, so running this again changes nothing.
#
# Environment: MLCLUSTER_ROOT (prefix for every path; tests), MLCLUSTER_STEPS,
# MLCLUSTER_RETRY_ATTEMPTS and MLCLUSTER_RETRY_DELAY (seconds, doubled per retry).
set -euo pipefail

readonly KNOWN_STEPS=(docker docker_group enroot_pyxis nccl_efa neuron exporters collector health_check)
readonly SUPPORT_FILES=(lib.sh pins.sh user_dirs.sh)
readonly EXPORTER_FILES=(exporter_units.sh efa_metrics.sh slurm_metrics.sh dcgm_counters.csv)
readonly COLLECTOR_FILES=(collector_install.sh collector_targets.py collector.yml collector_targets.json)
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
  echo "usage: run.sh --role head|compute|login --source s3://BUCKET/PREFIX/|DIR [STEP...]" >&2
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
requested=()
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

mkdir -p "${LOG_DIR}"
case "${role}" in
  head | compute | login) ;;
  *) fail "--role must be head, compute or login (got '${role}')" ;;
esac
[[ -n "${source_uri}" ]] || fail "--source is required: the S3 prefix or folder holding the step scripts"
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

# One run at a time: ParallelCluster runs this once, an operator may run it again.
exec 9>"${LOG_DIR}/run.lock"
flock -w 900 9 || fail "another run.sh holds ${LOG_DIR}/run.lock"

if [[ "${source_uri}" == s3://* ]]; then
  script_dir="${ROOT}/opt/mlcluster/node-scripts"
  mkdir -p "${script_dir}"
  download="$(mktemp -d)"
  trap 'rm -rf "${download}"' EXIT
  files=("${SUPPORT_FILES[@]}" "${steps[@]/%/.sh}")
  [[ " ${steps[*]} " == *" exporters "* ]] && files+=("${EXPORTER_FILES[@]}")
  [[ " ${steps[*]} " == *" collector "* ]] && files+=("${COLLECTOR_FILES[@]}")
  [[ " ${steps[*]} " == *" health_check "* ]] && files+=("${HEALTH_FILES[@]}")
  for file in "${files[@]}"; do
    retry aws s3 cp --only-show-errors "${source_uri%/}/${file}" "${download}/${file}" \
      || fail "cannot download ${source_uri%/}/${file}; check the node role's S3 read access"
    if ! cmp -s "${download}/${file}" "${script_dir}/${file}" 2>/dev/null; then
      install -m 0755 "${download}/${file}" "${script_dir}/${file}"
    fi
  done
else
  script_dir="${source_uri%/}"
  [[ -d "${script_dir}" ]] || fail "--source folder '${script_dir}' does not exist"
fi

say "role ${role}; steps: ${steps[*]:-none}"
for step in "${steps[@]}"; do
  script="${script_dir}/${step}.sh"
  [[ -f "${script}" ]] || fail "step '${step}': ${script} is missing"
  say "step ${step}: starting"
  status=0
  MLCLUSTER_STEP="${step}" MLCLUSTER_NODE_ROLE="${role}" bash "${script}" >>"${LOG_DIR}/${step}.log" 2>&1 || status=$?
  if ((status != 0)); then
    tail -n 20 "${LOG_DIR}/${step}.log" >&2 || true
    fail "step '${step}' failed with exit code ${status}; see /var/log/mlcluster/${step}.log"
  fi
  say "step ${step}: done"
done
say "all steps done"
