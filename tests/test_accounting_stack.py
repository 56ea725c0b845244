"""A HyperPod environment with the managed Slurm accounting database, synthesized whole.

The stage runs every cdk-nag pack the file lists (NIST 800-53 R5 here) and AwsSolutions: synth
fails on any unacknowledged finding. The templates then show the database in the Storage stack,
the controller alone reading its secret, the lifecycle features pointing slurmdbd at it, and the
Observability stack's alarms on it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import cx_api

from mlcluster.analysis.assembly import Assembly, load_assembly
from mlcluster.analysis.reachability import _hyperpod_groups, check_assembly, databases, rotation_functions
from mlcluster.app import build_app
from mlcluster.config import load_environment
from mlcluster.deploy_outcomes import outcome_checks
from mlcluster.replacement import Snapshot, snapshot_from_assembly
from tests.support import stack_templates, write_env

ENVIRONMENT: dict[str, Any] = {
    "compliance": {"packs": ["nist-800-53-r5"]},
    "network": {"availability_zone_id": "usw2-az4", "extra_zones": [{"availability_zone_id": "usw2-az1"}]},
    "storage": {"accounting": {}},
    "cluster": {
        "backend": "hyperpod",
        "hyperpod": {
            "workers": [{"instance_group_name": "gpu", "instance_type": "ml.p5.48xlarge"}],
            "lifecycle": {"accounting": {"mode": "managed"}},
        },
    },
    "observability": {"alarm_emails": ["ops@example.com"]},
}


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("accounting-stack")
    write_env(tmp / "envs", "acct", {"region": "us-west-2", **ENVIRONMENT})
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


@pytest.fixture(scope="module")
def templates(outdir: Path) -> dict[str, dict[str, Any]]:
    return stack_templates(cx_api.CloudAssembly(str(outdir)))


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_the_database_lives_in_the_storage_stack(templates: dict[str, dict[str, Any]]) -> None:
    storage = templates["acct/Storage"]
    (cluster,) = of_type(storage, "AWS::RDS::DBCluster").values()
    assert cluster["DeletionPolicy"] == "Snapshot"
    assert cluster["Properties"]["DeletionProtection"] is False
    # HyperPod's controller logs in as the master user: no Data API, no user function, no second secret.
    assert "EnableHttpEndpoint" not in cluster["Properties"]
    assert not of_type(storage, "Custom::AccountingDatabaseUser")
    assert len(of_type(storage, "AWS::SecretsManager::Secret")) == 1
    assert {"AccountingDatabaseEndpoint", "AccountingDatabaseSecretArn"} <= set(storage["Outputs"])
    assert not of_type(templates["acct/Cluster"], "AWS::RDS::DBCluster")


def _policies_of(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in of_type(template, "AWS::IAM::ManagedPolicy").values()
        if any(r["Ref"].startswith(role_prefix) for r in policy["Properties"].get("Roles", []))
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_only_the_controller_reads_and_decrypts_the_secret(templates: dict[str, dict[str, Any]]) -> None:
    cluster = templates["acct/Cluster"]
    controller = {s.get("Sid"): s for s in _policies_of(cluster, "Rolecontroller")}
    read = controller["ReadSecrets"]
    assert read["Action"] == "secretsmanager:GetSecretValue"
    assert read["Resource"]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"
    decrypt = controller["DecryptSecrets"]
    assert decrypt["Action"] == "kms:Decrypt"
    assert decrypt["Resource"]["Fn::GetStackOutput"]["StackName"] == "acct-Network"
    assert list(decrypt["Condition"]["StringEquals"]) == ["kms:ViaService"]
    worker = {s.get("Sid") for s in _policies_of(cluster, "Rolegpu")}
    assert worker and not worker & {"ReadSecrets", "DecryptSecrets"}


def test_the_controller_runs_slurmdbd_against_it(outdir: Path, templates: dict[str, dict[str, Any]]) -> None:
    cluster = templates["acct/Cluster"]
    (features,) = outdir.glob("asset.*/mlcluster_features.json")
    accounting = json.loads(features.read_text(encoding="utf-8"))["accounting"]
    assert accounting["mode"] == "remote"
    markers: dict[str, Any] = {}
    for deployment in of_type(cluster, "Custom::CDKBucketDeployment").values():
        for source in deployment["Properties"].get("SourceMarkers", []):
            markers.update(source)
    host, port = accounting["endpoint"].rsplit(":", 1)
    assert port == "3306"
    assert markers[host]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"
    assert markers[accounting["secret_arn"]]["Fn::GetStackOutput"]["StackName"] == "acct-Storage"


def test_observability_alarms_on_the_database(templates: dict[str, dict[str, Any]]) -> None:
    alarms = {k: v["Properties"] for k, v in of_type(templates["acct/Observability"], "AWS::CloudWatch::Alarm").items()}
    by_metric = {a["MetricName"]: a for a in alarms.values() if a.get("Namespace") == "AWS/RDS"}
    assert set(by_metric) == {"VolumeBytesUsed", "CPUUtilization", "ACUUtilization", "DatabaseConnections"}
    assert by_metric["VolumeBytesUsed"]["Threshold"] == 50 * 1024**3  # storage.accounting.alarm_volume_gib
    assert by_metric["CPUUtilization"]["Threshold"] == 90
    connections = by_metric["DatabaseConnections"]
    assert (connections["ComparisonOperator"], connections["TreatMissingData"]) == ("LessThanThreshold", "breaching")
    for alarm in by_metric.values():
        (dimension,) = alarm["Dimensions"]
        assert dimension["Name"] == "DBClusterIdentifier"
        assert alarm["AlarmActions"] and alarm["OKActions"]


@pytest.fixture(scope="module")
def assembly(outdir: Path) -> Assembly:
    return load_assembly(outdir)


def edited(assembly: Assembly, change: Callable[[dict[str, Any]], None]) -> Assembly:
    templates = copy.deepcopy(assembly.templates)
    change(templates["acct/Storage"]["Resources"])
    return Assembly(templates, assets=assembly.assets, stack_names=assembly.stack_names)


def test_the_reachability_gate_proves_the_database_paths(assembly: Assembly) -> None:
    (report,) = check_assembly(assembly)
    assert report.problems == []
    (database,) = databases(assembly, "acct")
    assert database.port == 3306 and len(database.subnets) == 2
    (function,) = rotation_functions(assembly, "acct")
    assert function.subnets == database.subnets


def test_only_the_controller_carries_the_database_client_group(templates: dict[str, dict[str, Any]]) -> None:
    """Issue 30, item 4: the controller's OverrideVpcConfig adds the client group; the workers do not have it."""
    storage = templates["acct/Storage"]["Resources"]
    client = _client_group_id(storage)
    (cluster,) = of_type(templates["acct/Cluster"], "AWS::SageMaker::Cluster").values()
    groups = {g["InstanceGroupName"]: g for g in cluster["Properties"]["InstanceGroups"]}
    default = cluster["Properties"]["VpcConfig"]
    controller = groups.pop("controller-machine")["OverrideVpcConfig"]
    assert controller["Subnets"] == default["Subnets"]
    (extra,) = [g for g in controller["SecurityGroupIds"] if g not in default["SecurityGroupIds"]]
    assert list(extra) == ["Fn::GetStackOutput"]  # a weak reference (mlcluster/stacks/common.py), never an export
    assert client in str(extra)
    for name, group in groups.items():
        assert client not in str(group.get("OverrideVpcConfig", {})), name
    # The client group admits nothing and sends only MySQL to the database (inline: no default allow-all).
    assert "SecurityGroupIngress" not in storage[client]["Properties"]
    (egress,) = storage[client]["Properties"]["SecurityGroupEgress"]
    assert (egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == ("tcp", 3306, 3306)


def _interface_groups(template: dict[str, Any], role_prefix: str) -> list[str]:
    """The security groups a role may name when it creates a network interface (its Network policy)."""
    (create,) = [s for s in _policies_of(template, role_prefix) if s.get("Sid") == "CreateInterfacesInClusterSubnets"]
    return [json.dumps(r) for r in create["Resource"] if ":security-group/" in json.dumps(r)]


def test_only_the_controllers_role_may_create_its_eni_with_the_client_group(
    templates: dict[str, dict[str, Any]],
) -> None:
    """Issue 30c, item 1: the controller's ENI carries the client group, so its role's CreateNetworkInterface must
    name it (else HyperPod's create of the controller is denied); a worker's role must not."""
    client = _client_group_id(templates["acct/Storage"]["Resources"])
    cluster = templates["acct/Cluster"]
    controller = _interface_groups(cluster, "Rolecontroller")
    assert len(controller) == 2 and sum(client in g for g in controller) == 1
    worker = _interface_groups(cluster, "Rolegpu")
    assert len(worker) == 1 and client not in worker[0]


def _group(resources: dict[str, Any], description: str) -> dict[str, Any]:
    (group,) = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroup" and r["Properties"]["GroupDescription"].startswith(description)
    ]
    return group


def _client_group_id(resources: dict[str, Any]) -> str:
    (name,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        and r["Properties"]["GroupDescription"].startswith("Slurm accounting database clients")
    ]
    return name


def _without_client_ingress(resources: dict[str, Any]) -> None:
    client = {"Fn::GetAtt": [_client_group_id(resources), "GroupId"]}
    for name in [k for k, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]:
        if resources[name]["Properties"]["SourceSecurityGroupId"] == client:
            del resources[name]


def _open_to_the_vpc(resources: dict[str, Any]) -> None:
    _group(resources, "Slurm accounting database -")["Properties"]["SecurityGroupIngress"] = [
        {"CidrIp": "10.0.0.0/16", "IpProtocol": "tcp", "FromPort": 3306, "ToPort": 3306}
    ]


def _no_https_for_rotation(resources: dict[str, Any]) -> None:
    _group(resources, "Slurm accounting database secret rotation")["Properties"]["SecurityGroupEgress"] = []


def _no_rotation_egress_to_the_database(resources: dict[str, Any]) -> None:
    for name in [k for k, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]:
        del resources[name]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_without_client_ingress, "its security groups admit no TCP 3306 from instance group controller-machine"),
        (_open_to_the_vpc, "admits 10.0.0.0/16, an address range"),
        (_no_https_for_rotation, "no security group lets HTTPS out to Secrets Manager"),
        (_no_rotation_egress_to_the_database, "no security group of rotation function"),
    ],
)
def test_the_gate_refuses_a_broken_or_wider_path(
    assembly: Assembly, change: Callable[[dict[str, Any]], None], problem: str
) -> None:
    (report,) = check_assembly(edited(assembly, change))
    assert any(problem in p for p in report.problems), report.problems


def test_the_gate_refuses_a_database_open_to_every_node(assembly: Assembly) -> None:
    """Issue 30, item 4: admitting the nodes' shared group (the way it was before) lets the workers in: refused."""
    templates = copy.deepcopy(assembly.templates)
    (cluster,) = of_type(templates["acct/Cluster"], "AWS::SageMaker::Cluster").values()
    nodes = cluster["Properties"]["VpcConfig"]["SecurityGroupIds"][0]
    storage = templates["acct/Storage"]["Resources"]
    (database,) = [r for r in storage.values() if r["Type"] == "AWS::RDS::DBCluster"]
    (group,) = database["Properties"]["VpcSecurityGroupIds"]
    storage["AdmitEveryNode"] = {
        "Type": "AWS::EC2::SecurityGroupIngress",
        "Properties": {"GroupId": group, "IpProtocol": "tcp", "FromPort": 3306, "ToPort": 3306},
    }
    storage["AdmitEveryNode"]["Properties"]["SourceSecurityGroupId"] = nodes
    (report,) = check_assembly(Assembly(templates, assets=assembly.assets, stack_names=assembly.stack_names))
    assert any("admit TCP 3306 from instance group gpu, which does not run slurmdbd" in p for p in report.problems), (
        report.problems
    )


def test_the_gate_finds_the_controller_by_its_slurm_node_type_or_first_place() -> None:
    """HyperPod's ``SlurmConfig.NodeType`` names the controller when given; else HyperPodCluster lists it first."""
    vpc = {"Subnets": ["subnet-a"], "SecurityGroupIds": ["sg-nodes"]}
    typed = {
        "VpcConfig": vpc,
        "InstanceGroups": [
            {"InstanceGroupName": "gpu", "SlurmConfig": {"NodeType": "Compute"}},
            {"InstanceGroupName": "ctl", "SlurmConfig": {"NodeType": "Controller"}},
        ],
    }
    assert [(g.name, g.slurm_controller) for g in _hyperpod_groups("e", typed)] == [
        ("instance group gpu", False),
        ("instance group ctl", True),
    ]
    untyped = {"VpcConfig": vpc, "InstanceGroups": [{"InstanceGroupName": "ctl"}, {"InstanceGroupName": "gpu"}]}
    assert [g.slurm_controller for g in _hyperpod_groups("e", untyped)] == [True, False]


def _database_ingress(resources: dict[str, Any]) -> dict[str, Any]:
    """The database group's TCP 3306 ingress resources, by logical ID (the rotation's port is a GetAtt)."""
    (group,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        and r["Properties"]["GroupDescription"].startswith("Slurm accounting database -")
    ]
    return {
        k: r["Properties"]
        for k, r in resources.items()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
        and r["Properties"]["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
        and r["Properties"]["FromPort"] == 3306
    }


#: The rule b0ae860 deployed for the node group (its only client then): the flag must render this logical ID, or
#: CloudFormation would remove the deployed rule and add a new one, cutting slurmdbd off in between.
NODE_GROUP_RULE = "AccountingDatabaseSecurityGroupfromacctNetworkSecurityGroupRef"


@pytest.fixture(scope="module")
def bridged_outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("accounting-bridge")
    environment = copy.deepcopy(ENVIRONMENT)
    environment["storage"]["accounting"]["admit_node_group"] = True
    write_env(tmp / "envs", "acct", {"region": "us-west-2", **environment})
    app, _ = build_app(tmp / "envs", outdir=str(tmp / "out"))
    app.synth()
    return tmp / "out"


def test_by_default_the_database_admits_the_client_group_alone(templates: dict[str, dict[str, Any]]) -> None:
    """Issue 30d, item 1: without admit_node_group the only 3306 rule is the client group's, and the database
    carries no mark that would let the gate accept the workers."""
    storage = templates["acct/Storage"]["Resources"]
    (rule,) = _database_ingress(storage).values()
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [_client_group_id(storage), "GroupId"]}
    (database,) = of_type(templates["acct/Storage"], "AWS::RDS::DBCluster").values()
    assert "mlcluster:admitsNodeGroup" not in database.get("Metadata", {})


def test_admit_node_group_keeps_the_nodes_rule_beside_the_client_group(bridged_outdir: Path) -> None:
    """Issue 30d, item 1: with admit_node_group the node group's rule (the logical ID an environment deployed before
    the client group has) stays beside the client group's, and the database is marked as admitting it knowingly."""
    templates: dict[str, dict[str, Any]] = stack_templates(cx_api.CloudAssembly(str(bridged_outdir)))
    storage = templates["acct/Storage"]["Resources"]
    rules = _database_ingress(storage)
    assert len(rules) == 2
    (node_rule,) = [k for k in rules if k.startswith(NODE_GROUP_RULE)]
    (cluster,) = of_type(templates["acct/Cluster"], "AWS::SageMaker::Cluster").values()
    nodes = cluster["Properties"]["VpcConfig"]["SecurityGroupIds"][0]
    # The rule's source is the Network stack's output the Cluster gives every node as its group.
    source = rules[node_rule]["SourceSecurityGroupId"]["Fn::GetStackOutput"]
    assert (source["StackName"], source["OutputName"]) == (
        nodes["Fn::GetStackOutput"]["StackName"],
        nodes["Fn::GetStackOutput"]["OutputName"],
    )
    assert "NetworkSecurityGroup" in source["OutputName"]
    (client_rule,) = [v for k, v in rules.items() if k != node_rule]
    assert client_rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [_client_group_id(storage), "GroupId"]}
    (database,) = of_type(templates["acct/Storage"], "AWS::RDS::DBCluster").values()
    assert database["Metadata"]["mlcluster:admitsNodeGroup"] is True


def test_the_gate_accepts_the_workers_path_only_when_the_flag_marks_it(bridged_outdir: Path) -> None:
    """Issue 30d, item 1: the gate passes the bridged environment (the controller still proven, the workers admitted
    knowingly); the same templates without the flag's mark are refused for the workers' path."""
    bridged = load_assembly(bridged_outdir)
    (report,) = check_assembly(bridged)
    assert report.problems == []

    def unmarked(resources: dict[str, Any]) -> None:
        (database,) = [r for r in resources.values() if r["Type"] == "AWS::RDS::DBCluster"]
        del database["Metadata"]["mlcluster:admitsNodeGroup"]

    (report,) = check_assembly(edited(bridged, unmarked))
    assert any("admit TCP 3306 from instance group gpu, which does not run slurmdbd" in p for p in report.problems), (
        report.problems
    )

    def marked_loosely(resources: dict[str, Any]) -> None:
        """Only the boolean true the construct writes counts, not a string a hand edit might leave."""
        (database,) = [r for r in resources.values() if r["Type"] == "AWS::RDS::DBCluster"]
        database["Metadata"]["mlcluster:admitsNodeGroup"] = "true"

    (report,) = check_assembly(edited(bridged, marked_loosely))
    assert any("which does not run slurmdbd" in p for p in report.problems), report.problems


def _before_the_client_group(snapshot: Snapshot) -> Snapshot:
    """What an environment deployed before the client group locked: the node group's 3306 rule, no client rule."""
    old = copy.deepcopy(snapshot)
    resources = old["acct-Storage"].resources
    for lid in [
        k for k in resources if k.startswith("AccountingDatabaseSecurityGroupfromacctStorageAccountingDatabaseClient")
    ]:
        del resources[lid]
    return old


def test_the_lock_guard_refuses_an_upgrade_that_cuts_slurmdbd_off(outdir: Path, bridged_outdir: Path) -> None:
    """Issue 30d, item 1: a lock with the node group's rule and none for the client group (a cluster created before
    it) refuses the default edit, which removes that rule; admit_node_group passes; once the lock shows the client
    group's rule (relocked after the bridge deploy) setting it back to false passes."""
    environment = load_environment(outdir.parent / "envs" / "acct.yaml")
    default = snapshot_from_assembly(outdir, "acct")
    bridged = snapshot_from_assembly(bridged_outdir, "acct")
    old = _before_the_client_group(bridged)
    assert len(old["acct-Storage"].resources) == len(bridged["acct-Storage"].resources) - 1

    problems, _ = outcome_checks(environment, old, default)
    (problem,) = [p for p in problems if p.path == "storage.accounting.admit_node_group"]
    assert "acct-Storage/AccountingDatabaseSecurityGroupfromacctNetworkSecurityGroupRef" in problem.allowed
    assert "set storage.accounting.admit_node_group: true and deploy" in problem.allowed
    assert "storage.accounting.admit_node_group" not in [p.path for p in outcome_checks(environment, old, bridged)[0]]
    assert "storage.accounting.admit_node_group" not in [
        p.path for p in outcome_checks(environment, bridged, default)[0]
    ]
    assert "storage.accounting.admit_node_group" not in [
        p.path for p in outcome_checks(environment, default, default)[0]
    ]


def test_the_bridged_environment_has_only_descriptions_ec2_accepts(bridged_outdir: Path) -> None:
    """The node-group rule admit_node_group adds once said "cluster's": EC2 refuses an apostrophe (final AWS re-review).

    The description gate runs over the examples only, and no example sets the flag.
    """
    from tests.gates.test_security_group_descriptions import problems

    templates = stack_templates(cx_api.CloudAssembly(str(bridged_outdir)))
    assert problems(templates) == []
