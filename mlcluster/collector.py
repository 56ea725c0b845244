"""The metrics collector's configuration, rendered at synth time for both cluster backends.

The collector is Prometheus (2.54.1) in agent mode on the head node
(ParallelCluster) or the controller (HyperPod). Agent mode keeps only a
write-ahead log and forwards every sample with ``remote_write``, signed with
SigV4 by the node's instance role; it stores nothing queryable and serves
nothing but its own status page, on localhost. Prometheus rather than the AWS
Distro for OpenTelemetry collector: every exporter of the contract speaks the
Prometheus text format, Prometheus's own ``file_sd`` follows the target files
our timer rewrites from Slurm's node list, ``sigv4`` is built into
``remote_write``, and it is one static binary with a published checksum on
every Linux the backends run (ADOT ships OS packages per distribution).

Two files come out of :func:`render`, uploaded next to the node scripts:

- ``collector.yml``: the Prometheus configuration: one scrape job per
  exporter of :data:`mlcluster.exporters.EXPORTERS`, each reading the
  ``file_sd`` file of its job, plus the head node/controller itself on
  localhost for the jobs that run there; ``remote_write`` to the workspace.
- ``collector_targets.json``: what the target refresher
  (``collector_targets.py``, run by a timer on the node) needs to turn Slurm's
  node list into those ``file_sd`` files: the jobs, and which kind of node
  (GPU, Neuron) each partition and instance type is.

Deploy-time values (the workspace URL, the region) may be CDK tokens; the
upload fills them in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from mlcluster.config.hyperpod import HyperPodConfig
from mlcluster.config.pcluster import PclusterConfig
from mlcluster.exporters import EXPORTERS, Exporter
from mlcluster.pcluster.instance_types import lookup

#: The rendered Prometheus configuration, and the refresher's input, as uploaded beside the node scripts.
CONFIG_FILE = "collector.yml"
TARGETS_CONFIG_FILE = "collector_targets.json"
#: Where the install step puts them on the node.
CONFIG_DIR = "/etc/mlcluster/collector"
#: The collector's state, owned by its user: the write-ahead log and the file_sd target files.
STATE_DIR = "/var/lib/mlcluster-collector"
WAL_DIR = f"{STATE_DIR}/wal"
TARGETS_DIR = f"{STATE_DIR}/targets"
#: The unprivileged system user the collector and the refresher run as.
USER = "mlc-collector"
#: Where the collector's status page listens (localhost only).
LISTEN_ADDRESS = "127.0.0.1:9090"
#: How often Prometheus re-reads the file_sd files (it also watches them).
FILE_SD_REFRESH = "1m"

#: Bounds per scrape, so that a process that answers on an exporter's port of some node (any job can bind a
#: free port) cannot fill the controller's memory, where slurmctld and MariaDB live: a scrape over either
#: limit fails and is dropped whole (Prometheus scrape_config ``sample_limit``, ``body_size_limit``,
#: ``label_limit``, ``label_value_length_limit``). The largest exporter of the contract (node_exporter on a
#: p5.48xlarge) answers a few thousand samples, well inside them.
SAMPLE_LIMIT = 20000
BODY_SIZE_LIMIT = "10MB"
LABEL_LIMIT = 30
LABEL_VALUE_LENGTH_LIMIT = 512

#: The node kinds of the contract that the refresher finds in Slurm's node list.
NODE_KINDS = ("gpu", "neuron")


def node_kinds(instance_type: str) -> tuple[str, ...]:
    """``("gpu",)``, ``("neuron",)`` or ``()`` for an EC2 or SageMaker (``ml.``) instance type.

    From the instance-type table; a type not in it falls back to its family
    (``p*``/``g*`` NVIDIA, ``trn*``/``inf*`` Neuron).
    """
    name = instance_type.removeprefix("ml.")
    info = lookup(name)
    if info is not None:
        return {"nvidia": ("gpu",), "neuron": ("neuron",), None: ()}[info.accelerator]
    family = name.split(".", 1)[0]
    if family.startswith(("trn", "inf")):
        return ("neuron",)
    if family[:1] in ("p", "g") and family[1:2].isdigit():
        return ("gpu",)
    return ()


@dataclass(frozen=True, kw_only=True)
class CollectorInputs:
    """What the collector's configuration is made of (strings may be CDK tokens).

    :param cluster_name: the cluster's name, an external label on every sample.
    :param environment: the environment's name, an external label on every sample.
    :param region: the workspace's region, for SigV4.
    :param remote_write_url: the workspace's remote-write endpoint.
    :param scrape_interval_seconds: how often every exporter is scraped.
    :param head_label: the ``node`` label of the head node/controller's own targets.
    :param partitions: Slurm partition -> node kinds of its nodes.
    :param instance_types: instance type (as Slurm lists it in a node's features) -> node kinds.
    """

    cluster_name: str
    environment: str
    region: str
    remote_write_url: str
    scrape_interval_seconds: int
    head_label: str
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    instance_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Reject an interval Prometheus would refuse, naming it."""
        if self.scrape_interval_seconds < 1:
            raise ValueError(
                f"scrape_interval_seconds: {self.scrape_interval_seconds} is not valid; allowed: 1 or more"
            )


def _on_head(exporter: Exporter) -> bool:
    """Jobs the head node/controller runs itself (it is not in Slurm's node list)."""
    return exporter.nodes in ("all", "controller")


def _from_slurm(exporter: Exporter) -> bool:
    """Jobs whose targets are Slurm's nodes."""
    return exporter.nodes != "controller"


def targets_file(job: str) -> str:
    """The file_sd file of ``job`` on the node."""
    return f"{TARGETS_DIR}/{job}.json"


def _scrape_job(exporter: Exporter, head_label: str) -> dict[str, Any]:
    job: dict[str, Any] = {
        "job_name": exporter.job,
        "sample_limit": SAMPLE_LIMIT,
        "body_size_limit": BODY_SIZE_LIMIT,
        "label_limit": LABEL_LIMIT,
        "label_value_length_limit": LABEL_VALUE_LENGTH_LIMIT,
    }
    if _on_head(exporter):
        job["static_configs"] = [
            {"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"node": head_label, "role": "head"}}
        ]
    if _from_slurm(exporter):
        job["file_sd_configs"] = [{"files": [targets_file(exporter.job)], "refresh_interval": FILE_SD_REFRESH}]
    return job


def prometheus_config(inputs: CollectorInputs, exporters: Sequence[Exporter] = EXPORTERS) -> dict[str, Any]:
    """The Prometheus (agent mode) configuration as a dict: global settings, one job per exporter, remote write."""
    interval = f"{inputs.scrape_interval_seconds}s"
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": f"{min(inputs.scrape_interval_seconds, 10)}s",
            "external_labels": {"cluster": inputs.cluster_name, "environment": inputs.environment},
        },
        "scrape_configs": [_scrape_job(e, inputs.head_label) for e in exporters],
        "remote_write": [
            {
                "url": inputs.remote_write_url,
                "sigv4": {"region": inputs.region},
                "queue_config": {"max_samples_per_send": 1000, "max_shards": 10},
            }
        ],
    }


def targets_config(inputs: CollectorInputs, exporters: Sequence[Exporter] = EXPORTERS) -> dict[str, Any]:
    """The refresher's input: every job fed from Slurm's node list, and the node kinds per partition and type."""
    return {
        "output_dir": TARGETS_DIR,
        "jobs": [{"job": e.job, "port": e.port, "nodes": e.nodes} for e in exporters if _from_slurm(e)],
        "partitions": {name: list(kinds) for name, kinds in sorted(inputs.partitions.items())},
        "instance_types": {name: list(kinds) for name, kinds in sorted(inputs.instance_types.items())},
    }


def render(inputs: CollectorInputs) -> dict[str, str]:
    """File name -> content of the two files the node's collector step installs."""
    config = yaml.safe_dump(prometheus_config(inputs), sort_keys=False, width=1 << 16)
    header = "# Written by mlcluster at synth time: the Prometheus agent on the head node/controller.\n"
    return {
        CONFIG_FILE: header + config,
        TARGETS_CONFIG_FILE: json.dumps(targets_config(inputs), indent=2, sort_keys=True) + "\n",
    }


def _merge(kinds: dict[str, set[str]], key: str, found: tuple[str, ...]) -> None:
    kinds.setdefault(key, set()).update(found)


def _scraped_kinds(instance_type: str, *, docker: bool) -> tuple[str, ...]:
    """The node kinds whose exporters run on ``instance_type``: the DCGM exporter ("gpu") runs in Docker only."""
    return tuple(kind for kind in node_kinds(instance_type) if docker or kind != "gpu")


def pcluster_inputs(cfg: PclusterConfig, **common: Any) -> CollectorInputs:
    """Inputs for a ParallelCluster cluster: each queue's kinds, and each compute resource's instance type.

    ParallelCluster lists a compute resource's instance type among its nodes'
    Slurm features (``static,p5.48xlarge,<name>,efa,gpu``), so the refresher
    tells nodes of a mixed queue apart; the queue's kinds are the fallback.
    Without Docker no GPU node runs the DCGM exporter, so none is its target.
    """
    partitions: dict[str, set[str]] = {}
    types: dict[str, set[str]] = {}
    for queue in cfg.queues:
        partitions.setdefault(queue.name, set())
        for cr in queue.compute_resources:
            found = _scraped_kinds(cr.instance_type, docker=cfg.node_scripts.docker_enroot_pyxis)
            _merge(partitions, queue.name, found)
            _merge(types, cr.instance_type, found)
    return CollectorInputs(
        head_label="head-node",
        partitions={k: tuple(sorted(v)) for k, v in partitions.items()},
        instance_types={k: tuple(sorted(v)) for k, v in types.items()},
        **common,
    )


def hyperpod_inputs(cfg: HyperPodConfig, **common: Any) -> CollectorInputs:
    """Inputs for a HyperPod cluster: each worker group's partition is one instance type (DCGM only with Docker)."""
    partitions: dict[str, set[str]] = {}
    for worker in cfg.workers:
        found = _scraped_kinds(worker.instance_type, docker=cfg.lifecycle.docker)
        _merge(partitions, worker.partition_name or worker.instance_group_name, found)
    return CollectorInputs(
        head_label="controller", partitions={k: tuple(sorted(v)) for k, v in partitions.items()}, **common
    )
