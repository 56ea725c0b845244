"""AccountingDatabase on rendered CloudFormation: defaults, options, validation errors.

One app holds a stack per variant and is synthesized once with cdk-nag's
AwsSolutions and NIST 800-53 R5 packs on (synth fails on any unacknowledged
finding); the templates are then checked one property at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks

from mlcluster.constructs.accounting_database import PORT, AccountingDatabase

ENV = cdk.Environment(account="111111111111", region="us-west-2")
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
CLIENT_SG = "sg-0123456789abcdef0"


def props(stack: cdk.Stack, subnet_count: int = 2) -> dict[str, Any]:
    """What every AccountingDatabase needs: an existing VPC, the nodes' group and a key of the stack."""
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["us-west-2a", "us-west-2b"],
        private_subnet_ids=SUBNETS,
        private_subnet_route_table_ids=["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"],
    )
    return {
        "vpc": vpc,
        "subnets": vpc.private_subnets[:subnet_count],
        "client_security_group": ec2.SecurityGroup.from_security_group_id(stack, "Nodes", CLIENT_SG),
        "encryption_key": kms.Key(stack, "Key", enable_key_rotation=True, removal_policy=cdk.RemovalPolicy.DESTROY),
    }


VARIANTS: dict[str, Callable[[cdk.Stack], AccountingDatabase]] = {
    "Default": lambda st: AccountingDatabase(st, "Db", **props(st)),
    # No client group given: the database makes its own (for the node that runs slurmdbd alone).
    "OwnClient": lambda st: AccountingDatabase(
        st, "Db", **{k: v for k, v in props(st).items() if k != "client_security_group"}
    ),
    "Options": lambda st: AccountingDatabase(
        st,
        "Db",
        **props(st),
        min_capacity_acu=0.5,
        max_capacity_acu=8,
        backup_retention_days=7,
        rotation_days=90,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    ),
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out: Path = tmp_path_factory.mktemp("accounting")
    app = cdk.App(outdir=str(out))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app), NIST80053R5Checks(app))
    stacks = {}
    for name, build in VARIANTS.items():
        stack = cdk.Stack(app, name, env=ENV)
        build(stack)
        stacks[name] = stack
    app.synth()
    return {name: Template.from_stack(stack).to_json() for name, stack in stacks.items()}


def only(template: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    return found


def of_type(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


def test_default_database_is_encrypted_protected_and_pauses(templates: dict[str, dict[str, Any]]) -> None:
    cluster = only(templates["Default"], "AWS::RDS::DBCluster")
    p = cluster["Properties"]
    assert p["Engine"] == "aurora-mysql"
    # Auto-pause at 0 ACUs needs Aurora MySQL 3.08.0 or later.
    major, minor = (int(n) for n in p["EngineVersion"].rsplit(".mysql_aurora.", 1)[1].split(".")[:2])
    assert (major, minor) >= (3, 8)
    assert p["ServerlessV2ScalingConfiguration"] == {"MinCapacity": 0, "MaxCapacity": 2, "SecondsUntilAutoPause": 3600}
    assert p["StorageEncrypted"] is True
    assert p["KmsKeyId"] == {"Fn::GetAtt": [_key_id(templates["Default"]), "Arn"]}
    assert p["BackupRetentionPeriod"] == 35
    # Off: RDS refuses to delete a protected cluster, so a failed first create would end in ROLLBACK_FAILED.
    assert p["DeletionProtection"] is False
    assert cluster["DeletionPolicy"] == "Snapshot"
    assert cluster["UpdateReplacePolicy"] == "Snapshot"
    writer = only(templates["Default"], "AWS::RDS::DBInstance")
    assert writer["Properties"]["DBInstanceClass"] == "db.serverless"
    assert writer["Properties"]["PubliclyAccessible"] is False


def _key_id(template: dict[str, Any]) -> str:
    (key,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    return key


def test_tls_is_required_by_the_cluster_parameter_group(templates: dict[str, dict[str, Any]]) -> None:
    group = only(templates["Default"], "AWS::RDS::DBClusterParameterGroup")
    assert group["Properties"]["Parameters"] == {"require_secure_transport": "ON"}
    cluster = only(templates["Default"], "AWS::RDS::DBCluster")
    assert cluster["Properties"]["DBClusterParameterGroupName"] == {"Ref": _logical(templates["Default"], group)}


def _logical(template: dict[str, Any], resource: dict[str, Any]) -> str:
    (name,) = [k for k, r in template["Resources"].items() if r is resource]
    return name


def test_only_the_nodes_group_and_the_rotation_function_reach_the_database(
    templates: dict[str, dict[str, Any]],
) -> None:
    template = templates["Default"]
    groups = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SecurityGroup"}
    assert len(groups) == 2
    (db_group,) = [k for k, r in groups.items() if "Slurm accounting database -" in r["Properties"]["GroupDescription"]]
    (rotation_group,) = [k for k in groups if k != db_group]
    # The database's group sends nothing (CDK's placeholder rule matches no traffic).
    assert groups[db_group]["Properties"]["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"
    for group in groups.values():
        assert "SecurityGroupIngress" not in group["Properties"]
    ingress = of_type(template, "AWS::EC2::SecurityGroupIngress")
    sources = sorted(str(rule["Properties"]["SourceSecurityGroupId"]) for rule in ingress)
    assert sources == sorted([CLIENT_SG, str({"Fn::GetAtt": [rotation_group, "GroupId"]})])
    for rule in ingress:
        assert rule["Properties"]["GroupId"] == {"Fn::GetAtt": [db_group, "GroupId"]}
        assert rule["Properties"]["IpProtocol"] == "tcp"
        assert "CidrIp" not in rule["Properties"]
    (client_rule,) = [r for r in ingress if r["Properties"]["SourceSecurityGroupId"] == CLIENT_SG]
    assert (client_rule["Properties"]["FromPort"], client_rule["Properties"]["ToPort"]) == (PORT, PORT)
    # The rotation function: HTTPS out (Secrets Manager through NAT) and the database's port to its group only.
    rotation_egress = groups[rotation_group]["Properties"]["SecurityGroupEgress"]
    assert rotation_egress == [
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "Secrets Manager API through the NAT route of the subnets",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    (to_db,) = of_type(template, "AWS::EC2::SecurityGroupEgress")
    assert to_db["Properties"]["DestinationSecurityGroupId"] == {"Fn::GetAtt": [db_group, "GroupId"]}


def test_master_secret_is_under_the_key_retained_and_rotated(templates: dict[str, dict[str, Any]]) -> None:
    template = templates["Default"]
    secret = only(template, "AWS::SecretsManager::Secret")
    assert secret["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [_key_id(template), "Arn"]}
    # Kept on delete and replacement, deleted when the first create rolls back (no snapshot to open then).
    assert (secret["DeletionPolicy"], secret["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
    assert secret["Properties"]["GenerateSecretString"]["SecretStringTemplate"] == '{"username":"slurm"}'
    schedule = only(template, "AWS::SecretsManager::RotationSchedule")
    assert schedule["Properties"]["RotationRules"] == {"ScheduleExpression": "rate(30 days)"}
    application = only(template, "AWS::Serverless::Application")
    parameters = application["Properties"]["Parameters"]
    assert "vpcSubnetIds" in parameters and "vpcSecurityGroupIds" in parameters
    # The function calls Secrets Manager's regional endpoint (through the subnets' NAT route).
    assert parameters["endpoint"] == {
        "Fn::Join": ["", ["https://secretsmanager.us-west-2.", {"Ref": "AWS::URLSuffix"}]]
    }


def test_options_and_destroy(templates: dict[str, dict[str, Any]]) -> None:
    template = templates["Options"]
    cluster = only(template, "AWS::RDS::DBCluster")
    assert cluster["Properties"]["ServerlessV2ScalingConfiguration"] == {"MinCapacity": 0.5, "MaxCapacity": 8}
    assert cluster["Properties"]["BackupRetentionPeriod"] == 7
    assert cluster["Properties"]["DeletionProtection"] is False
    assert cluster["DeletionPolicy"] == "Delete"
    assert only(template, "AWS::SecretsManager::Secret")["DeletionPolicy"] == "Delete"
    schedule = only(template, "AWS::SecretsManager::RotationSchedule")
    assert schedule["Properties"]["RotationRules"] == {"ScheduleExpression": "rate(90 days)"}


@pytest.mark.parametrize(
    ("changes", "subnet_count", "expected"),
    [
        ({}, 1, ["subnets: 1 given; allowed: private subnets of at least two zones"]),
        ({"min_capacity_acu": 0.25}, 2, ["min_capacity_acu: 0.25; allowed: 0 to 256 Aurora capacity units"]),
        ({"max_capacity_acu": 257}, 2, ["max_capacity_acu: 257; allowed: 0 to 256"]),
        ({"max_capacity_acu": 0.5}, 2, ["max_capacity_acu: 0.5; allowed: at least 1"]),
        ({"min_capacity_acu": 4, "max_capacity_acu": 2}, 2, ["min_capacity_acu: 4; allowed: at most max_capacity_acu"]),
        (
            {"auto_pause_minutes": 4, "backup_retention_days": 36, "rotation_days": 0},
            2,
            [
                "auto_pause_minutes: 4; allowed: 5 to 1440",
                "backup_retention_days: 36; allowed: 1 to 35",
                "rotation_days: 0; allowed: 1 to 1000",
            ],
        ),
    ],
)
def test_bad_props_are_named_with_what_is_allowed(
    changes: dict[str, Any], subnet_count: int, expected: list[str]
) -> None:
    stack = cdk.Stack(cdk.App(), "Bad", env=ENV)
    with pytest.raises(ValueError) as error:
        AccountingDatabase(stack, "Db", **props(stack, subnet_count), **changes)
    for part in expected:
        assert part in str(error.value)
    assert str(error.value).startswith("AccountingDatabase Bad/Db: ")


def test_props_at_the_edges_are_accepted() -> None:
    stack = cdk.Stack(cdk.App(), "Edge", env=ENV)
    AccountingDatabase(
        stack,
        "Db",
        **props(stack),
        min_capacity_acu=256,
        max_capacity_acu=256,
        auto_pause_minutes=1440,
        backup_retention_days=1,
        rotation_days=1000,
    )
    cluster = only(Template.from_stack(stack).to_json(), "AWS::RDS::DBCluster")
    assert cluster["Properties"]["ServerlessV2ScalingConfiguration"] == {"MinCapacity": 256, "MaxCapacity": 256}


def _by_id(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def test_without_a_client_group_the_database_makes_one_for_slurmdbds_node(
    templates: dict[str, dict[str, Any]],
) -> None:
    """Issue 30, item 4: a group that admits nothing and sends only MySQL to the database, the only one admitted."""
    template = templates["OwnClient"]
    groups = _by_id(template, "AWS::EC2::SecurityGroup")
    (client,) = [
        k
        for k, g in groups.items()
        if g["Properties"]["GroupDescription"].startswith("Slurm accounting database clients")
    ]
    (database,) = [
        k for k, g in groups.items() if g["Properties"]["GroupDescription"].startswith("Slurm accounting database -")
    ]
    assert "SecurityGroupIngress" not in groups[client]["Properties"]
    # Inline: only the SecurityGroupEgress property removes EC2's default allow-all egress.
    assert groups[client]["Properties"]["SecurityGroupEgress"] == [
        {
            "IpProtocol": "tcp",
            "FromPort": 3306,
            "ToPort": 3306,
            "DestinationSecurityGroupId": {"Fn::GetAtt": [database, "GroupId"]},
            "Description": "MySQL over TLS to the Slurm accounting database",
        }
    ]
    assert not [
        r
        for r in of_type(template, "AWS::EC2::SecurityGroupEgress")
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [client, "GroupId"]}
    ]
    sources = [
        r["Properties"]["SourceSecurityGroupId"]
        for r in of_type(template, "AWS::EC2::SecurityGroupIngress")
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [database, "GroupId"]} and r["Properties"]["FromPort"] == 3306
    ]
    assert {"Fn::GetAtt": [client, "GroupId"]} in sources
    assert CLIENT_SG not in str(sources)
