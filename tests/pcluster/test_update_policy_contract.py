"""The update-policy contract: ``mlcluster.pcluster.update_policy`` against ParallelCluster's own code.

mlcluster's venv cannot import aws-parallelcluster (CDK v1), so the policy of
every configuration key is a data file read from the pinned package
(``tools/pcluster_update_policies.py``), and ``cluster_changes`` re-states the
policies' conditions. Both are proven here against the real code in
``.venv-pcluster``: the data file is regenerated and compared, and for a set of
real edits of the rendered examples ParallelCluster's ``ConfigPatch`` finds the
same changes with the same policies, and its own checks, run on a cluster whose
fleet runs and on one whose fleet is stopped, give the outcome we predict:
``in_place`` = passes with the fleet running; ``fleet_stop`` = fails running,
passes stopped; ``refused`` = fails either way.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlcluster.pcluster.render import render_cluster_config
from mlcluster.pcluster.update_policy import (
    KNOWN_POLICIES,
    ClusterChange,
    cluster_changes,
    pcluster_version,
    policy_tree,
    rollback_changes,
)
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON, inputs, pcluster
from tests.support import ENVIRONMENTS, ROOT

POLICIES_TOOL = ROOT / "tools" / "pcluster_update_policies.py"
POLICIES_FILE = ROOT / "mlcluster" / "pcluster" / "update_policies.json"
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "AWS_DEFAULT_REGION": "us-east-1"}

Config = dict[str, Any]


def needs_pcluster() -> None:
    if not PCLUSTER_PYTHON.exists():
        pytest.skip(".venv-pcluster is not set up (make pytest does)")


def rendered(name: str, edit: Callable[[dict[str, Any]], None] | None = None) -> Config:
    """The ClusterConfiguration of example ``name`` (its ``cluster.pcluster`` section edited by ``edit``)."""
    section = yaml.safe_load((ENVIRONMENTS / f"{name}.yaml").read_text())["cluster"]["pcluster"]
    if edit is not None:
        edit(section)
    return render_cluster_config(pcluster(section), inputs(exporters=True))


def edited(config: Config, edit: Callable[[Config], None]) -> Config:
    out = copy.deepcopy(config)
    edit(out)
    return out


def queue(config: Config, index: int = 0) -> Config:
    found: Config = config["Scheduling"]["SlurmQueues"][index]
    return found


def resource(config: Config, index: int = 0) -> Config:
    found: Config = queue(config)["ComputeResources"][index]
    return found


def strategy(value: str) -> Callable[[Config], None]:
    def set_it(config: Config) -> None:
        config["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = value

    return set_it


def both(*edits: Callable[[Config], None]) -> Callable[[Config], None]:
    def run(config: Config) -> None:
        for one in edits:
            one(config)

    return run


def no_login(config: Config) -> None:
    config.pop("LoginNodes", None)


P4DE = rendered("p4de")
P5 = rendered("p5")
MANAGED_GROUP = edited(P4DE, lambda c: resource(c)["Networking"].update(PlacementGroup={"Enabled": True}))
EXTERNAL_EFS = {"Name": "efs", "MountDir": "/efs", "StorageType": "Efs", "EfsSettings": {"FileSystemId": "fs-0123"}}
MANAGED_EBS = {"Name": "scratch", "MountDir": "/scratch", "StorageType": "Ebs", "EbsSettings": {"Size": 50}}

#: name -> (old, new, the outcome of each change in order). Realistic edits of the examples: what users ask
#: for day two, with each queue update strategy, with and without login nodes running.
EDITS: dict[str, tuple[Config, Config, list[str]]] = {
    "head node instance type": (
        P4DE,
        rendered("p4de", lambda s: s.setdefault("head_node", {}).update(instance_type="m5.4xlarge")),
        ["refused"],
    ),
    "operating system": (P4DE, edited(P4DE, lambda c: c["Image"].update(Os="ubuntu2204")), ["refused"]),
    "queue removed": (P4DE, rendered("p4de", lambda s: s["queues"].pop()), ["fleet_stop"]),
    "queue added": (
        edited(P4DE, lambda c: c["Scheduling"]["SlurmQueues"].pop()),
        P4DE,
        ["in_place"],
    ),
    "queue removed, TERMINATE": (
        edited(P4DE, strategy("TERMINATE")),
        edited(P4DE, both(strategy("TERMINATE"), lambda c: c["Scheduling"]["SlurmQueues"].pop())),
        ["in_place"],
    ),
    "instance type of a compute resource": (
        P4DE,
        edited(P4DE, lambda c: resource(c).update(InstanceType="p5.48xlarge")),
        ["fleet_stop"],
    ),
    "min_count lowered": (P4DE, edited(P4DE, lambda c: resource(c).update(MinCount=2)), ["fleet_stop"]),
    "max_count raised": (P4DE, edited(P4DE, lambda c: resource(c).update(MaxCount=8)), ["in_place"]),
    "min and max raised together": (
        P4DE,
        edited(P4DE, lambda c: resource(c).update(MinCount=6, MaxCount=6)),
        ["in_place", "in_place"],
    ),
    "min raised more than max": (
        P4DE,
        edited(P4DE, lambda c: resource(c).update(MinCount=6, MaxCount=5)),
        ["in_place", "fleet_stop"],
    ),
    "max_count lowered": (
        P4DE,
        edited(P4DE, lambda c: resource(c).update(MaxCount=3, MinCount=3)),
        ["fleet_stop", "in_place"],
    ),
    "scaledown idletime": (
        P4DE,
        edited(P4DE, lambda c: c["Scheduling"]["SlurmSettings"].update(ScaledownIdletime=30)),
        ["fleet_stop"],
    ),
    "detailed monitoring": (
        P4DE,
        edited(P4DE, lambda c: c["Monitoring"].update(DetailedMonitoring=True)),
        ["fleet_stop"],
    ),
    "queue root volume, DRAIN": (
        P4DE,
        edited(P4DE, lambda c: queue(c)["ComputeSettings"]["LocalStorage"]["RootVolume"].update(Size=400)),
        ["in_place"],
    ),
    "queue root volume, COMPUTE_FLEET_STOP": (
        edited(P4DE, strategy("COMPUTE_FLEET_STOP")),
        edited(
            P4DE,
            both(
                strategy("COMPUTE_FLEET_STOP"),
                lambda c: queue(c)["ComputeSettings"]["LocalStorage"]["RootVolume"].update(Size=400),
            ),
        ),
        ["fleet_stop"],
    ),
    "managed placement group removed": (MANAGED_GROUP, P4DE, ["fleet_stop"]),
    "managed placement group added": (P4DE, MANAGED_GROUP, ["in_place"]),
    "login pool instance type, pool running": (
        P4DE,
        edited(P4DE, lambda c: c["LoginNodes"]["Pools"][0].update(InstanceType="c7i.4xlarge")),
        ["refused"],
    ),
    "login pool instance type, pool at 0": (
        edited(P4DE, lambda c: c["LoginNodes"]["Pools"][0].update(Count=0)),
        edited(P4DE, lambda c: c["LoginNodes"]["Pools"][0].update(Count=0, InstanceType="c7i.4xlarge")),
        ["in_place"],
    ),
    "login nodes added": (edited(P4DE, no_login), P4DE, ["in_place"]),
    "login pool count": (P4DE, edited(P4DE, lambda c: c["LoginNodes"]["Pools"][0].update(Count=2)), ["in_place"]),
    "external EFS added, login running": (
        P4DE,
        edited(P4DE, lambda c: c["SharedStorage"].append(EXTERNAL_EFS)),
        ["in_place"],
    ),
    "managed EBS added, login running": (
        P4DE,
        edited(P4DE, lambda c: c["SharedStorage"].append(MANAGED_EBS)),
        ["refused"],
    ),
    "managed EBS added, no login, DRAIN": (
        edited(P4DE, no_login),
        edited(P4DE, both(no_login, lambda c: c["SharedStorage"].append(MANAGED_EBS))),
        ["in_place"],
    ),
    "managed EBS added, no login, COMPUTE_FLEET_STOP": (
        edited(P4DE, both(no_login, strategy("COMPUTE_FLEET_STOP"))),
        edited(
            P4DE,
            both(no_login, strategy("COMPUTE_FLEET_STOP"), lambda c: c["SharedStorage"].append(MANAGED_EBS)),
        ),
        ["fleet_stop"],
    ),
    "/home storage size": (
        P4DE,
        edited(P4DE, lambda c: c["SharedStorage"][1]["EbsSettings"].update(Size=200)),
        ["refused"],
    ),
    "/home storage removed": (P4DE, edited(P4DE, lambda c: c["SharedStorage"].pop()), ["refused"]),
    "mount directory moved": (
        P4DE,
        edited(P4DE, lambda c: c["SharedStorage"][0].update(MountDir="/lustre")),
        ["refused"],
    ),
    "head node script changed": (
        P4DE,
        edited(
            P4DE,
            lambda c: c["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"].append({"Script": "s3://b/x.sh"}),
        ),
        ["refused"],
    ),
    "queue script changed": (
        P5,
        edited(
            P5, lambda c: queue(c)["CustomActions"]["OnNodeConfigured"]["Sequence"].append({"Script": "s3://b/x.sh"})
        ),
        ["in_place"],
    ),
    "queue subnet changed": (
        P4DE,
        edited(P4DE, lambda c: queue(c)["Networking"].update(SubnetIds=["subnet-0aaaaaaaaaaaaaaa2"])),
        ["in_place"],
    ),
    "head node subnet": (
        P4DE,
        edited(P4DE, lambda c: c["HeadNode"]["Networking"].update(SubnetId="subnet-0aaaaaaaaaaaaaaa2")),
        ["refused"],
    ),
    "tags": (P4DE, edited(P4DE, lambda c: c.update(Tags=[{"Key": "team", "Value": "ml"}])), ["in_place"]),
    "renamed compute resource": (
        P4DE,
        edited(P4DE, lambda c: resource(c).update(Name="p4de-b")),
        ["in_place", "fleet_stop"],
    ),
}


@pytest.fixture(scope="module")
def pcluster_says() -> dict[str, list[dict[str, Any]]]:
    """ParallelCluster's ConfigPatch and policy checks on every edit (one run of its venv for all)."""
    needs_pcluster()
    pairs = {name: [old, new] for name, (old, new, _) in EDITS.items()}
    # The rollback of each: from the cluster as updated back to the old configuration.
    pairs |= {f"{name} (rollback)": [new, old] for name, (old, new, _) in EDITS.items()}
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tools')!r})\n"
        "import pcluster_update_check as tool\n"
        "pairs = json.load(sys.stdin)\n"
        "print(json.dumps({name: tool.outcomes(old, new) for name, (old, new) in pairs.items()}))\n"
    )
    proc = subprocess.run(
        [str(PCLUSTER_PYTHON), "-c", script],
        input=json.dumps(pairs),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, list[dict[str, Any]]] = json.loads(proc.stdout.splitlines()[-1])
    return answer


def their_path(change: dict[str, Any]) -> str:
    leaf = f"{change['key']}[{change['item']}]" if change["item"] is not None else change["key"]
    return f"{change['path']}.{leaf}" if change["path"] else leaf


def their_outcome(change: dict[str, Any]) -> str:
    if change["running"] == "SUCCEEDED":
        return "in_place"
    if change["stopped"] == "SUCCEEDED":
        return "fleet_stop"
    return "refused"


def test_the_policy_file_is_the_pinned_packages(tmp_path: Path) -> None:
    """update_policies.json is exactly what the tool reads from the installed aws-parallelcluster."""
    needs_pcluster()
    out = tmp_path / "policies.json"
    proc = subprocess.run(
        [str(PCLUSTER_PYTHON), str(POLICIES_TOOL), str(out)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == POLICIES_FILE.read_text(), (
        "update_policies.json is stale: run .venv-pcluster/bin/python tools/pcluster_update_policies.py "
        "mlcluster/pcluster/update_policies.json"
    )


def test_the_policy_file_names_its_release_and_the_keys_that_matter() -> None:
    """Read without pcluster: the version, and the policies the issue's edits hinge on."""
    tree = policy_tree()["fields"]
    assert pcluster_version().startswith("3.")
    assert tree["HeadNode"]["fields"]["InstanceType"]["policy"] == "UNSUPPORTED"
    assert tree["Image"]["fields"]["Os"]["policy"] == "UNSUPPORTED"
    queues = tree["Scheduling"]["fields"]["SlurmQueues"]
    assert queues["list_key"] == "Name"
    assert queues["fields"]["ComputeResources"]["fields"]["InstanceType"]["policy"] == "COMPUTE_FLEET_STOP"


def test_every_policy_in_the_file_is_one_we_read() -> None:
    """A new ParallelCluster policy would be refused blindly: learn its condition before moving the pin."""

    def names(fields: dict[str, Any]) -> set[str]:
        found: set[str] = set()
        for field in fields.values():
            found.add(field["policy"])
            found |= names(field.get("fields", {}))
        return found

    assert names(policy_tree()["fields"]) <= KNOWN_POLICIES


@pytest.mark.parametrize("name", list(EDITS))
def test_changes_and_policies_are_parallelclusters(name: str, pcluster_says: dict[str, list[dict[str, Any]]]) -> None:
    old, new, _ = EDITS[name]
    ours = cluster_changes(old, new)
    theirs = pcluster_says[name]
    assert [(c.path, c.policy) for c in ours] == [(their_path(c), c["policy"]) for c in theirs]


@pytest.mark.parametrize("name", list(EDITS))
def test_outcomes_are_what_parallelclusters_checks_decide(
    name: str, pcluster_says: dict[str, list[dict[str, Any]]]
) -> None:
    old, new, expected = EDITS[name]
    ours = cluster_changes(old, new)
    assert [c.outcome for c in ours] == [their_outcome(c) for c in pcluster_says[name]]
    assert [c.outcome for c in ours] == expected  # the edit means what its name says


def test_a_refused_change_names_the_safe_way() -> None:
    old, new, _ = EDITS["head node instance type"]
    (change,) = cluster_changes(old, new)
    assert change == ClusterChange(
        path="HeadNode.InstanceType",
        policy="UNSUPPORTED",
        outcome="refused",
        old="m5.8xlarge",
        new="m5.4xlarge",
        safe_way=change.safe_way,
    )
    assert "new cluster" in change.safe_way
    for name, (old, new, _) in EDITS.items():
        for one in cluster_changes(old, new):
            assert bool(one.safe_way) == (one.outcome == "refused"), (name, one)


def test_no_change_no_changes() -> None:
    assert cluster_changes(P4DE, copy.deepcopy(P4DE)) == []
    assert cluster_changes(P5, P5) == []


# -- rollbacks: what CloudFormation asks ParallelCluster when a deploy fails after the cluster was updated ---

#: Edits ParallelCluster applies whose rollback it refuses once they are applied (login nodes then run): a
#: rollback reaching the cluster would stop in UPDATE_ROLLBACK_FAILED. The guard notes each at synth
#: (tests/test_deploy_outcomes.py) with the way out.
STUCK_ROLLBACKS = {"login nodes added"}


@pytest.mark.parametrize("name", list(EDITS))
def test_rollbacks_are_what_parallelclusters_checks_decide(
    name: str, pcluster_says: dict[str, list[dict[str, Any]]]
) -> None:
    old, new, _ = EDITS[name]
    back = rollback_changes(old, new)
    theirs = pcluster_says[f"{name} (rollback)"]
    assert [(c.path, c.policy) for c in back] == [(their_path(c), c["policy"]) for c in theirs]
    assert [c.outcome for c in back] == [their_outcome(c) for c in theirs]


def test_only_the_known_rollbacks_would_stop() -> None:
    """Every edit the guard lets through: its rollback is applied (in place, or with the fleet stopped, which
    'mlcluster update' keeps until the stacks settle), except the ones the guard notes."""
    stuck = {
        name
        for name, (old, new, _) in EDITS.items()
        if all(c.outcome != "refused" for c in cluster_changes(old, new))
        and any(c.outcome == "refused" for c in rollback_changes(old, new))
    }
    assert stuck == STUCK_ROLLBACKS
