"""Issue 30: a kept HyperPod instance group's OverrideVpcConfig edit is refused at synth (``mlcluster.deploy_outcomes``).

The lock and the new snapshot are reduced (``stack_state``) from templates built here the way the
stacks render them: an ``AWS::SageMaker::Cluster`` whose groups read the nodes' security group from the
Network stack's output and, for the controller, the accounting database's client group from the Storage
stack's output (``Fn::GetStackOutput``). The real synthesis of the edit that adds the client group to a
running controller is the day-two table's row "HyperPod managed accounting database added"
(tests/test_day_two.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mlcluster.config import Environment, load_environment
from mlcluster.lockfile import Lock, guard, write_lock
from mlcluster.replacement import (
    CONTROLLER_KEY,
    GROUP_NETWORKS_KEY,
    Snapshot,
    compare,
    snapshot_from_json,
    snapshot_to_json,
    stack_state,
)
from tests.support import write_env
from tests.test_deploy_outcomes import refusal

NAME = "hp"
NODES_GROUP = {"Fn::GetStackOutput": {"OutputName": "NodesGroup", "StackName": f"{NAME}-Network"}}
CLIENT_GROUP = {"Fn::GetStackOutput": {"OutputName": "ClientGroup", "StackName": f"{NAME}-Storage"}}
PRIMARY = {"Fn::GetStackOutput": {"OutputName": "Private1", "StackName": f"{NAME}-Network"}}
SECOND = {"Fn::GetStackOutput": {"OutputName": "Private2", "StackName": f"{NAME}-Network"}}
CONTROLLER_OVERRIDE = {"SecurityGroupIds": [NODES_GROUP, CLIENT_GROUP], "Subnets": [PRIMARY]}
ENVIRONMENT: dict[str, Any] = {
    "region": "us-west-2",
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "cluster": {
        "backend": "hyperpod",
        "name": "hp-train",
        "hyperpod": {
            "controller": {"instance_group_name": "controller", "instance_type": "ml.m5.12xlarge"},
            "workers": [
                {"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge", "instance_count": 2},
                {"instance_group_name": "spill", "instance_type": "ml.p5.48xlarge", "instance_count": 1},
            ],
        },
    },
}


def group(name: str, count: int = 1, override: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "InstanceGroupName": name,
        "InstanceType": "ml.p5.48xlarge" if name != "controller" else "ml.m5.12xlarge",
        "InstanceCount": count,
        "ExecutionRole": {"Fn::GetAtt": [f"Role{name}", "Arn"]},
        "ThreadsPerCore": 1,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/hp", "OnCreate": "on_create.sh"},
    }
    if override is not None:
        spec["OverrideVpcConfig"] = override
    return spec


def templates(
    groups: list[dict[str, Any]] | None = None,
    *,
    cluster_name: str = "hp-train",
    client_description: str = "clients",
    second_cidr: str = "10.1.128.0/17",
) -> Snapshot:
    """The Network, Storage and Cluster stacks: the cluster's groups as given (default: the controller with the
    client group in its override, two workers without one); a new ``client_description`` or ``second_cidr``
    replaces the client group or the second subnet (create-only properties)."""
    if groups is None:
        groups = [group("controller", override=CONTROLLER_OVERRIDE), group("gpu", 2), group("spill")]
    cluster = {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {
            "ClusterName": cluster_name,
            "VpcConfig": {"SecurityGroupIds": [NODES_GROUP], "Subnets": [PRIMARY]},
            "InstanceGroups": groups,
            "NodeRecovery": "Automatic",
        },
    }
    network = {
        "NodesGroup": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "nodes", "VpcId": "v"}},
        "Private1": {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": "10.1.0.0/17", "VpcId": "v"}},
        "Private2": {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": second_cidr, "VpcId": "v"}},
    }
    client = {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": client_description, "VpcId": "v"}}

    def outputs(*ids: str) -> dict[str, Any]:
        return {i: {"Value": {"Fn::GetAtt": [i, "GroupId"]} if "Group" in i else {"Ref": i}} for i in ids}

    return {
        f"{NAME}-Network": stack_state(
            {"Resources": network, "Outputs": outputs(*network)},
            {"NodesGroup": "Network/SecurityGroup/Resource", "Private1": "Network/Private1", "Private2": "Network/P2"},
        ),
        f"{NAME}-Storage": stack_state(
            {"Resources": {"ClientGroup": client}, "Outputs": outputs("ClientGroup")},
            {"ClientGroup": "Storage/AccountingDatabase/ClientSecurityGroup/Resource"},
        ),
        f"{NAME}-Cluster": stack_state({"Resources": {"Cluster": cluster}}, {"Cluster": "Cluster/Cluster/Resource"}),
    }


def environment(tmp_path: Path, deployed: Snapshot, **retention: Any) -> Environment:
    env = load_environment(write_env(tmp_path, NAME, {**ENVIRONMENT, "retention": retention}))
    write_lock(env, Lock(deployed, "deployed"))
    return env


def test_the_lock_records_each_groups_override_and_round_trips() -> None:
    snapshot = templates()
    settings = snapshot[f"{NAME}-Cluster"].resources["Cluster"].settings
    assert settings[GROUP_NETWORKS_KEY] == {"controller": CONTROLLER_OVERRIDE, "gpu": None, "spill": None}
    assert snapshot_from_json(snapshot_to_json(snapshot)) == snapshot


def test_the_controller_gaining_the_client_group_is_refused_naming_group_change_and_way(tmp_path: Path) -> None:
    """The upgrade to the managed database's client group on a running controller (docs/upgrading.md)."""
    before = [group("controller", override={"SecurityGroupIds": [NODES_GROUP], "Subnets": [PRIMARY]}), group("gpu", 2)]
    env = environment(tmp_path, templates(before))
    after = copy.deepcopy(before)
    after[0]["OverrideVpcConfig"] = CONTROLLER_OVERRIDE
    text = refusal(env, templates(after))
    assert (
        "cluster.hyperpod.controller: this edit keeps instance group controller of the HyperPod cluster hp-train "
        "(hp-Cluster) under its name but changes the SecurityGroupIds of its OverrideVpcConfig" in text
    )
    assert (
        "subnets [<hp-Network Private1>] security groups [<hp-Network NodesGroup>] -> subnets [<hp-Network Private1>] "
        "security groups [<hp-Network NodesGroup>, <hp-Storage ClientGroup>]" in text
    )
    # An existing group keeps its instance type (the Slurm guide; mlcluster.replacement): not said to change.
    assert "UpdateCluster, which changes an existing group's instance count and lifecycle script, not its network" in (
        text
    )
    assert "instance type" not in text
    # Review i33 finding 2: for the controller only a new cluster is a way (a new group name is a new controller).
    assert "new instance_group_name in" not in text
    assert (
        "Safe way, which creates the nodes anew: create the cluster again" in text and "set a new cluster.name" in text
    )
    assert "A new instance_group_name for the controller is no way" in text
    # Review i33 finding 4: the new controller starts on FSx-kept folders while the old one still runs.
    assert "stop the old controller's slurmctld, slurmdbd and mariadb first" in text


@pytest.mark.parametrize(
    ("edit", "name", "told"),
    [
        (
            lambda g: g[2].update(OverrideVpcConfig={"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}),
            "spill",
            "gains an OverrideVpcConfig",
        ),
        (lambda g: g[0].pop("OverrideVpcConfig"), "controller", "loses its OverrideVpcConfig"),
        (lambda g: g[0]["OverrideVpcConfig"].update(Subnets=[SECOND]), "controller", "changes the Subnets of its"),
    ],
    ids=["worker gains zones", "controller loses its override", "controller moves subnet"],
)
def test_every_override_change_of_a_kept_group_is_refused(tmp_path: Path, edit: Any, name: str, told: str) -> None:
    env = environment(tmp_path, templates())
    groups = [group("controller", override=copy.deepcopy(CONTROLLER_OVERRIDE)), group("gpu", 2), group("spill")]
    edit(groups)
    text = refusal(env, templates(groups))
    key = "cluster.hyperpod.workers[1]" if name == "spill" else "cluster.hyperpod.controller"
    assert f"{key}: this edit keeps instance group {name} of the HyperPod cluster hp-train" in text
    assert told in text
    assert text.count("this edit keeps instance group") == 1  # the other groups are unchanged
    # A worker may move under a new group name; the controller may not (a new group is a new controller).
    assert ("give the group a new instance_group_name in cluster.hyperpod.workers[1]" in text) == (name == "spill")


def test_a_new_group_with_an_override_and_an_unchanged_override_pass(tmp_path: Path) -> None:
    """The edges: a group added with its own override (created so), the controller's override as deployed while
    the workers change count, and a group removed, pass without a problem or a note."""
    env = environment(tmp_path, templates())
    grown = [
        group("controller", override=CONTROLLER_OVERRIDE),
        group("gpu", 4),
        group("spill-b", override={"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}),
    ]
    _, notes = guard(env, templates(grown))
    assert notes == []
    assert guard(env, templates())[1] == []


def test_a_replaced_cluster_is_left_to_the_data_guard(tmp_path: Path) -> None:
    """A new cluster (a new name, allowed) creates every group with its network: no network refusal on top."""
    env = environment(tmp_path, templates(), allow_replacement=["Cluster/Cluster"])
    moved = [group("controller", override={"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}), group("gpu", 2)]
    changes, notes = guard(env, templates(moved, cluster_name="hp-train2"))
    assert [c.action for c in changes if c.path == "Cluster/Cluster/Resource"] == ["replace"]
    assert not [n for n in notes if "OverrideVpcConfig" in n]


def test_a_lock_without_the_record_notes_it_and_refuses_nothing(tmp_path: Path) -> None:
    """A lock written before the record: the edit passes with a note that says what is not checked and the way."""
    bare = snapshot_to_json(templates())
    del bare[f"{NAME}-Cluster"]["resources"]["Cluster"]["settings"]
    env = environment(tmp_path, snapshot_from_json(bare))
    groups = [group("controller", override={"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}), group("gpu", 2)]
    _, notes = guard(env, templates([*groups, group("spill")]))
    (note,) = notes
    assert (
        "the lock does not record the instance groups' OverrideVpcConfig of the HyperPod cluster in hp-Cluster" in note
    )
    assert f"run 'mlcluster lock {NAME}'" in note
    assert "a kept group's network change is not refused" in note
    # The same lock with an unchanged cluster: nothing to say.
    assert guard(env, templates())[1] == []


def test_a_replaced_client_group_a_kept_group_holds_is_refused(tmp_path: Path) -> None:
    """The client group replaced in the Storage stack (a create-only change): the cluster's template is unchanged,
    but the deploy would give the running controller a new group id after the Storage stack moved the database's
    rule to it. Refused like an edit of the override, naming the group, the resource and the way."""
    env = environment(tmp_path, templates())
    edited = templates(client_description="clients of the database")
    assert [c.action for c in compare(templates(), edited) if c.path.endswith("ClientSecurityGroup/Resource")] == [
        "replace"
    ]
    text = refusal(env, edited)
    assert (
        "cluster.hyperpod.controller: this edit replaces the security group "
        "Storage/AccountingDatabase/ClientSecurityGroup/Resource (stack hp-Storage), which instance group controller "
        "of the "
        "HyperPod cluster hp-train (hp-Cluster) holds through its OverrideVpcConfig" in text
    )
    assert "slurmdbd loses its database" in text
    assert "set a new cluster.name and name Cluster/Cluster in retention.allow_replacement" in text
    assert text.count("this edit replaces the") == 1


def test_a_replaced_client_group_no_kept_group_holds_passes(tmp_path: Path) -> None:
    """The edge: the same replacement while no instance group holds the client group passes, without a note."""
    plain = [group("controller"), group("gpu", 2), group("spill")]
    env = environment(tmp_path, templates(plain))
    changes, notes = guard(env, templates(plain, client_description="clients of the database"))
    assert [c.action for c in changes if c.path.endswith("ClientSecurityGroup/Resource")] == ["replace"]
    assert notes == []


WORKER_OVERRIDE = {"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}


def test_a_replaced_subnet_a_kept_group_holds_is_refused(tmp_path: Path) -> None:
    """The extra zone's subnet made again (a new CIDR, or zone) while worker group spill runs in it: the cluster's
    template is unchanged, but the deploy would send UpdateCluster the new subnet for the running group."""
    groups = [
        group("controller", override=CONTROLLER_OVERRIDE),
        group("gpu", 2),
        group("spill", override=WORKER_OVERRIDE),
    ]
    env = environment(tmp_path, templates(groups))
    text = refusal(env, templates(groups, second_cidr="10.1.200.0/24"))
    assert (
        "cluster.hyperpod.workers[1]: this edit replaces the subnet Network/P2 (stack hp-Network), which instance group spill "
        "of the HyperPod cluster hp-train (hp-Cluster) holds through its OverrideVpcConfig" in text
    )
    assert "sends the new subnet's id to SageMaker's UpdateCluster for the running group" in text
    assert "a group of a new instance_group_name that does not use it and remove this group" in text
    assert text.count("this edit replaces the") == 1  # the controller's subnet is the first one, kept


def test_a_replaced_subnet_held_only_by_a_new_or_edited_group_is_not_refused_twice(tmp_path: Path) -> None:
    """The edges: a group added in the same edit is created in the new subnet (passes); a kept group whose override
    is edited as well is refused once, for the edit, not a second time for the subnet; a kept group without an
    override does not hold the subnet (passes)."""
    env = environment(tmp_path, templates())
    added = [
        group("controller", override=CONTROLLER_OVERRIDE),
        group("gpu", 2),
        group("spill-b", override=WORKER_OVERRIDE),
    ]
    _, notes = guard(env, templates(added, second_cidr="10.1.200.0/24"))
    assert notes == []
    assert guard(env, templates(second_cidr="10.1.200.0/24"))[1] == []
    moved = [
        group("controller", override=CONTROLLER_OVERRIDE),
        group("gpu", 2),
        group("spill", override=WORKER_OVERRIDE),
    ]
    text = refusal(env, templates(moved, second_cidr="10.1.200.0/24"))
    assert "spill" in text and "gains an OverrideVpcConfig" in text
    assert "this edit replaces the subnet" not in text


def test_a_lock_without_the_record_still_refuses_a_replaced_group_a_kept_group_holds(tmp_path: Path) -> None:
    """The kept groups are told from the lock's create-only fields too, so a lock written before the record of the
    groups' networks still refuses the replaced client group the running controller holds."""
    bare = snapshot_to_json(templates())
    del bare[f"{NAME}-Cluster"]["resources"]["Cluster"]["settings"]
    env = environment(tmp_path, snapshot_from_json(bare))
    text = refusal(env, templates(client_description="clients of the database"))
    assert "cluster.hyperpod.controller: this edit replaces the security group" in text


def test_a_new_controller_group_name_needs_the_clusters_allowance(tmp_path: Path) -> None:
    """Review i33 finding 2: a new controller instance_group_name on a kept cluster makes UpdateCluster delete the
    locked controller group and with it /opt/sagemaker (slurmctld's state, a local accounting database): refused
    like a new cluster without the allowance Cluster/Cluster, accepted with it; a worker group renamed passes."""
    renamed = [group("ctl2", override=CONTROLLER_OVERRIDE), group("gpu", 2), group("spill")]
    assert templates(renamed)[f"{NAME}-Cluster"].resources["Cluster"].create_only[CONTROLLER_KEY] == "ctl2"
    text = refusal(environment(tmp_path / "refused", templates()), templates(renamed))
    assert (
        "cluster.hyperpod.controller.instance_group_name: this edit replaces hp-Cluster/Cluster/Cluster/Resource "
        '(AWS::SageMaker::Cluster, logical id Cluster): ControllerInstanceGroupName "controller" -> "ctl2" '
        "(a new Slurm controller: the locked one's group is removed)" in text
    )
    assert "the old controller's /opt/sagemaker goes with it" in text
    assert "with accounting.mode local also the MariaDB accounting database" in text
    assert "set a new cluster.name with the new group name" in text
    assert "To allow it, add 'Cluster/Cluster' to retention.allow_replacement" in text
    assert "stop the old controller's daemons first ('sudo systemctl stop slurmctld slurmdbd mariadb'" in text
    # With the allowance: accepted, and the kept groups' networks are still checked (no new cluster).
    allowed = environment(tmp_path / "allowed", templates(), allow_replacement=["Cluster/Cluster"])
    changes, _ = guard(allowed, templates(renamed))
    assert [c.action for c in changes if c.path == "Cluster/Cluster/Resource"] == ["replace"]
    moved = copy.deepcopy(renamed)
    moved[1]["OverrideVpcConfig"] = {"SecurityGroupIds": [NODES_GROUP], "Subnets": [SECOND]}
    assert "this edit keeps instance group gpu" in refusal(allowed, templates(moved))
    # The edges: a worker group renamed, and the controller kept, pass without an allowance.
    kept = environment(tmp_path / "kept", templates())
    changes, _ = guard(kept, templates([group("controller", override=CONTROLLER_OVERRIDE), group("gpu2", 2)]))
    assert not [c for c in changes if c.dangerous]


def test_a_new_controller_group_is_found_in_a_lock_without_its_record(tmp_path: Path) -> None:
    """A lock written before the controller group was recorded: a controller name no locked group has is new."""
    bare = snapshot_to_json(templates())
    del bare[f"{NAME}-Cluster"]["resources"]["Cluster"]["create_only"][CONTROLLER_KEY]
    env = environment(tmp_path, snapshot_from_json(bare))
    renamed = [group("ctl2", override=CONTROLLER_OVERRIDE), group("gpu", 2), group("spill")]
    assert 'ControllerInstanceGroupName (one of controller, gpu, spill) -> "ctl2"' in refusal(env, templates(renamed))
    # The edge: the same lock and the same controller name pass.
    changes, _ = guard(env, templates())
    assert not [c for c in changes if c.dangerous]


def test_the_controller_group_is_the_slurm_config_controller_else_the_first() -> None:
    """With SlurmConfig the group whose NodeType is Controller (wherever it is), without it the first group."""
    typed = [group("gpu", 2), group("ctl", override=CONTROLLER_OVERRIDE)]
    typed[0]["SlurmConfig"] = {"NodeType": "Compute"}
    typed[1]["SlurmConfig"] = {"NodeType": "Controller"}
    assert templates(typed)[f"{NAME}-Cluster"].resources["Cluster"].create_only[CONTROLLER_KEY] == "ctl"
    assert templates()[f"{NAME}-Cluster"].resources["Cluster"].create_only[CONTROLLER_KEY] == "controller"


def test_a_kept_groups_new_instance_type_does_not_hide_another_groups_network_change(tmp_path: Path) -> None:
    """Review i33e finding 1b: a worker's InstanceType change (the data guard's "replace", allowed) is an in-place
    UpdateCluster to CloudFormation (its create-only paths are ClusterName and VpcConfig): the cluster is not new,
    so a kept group's OverrideVpcConfig moved in the same edit is still refused."""
    env = environment(tmp_path, templates(), allow_replacement=["Cluster/Cluster"])
    groups = [group("controller", override=copy.deepcopy(CONTROLLER_OVERRIDE)), group("gpu", 2), group("spill")]
    groups[1]["InstanceType"] = "ml.p4d.24xlarge"
    groups[0]["OverrideVpcConfig"]["Subnets"] = [SECOND]
    changes = compare(templates(), templates(groups))
    assert [c.action for c in changes if c.path == "Cluster/Cluster/Resource"] == ["replace"]
    text = refusal(env, templates(groups))
    assert "cluster.hyperpod.controller: this edit keeps instance group controller of the HyperPod cluster" in text
    assert "changes the Subnets of its OverrideVpcConfig" in text
