#!/usr/bin/env bash
# shellcheck disable=SC2317  # the generated-file data section after the final exit is read, never run
# SageMaker HyperPod OnCreate entrypoint for mlcluster Slurm nodes (Ubuntu).
#
# HyperPod runs it as root on every node from the folder it downloaded the lifecycle S3 prefix
# into. It finds this node's role (steps/identify_node.sh), asks plan.py which steps that role
# runs, and runs each steps/<step>.sh in order. Each step is idempotent and logs to
# /var/log/provision/<step>.log (and the console, which HyperPod sends to CloudWatch). The first
# failing step stops the run with a message naming it.
#
# Usage: on_create.sh            every step this node's role needs
#        on_create.sh STEP...    identify the node again, then only the named steps (a re-run
#                                after a fix; the scripts stay in /opt/mlcluster/lifecycle)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MLC_LIFECYCLE_DIR=$HERE

# The SHA-256 of every other file of this folder, written in by mlcluster when it uploads the folder
# (HyperPodLifecycle). The run stops before any step when a file differs, is missing, or was added.
read -r -d '' MANIFEST <<'MLCLUSTER_MANIFEST' || true
@MLCLUSTER_MANIFEST@
MLCLUSTER_MANIFEST
# Generated at deploy time (deploy-time values in them, so no checksum exists at synth time): each
# one must equal its copy below, written in by mlcluster with the same deploy-time values. The
# collector's two files are there only when observability.prometheus is on.
GENERATED_FILES=(mlcluster_features.json provisioning_parameters.json collector.yml collector_targets.json)

# Their texts are in the data section after this script's last command, one "NAME BASE64" line each
# below the line GENERATED_SECTION. Deploy-time values reach this script only there: bash stops at
# the `exit` above that section and never reads it as commands, and every line of it is checked
# against that shape before it is decoded, so a value with a newline, a quote or a delimiter in it
# is refused, never run.
GENERATED_SECTION=__MLCLUSTER_GENERATED_FILES__
declare -A GENERATED=()

refuse() {
  printf 'ERROR: %s\n' "$*" >&2
  exit 1
}

# load_generated : read the data section into GENERATED (name -> base64 text).
load_generated() {
  local line name in_section=false
  while IFS= read -r line || [[ -n $line ]]; do
    if [[ $in_section == false ]]; then
      [[ $line != "$GENERATED_SECTION" ]] || in_section=true
      continue
    fi
    [[ $line =~ ^([a-z_]+[.](json|yml))\ ([A-Za-z0-9+/]*={0,2})$ ]] ||
      refuse "on_create.sh: a line of its generated-files section is not 'NAME BASE64'; refusing to run"
    name=${BASH_REMATCH[1]}
    [[ " ${GENERATED_FILES[*]} " == *" $name "* && -z ${GENERATED[$name]+set} ]] ||
      refuse "on_create.sh: its generated-files section names $name twice or a file it does not know; refusing to run"
    GENERATED[$name]=${BASH_REMATCH[3]}
  done <"${BASH_SOURCE[0]}"
}

# generated_copy NAME : print the text mlcluster uploaded as NAME; fails for a file it did not upload.
generated_copy() {
  [[ -n ${GENERATED[$1]+set} ]] || return 1
  base64 --decode <<<"${GENERATED[$1]}"
}

# verify_files : before anything of this folder runs (lib.sh included): every file listed in
# MANIFEST has its checksum, and no other file is here.
verify_files() {
  local expected file actual relative listed=" " count=0 i files=() wanted=() sums=()
  [[ $MANIFEST != "@MLCLUSTER_MANIFEST@"* ]] ||
    refuse "on_create.sh carries no checksum manifest; upload the folder through mlcluster (HyperPodLifecycle)"
  load_generated
  while read -r expected file; do
    [[ -f $HERE/$file && ! -L $HERE/$file ]] || refuse "checksum manifest: $file is missing; refusing to run"
    files+=("$file")
    wanted+=("$expected")
    listed+="$file "
  done <<<"$MANIFEST"
  # One sha256sum for all of them, its lines in the order of the arguments.
  mapfile -t sums < <(cd "$HERE" && sha256sum -- "${files[@]}")
  ((${#sums[@]} == ${#files[@]})) || refuse "could not compute the checksums of the lifecycle files; refusing to run"
  for i in "${!files[@]}"; do
    file=${files[i]} expected=${wanted[i]} actual=${sums[i]%% *}
    [[ $actual == "$expected" ]] ||
      refuse "checksum mismatch for $file (expected $expected, found $actual): the lifecycle files were changed after mlcluster uploaded them; refusing to run"
  done
  count=${#files[@]}
  # The generated files: each one here must be the one uploaded, byte for byte.
  for file in "${GENERATED_FILES[@]}"; do
    if [[ -e $HERE/$file || -L $HERE/$file ]]; then
      [[ -f $HERE/$file && ! -L $HERE/$file ]] || refuse "$file is not a regular file; refusing to run"
      generated_copy "$file" >/dev/null || refuse "$file was not uploaded by mlcluster (on_create.sh has no copy of it); refusing to run"
      cmp -s -- "$HERE/$file" <(generated_copy "$file") ||
        refuse "$file differs from the copy mlcluster uploaded with on_create.sh: it was changed after the upload; refusing to run"
      count=$((count + 1))
    elif generated_copy "$file" >/dev/null; then
      refuse "$file is missing; refusing to run"
    fi
  done
  while IFS= read -r -d '' file; do
    relative=${file#"$HERE"/}
    if [[ $relative == on_create.sh || " ${GENERATED_FILES[*]} " == *" $relative "* || $listed == *" $relative "* ]]; then
      continue
    fi
    refuse "$relative is not in the checksum manifest: it was added after mlcluster uploaded the folder; refusing to run"
  done < <(find "$HERE" \( -name __pycache__ -prune \) -o \( -type f ! -name '*.pyc' -print0 \))
  printf 'checked %d files against the checksum manifest\n' "$count" >&2
}

verify_files

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# say MESSAGE : log MESSAGE to the console and to on_create.log.
say() {
  local line
  line=$(log "$@" 2>&1)
  printf '%s\n' "$line" >>"$LOG_DIR/on_create.log"
  printf '%s\n' "$line" >&2
}

# run_step NAME : run steps/NAME.sh with its output to the console and /var/log/provision/NAME.log.
run_step() {
  local name=$1 log_file="$LOG_DIR/$1.log" status=0
  say "step $name: start (log: $log_file)"
  printf '=== %(%Y-%m-%dT%H:%M:%S%z)T step %s\n' -1 "$name" >>"$log_file"
  MLC_STEP=$name bash "$HERE/steps/$name.sh" 2>&1 | tee -a "$log_file" || status=$?
  if ((status != 0)); then
    say "step $name: FAILED (exit code $status); the run stops here. Details: $log_file"
    exit "$status"
  fi
  say "step $name: done"
}

known_steps() {
  local file
  for file in "$HERE"/steps/*.sh; do
    basename "$file" .sh
  done
}

main() {
  if [[ -z $MLC_ROOT && $EUID -ne 0 ]]; then
    die "run on_create.sh as root"
  fi
  mkdir -p "$LOG_DIR" "$ETC_DIR" "$STATE_DIR" "$TMP_DIR"
  exec 9>"$STATE_DIR/on_create.lock"
  flock -n 9 || die "another on_create.sh is running (lock: $STATE_DIR/on_create.lock)"

  local step steps=()
  for step in "$@"; do
    if [[ ! -f $HERE/steps/$step.sh || $step == identify_node ]]; then
      die "unknown step '$step'; allowed: $(known_steps | grep -vx identify_node | tr '\n' ' ')"
    fi
  done

  say "mlcluster lifecycle: start in $HERE"
  run_step identify_node
  load_node_env
  if (($# > 0)); then
    steps=("$@")
  else
    local planned
    # shellcheck disable=SC2153  # MLC_ROLE comes from node.env
    planned=$(plan steps --role "$MLC_ROLE" --features "$HERE/mlcluster_features.json")
    mapfile -t steps <<<"$planned"
  fi
  say "node $MLC_INSTANCE_NAME ($MLC_ADDRESS) is a $MLC_ROLE in group $MLC_GROUP; steps: ${steps[*]}"
  for step in "${steps[@]}"; do
    run_step "$step"
  done
  say "mlcluster lifecycle: all ${#steps[@]} steps done"
}

main "$@"
# Nothing below runs: bash stops at this exit. The data section (see GENERATED_SECTION) follows.
exit 0
__MLCLUSTER_GENERATED_FILES__
# @MLCLUSTER_GENERATED@
