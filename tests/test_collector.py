"""The collector's renderer (mlcluster/collector.py): one configuration for both backends."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.collector import (
    CONFIG_FILE,
    TARGETS_CONFIG_FILE,
    CollectorInputs,
    hyperpod_inputs,
    node_kinds,
    pcluster_inputs,
    prometheus_config,
    render,
)
from mlcluster.config.hyperpod import HyperPodConfig, LifecycleConfig, WorkerGroupConfig
from mlcluster.config.pcluster import ComputeResourceConfig, NodeScriptsConfig, PclusterConfig, QueueConfig
from mlcluster.exporters import EXPORTERS, Exporter
from mlcluster.lifecycle.collector import COLLECTOR_FILES
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.lifecycle.pcluster import GENERATED_FILES as PCLUSTER_GENERATED_FILES
from mlcluster.lifecycle.pcluster import PCLUSTER_DIR

COMMON: dict[str, Any] = {
    "cluster_name": "ml",
    "environment": "test",
    "region": "eu-west-1",
    "remote_write_url": "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
    "scrape_interval_seconds": 15,
}


@pytest.mark.parametrize(
    ("instance_type", "kinds"),
    [
        ("p5.48xlarge", ("gpu",)),
        ("ml.p5.48xlarge", ("gpu",)),
        ("g5.12xlarge", ("gpu",)),
        ("trn1.32xlarge", ("neuron",)),
        ("ml.trn1.32xlarge", ("neuron",)),
        ("inf2.48xlarge", ("neuron",)),
        ("m5.8xlarge", ()),
        ("ml.m5.12xlarge", ()),
        ("p9.96xlarge", ("gpu",)),  # not in the table: by family
        ("trn9.48xlarge", ("neuron",)),
        ("gr6.4xlarge", ()),  # a family that starts with g but is not g<digit>
    ],
)
def test_node_kinds(instance_type: str, kinds: tuple[str, ...]) -> None:
    assert node_kinds(instance_type) == kinds


def test_the_configuration_is_yaml_with_one_job_per_exporter() -> None:
    inputs = CollectorInputs(head_label="head-node", **COMMON)
    files = render(inputs)
    assert set(files) == {CONFIG_FILE, TARGETS_CONFIG_FILE}
    config = yaml.safe_load(files[CONFIG_FILE])
    assert config == prometheus_config(inputs)
    assert config["global"] == {
        "scrape_interval": "15s",
        "scrape_timeout": "10s",
        "external_labels": {"cluster": "ml", "environment": "test"},
    }
    assert [j["job_name"] for j in config["scrape_configs"]] == [e.job for e in EXPORTERS]
    assert config["remote_write"][0]["url"] == COMMON["remote_write_url"]
    assert config["remote_write"][0]["sigv4"] == {"region": "eu-west-1"}


def test_a_controller_only_job_is_scraped_on_localhost_only() -> None:
    inputs = CollectorInputs(head_label="controller", **COMMON)
    exporters = (Exporter(job="slurm", port=9341, nodes="controller", what="x", metrics=("a",)),)
    (job,) = prometheus_config(inputs, exporters)["scrape_configs"]
    assert job == {
        "job_name": "slurm",
        "sample_limit": 20000,
        "body_size_limit": "10MB",
        "label_limit": 30,
        "label_value_length_limit": 512,
        "static_configs": [{"targets": ["127.0.0.1:9341"], "labels": {"node": "controller", "role": "head"}}],
    }


def test_every_scrape_is_bounded_and_promtool_accepts_the_configuration(tmp_path: Path) -> None:
    """A process answering on an exporter port cannot send more than the limits (Prometheus's own check)."""
    inputs = CollectorInputs(head_label="h", **COMMON)
    for job in prometheus_config(inputs)["scrape_configs"]:
        assert (job["sample_limit"], job["body_size_limit"]) == (20000, "10MB"), job["job_name"]
    config = tmp_path / CONFIG_FILE
    config.write_text(render(inputs)[CONFIG_FILE])
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is needed (Debian package prometheus)")
    # promtool checks the file_sd files exist only lazily; the syntax and every limit key are checked here.
    done = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(config)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "bad.yml"
    bad.write_text(config.read_text().replace("sample_limit:", "sample_limitt:", 1))
    refused = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(bad)], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0  # the check can fail: an unknown key is refused


def test_a_short_interval_keeps_the_timeout_within_it() -> None:
    inputs = CollectorInputs(head_label="h", **{**COMMON, "scrape_interval_seconds": 1})
    assert prometheus_config(inputs)["global"]["scrape_timeout"] == "1s"


def test_a_bad_interval_is_named() -> None:
    with pytest.raises(ValueError, match="scrape_interval_seconds: 0 is not valid; allowed: 1 or more"):
        CollectorInputs(head_label="h", **{**COMMON, "scrape_interval_seconds": 0})


def test_tokens_pass_through_the_yaml_untouched() -> None:
    token = "${Token[TOKEN.1234]}"
    inputs = CollectorInputs(head_label="h", **{**COMMON, "remote_write_url": f"{token}api/v1/remote_write"})
    assert f"{token}api/v1/remote_write" in render(inputs)[CONFIG_FILE]


def test_pcluster_queues_and_instance_types() -> None:
    def cr(name: str, instance_type: str) -> ComputeResourceConfig:
        return ComputeResourceConfig(name=name, instance_type=instance_type, min_count=0, max_count=1)

    cfg = PclusterConfig(
        queues=(
            QueueConfig(name="mixed", compute_resources=(cr("g5", "g5.12xlarge"), cr("c5", "c5.4xlarge"))),
            QueueConfig(name="cpu", compute_resources=(cr("m5", "m5.large"),)),
        )
    )
    inputs = pcluster_inputs(cfg, **COMMON)
    assert inputs.head_label == "head-node"
    assert inputs.partitions == {"mixed": ("gpu",), "cpu": ()}
    assert inputs.instance_types == {"g5.12xlarge": ("gpu",), "c5.4xlarge": (), "m5.large": ()}
    targets = json.loads(render(inputs)[TARGETS_CONFIG_FILE])
    assert targets["instance_types"]["c5.4xlarge"] == []


def test_hyperpod_partitions_default_to_the_group_name() -> None:
    cfg = HyperPodConfig(
        workers=(
            WorkerGroupConfig(instance_group_name="gpu-workers", instance_type="ml.p5.48xlarge", partition_name="p5"),
            WorkerGroupConfig(instance_group_name="trn-workers", instance_type="ml.trn1.32xlarge"),
        )
    )
    inputs = hyperpod_inputs(cfg, **COMMON)
    assert inputs.head_label == "controller"
    assert inputs.partitions == {"p5": ("gpu",), "trn-workers": ("neuron",)}


def _shell_array(path: Path, name: str) -> set[str]:
    match = re.search(rf"^(?:readonly )?{name}=\(([^)]*)\)", path.read_text(), flags=re.M)
    assert match, f"{path}: no {name}=(...)"
    return set(match.group(1).split())


def test_the_node_scripts_fetch_and_trust_exactly_the_collectors_files() -> None:
    """run.sh downloads the collector's scripts and takes its rendered files from its arguments (the cluster
    configuration); on_create.sh leaves only the rendered files out of its manifest."""
    assert _shell_array(PCLUSTER_DIR / "run.sh", "COLLECTOR_FILES") == set(COLLECTOR_FILES)
    assert _shell_array(PCLUSTER_DIR / "run.sh", "GENERATED_FILES") == {CONFIG_FILE, TARGETS_CONFIG_FILE}
    assert set(PCLUSTER_GENERATED_FILES) == {CONFIG_FILE, TARGETS_CONFIG_FILE}
    generated = _shell_array(HYPERPOD_DIR / "on_create.sh", "GENERATED_FILES")
    assert {CONFIG_FILE, TARGETS_CONFIG_FILE} <= generated
    assert not set(COLLECTOR_FILES) & generated  # the scripts are checked against the manifest


def test_without_docker_gpu_nodes_are_not_dcgm_targets() -> None:
    """The DCGM exporter runs in Docker: with Docker off there is nothing on 9400 to scrape.

    Scraping it anyway would keep ``up{job="dcgm"} == 0`` and the ExporterDown alert firing forever.
    """
    resource = ComputeResourceConfig(name="g5", instance_type="g5.12xlarge", min_count=0, max_count=1)
    queue = QueueConfig(name="gpu", compute_resources=(resource,))
    off = pcluster_inputs(
        PclusterConfig(queues=(queue,), node_scripts=NodeScriptsConfig(docker_enroot_pyxis=False)), **COMMON
    )
    assert (off.partitions, off.instance_types) == ({"gpu": ()}, {"g5.12xlarge": ()})
    on = pcluster_inputs(PclusterConfig(queues=(queue,)), **COMMON)  # the default: Docker on
    assert (on.partitions, on.instance_types) == ({"gpu": ("gpu",)}, {"g5.12xlarge": ("gpu",)})

    workers = (
        WorkerGroupConfig(instance_group_name="gpu", instance_type="ml.p5.48xlarge"),
        WorkerGroupConfig(instance_group_name="trn", instance_type="ml.trn1.32xlarge"),
    )
    lifecycle = LifecycleConfig(docker=False, enroot_pyxis=False)
    hp_off = hyperpod_inputs(HyperPodConfig(workers=workers, lifecycle=lifecycle), **COMMON)
    assert hp_off.partitions == {"gpu": (), "trn": ("neuron",)}  # Neuron monitor needs no Docker
    hp_on = hyperpod_inputs(HyperPodConfig(workers=workers), **COMMON)
    assert hp_on.partitions == {"gpu": ("gpu",), "trn": ("neuron",)}
