"""Day two: ParallelCluster accepts the updates mlcluster makes as it evolves.

ParallelCluster refuses any change to ``HeadNode.CustomActions.OnNodeStart/OnNodeConfigured`` and to
``LoginNodes.Pools[*].CustomActions`` (``UpdatePolicy.UNSUPPORTED`` in its cluster schema); a queue's
actions follow its queue update strategy. So the head node's and the login pools' node-script actions
must stay byte-identical when a node script changes (a new mlcluster release), when a queue is added
and when the collector's scrape interval changes (both change the collector files the head node runs
from); the queues' actions still carry each file's digest and change with it. Checked with the rendered
configurations and with ParallelCluster's own ConfigPatch (tools/pcluster_update_check.py).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import cx_api

import mlcluster.lifecycle.pcluster as node_scripts
from mlcluster.app import build_app
from mlcluster.pcluster.render import render_cluster_config
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON, cluster_resource, inputs, pcluster
from tests.support import ENVIRONMENTS, ROOT, stack_templates, write_env

UPDATE_TOOL = ROOT / "tools" / "pcluster_update_check.py"
EXAMPLES = ("p5", "p4de")
#: The queue the edited environments add (a small CPU queue: no reservation, no EFA).
ADDED_QUEUE = {"name": "cpu", "compute_resources": [{"name": "c7i", "instance_type": "c7i.4xlarge", "efa": False}]}
EDITED_SCRAPE_INTERVAL_SECONDS = 60


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ENVIRONMENTS / f"{name}.yaml").read_text())
    return data


def fixed_sections(config: dict[str, Any]) -> dict[str, Any]:
    """The sections ParallelCluster refuses to update: the head node's and every login pool's CustomActions."""
    pools = config.get("LoginNodes", {}).get("Pools", [])
    return {
        "HeadNode": config["HeadNode"].get("CustomActions"),
        "LoginNodes": {pool["Name"]: pool.get("CustomActions") for pool in pools},
    }


def queue_args(config: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        queue["Name"]: queue["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
        for queue in config["Scheduling"]["SlurmQueues"]
    }


def update_check(tmp_path: Path, old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    """ParallelCluster's ConfigPatch from ``old`` to ``new``: every change with its update policy."""
    if not PCLUSTER_PYTHON.exists():
        pytest.skip(".venv-pcluster is not set up (make pytest does)")
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    proc = subprocess.run(
        [str(PCLUSTER_PYTHON), str(UPDATE_TOOL), str(tmp_path / "old.json"), str(tmp_path / "new.json")],
        env={**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def refused(changes: list[dict[str, str]]) -> list[dict[str, str]]:
    return [change for change in changes if change["policy"] == "UNSUPPORTED"]


# -- a node script changes (a new mlcluster release) ------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_changed_node_script_leaves_the_head_and_login_actions_alone(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = pcluster(example(name)["cluster"]["pcluster"])
    before = render_cluster_config(cfg, inputs(exporters=True))
    # The next release's docker.sh: the digests come from the package's files (node_script_sha256).
    released = tmp_path / "pcluster"
    shutil.copytree(node_scripts.PCLUSTER_DIR, released, ignore=shutil.ignore_patterns("__pycache__"))
    with (released / "docker.sh").open("a") as script:
        script.write("# the next release\n")
    monkeypatch.setattr(node_scripts, "PCLUSTER_DIR", released)
    after = render_cluster_config(cfg, inputs(exporters=True))

    assert json.dumps(fixed_sections(after), sort_keys=True) == json.dumps(fixed_sections(before), sort_keys=True)
    head_args = fixed_sections(after)["HeadNode"]["OnNodeConfigured"]["Sequence"][0]["Args"]
    # Exactly the form clusters were deployed with before the manifest existed: no option a deployed
    # cluster's head node lacks, so upgrading mlcluster changes nothing ParallelCluster refuses.
    assert [a for a in head_args if isinstance(a, str) and a.startswith("--")] == ["--role", "--source"]
    new_digest = f"docker.sh={node_scripts.node_script_sha256()['docker.sh']}"
    for queue, args in queue_args(after).items():
        assert new_digest in args, queue
        assert new_digest not in queue_args(before)[queue]
    changes = update_check(tmp_path, before, after)
    assert refused(changes) == []
    assert {c["path"] for c in changes if c["key"] == "Sequence"} == {
        f"Scheduling.SlurmQueues[{queue}].CustomActions.OnNodeConfigured" for queue in queue_args(after)
    }
    assert {c["policy"] for c in changes} == {"QUEUE_UPDATE_STRATEGY"}


def test_the_update_check_sees_a_refused_change(tmp_path: Path) -> None:
    """The check is ParallelCluster's: a changed head-node action (another script prefix) is UNSUPPORTED."""
    cfg = pcluster(example("p4de")["cluster"]["pcluster"])
    before = render_cluster_config(cfg, inputs(exporters=True))
    after = render_cluster_config(cfg, inputs(exporters=True, node_script_prefix="other/"))
    assert {(c["path"], c["key"]) for c in refused(update_check(tmp_path, before, after))} == {
        ("HeadNode.CustomActions.OnNodeConfigured", "Sequence"),
        ("LoginNodes.Pools[login].CustomActions.OnNodeConfigured", "Sequence"),
    }


# -- a queue is added, the scrape interval changes: the synthesized examples ------------------------------


@pytest.fixture(scope="module")
def configurations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The ClusterConfiguration of p5 and p4de as synthesized, and of each with a queue added and the
    collector's scrape interval changed (``NAME-edited``)."""
    tmp = tmp_path_factory.mktemp("update")
    for name in EXAMPLES:
        data = example(name)
        data.setdefault("observability", {}).setdefault("prometheus", {})["enabled"] = True
        write_env(tmp / "before", name, data)
        edited = copy.deepcopy(data)
        edited["cluster"]["pcluster"]["queues"].append(ADDED_QUEUE)
        edited["observability"]["prometheus"]["scrape_interval_seconds"] = EDITED_SCRAPE_INTERVAL_SECONDS
        write_env(tmp / "after", name, edited)
    out: dict[str, dict[str, Any]] = {}
    for when, suffix in (("before", ""), ("after", "-edited")):  # one deployment each: same cluster names
        app, _ = build_app(tmp / when, outdir=str(tmp / f"{when}.out"))
        app.synth()
        templates = stack_templates(cx_api.CloudAssembly(str(tmp / f"{when}.out")))
        for name in EXAMPLES:
            _, resource = cluster_resource(templates, name)
            out[name + suffix] = resource["Properties"]["ClusterConfiguration"]
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_new_queue_and_scrape_interval_leave_the_head_and_login_actions_alone(
    name: str, configurations: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    before, after = configurations[name], configurations[f"{name}-edited"]
    head = before["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
    assert "collector" in head  # the head node runs the collector whose files the edits change
    assert json.dumps(fixed_sections(after), sort_keys=True) == json.dumps(fixed_sections(before), sort_keys=True)
    # The existing queues keep their actions; the new one has its own, with its manifest.
    for queue, args in queue_args(before).items():
        assert queue_args(after)[queue] == args
    assert "--sha256" in queue_args(after)["cpu"]
    # ParallelCluster sees one change, the added queue, which it applies (its policy for SlurmQueues).
    assert update_check(tmp_path, before, after) == [
        {"path": "Scheduling", "key": "SlurmQueues", "policy": "RESIZE_UPDATE_STRATEGY_ON_REMOVE"}
    ]
