"""The Grafana dashboards and data sources of an environment, built as JSON from code.

The provisioning custom resource (``mlcluster/handlers/grafana_provisioner``)
writes them into the environment's Amazon Managed Grafana workspace through
Grafana's HTTP API: the data sources by fixed uid, every dashboard with
``overwrite``. Every query reads the Prometheus data source by its uid and
uses only metric names of the exporter contract (``mlcluster.exporters``);
the tests parse each expression to hold that.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: The uid of the Amazon Managed Service for Prometheus data source every panel queries.
PROMETHEUS_UID = "mlcluster-prometheus"
#: The uid of the CloudWatch data source (the Lustre and cluster metrics of the CloudWatch dashboard).
CLOUDWATCH_UID = "mlcluster-cloudwatch"
PROMETHEUS = {"type": "prometheus", "uid": PROMETHEUS_UID}
#: Grafana's dashboard JSON schema version the panels are written in (Grafana 10.x reads it as is).
SCHEMA_VERSION = 39
PANEL_HEIGHT = 8
GRID_WIDTH = 24
#: Rates and increases look back this far: several scrapes even at the slowest interval (300 s) allowed.
WINDOW = "[10m]"
#: Node-exporter file systems that are not disks.
NOT_DISKS = 'fstype!~"tmpfs|overlay|squashfs|nsfs|ramfs"'


@dataclasses.dataclass(frozen=True)
class Query:
    """One PromQL expression of a panel and how its series are named."""

    expr: str
    legend: str = "{{instance}}"


@dataclasses.dataclass(frozen=True)
class Panel:
    """A time-series panel: a title, Grafana's unit id and its queries."""

    title: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 12
    description: str = ""


@dataclasses.dataclass(frozen=True)
class Dashboard:
    """A dashboard: a fixed uid (provisioning overwrites it), a title and its panels in rows of 24 columns."""

    uid: str
    title: str
    panels: tuple[Panel, ...]


def _per_gpu(expr: str) -> Query:
    return Query(expr, "{{instance}} GPU {{gpu}}")


GPU = Dashboard(
    uid="mlcluster-gpu",
    title="GPUs",
    panels=(
        Panel("GPU utilisation", "percent", (_per_gpu("DCGM_FI_DEV_GPU_UTIL"),)),
        Panel(
            "GPU memory used",
            "percent",
            (_per_gpu("100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)"),),
        ),
        Panel("GPU power", "watt", (_per_gpu("DCGM_FI_DEV_POWER_USAGE"),)),
        Panel("GPU temperature", "celsius", (_per_gpu("DCGM_FI_DEV_GPU_TEMP"),)),
        Panel(
            "Last Xid error",
            "none",
            (_per_gpu("DCGM_FI_DEV_XID_ERRORS > 0"),),
            description="The code of the last Xid error a GPU reported (no series: none). Codes: NVIDIA's Xid "
            "catalogue; 48, 63, 64, 74, 79, 94, 95 usually mean the node needs draining.",
        ),
        Panel(
            "ECC errors (per hour)",
            "short",
            (
                Query(f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{WINDOW}) * 6", "{{instance}} GPU {{gpu}} double-bit"),
                Query(f"increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{WINDOW}) * 6", "{{instance}} GPU {{gpu}} single-bit"),
            ),
            description="Volatile ECC errors since the last driver load; any double-bit error needs attention.",
        ),
        Panel(
            "Thermal throttling",
            "percentunit",
            (_per_gpu(f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{WINDOW}) / 1e6"),),
            width=GRID_WIDTH,
            description="Share of the time each GPU was slowed down for temperature (DCGM counts microseconds).",
        ),
    ),
)

NETWORK = Dashboard(
    uid="mlcluster-network",
    title="EFA and network",
    panels=(
        Panel(
            "EFA traffic",
            "Bps",
            (
                Query(f"sum by (instance) (rate(mlcluster_efa_rx_bytes_total{WINDOW}))", "{{instance}} received"),
                Query(f"sum by (instance) (rate(mlcluster_efa_tx_bytes_total{WINDOW}))", "{{instance}} sent"),
            ),
        ),
        Panel(
            "EFA RDMA",
            "Bps",
            (
                Query(f"sum by (instance) (rate(mlcluster_efa_rdma_read_bytes_total{WINDOW}))", "{{instance}} read"),
                Query(f"sum by (instance) (rate(mlcluster_efa_rdma_write_bytes_total{WINDOW}))", "{{instance}} write"),
            ),
        ),
        Panel(
            "EFA receive drops",
            "pps",
            (Query(f"sum by (instance) (rate(mlcluster_efa_rx_drops_total{WINDOW}))"),),
            description="Packets the EFA devices dropped on receive; steady drops slow collective operations.",
        ),
        Panel(
            "IP network (ENA)",
            "Bps",
            (
                Query(
                    f'sum by (instance) (rate(node_network_receive_bytes_total{{device!="lo"}}{WINDOW}))',
                    "{{instance}} received",
                ),
                Query(
                    f'sum by (instance) (rate(node_network_transmit_bytes_total{{device!="lo"}}{WINDOW}))',
                    "{{instance}} sent",
                ),
            ),
        ),
    ),
)

SLURM = Dashboard(
    uid="mlcluster-slurm",
    title="Slurm",
    panels=(
        Panel("Nodes by state", "short", (Query("sum by (state) (mlcluster_slurm_nodes)", "{{state}}"),)),
        Panel("Jobs by state", "short", (Query("sum by (state) (mlcluster_slurm_jobs)", "{{state}}"),)),
    ),
)

NODES = Dashboard(
    uid="mlcluster-nodes",
    title="Nodes",
    panels=(
        Panel(
            "CPU busy",
            "percent",
            (Query(f'100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle"}}{WINDOW})))'),),
        ),
        Panel("Load (1 minute)", "short", (Query("node_load1"),)),
        Panel(
            "Memory used",
            "percent",
            (Query("100 * (1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)"),),
        ),
        Panel(
            "Disk space free",
            "percent",
            (
                Query(
                    f"100 * node_filesystem_avail_bytes{{{NOT_DISKS}}} / node_filesystem_size_bytes{{{NOT_DISKS}}}",
                    "{{instance}} {{mountpoint}}",
                ),
            ),
            description="Root volumes fill up with container images; below 10% jobs and Slurm start failing.",
        ),
    ),
)

NEURON = Dashboard(
    uid="mlcluster-neuron",
    title="Neuron (Trainium, Inferentia)",
    panels=(
        Panel(
            "NeuronCore utilisation",
            "percent",
            (Query("100 * neuroncore_utilization_ratio", "{{instance}} core {{neuroncore}}"),),
        ),
        Panel("Neuron runtime memory used", "bytes", (Query("sum by (instance) (neuron_runtime_memory_used_bytes)"),)),
        Panel(
            "Neuron hardware ECC events (per hour)",
            "short",
            (Query(f"sum by (instance) (increase(hardware_ecc_events_total{WINDOW})) * 6"),),
        ),
        Panel(
            "Neuron execution errors (per hour)",
            "short",
            (Query(f"sum by (instance) (increase(execution_errors_total{WINDOW})) * 6"),),
        ),
    ),
)

DASHBOARDS: tuple[Dashboard, ...] = (GPU, NETWORK, SLURM, NODES, NEURON)


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {"refId": chr(ord("A") + i), "datasource": PROMETHEUS, "expr": q.expr, "legendFormat": q.legend}
        for i, q in enumerate(panel.queries)
    ]
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": PROMETHEUS,
        "gridPos": {"h": PANEL_HEIGHT, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": targets,
    }


def dashboard_json(dashboard: Dashboard, environment_name: str) -> dict[str, Any]:
    """The Grafana dashboard model of ``dashboard`` for ``environment_name`` (panels laid out left to right)."""
    panels = []
    x = y = 0
    for panel_id, panel in enumerate(dashboard.panels, start=1):
        if x + panel.width > GRID_WIDTH:
            x, y = 0, y + PANEL_HEIGHT
        panels.append(_panel_json(panel, panel_id, x, y))
        x += panel.width
    return {
        "uid": dashboard.uid,
        "title": f"mlcluster {environment_name}: {dashboard.title}",
        "tags": ["mlcluster", environment_name],
        "timezone": "utc",
        "schemaVersion": SCHEMA_VERSION,
        "editable": False,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "panels": panels,
    }


def dashboards_json(environment_name: str) -> list[dict[str, Any]]:
    """Every dashboard of ``environment_name`` as Grafana's JSON model."""
    return [dashboard_json(d, environment_name) for d in DASHBOARDS]


def data_sources_json(prometheus_query_url: str, region: str) -> list[dict[str, Any]]:
    """The data sources, as Grafana's data source API takes them, reading with the workspace's IAM role.

    Amazon Managed Grafana signs requests with the workspace role when a
    Prometheus data source has ``sigV4Auth`` and ``sigV4AuthType``
    ``ec2_iam_role`` (what its console writes when "Workspace IAM Role" is
    chosen); the CloudWatch data source takes the same ``authType``.
    """
    return [
        {
            "uid": PROMETHEUS_UID,
            "name": "Amazon Managed Service for Prometheus (mlcluster)",
            "type": "prometheus",
            "access": "proxy",
            "url": prometheus_query_url,
            "isDefault": True,
            "jsonData": {
                "httpMethod": "POST",
                "sigV4Auth": True,
                "sigV4AuthType": "ec2_iam_role",
                "sigV4Region": region,
            },
        },
        {
            "uid": CLOUDWATCH_UID,
            "name": "CloudWatch (mlcluster)",
            "type": "cloudwatch",
            "access": "proxy",
            "isDefault": False,
            "jsonData": {"authType": "ec2_iam_role", "defaultRegion": region},
        },
    ]
