#!/usr/bin/env bash
# mlcluster-slurm-metrics OUTPUT_DIR: Slurm node and job counts for the node exporter's textfile collector.
#
# Runs as the exporter user from a systemd timer on the head node (ParallelCluster) or the controller
# (HyperPod). Asks Slurm read-only (sinfo, squeue) and writes mlcluster_slurm_nodes{partition,state} and
# mlcluster_slurm_jobs{partition,state} to OUTPUT_DIR/mlcluster_slurm.prom through a temporary file in
# the same folder and a rename. Every task of a job array counts as a job (squeue --array: without it
# Slurm folds an array's pending tasks into one line). When Slurm does not answer, the file is removed (the series go absent
# rather than stale) and the run fails, so systemd logs it. The same file ships with the HyperPod
# lifecycle scripts; the metric names are mlcluster/exporters.py's SLURM_METRICS.
set -euo pipefail

out_dir="${1:?usage: mlcluster-slurm-metrics OUTPUT_DIR}"
target="${out_dir}/mlcluster_slurm.prom"

# counts NAME HELP: "PARTITION STATE COUNT" lines on stdin summed into NAME{partition,state} samples.
counts() {
  printf '# HELP %s %s\n# TYPE %s gauge\n' "$1" "$2" "$1"
  awk -v name="$1" '
    function label(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
    NF >= 3 { sum[$1 SUBSEP $2] += $3 }
    END {
      for (key in sum) {
        split(key, part, SUBSEP)
        printf "%s{partition=\"%s\",state=\"%s\"} %d\n", name, label(part[1]), label(part[2]), sum[key]
      }
    }' | sort
}

if ! nodes="$(sinfo --noheader --format='%R %T %D')" || ! jobs="$(squeue --all --array --noheader --format='%P %T')"; then
  rm -f "${target}"
  echo "mlcluster-slurm-metrics: Slurm did not answer (sinfo/squeue failed); removed ${target}" >&2
  exit 1
fi
tmp="$(mktemp "${out_dir}/.mlcluster_slurm.prom.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
{
  counts mlcluster_slurm_nodes "Slurm nodes per partition and state (sinfo)" <<<"${nodes}"
  awk 'NF >= 2 { print $1, $2, 1 }' <<<"${jobs}" | counts mlcluster_slurm_jobs "Slurm jobs per partition and state (squeue)"
} >"${tmp}"
chmod 0644 "${tmp}"
mv -f "${tmp}" "${target}"
trap - EXIT
