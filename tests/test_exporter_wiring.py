"""The example environments run the exporters exactly where ``observability.prometheus.enabled`` asks.

Reads the synthesized examples (the session's shared cloud assembly): ParallelCluster nodes get the
node-script step ``exporters`` last on every node; the HyperPod lifecycle's features file turns its
``observability`` step on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import load_environment
from mlcluster.config.observability import prometheus_enabled
from tests.support import ROOT

ENVIRONMENTS = ROOT / "environments"


def node_step_lists(config: dict[str, Any]) -> list[list[str]]:
    """The mlcluster steps of every node kind's OnNodeConfigured run.sh action (head, queues, login pools)."""
    holders = [config["HeadNode"], *config["Scheduling"]["SlurmQueues"], *config.get("LoginNodes", {}).get("Pools", [])]
    steps = []
    for holder in holders:
        for action in holder.get("CustomActions", {}).get("OnNodeConfigured", {}).get("Sequence", []):
            args = action.get("Args", [])
            if args[:1] == ["--role"]:
                steps.append(args[4:])
    return steps


@pytest.mark.parametrize("name", ["p5", "trn1", "p4de"])
def test_pcluster_nodes_run_the_exporters_step_last_when_prometheus_is_on(
    example_templates: dict[str, dict[str, Any]], name: str
) -> None:
    wanted = prometheus_enabled(load_environment(ENVIRONMENTS / f"{name}.yaml").config)
    (cluster,) = [
        r for r in example_templates[f"{name}/Cluster"]["Resources"].values() if r["Type"] == "Custom::PclusterCluster"
    ]
    lists = node_step_lists(cluster["Properties"]["ClusterConfiguration"])
    assert lists, "no node runs mlcluster's node scripts"
    for steps in lists:
        assert ("exporters" in steps) is wanted, steps
        # After every step that installs software: only the collector and the health check come later.
        assert not wanted or set(steps[steps.index("exporters") + 1 :]) <= {"collector", "health_check"}
    assert wanted is (name != "p4de")


def test_hyperpod_features_turn_the_observability_step_on(examples_outdir: Path) -> None:
    assert prometheus_enabled(load_environment(ENVIRONMENTS / "hyperpod.yaml").config)
    every = [json.loads(p.read_text()) for p in examples_outdir.rglob("mlcluster_features.json")]
    # The hyperpod example's (its daily copies go under its cluster's prefix); hyperpod-accounting has none.
    documents = [d for d in every if d["scheduled_backup"]["prefix"].startswith("mlcluster/patch/ml-hyperpod/")]
    assert documents and all(d["observability"] is True for d in documents)
