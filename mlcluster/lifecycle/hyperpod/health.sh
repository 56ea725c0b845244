#!/usr/bin/env bash
# mlcluster-health: tiered health checks of one node's accelerators and network, installed as
# /usr/local/bin/mlcluster-health (HyperPod: the install_tools step; ParallelCluster: the health_check
# step) and run by Slurm as its HealthCheckProgram (quick tier, --drain) and by `mlcluster health ENV`
# through srun.
#
#   mlcluster-health [--tier quick|deep] [--drain] [--expect-gpus N] [--expect-efa N] [--expect-neuron N]
#                    [--require-env]
#
# One line per check: `<host> PASS|FAIL|SKIP <check> <severity>: <detail>[. Action: <action>]`, then
# `<host>: healthy` or `<host>: N critical, M warning`. Severities: critical (the node must not run
# jobs: --drain drains it, with the failed checks as the reason `scontrol show node` prints) and
# warning (the node works; plan the action). Exit 1 when a critical check failed.
# The expected counts come from /etc/mlcluster/health.env (written for this node's instance type by
# the install_tools or health_check step; EFA 0 where the compute resource has EFA off); the flags
# override them. --require-env (`mlcluster health` on a node whose kind it cannot tell from its name)
# fails the node critically when that file is missing: without it nothing says what the node must show,
# and every check would skip.
#
# slurmd kills HealthCheckProgram after 60 s: every tool of the quick tier (nvidia-smi, journalctl or
# dmesg, fi_info, neuron-ls, scontrol) runs under `timeout` (MLC_HEALTH_TOOL_TIMEOUT_S, default 10 s); a
# tool that does not answer in time fails its check as critical, and is not called again in this run
# (a hung driver hangs every call), so a run stays within slurmd's limit and the node still drains.
#
# Quick (seconds): GPU count, Xid/SXid in the kernel log, ECC and row remapping, clock slowdown,
# EFA device count, `fi_info -p efa`, the locked-memory limit (`ulimit -l`), Neuron device count.
# Deep (minutes, exclusive node): DCGM diagnostics level 2, NCCL all_reduce on this node's GPUs,
# nccom-test all-reduce on this node's NeuronCores; each under `timeout` (MLC_HEALTH_DEEP_TIMEOUT_S,
# default 540 s).
#
# Formats read, with their sources:
# - `nvidia-smi -L`: one `GPU <i>: <name> (UUID: GPU-...)` line per GPU (nvidia-smi(1)).
# - `nvidia-smi --query-gpu=... --format=csv,noheader`: comma-separated values, `[N/A]` where a field
#   does not apply; field names as `nvidia-smi --help-query-gpu` lists them (clocks_event_reasons.*
#   since driver 535, clocks_throttle_reasons.* before).
# - Kernel log, messages only (`journalctl -k -o cat`, `dmesg --notime`): the driver's lines START with
#   `NVRM: Xid (PCI:0000:53:00): 79, pid=..., ...` and `nvidia-nvswitch<N>: SXid (PCI:...): 12028, ...`
#   (NVIDIA "Xid Errors" guide; the codes it says need a GPU reset or node service are CRITICAL_XIDS).
#   Only lines starting so count: other kernel lines carry text users choose (a segfault line names
#   the program and its file), and a planted "NVRM: Xid ..." inside one must not drain the node.
# - `fi_info -p efa -t FI_EP_RDM`: one block per EFA device, each starting `provider: efa` (fi_info(1)).
# - `neuron-ls`: a table with one row per device whose first cell is its number (Neuron "Neuron LS User Guide").
# - `dcgmi diag -r 2`: a `| Test | Pass/Fail/Skip ... |` table and a non-zero exit status on a failure
#   (NVIDIA "dcgmi diag" reference, output and exit status).
# - nccl-tests: `# Out of bounds values : 0 OK` and `# Avg bus bandwidth : <GB/s>` (src/util.cu).
# - nccom-test: `Avg bus bandwidth:      40.6901GB/s` (Neuron "NCCOM-TEST User Guide").
set -uo pipefail

MLC_ROOT="${MLC_ROOT:-}"
# slurmd starts HealthCheckProgram with an empty environment (no PATH), and srun passes the user's:
# put the folders of the tools read here first: Slurm (/opt/slurm/bin on HyperPod), the EFA software
# (fi_info), the Neuron tools (neuron-ls, nccom-test), then the system's (nvidia-smi, dcgmi, journalctl).
TOOL_DIRS=(/opt/slurm/bin /opt/amazon/efa/bin /opt/aws/neuron/bin /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin)
# (The folders are under MLC_ROOT, a test's fake root; the system's own follow in any case.)
PATH=$(printf "$MLC_ROOT%s:" "${TOOL_DIRS[@]}")${PATH:+$PATH:}/usr/sbin:/usr/bin:/sbin:/bin
export PATH
ENV_FILE="$MLC_ROOT/etc/mlcluster/health.env"
# Root writes its files only into folders that are root's alone (see root_folder): its log, and the
# time of the previous periodic run. Another user's run (srun) writes neither.
LOG_FILE="$MLC_ROOT/var/log/mlcluster/health.log"
# The periodic run (--drain) reads the kernel log from the time of its previous run on (epoch seconds):
# an Xid that drained the node once is not counted again after the operator reset and resumed it.
XID_SINCE_FILE="$MLC_ROOT/var/lib/mlcluster/health-xid-since"
NCCL_TESTS=/opt/mlcluster/nccl-tests/bin/all_reduce_perf
# Xid codes NVIDIA's Xid catalog gives a GPU reset or node service as the action (RESET_GPU and up):
# double-bit ECC (48), row-remapping failure (64), NVLink (74), fallen off the bus (79), uncontained
# ECC (95), GSP errors (119, 120). Xid 94 (contained ECC error) only ends the application using the
# memory (RESTART_APP): a warning, as in awsome-distributed-training's GPU health checks.
CRITICAL_XIDS=" 48 64 74 79 95 119 120 "
# Seconds each quick-tier tool may take (see the header); a test sets a shorter one.
TOOL_TIMEOUT_S=${MLC_HEALTH_TOOL_TIMEOUT_S:-10}
[[ $TOOL_TIMEOUT_S =~ ^[1-9][0-9]{0,2}$ ]] || TOOL_TIMEOUT_S=10
# Seconds each deep-tier run (dcgmi diag, all_reduce_perf, nccom-test) may take: the three stay within
# the 1800 s `mlcluster health --tier deep` gives a node, and a hung one fails its check instead.
DEEP_TIMEOUT_S=${MLC_HEALTH_DEEP_TIMEOUT_S:-540}
[[ $DEEP_TIMEOUT_S =~ ^[1-9][0-9]{0,3}$ ]] || DEEP_TIMEOUT_S=540
# NeuronCores neuron-ls lists on this node (check_neuron): nccom-test's rank count. Read from the tool, not
# a table: a Trainium2 device has 8 physical NeuronCores, exposed as 4 with the default logical NeuronCore
# config (LNC=2) or 8 with LNC=1 (Neuron "Logical NeuronCore configuration"); a trn1 device has 2.
NEURON_CORES=0
# A folder marking the tools that timed out in this run (a file per tool; the calls run in command
# substitutions, whose variables do not reach this shell): their later calls fail at once. And the Xid
# window's end to record once the run is through (see check_xid). Root's run ignores TMPDIR: a caller's
# environment kept by `sudo -E` would put root's folder inside a folder that user owns, where the user
# could swap it; root's goes under /tmp (sticky: no one else can rename or remove it). Another user's
# run uses its own TMPDIR.
if ((EUID == 0)); then
  HUNG_PARENT=/tmp
else
  HUNG_PARENT=${TMPDIR:-/tmp}
fi
HUNG_DIR=$(mktemp -d "$HUNG_PARENT/mlcluster-health.XXXXXX" 2>/dev/null) || HUNG_DIR=""
trap '[[ -z $HUNG_DIR ]] || rm -rf -- "$HUNG_DIR"' EXIT
XID_PENDING=""
HOST=$(hostname -s 2>/dev/null || echo unknown-host)
CRITICAL=()
WARNINGS=0
REPLACE="drain the node and replace it (HyperPod: aws sagemaker batch-replace-cluster-nodes; ParallelCluster: scontrol update nodename=<node> state=power_down_force)"

# root_only DIR : true when DIR is a folder (not a link) owned by root that no group or other user may
# write, so no one else can plant a link or a file in it.
root_only() {
  local info
  [[ -d $1 && ! -L $1 ]] && info=$(stat -c '%u %a' -- "$1") && [[ ${info%% *} == 0 ]] && (((8#${info#* } & 8#022) == 0))
}

# root_folder DIR : for root's own writes: true when DIR is root_only, made so (install -d, root's, 0755)
# when missing. Only root gets true (another user's run writes nothing). A refusal is said once per folder.
declare -A REFUSED=()
root_folder() {
  local dir=$1
  ((EUID == 0)) || return 1
  if [[ ! -e $dir && ! -L $dir ]]; then
    install -d -m 0755 -o 0 -g 0 -- "$dir" 2>/dev/null || true
  fi
  root_only "$dir" && return 0
  if [[ -z ${REFUSED[$dir]:-} ]]; then
    REFUSED[$dir]=1
    printf 'mlcluster-health: %s is not a folder only root may write (owner root, no group or other write, not a link); nothing is written to or read from it\n' "${dir#"$MLC_ROOT"}" >&2
  fi
  return 1
}

log() {
  if root_folder "${LOG_FILE%/*}" && [[ ! -L $LOG_FILE ]]; then
    printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >>"$LOG_FILE"
  fi
}

report() {
  local status=$1 check=$2 severity=$3 detail=$4 action=${5:-} line
  line="$HOST $status $check $severity: $detail"
  if [[ $status == FAIL && -n $action ]]; then
    line+=". Action: $action"
  fi
  printf '%s\n' "$line"
  log "$line"
  if [[ $status == FAIL && $severity == critical ]]; then
    CRITICAL+=("$check")
  elif [[ $status == FAIL ]]; then
    WARNINGS=$((WARNINGS + 1))
  fi
}

# missing TOOL CHECK: report CHECK as a warning when TOOL is not on PATH (return 0), so a missing
# tool never reads as "0 devices" and never drains a node on its own.
missing() {
  if command -v "$1" >/dev/null 2>&1; then
    return 1
  fi
  report FAIL "$2" warning "$1 not found (PATH=$PATH)" "install $1 or fix its folder in mlcluster-health's TOOL_DIRS"
  return 0
}

# tool COMMAND ARGS...: COMMAND under `timeout` (TOOL_TIMEOUT_S); status 124 when it did not finish in
# time, then and for every later call of COMMAND in this run (marked in HUNG_DIR).
tool() {
  local status=0
  if [[ -n $HUNG_DIR && -e $HUNG_DIR/$1 ]]; then
    return 124
  fi
  timeout -k 2 "$TOOL_TIMEOUT_S" "$@" || status=$?
  if ((status == 124 || status == 137)); then
    [[ -z $HUNG_DIR ]] || : >"$HUNG_DIR/$1"
    return 124
  fi
  return "$status"
}

# hung CHECK TOOL: when TOOL timed out in this run, report CHECK critical (the node must not take jobs
# with a tool, usually its driver, that hangs) and return 0.
hung() {
  if [[ -z $HUNG_DIR || ! -e $HUNG_DIR/$2 ]]; then
    return 1
  fi
  report FAIL "$1" critical "$2 did not answer within ${TOOL_TIMEOUT_S} s" "a hung driver or service: reboot the node; if it persists, $REPLACE"
  return 0
}

# query FIELDS: nvidia-smi's CSV for FIELDS, one GPU a line, spaces after commas removed.
query() {
  local out
  out=$(tool nvidia-smi --query-gpu="$1" --format=csv,noheader 2>/dev/null) || return
  printf '%s\n' "${out//, /,}"
}

check_gpu_count() {
  local count out
  if ((EXPECT_GPUS == 0)); then
    report SKIP gpu_count critical "no NVIDIA GPU expected on this instance type"
    return
  fi
  if missing nvidia-smi gpu_count; then
    return
  fi
  if ! out=$(tool nvidia-smi -L 2>&1); then
    hung gpu_count nvidia-smi && return
    report FAIL gpu_count critical "nvidia-smi failed: ${out%%$'\n'*}" "reboot the node; if nvidia-smi still fails, $REPLACE"
    return
  fi
  count=$(grep -c '^GPU [0-9]' <<<"$out")
  if ((count == EXPECT_GPUS)); then
    report PASS gpu_count critical "$count GPUs"
  else
    report FAIL gpu_count critical "$count of $EXPECT_GPUS GPUs visible" "reboot the node; if a GPU stays missing, $REPLACE"
  fi
}

# kernel_log [SINCE]: this boot's kernel messages without their time or host prefix (so a driver line
# starts with the driver's own prefix), from epoch SINCE on when given (journalctl; dmesg has no
# wall-clock filter, so without journalctl the whole boot is read).
kernel_log() {
  local status=0
  if command -v journalctl >/dev/null 2>&1; then
    tool journalctl -k -b --no-pager -q -o cat ${1:+--since "@$1"} 2>/dev/null || status=$?
    ((status == 0 || status == 124)) && return "$status"
  fi
  tool dmesg --notime 2>/dev/null
}

# record_xid_since: the periodic run's kernel-log window ends at XID_PENDING (the time this run read it).
record_xid_since() {
  local tmp
  if root_folder "${XID_SINCE_FILE%/*}"; then
    # A new file renamed over the old one: a link in its place is replaced, never followed.
    if tmp=$(mktemp "$XID_SINCE_FILE.XXXXXX" 2>/dev/null); then
      if ! { printf '%s\n' "$XID_PENDING" >"$tmp" && chmod 0644 -- "$tmp" && mv -f -- "$tmp" "$XID_SINCE_FILE"; }; then
        rm -f -- "$tmp"
      fi
    fi
  fi
  XID_PENDING=""
}

# check_xid DRAIN: with DRAIN true, count only Xids since the previous periodic run and record this one
# (at once when no critical Xid is found, else once drain() has drained the node).
check_xid() {
  local text codes code critical="" other="" since="" now window="since boot"
  if ((EXPECT_GPUS == 0)); then
    report SKIP xid critical "no NVIDIA GPU expected on this instance type"
    return
  fi
  now=$(date +%s)
  # The previous run's time only from root's own folder and file: one planted by a user could hide an Xid.
  if root_only "${XID_SINCE_FILE%/*}" && [[ -f $XID_SINCE_FILE && ! -L $XID_SINCE_FILE ]] &&
    [[ $(stat -c %u -- "$XID_SINCE_FILE") == 0 ]]; then
    since=$(<"$XID_SINCE_FILE")
    [[ $since =~ ^[0-9]+$ ]] || since=""
  fi
  if [[ -n $since ]] && command -v journalctl >/dev/null 2>&1; then
    window="since @$since"
  else
    since=""
  fi
  # An empty log of the whole boot means it was not readable (it starts with the kernel's banner).
  if ! text=$(kernel_log "$since") || [[ -z $text && -z $since ]]; then
    if hung xid journalctl || hung xid dmesg; then
      return
    fi
    report SKIP xid critical "the kernel log is not readable by $(id -un) (run as root)"
    return
  fi
  # The window moves on (record_xid_since) when no critical Xid was found, or once the node is drained:
  # a run killed before its drain sees the Xid again next time.
  XID_PENDING=$now
  codes=$(sed -nE 's/^NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): ([0-9]+),.*/\1/p' <<<"$text" | sort -n -u | tr '\n' ' ')
  for code in $codes; do
    if [[ $CRITICAL_XIDS == *" $code "* ]]; then critical+="$code "; else other+="$code "; fi
  done
  if [[ -n $critical ]]; then
    report FAIL xid critical "Xid ${critical% } $window" "$REPLACE (NVIDIA's Xid guide: these need a GPU reset or service)"
  elif [[ -n $other ]]; then
    report FAIL xid warning "Xid ${other% } $window" "look up each code in NVIDIA's Xid guide; watch for repeats"
  else
    report PASS xid critical "no Xid $window"
  fi
  if [[ -z $critical ]] && $1; then
    record_xid_since
  fi
  if grep -Eq '^nvidia-nvswitch[0-9]*: SXid \(' <<<"$text"; then
    report FAIL sxid warning "NVSwitch SXid errors $window" "check the fabric manager (systemctl status nvidia-fabricmanager) and NVLink"
  fi
}

check_ecc() {
  local rows index uncorrected failure pending bad="" waiting=""
  if ((EXPECT_GPUS == 0)); then
    report SKIP ecc critical "no NVIDIA GPU expected on this instance type"
    return
  fi
  if missing nvidia-smi ecc || hung ecc nvidia-smi; then
    return
  fi
  if ! rows=$(query index,ecc.errors.uncorrected.volatile.total,remapped_rows.failure,remapped_rows.pending) || [[ -z $rows ]]; then
    hung ecc nvidia-smi && return
    report FAIL ecc critical "nvidia-smi cannot report ECC" "reboot the node; if it persists, $REPLACE"
    return
  fi
  while IFS=, read -r index uncorrected failure pending; do
    [[ -n $index ]] || continue
    if [[ $uncorrected =~ ^[0-9]+$ ]] && ((uncorrected > 0)) || [[ $failure == Yes ]]; then
      bad+="GPU $index (uncorrected $uncorrected, remap failure $failure) "
    elif [[ $pending == Yes ]]; then
      waiting+="$index "
    fi
  done <<<"$rows"
  if [[ -n $bad ]]; then
    report FAIL ecc critical "${bad% }" "$REPLACE"
  elif [[ -n $waiting ]]; then
    report FAIL ecc warning "row remapping pending on GPU ${waiting% }" "reboot the node (a GPU reset applies the remapping)"
  else
    report PASS ecc critical "no uncorrected ECC errors, no failed or pending row remapping"
  fi
}

check_throttle() {
  local rows index hw thermal power slow=""
  if ((EXPECT_GPUS == 0)); then
    report SKIP throttle warning "no NVIDIA GPU expected on this instance type"
    return
  fi
  if missing nvidia-smi throttle || hung throttle nvidia-smi; then
    return
  fi
  rows=$(query index,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown) ||
    rows=$(query index,clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown) ||
    rows=""
  if [[ -z $rows ]]; then
    hung throttle nvidia-smi && return
    report FAIL throttle warning "nvidia-smi cannot report clock event reasons" "check the driver (nvidia-smi -q -d PERFORMANCE)"
    return
  fi
  while IFS=, read -r index hw thermal power; do
    [[ -n $index ]] || continue
    if [[ $hw == Active || $thermal == Active || $power == Active ]]; then
      slow+="$index "
    fi
  done <<<"$rows"
  if [[ -n $slow ]]; then
    report FAIL throttle warning "hardware clock slowdown on GPU ${slow% }" "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE); replace the node if it persists idle"
  else
    report PASS throttle warning "no hardware clock slowdown"
  fi
}

check_efa_count() {
  local device count=0
  if ((EXPECT_EFA == 0)); then
    report SKIP efa_count critical "no EFA expected on this instance type"
    return
  fi
  for device in "$MLC_ROOT"/sys/class/infiniband/*; do
    if [[ $(readlink -f "$device/device/driver" 2>/dev/null) == */efa ]]; then
      count=$((count + 1))
    fi
  done
  if ((count == EXPECT_EFA)); then
    report PASS efa_count critical "$count EFA devices"
  else
    report FAIL efa_count critical "$count of $EXPECT_EFA EFA devices" "reboot the node; if a device stays missing, $REPLACE"
  fi
}

check_fi_info() {
  local out count
  if ((EXPECT_EFA == 0)); then
    report SKIP fi_info critical "no EFA expected on this instance type"
    return
  fi
  if missing fi_info fi_info; then
    return
  fi
  if ! out=$(tool fi_info -p efa -t FI_EP_RDM 2>&1); then
    hung fi_info fi_info && return
    report FAIL fi_info critical "fi_info -p efa failed: ${out%%$'\n'*}" "reinstall the EFA software (the EFA installer), then reboot"
    return
  fi
  # libfabric >= 2.1 lists every device twice (fabric efa-direct, then efa) under one domain name.
  count=$(sed -n 's/^ *domain: *\([^ ]*\) *$/\1/p' <<<"$out" | sort -u | grep -c .)
  if ((count == EXPECT_EFA)); then
    report PASS fi_info critical "libfabric's efa provider lists $count devices"
  else
    report FAIL fi_info critical "libfabric's efa provider lists $count of $EXPECT_EFA devices" "reboot the node; if it persists, $REPLACE"
  fi
}

# The hard locked-memory limit of this process, from /proc/self/limits: `Max locked memory  <soft>
# <hard> bytes` (proc(5)). Run by slurmd it is slurmd's, not a job's: Slurm gives a job the submitter's
# soft limit (PropagateResourceLimits), capped by slurmd's hard limit. So only the hard limit says
# something about jobs here, and only as a warning.
check_memlock() {
  local limit
  limit=$(awk '/^Max locked memory/ {print $5}' "$MLC_ROOT/proc/self/limits" 2>/dev/null)
  if ((EXPECT_EFA == 0)); then
    report SKIP memlock warning "no EFA expected on this instance type"
  elif [[ $limit == unlimited ]]; then
    report PASS memlock warning "hard locked-memory limit unlimited"
  else
    report FAIL memlock warning "hard locked-memory limit ${limit:-unknown} bytes (EFA registers its buffers)" \
      "set LimitMEMLOCK=infinity for slurmd and memlock unlimited in /etc/security/limits.d, then restart slurmd"
  fi
}

check_neuron() {
  local out count
  if ((EXPECT_NEURON == 0)); then
    report SKIP neuron critical "no Neuron device expected on this instance type"
    return
  fi
  if missing neuron-ls neuron; then
    return
  fi
  if ! out=$(tool neuron-ls 2>/dev/null) && hung neuron neuron-ls; then
    return
  fi
  count=$(awk -F'|' 'NF > 2 && $2 ~ /^ *[0-9]+ *$/ {n++} END {print n + 0}' <<<"$out")
  # The NEURON CORES column of the same rows (neuron-ls: DEVICE, CORES, MEMORY, ...).
  NEURON_CORES=$(awk -F'|' 'NF > 3 && $2 ~ /^ *[0-9]+ *$/ && $3 ~ /^ *[0-9]+ *$/ {n += $3} END {print n + 0}' <<<"$out")
  if ((count == EXPECT_NEURON)); then
    report PASS neuron critical "$count Neuron devices"
  else
    report FAIL neuron critical "$count of $EXPECT_NEURON Neuron devices" "check the driver (modinfo neuron; sudo dmesg | grep -i neuron); if a device stays missing, $REPLACE"
  fi
}

check_dcgm() {
  local out
  if ((EXPECT_GPUS == 0)); then
    report SKIP dcgm_diag critical "no NVIDIA GPU expected on this instance type"
    return
  fi
  if ! command -v dcgmi >/dev/null 2>&1; then
    report SKIP dcgm_diag critical "dcgmi is not installed"
    return
  fi
  if out=$(timeout -k 10 "$DEEP_TIMEOUT_S" dcgmi diag -r 2 2>&1); then
    report PASS dcgm_diag critical "dcgmi diag -r 2 passed"
  elif (($? == 124)); then
    report FAIL dcgm_diag critical "dcgmi diag -r 2 did not finish within $DEEP_TIMEOUT_S s" "check nv-hostengine (systemctl status nvidia-dcgm); if it persists, $REPLACE"
  else
    out=$(grep -E '\| *Fail' <<<"$out" | sed -E 's/^\| *//; s/ *\| */: /g; s/: *$//' | head -n 3 | paste -s -d ';' -)
    report FAIL dcgm_diag critical "dcgmi diag -r 2 failed${out:+: $out}" "$REPLACE"
  fi
}

# How each backend installs nccl-tests again: HyperPod's lifecycle step nccl_tests, ParallelCluster's node
# step nccl_efa (run.sh keeps the checked step scripts in /opt/mlcluster/node-scripts).
NCCL_TESTS_HYPERPOD="re-run the lifecycle step: sudo bash /opt/mlcluster/lifecycle/on_create.sh nccl_tests"
NCCL_TESTS_PCLUSTER="re-run the node step: sudo MLCLUSTER_STEP=nccl_efa MLCLUSTER_NODE_ROLE=compute bash /opt/mlcluster/node-scripts/nccl_efa.sh (its log: /var/log/mlcluster/nccl_efa.log)"

# backend: the service this node belongs to, for repair advice: HyperPod writes
# /opt/ml/config/resource_config.json on every node; ParallelCluster installs itself in /opt/parallelcluster.
backend() {
  if [[ -e $MLC_ROOT/opt/ml/config/resource_config.json ]]; then
    echo hyperpod
  elif [[ -d $MLC_ROOT/opt/parallelcluster ]]; then
    echo pcluster
  else
    echo unknown
  fi
}

check_nccl_single() {
  local out avg advice
  if ((EXPECT_GPUS == 0)); then
    report SKIP nccl_single critical "no NVIDIA GPU expected on this instance type"
    return
  fi
  if [[ ! -x $MLC_ROOT$NCCL_TESTS ]]; then
    case $(backend) in
      hyperpod) advice=$NCCL_TESTS_HYPERPOD ;;
      pcluster) advice=$NCCL_TESTS_PCLUSTER ;;
      *) advice="HyperPod: $NCCL_TESTS_HYPERPOD; ParallelCluster: $NCCL_TESTS_PCLUSTER" ;;
    esac
    report FAIL nccl_single critical "$NCCL_TESTS is not installed" "$advice"
    return
  fi
  # The library path of `mlcluster smoke` (nccl-tests link Open MPI and NCCL without an rpath).
  # shellcheck disable=SC2034 # the prelude also records the plugin's folder (mlc_ofi), unused here
  out=$(
    # BEGIN library_prelude hyperpod (mlcluster.cli.nccl.library_prelude; a test keeps them equal)
    mlc_path=""; mlc_missing=""; mlc_ofi=""; r=${MLC_ROOT:-}
    mlc_dir() {
      local name=$1 file=$2 d
      shift 2
      for d in "$@"; do
        if [ -d "$r$d" ] && [ -e "$r$d/$file" ]; then
          mlc_path="$mlc_path${mlc_path:+:}$r$d"
          if [ "$name" = ofi-nccl ]; then mlc_ofi="$r$d"; fi
          return 0
        fi
      done
      mlc_missing="$mlc_missing $name"
    }
    mlc_dir efa . /opt/amazon/efa/lib
    mlc_dir openmpi . /opt/amazon/openmpi/lib
    mlc_dir ofi-nccl . /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu /opt/amazon/ofi-nccl/lib
    mlc_dir nccl libnccl.so.2 /opt/nccl/build/lib /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64
    mlc_dir cuda . /usr/local/cuda/lib64
    export LD_LIBRARY_PATH="$mlc_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # END library_prelude
    timeout -k 10 "$DEEP_TIMEOUT_S" "$MLC_ROOT$NCCL_TESTS" -b 1G -e 4G -f 2 -g "$EXPECT_GPUS" 2>&1 ||
      echo "all_reduce_perf exited $? (124: did not finish within $DEEP_TIMEOUT_S s)"
  )
  avg=$(sed -n 's/^# *Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' <<<"$out")
  if [[ -n $avg ]] && grep -q '^# *Out of bounds values *: 0 OK' <<<"$out"; then
    report PASS nccl_single critical "all_reduce on $EXPECT_GPUS GPUs: avg bus bandwidth $avg GB/s"
  else
    report FAIL nccl_single critical "all_reduce on $EXPECT_GPUS GPUs failed: $(tail -n 1 <<<"$out")" \
      "check NVLink (nvidia-smi nvlink -s) and the fabric manager; if it persists, $REPLACE"
  fi
}

check_nccom_single() {
  local out avg status=0
  if ((EXPECT_NEURON == 0)); then
    report SKIP nccom_single critical "no Neuron device expected on this instance type"
    return
  fi
  # Critical, unlike a missing tool of the quick tier: nccom-test ships in aws-neuronx-tools with neuron-ls,
  # so a Neuron node without it lacks its tools, and the deep tier would pass it with no all-reduce run.
  if ! command -v nccom-test >/dev/null 2>&1; then
    report FAIL nccom_single critical "nccom-test not found (PATH=$PATH): no all-reduce ran" "install aws-neuronx-tools (it ships neuron-ls and nccom-test); if it is installed, fix its folder in mlcluster-health's TOOL_DIRS"
    return
  fi
  if ((NEURON_CORES == 0)); then
    report FAIL nccom_single critical "neuron-ls listed no NeuronCores to run nccom-test on" "check the driver (modinfo neuron; sudo dmesg | grep -i neuron); if it persists, $REPLACE"
    return
  fi
  # The options of the NCCOM-TEST guide (Neuron SDK 2.28.0): --check verifies the results (given before
  # another option: it takes an optional mode), --non-interactive leaves out the progress animation. A
  # failed size ends the output with `<N> errors found - test failed`. One rank per NeuronCore neuron-ls lists.
  out=$(timeout -k 10 "$DEEP_TIMEOUT_S" nccom-test -r "$NEURON_CORES" -b 64M -e 1G -f 2 --check -d fp32 --non-interactive allr 2>&1) || status=$?
  if ((status == 124 || status == 137)); then
    report FAIL nccom_single critical "nccom-test all-reduce did not finish within $DEEP_TIMEOUT_S s" "check the Neuron runtime (neuron-top; sudo dmesg | grep -i neuron); if it persists, $REPLACE"
    return
  fi
  avg=$(sed -n 's/^Avg bus bandwidth:[[:space:]]*\([0-9.]*\)[[:space:]]*GB\/s.*/\1/p' <<<"$out")
  if [[ -n $avg ]] && ! grep -q 'errors\{0,1\} found - test failed' <<<"$out"; then
    report PASS nccom_single critical "all-reduce on $NEURON_CORES NeuronCores: avg bus bandwidth $avg GB/s"
  else
    report FAIL nccom_single critical "nccom-test all-reduce failed: $(tail -n 1 <<<"$out")" "$REPLACE"
  fi
}

drain() {
  local node=${SLURMD_NODENAME:-$HOST} reason
  reason="mlcluster-health: ${CRITICAL[*]} failed"
  if missing scontrol drain; then
    return
  fi
  if tool scontrol update nodename="$node" state=drain reason="$reason"; then
    if [[ -n $XID_PENDING ]]; then
      record_xid_since
    fi
    log "drained $node: $reason"
    printf '%s: drained %s (%s)\n' "$HOST" "$node" "$reason"
  else
    log "could not drain $node: $reason"
    printf '%s: could not drain %s (%s)\n' "$HOST" "$node" "$reason" >&2
  fi
}

main() {
  local tier=quick drain_node=false require_env=false
  EXPECT_GPUS=0 EXPECT_EFA=0 EXPECT_NEURON=0
  if [[ -r $ENV_FILE ]]; then
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    EXPECT_GPUS=${MLC_EXPECT_GPUS:-0} EXPECT_EFA=${MLC_EXPECT_EFA:-0} EXPECT_NEURON=${MLC_EXPECT_NEURON:-0}
  fi
  while (($# > 0)); do
    case $1 in
      --tier) tier=${2:-} && shift 2 ;;
      --drain) drain_node=true && shift ;;
      --expect-gpus) EXPECT_GPUS=${2:-} && shift 2 ;;
      --expect-efa) EXPECT_EFA=${2:-} && shift 2 ;;
      --expect-neuron) EXPECT_NEURON=${2:-} && shift 2 ;;
      --require-env) require_env=true && shift ;;
      *) tier=bad && break ;;
    esac
  done
  if [[ $tier != quick && $tier != deep ]] || ! [[ $EXPECT_GPUS =~ ^[0-9]+$ && $EXPECT_EFA =~ ^[0-9]+$ && $EXPECT_NEURON =~ ^[0-9]+$ ]]; then
    echo "usage: mlcluster-health [--tier quick|deep] [--drain] [--expect-gpus N] [--expect-efa N] [--expect-neuron N] [--require-env]" >&2
    exit 2
  fi
  if $require_env && [[ ! -r $ENV_FILE ]]; then
    report FAIL expectations critical "${ENV_FILE#"$MLC_ROOT"} is missing: nothing says what this node must show" \
      "re-run the lifecycle step that writes it (HyperPod: install_tools; ParallelCluster: health_check)"
  fi
  check_gpu_count
  check_xid "$drain_node"
  check_ecc
  check_throttle
  check_efa_count
  check_fi_info
  check_memlock
  check_neuron
  if [[ $tier == deep ]]; then
    check_dcgm
    check_nccl_single
    check_nccom_single
  fi
  if ((${#CRITICAL[@]} > 0)); then
    printf '%s: %d critical, %d warning\n' "$HOST" "${#CRITICAL[@]}" "$WARNINGS"
    if $drain_node; then
      drain
    fi
    exit 1
  fi
  if ((WARNINGS > 0)); then
    printf '%s: 0 critical, %d warning\n' "$HOST" "$WARNINGS"
  else
    printf '%s: healthy\n' "$HOST"
  fi
}

main "$@"
