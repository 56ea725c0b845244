"""Which metrics exporters run where, on which port, and the metric names dashboards may use.

The contract between the node scripts (which install and start the
exporters), the collector's scrape configuration (which must reach each one
on the right nodes through the security groups) and the Grafana dashboards
(whose queries may use only the metric names listed here). The node and
dashboard tests read this table, so a name changes in one place.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

#: Where an exporter runs: every node, nodes with NVIDIA GPUs, nodes with Neuron devices, the head node/controller.
Nodes = Literal["all", "gpu", "neuron", "controller"]


@dataclasses.dataclass(frozen=True)
class Exporter:
    """One scrape job: an exporter on ``nodes`` listening on ``port``."""

    job: str
    port: int
    nodes: Nodes
    what: str
    metrics: tuple[str, ...]


#: Metrics written by our own textfile collectors into the node exporter's textfile folder. The EFA ones are
#: ``mlcluster_efa_<counter>_total{device,port}``, one per port counter of the Linux EFA driver
#: (``/sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter>``; rdma_write_bytes needs a
#: driver with RDMA write, a counter the driver lacks is left out).
EFA_METRICS = (
    "mlcluster_efa_rx_bytes_total",
    "mlcluster_efa_tx_bytes_total",
    "mlcluster_efa_rx_drops_total",
    "mlcluster_efa_rdma_read_bytes_total",
    "mlcluster_efa_rdma_write_bytes_total",
)
SLURM_METRICS = (
    "mlcluster_slurm_nodes",
    "mlcluster_slurm_jobs",
)

EXPORTERS: tuple[Exporter, ...] = (
    Exporter(
        job="node",
        port=9100,
        nodes="all",
        what="Prometheus node exporter: CPU, memory, disks, network; EFA counters and (controller) Slurm "
        "through its textfile collector",
        metrics=(
            "node_cpu_seconds_total",
            "node_memory_MemAvailable_bytes",
            "node_memory_MemTotal_bytes",
            "node_filesystem_avail_bytes",
            "node_filesystem_size_bytes",
            "node_network_receive_bytes_total",
            "node_network_transmit_bytes_total",
            "node_load1",
            *EFA_METRICS,
            *SLURM_METRICS,
        ),
    ),
    Exporter(
        job="dcgm",
        port=9400,
        nodes="gpu",
        what="NVIDIA DCGM exporter: GPU utilisation, memory, power, temperature, Xid errors, ECC, throttling",
        metrics=(
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
        ),
    ),
    Exporter(
        job="neuron",
        port=9410,
        nodes="neuron",
        what="AWS Neuron monitor through its Prometheus front end: NeuronCore utilisation, device memory, "
        "hardware errors",
        metrics=(
            "neuroncore_utilization_ratio",
            "neuron_runtime_memory_used_bytes",
            "hardware_ecc_events_total",
            "execution_errors_total",
        ),
    ),
)


def metric_names() -> frozenset[str]:
    """Every metric name a dashboard may query."""
    return frozenset(name for exporter in EXPORTERS for name in exporter.metrics)
