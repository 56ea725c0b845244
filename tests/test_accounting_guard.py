"""The lock-file guard treats the managed accounting database (``storage.accounting``) as data.

Templates are reduced by the real ``stack_state`` (create-only properties from the CloudFormation
resource schema cfn-lint bundles) and compared by ``compare``/``weakenings``, the functions the
synth-time guard calls.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from mlcluster.lockfile import SAFE_WAYS
from mlcluster.replacement import DATA_BEARING_TYPES, compare, stack_state, weakenings

PATH = "Storage/AccountingDatabase/Cluster/Resource"
CLUSTER: dict[str, Any] = {
    "Type": "AWS::RDS::DBCluster",
    "DeletionPolicy": "Snapshot",
    "UpdateReplacePolicy": "Snapshot",
    "Properties": {
        "Engine": "aurora-mysql",
        "EngineVersion": "8.0.mysql_aurora.3.10.0",
        "StorageEncrypted": True,
        "KmsKeyId": "arn:aws:kms:us-west-2:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "BackupRetentionPeriod": 35,
        "DeletionProtection": True,
    },
}


def state(resource: dict[str, Any]) -> Any:
    return {"acct-Storage": stack_state({"Resources": {"Db": resource}}, {"Db": PATH})}


def edited(**properties: Any) -> dict[str, Any]:
    resource = copy.deepcopy(CLUSTER)
    for key, value in properties.items():
        if value is None:
            resource["Properties"].pop(key)
        else:
            resource["Properties"][key] = value
    return resource


def test_the_database_is_data_bearing_with_a_safe_way() -> None:
    assert "AWS::RDS::DBCluster" in DATA_BEARING_TYPES
    assert "mysqldump" in SAFE_WAYS["AWS::RDS::DBCluster"]
    # How to delete it for good where data is kept: the final snapshot and the retained secret by hand.
    assert "aws rds delete-db-cluster-snapshot --db-cluster-snapshot-identifier ID" in SAFE_WAYS["AWS::RDS::DBCluster"]
    assert "aws secretsmanager delete-secret --secret-id ARN" in SAFE_WAYS["AWS::RDS::DBCluster"]


def test_a_new_key_replaces_the_database_and_is_data_bearing() -> None:
    changes = compare(state(CLUSTER), state(edited(KmsKeyId="arn:aws:kms:us-west-2:111111111111:key/other")))
    (change,) = changes
    assert (change.action, change.path, change.data_bearing) == ("replace", PATH, True)


def test_an_engine_version_upgrade_is_an_update_in_place() -> None:
    (change,) = compare(state(CLUSTER), state(edited(EngineVersion="8.0.mysql_aurora.3.11.0")))
    assert change.action == "update"


def _weakenings(after: dict[str, Any]) -> list[str]:
    before = state(CLUSTER)["acct-Storage"].resources["Db"]
    return weakenings(before, state(after)["acct-Storage"].resources["Db"])


def test_shorter_backups_or_no_snapshot_weaken_it() -> None:
    assert _weakenings(edited(BackupRetentionPeriod=7)) == ["BackupRetentionPeriod 35 -> 7"]
    # Absent, Aurora keeps automated backups one day.
    assert _weakenings(edited(BackupRetentionPeriod=None)) == ["BackupRetentionPeriod 35 -> 1"]
    deleted = copy.deepcopy(CLUSTER)
    deleted["DeletionPolicy"] = deleted["UpdateReplacePolicy"] = "Delete"
    assert _weakenings(deleted) == ["DeletionPolicy Snapshot -> Delete", "UpdateReplacePolicy Snapshot -> Delete"]


def test_deletion_protection_going_off_is_not_refused() -> None:
    """A lock recorded with protection on (deployed before it went off) lets the construct's new default through.

    The construct keeps protection off (a failed create must roll back); the snapshot policy and the
    backups are what the guard holds, and they still weaken when they go.
    """
    assert _weakenings(edited(DeletionProtection=False)) == []
    assert _weakenings(edited(DeletionProtection=None)) == []
    deleted = edited(DeletionProtection=False)
    deleted["DeletionPolicy"] = "Delete"
    assert _weakenings(deleted) == ["DeletionPolicy Snapshot -> Delete"]


def test_keeping_more_is_not_a_weakening() -> None:
    assert _weakenings(edited(BackupRetentionPeriod=35)) == []
    before = state(edited(DeletionProtection=False, BackupRetentionPeriod=7))["acct-Storage"].resources["Db"]
    assert weakenings(before, state(CLUSTER)["acct-Storage"].resources["Db"]) == []


# Review i33 finding 3: removing the node group's rule (admit_node_group: false) is refused while the locked
# HyperPod controller does not hold the client group, even when the lock shows the client group's rule.
ACCT = "acct"
NODES_OUTPUT = {"Fn::GetStackOutput": {"OutputName": "NodesGroup", "StackName": f"{ACCT}-Network"}}
CLIENT_OUTPUT = {"Fn::GetStackOutput": {"OutputName": "ClientGroup", "StackName": f"{ACCT}-Storage"}}
CLIENT_ID = "AccountingDatabaseClientSecurityGroup0A1B2C3D"
NODES_RULE = "AccountingDatabaseSecurityGroupfromacctNetworkSecurityGroupRef"
CLIENT_RULE = "AccountingDatabaseSecurityGroupfromacctStorageAccountingDatabaseClient"


def _rule(source: Any) -> dict[str, Any]:
    properties = {"GroupId": "sg-db", "IpProtocol": "tcp", "FromPort": 3306, "ToPort": 3306}
    return {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {**properties, "SourceSecurityGroupId": source}}


def _deployed(
    *,
    nodes_rule: bool = True,
    client_rule: bool = True,
    held: bool = False,
    name: str = "t",
    worker_type: str = "ml.p5.48xlarge",
) -> Any:
    """The Storage stack's 3306 rules and the Cluster stack's HyperPod cluster, the controller's override holding
    the client group when ``held``."""
    from mlcluster.replacement import stack_state

    resources: dict[str, Any] = {
        CLIENT_ID: {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "clients", "VpcId": "v"}}
    }
    paths = {CLIENT_ID: "Storage/AccountingDatabase/ClientSecurityGroup/Resource"}
    if nodes_rule:
        resources[NODES_RULE] = _rule(NODES_OUTPUT)
        paths[NODES_RULE] = "Storage/AccountingDatabase/SecurityGroup/from acctNetwork:3306"
    if client_rule:
        resources[CLIENT_RULE] = _rule({"Fn::GetAtt": [CLIENT_ID, "GroupId"]})
        paths[CLIENT_RULE] = "Storage/AccountingDatabase/SecurityGroup/from acctStorageClient:3306"
    controller: dict[str, Any] = {
        "InstanceGroupName": "controller",
        "InstanceType": "ml.m5.12xlarge",
        "InstanceCount": 1,
        "ExecutionRole": "arn:aws:iam::111111111111:role/c",
    }
    if held:
        controller["OverrideVpcConfig"] = {"SecurityGroupIds": [NODES_OUTPUT, CLIENT_OUTPUT], "Subnets": ["subnet-1"]}
    worker = {**controller, "InstanceGroupName": "gpu", "InstanceType": worker_type}
    worker.pop("OverrideVpcConfig", None)
    cluster = {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {"ClusterName": name, "InstanceGroups": [controller, worker], "VpcConfig": {}},
    }
    client_output = {"ClientGroup": {"Value": {"Fn::GetAtt": [CLIENT_ID, "GroupId"]}}}
    return {
        f"{ACCT}-Storage": stack_state({"Resources": resources, "Outputs": client_output}, paths),
        f"{ACCT}-Cluster": stack_state({"Resources": {"Cluster": cluster}}, {"Cluster": "Cluster/Cluster/Resource"}),
    }


def _accounting_problems(tmp_path: Any, locked: Any, snapshot: Any) -> list[str]:
    from mlcluster.config import load_environment
    from mlcluster.deploy_outcomes import outcome_checks
    from tests.support import write_env

    environment = load_environment(
        write_env(tmp_path, ACCT, {"region": "us-west-2", "network": {"availability_zone": "us-west-2a"}})
    )
    problems, _ = outcome_checks(environment, locked, snapshot)
    return [p.allowed for p in problems if p.path == "storage.accounting.admit_node_group"]


def test_the_nodes_rule_stays_while_the_locked_controller_is_outside_the_client_group(tmp_path: Any) -> None:
    """Bridge step 1 deployed and locked (both rules; the controller created before the client group): setting
    admit_node_group back to false before the cluster is created again is refused."""
    (text,) = _accounting_problems(tmp_path, _deployed(), _deployed(nodes_rule=False))
    assert f"this edit removes {ACCT}-Storage/{NODES_RULE}, the rule that admits MySQL" in text
    assert "with controller group controller outside the client group" in text
    assert "slurmdbd would lose its database until the cluster is created again" in text
    assert "set storage.accounting.admit_node_group: true and deploy" in text
    # A lock written before the groups' networks were recorded cannot show it: refused, saying to relock.
    bare = _deployed()
    cluster = bare[f"{ACCT}-Cluster"].resources["Cluster"]
    bare[f"{ACCT}-Cluster"].resources["Cluster"] = dataclasses.replace(cluster, settings={})
    (text,) = _accounting_problems(tmp_path, bare, _deployed(nodes_rule=False))
    assert "the lock does not record the instance groups' OverrideVpcConfig" in text
    assert f"run 'mlcluster lock {ACCT}'" in text
    # A lock without the client group's rule: refused as before.
    (text,) = _accounting_problems(tmp_path, _deployed(client_rule=False), _deployed(nodes_rule=False))
    assert "the lock shows no rule for the controller's client group" in text


def test_the_nodes_rule_may_go_once_the_controller_holds_the_client_group(tmp_path: Any) -> None:
    """The edges: step 2 locked (the controller created with the client group) passes, with or without a new
    cluster in the same edit, and so does an edit that keeps the rule."""
    assert _accounting_problems(tmp_path, _deployed(held=True), _deployed(nodes_rule=False, held=True)) == []
    assert _accounting_problems(tmp_path, _deployed(held=True), _deployed(nodes_rule=False, held=True, name="t2")) == []
    assert _accounting_problems(tmp_path, _deployed(), _deployed(held=True)) == []


def test_the_nodes_rule_stays_in_the_edit_that_creates_the_cluster_anew(tmp_path: Any) -> None:
    """Review i33e finding 4: a new cluster.name and admit_node_group: false in one edit is refused (a failed create
    rolls back to the old controller, which needs the rule); the refusal says to deploy the new cluster first."""
    (text,) = _accounting_problems(tmp_path, _deployed(), _deployed(nodes_rule=False, held=True, name="t2"))
    assert "with controller group controller outside the client group" in text
    assert "this edit also creates that cluster anew" in text
    assert "deploy the new cluster first (with admit_node_group: true), run 'mlcluster lock acct', then set" in text
    assert "then set admit_node_group: false" in text


def test_the_nodes_rule_stays_when_the_cluster_comes_back_under_a_new_logical_id(tmp_path: Any) -> None:
    """Re-review (data-loss): the same re-create under a new logical id is a removal plus an addition; CloudFormation
    creates the new cluster before it deletes the old, so a failed create leaves the old controller running without
    the rule. Refused like a re-create; a cluster removed with none left in the app is still no reason."""
    edited = _deployed(nodes_rule=False, held=True, name="t2")
    stack = edited[f"{ACCT}-Cluster"]
    stack.resources["Cluster2"] = stack.resources.pop("Cluster")
    (text,) = _accounting_problems(tmp_path, _deployed(), edited)
    assert "this edit also creates that cluster anew" in text
    del stack.resources["Cluster2"]
    assert _accounting_problems(tmp_path, _deployed(), edited) == []


def test_a_workers_new_instance_type_is_no_new_cluster_for_the_nodes_rule(tmp_path: Any) -> None:
    """Review i33e finding 1a: a kept worker group's InstanceType change is a "replace" to the data guard, but
    CloudFormation updates AWS::SageMaker::Cluster in place (ClusterName and VpcConfig are its create-only paths):
    the same controller runs on, so removing the nodes rule in that edit is refused like on a kept cluster."""
    changes = compare(_deployed(), _deployed(nodes_rule=False, held=True, worker_type="ml.p4d.24xlarge"))
    assert [c.action for c in changes if c.logical_id == "Cluster"] == ["replace"]
    (text,) = _accounting_problems(
        tmp_path, _deployed(), _deployed(nodes_rule=False, held=True, worker_type="ml.p4d.24xlarge")
    )
    assert "with controller group controller outside the client group" in text
    assert "creates that cluster anew" not in text


def test_the_database_leaving_the_template_is_noted_as_deleted_with_its_final_snapshot(tmp_path: Any) -> None:
    """Review i33e finding 5: DeletionPolicy Snapshot does not keep the Aurora cluster running: CloudFormation
    deletes it and keeps a final snapshot, which bills until deleted. The notice says that and how to delete it."""
    from mlcluster.config import load_environment
    from mlcluster.lockfile import notices
    from tests.support import write_env

    environment = load_environment(
        write_env(
            tmp_path,
            ACCT,
            {
                "region": "us-west-2",
                "network": {"availability_zone": "us-west-2a"},
                "retention": {"allow_replacement": ["Storage/AccountingDatabase/Cluster"]},
            },
        )
    )
    locked, after = state(CLUSTER), {"acct-Storage": stack_state({"Resources": {}}, {})}
    changes = compare(locked, after)
    assert [(c.action, c.path) for c in changes] == [("remove", PATH)]
    (text,) = notices(environment, locked, after, changes)
    assert f"acct-Storage/{PATH} (AWS::RDS::DBCluster) leaves the template, and CloudFormation deletes it" in text
    assert "keeping a final snapshot (DeletionPolicy Snapshot)" in text and "bills for its storage" in text
    assert "'aws rds delete-db-cluster-snapshot --db-cluster-snapshot-identifier ID' deletes it" in text
    assert "running outside the stack" not in text
