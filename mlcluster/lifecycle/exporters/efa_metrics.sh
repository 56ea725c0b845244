#!/usr/bin/env bash
# mlcluster-efa-metrics OUTPUT_DIR [SYSFS]: the EFA port counters for the node exporter's textfile collector.
#
# Runs as the exporter user from a systemd timer (installed by the exporters step on nodes with an EFA
# device). Reads /sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter> of every device
# the efa driver owns and writes mlcluster_efa_<counter>_total{device,port} to OUTPUT_DIR/mlcluster_efa.prom
# through a temporary file in the same folder and a rename, so the node exporter never reads half a
# file. A counter the driver does not offer (rdma_write_bytes on older kernels) is left out. The same file
# ships with the HyperPod lifecycle scripts; the metric names are mlcluster/exporters.py's EFA_METRICS.
set -euo pipefail

out_dir="${1:?usage: mlcluster-efa-metrics OUTPUT_DIR [SYSFS]}"
sysfs="${2:-/sys}"
readonly COUNTERS=(rx_bytes tx_bytes rx_drops rdma_read_bytes rdma_write_bytes)

tmp="$(mktemp "${out_dir}/.mlcluster_efa.prom.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
for counter in "${COUNTERS[@]}"; do
  described=0
  for file in "${sysfs}"/class/infiniband/*/ports/*/hw_counters/"${counter}"; do
    [[ -r "${file}" ]] || continue
    port_dir="${file%/hw_counters/*}"
    device_dir="${port_dir%/ports/*}"
    [[ "$(readlink "${device_dir}/device/driver" || true)" == */efa ]] || continue
    value="$(<"${file}")"
    [[ "${value}" =~ ^[0-9]+$ ]] || continue
    if ((!described)); then
      printf '# HELP mlcluster_efa_%s_total EFA port counter %s (hw_counters of the efa driver)\n' "${counter}" "${counter}"
      printf '# TYPE mlcluster_efa_%s_total counter\n' "${counter}"
      described=1
    fi
    printf 'mlcluster_efa_%s_total{device="%s",port="%s"} %s\n' "${counter}" "${device_dir##*/}" "${port_dir##*/}" "${value}"
  done
done >"${tmp}"
chmod 0644 "${tmp}"
mv -f "${tmp}" "${out_dir}/mlcluster_efa.prom"
trap - EXIT
