"""AccountingDatabase rendered whole: every resource, rule, policy and acknowledgement written out (issue 27).

The Slurm accounting database holds the environment's job history, so a quiet change to what it
renders costs data or opens access: a renamed construct id (a new logical id) makes CloudFormation
replace the cluster with an empty one, a dropped ``allow_all_outbound=False`` lets the rotation
function send anything anywhere, a dropped ``CopyTagsToSnapshot`` leaves the final snapshot without
the environment tag ``mlcluster orphans`` finds it by. Comparing each resource whole with the expected
one, written out, catches all of these at once; tests/constructs/test_accounting_database.py checks
the same stacks one property at a time, with cdk-nag's packs on.

Each test synthesizes its own stack (about a second and a half after the first): mutmut maps a mutant
to the tests that ran the mutated code, and a module fixture's synthesis counts for its first test only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from mlcluster.constructs.accounting_database import AccountingDatabase

ENV = cdk.Environment(account="111111111111", region="us-west-2")
VPC_ID = "vpc-0123456789abcdef0"
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1", "subnet-0123456789abcdef2"]
CLIENT_SG = "sg-0123456789abcdef0"
NODE_SG = "sg-0123456789abcdef9"
KEY_ARN = {"Fn::GetAtt": ["Key961B73FD", "Arn"]}
CLUSTER = "DbClusterA0CF0968"
DB_GROUP = "DbSecurityGroupC34ABFAB"
ROTATION_GROUP = "DbRotationSecurityGroup5AFD8C2F"
SECRET = "AccountingDbClusterSecretB88E00673fdaad7efa858a3daf9490cf0a702aeb"
ATTACHMENT = "DbClusterSecretAttachmentE8C77AF7"
DATABASE_PORT = {"Fn::GetAtt": [CLUSTER, "Endpoint.Port"]}
COMPLIANCE_PACKS = ("NIST.800.53.R5", "HIPAA.Security", "PCI.DSS.321")

RDS6 = (
    "slurmdbd logs in with StorageUser and StoragePass from slurmdbd.conf; it cannot present IAM authentication "
    "tokens, so the master secret (rotated, read by the controller's role alone) is its credential."
)
NO_DELETION_PROTECTION = (
    "RDS refuses to delete a protected cluster, so a failed first create of the stack would end in ROLLBACK_FAILED "
    "and a replacement could not remove the old cluster; the data is kept instead by the DeletionPolicy Snapshot (a "
    "final snapshot) and the lock-file guard, which refuses on_delete: destroy, shorter backups, a replacement or a "
    "removal of the database at synth"
)
RDS11 = (
    "3306 is slurmdbd's default StoragePort; the database's security group admits it only from the nodes' group and "
    "the rotation function's group, so another port would hide nothing."
)
RDS14 = (
    "Recovery is point-in-time restore from the automated backups (backup_retention_days) and the final snapshot; "
    "Slurm's accounting tables are rebuilt from a restore, not rewound in place."
)
NO_LOG_EXPORTS = (
    "The database holds slurmdbd's job records alone; slurmdbd logs its own errors on the node, and CloudWatch alarms "
    "watch the database's capacity, connections and CPU. Exported MySQL logs would add log groups outside the "
    "environment key and keep a paused database's log streams."
)
NO_ENHANCED_MONITORING = (
    "A Serverless v2 writer reports ACUUtilization, ServerlessDatabaseCapacity, CPUUtilization and "
    "DatabaseConnections to CloudWatch without enhanced monitoring, which would add an IAM role and an agent for "
    "per-process detail slurmdbd's small load does not need."
)
NO_BACKUP_PLAN = (
    "Aurora's automated backups (retention backup_retention_days, point-in-time restore) and the final snapshot on "
    "delete are this database's second copy; an AWS Backup plan would duplicate them."
)
ROTATION_RULE_PORT = (
    "The rule CDK's single-user rotation adds admits the rotation function's security group on the database's port "
    "(a CloudFormation attribute, 3306), from that group only; the rule cannot be evaluated at synth because the "
    "port is an attribute."
)


class Rendered:
    """One synthesized stack holding one AccountingDatabase ``Db``: its template and acknowledged findings."""

    def __init__(
        self,
        outdir: Path,
        *,
        own_client: bool = False,
        node_group: bool = False,
        subnet_indexes: tuple[int, ...] = (0, 1),
    ) -> None:
        app = cdk.App(outdir=str(outdir))
        self.stack = cdk.Stack(app, "Accounting", env=ENV)
        vpc = ec2.Vpc.from_vpc_attributes(
            self.stack,
            "Vpc",
            vpc_id=VPC_ID,
            vpc_cidr_block="10.0.0.0/16",
            availability_zones=["us-west-2a", "us-west-2b", "us-west-2c"],
            private_subnet_ids=SUBNETS,
            private_subnet_route_table_ids=["rtb-0123456789abcdef0", "rtb-0123456789abcdef1", "rtb-0123456789abcdef2"],
        )
        self.database = AccountingDatabase(
            self.stack,
            "Db",
            vpc=vpc,
            subnets=[vpc.private_subnets[i] for i in subnet_indexes],
            encryption_key=kms.Key(self.stack, "Key", removal_policy=cdk.RemovalPolicy.DESTROY),
            client_security_group=(
                None if own_client else ec2.SecurityGroup.from_security_group_id(self.stack, "Nodes", CLIENT_SG)
            ),
            node_security_group=(
                ec2.SecurityGroup.from_security_group_id(self.stack, "AllNodes", NODE_SG) if node_group else None
            ),
        )
        self.controller = iam.Role(self.stack, "Controller", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        self.database.secret.grant_read(self.controller)
        app.synth()
        self.template: dict[str, Any] = json.loads((outdir / "Accounting.template.json").read_text())
        metadata = json.loads((outdir / "Accounting.metadata.json").read_text())
        #: construct path under the database -> finding -> reason, as the cloud assembly records them.
        self.acknowledged: dict[str, dict[str, str]] = {}
        for path, entries in metadata.items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    findings = self.acknowledged.setdefault(path.removeprefix("/Accounting/Db/"), {})
                    findings.update({k.removeprefix("Annotation::"): v for k, v in entry["data"].items()})

    def resources(self, *kinds: str) -> dict[str, dict[str, Any]]:
        """The resources of these types by logical id."""
        return {k: r for k, r in self.template["Resources"].items() if r["Type"] in kinds}


def _in_every_pack(rule: str, reason: str) -> dict[str, str]:
    return {f"{pack}-{rule}": reason for pack in COMPLIANCE_PACKS}


def test_the_database_its_secret_and_their_retention_are_exactly_these(tmp_path: Path) -> None:
    """Logical ids are the contract with the deployed stack: a new one replaces the database (job history) or secret."""
    rendered = Rendered(tmp_path)
    assert rendered.resources(
        "AWS::RDS::DBCluster",
        "AWS::RDS::DBInstance",
        "AWS::RDS::DBClusterParameterGroup",
        "AWS::RDS::DBSubnetGroup",
        "AWS::SecretsManager::Secret",
        "AWS::SecretsManager::SecretTargetAttachment",
        "AWS::SecretsManager::RotationSchedule",
        "AWS::SecretsManager::ResourcePolicy",
    ) == {
        CLUSTER: {
            "Type": "AWS::RDS::DBCluster",
            "Properties": {
                "BackupRetentionPeriod": 35,
                # The final snapshot carries the environment tag: `mlcluster orphans` lists it by that tag.
                "CopyTagsToSnapshot": True,
                "DBClusterParameterGroupName": {"Ref": "DbParameters8822AC2B"},
                "DBSubnetGroupName": {"Ref": "DbClusterSubnets16951D21"},
                "DeletionProtection": False,
                "Engine": "aurora-mysql",
                "EngineVersion": "8.0.mysql_aurora.3.10.0",
                "KmsKeyId": KEY_ARN,
                "MasterUserPassword": {
                    "Fn::Join": ["", ["{{resolve:secretsmanager:", {"Ref": SECRET}, ":SecretString:password::}}"]]
                },
                "MasterUsername": "slurm",
                "Port": 3306,
                "ServerlessV2ScalingConfiguration": {"MaxCapacity": 2, "MinCapacity": 0, "SecondsUntilAutoPause": 3600},
                "StorageEncrypted": True,
                "VpcSecurityGroupIds": [{"Fn::GetAtt": [DB_GROUP, "GroupId"]}],
            },
            "UpdateReplacePolicy": "Snapshot",
            "DeletionPolicy": "Snapshot",
            "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_162", "comment": RDS6}]}},
        },
        "DbClusterWriter04F49224": {
            "Type": "AWS::RDS::DBInstance",
            "Properties": {
                "DBClusterIdentifier": {"Ref": CLUSTER},
                "DBInstanceClass": "db.serverless",
                "Engine": "aurora-mysql",
                "PromotionTier": 0,
                "PubliclyAccessible": False,
            },
            "UpdateReplacePolicy": "Delete",
            "DeletionPolicy": "Delete",
            "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_118", "comment": NO_ENHANCED_MONITORING}]}},
        },
        "DbParameters8822AC2B": {
            "Type": "AWS::RDS::DBClusterParameterGroup",
            "Properties": {
                "Description": "Slurm accounting: TLS only",
                "Family": "aurora-mysql8.0",
                "Parameters": {"require_secure_transport": "ON"},
            },
        },
        "DbClusterSubnets16951D21": {
            "Type": "AWS::RDS::DBSubnetGroup",
            "Properties": {"DBSubnetGroupDescription": "Subnets for Cluster database", "SubnetIds": SUBNETS[:2]},
        },
        SECRET: {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Description": {"Fn::Join": ["", ["Generated by the CDK for stack: ", {"Ref": "AWS::StackName"}]]},
                "GenerateSecretString": {
                    "ExcludeCharacters": " %+~`#$&*()|[]{}:;<>?!'/@\"\\",
                    "GenerateStringKey": "password",
                    "PasswordLength": 30,
                    "SecretStringTemplate": '{"username":"slurm"}',
                },
                "KmsKeyId": KEY_ARN,
            },
            # Kept on delete and replacement (it opens the final snapshot), not after a first create rolls back.
            "UpdateReplacePolicy": "Retain",
            "DeletionPolicy": "RetainExceptOnCreate",
        },
        ATTACHMENT: {
            "Type": "AWS::SecretsManager::SecretTargetAttachment",
            "Properties": {
                "SecretId": {"Ref": SECRET},
                "TargetId": {"Ref": CLUSTER},
                "TargetType": "AWS::RDS::DBCluster",
            },
        },
        "DbClusterSecretAttachmentRotationSchedule76B98D9D": {
            "Type": "AWS::SecretsManager::RotationSchedule",
            "Properties": {
                "RotationLambdaARN": {
                    "Fn::GetAtt": ["DbClusterRotationSingleUser42D54E87", "Outputs.RotationLambdaARN"]
                },
                # rotation_days' documented default.
                "RotationRules": {"ScheduleExpression": "rate(30 days)"},
                "SecretId": {"Ref": ATTACHMENT},
            },
        },
        # Added by the rotation schedule: no principal of the account may delete the rotated master secret.
        "DbClusterSecretPolicy114122E2": {
            "Type": "AWS::SecretsManager::ResourcePolicy",
            "Properties": {
                "ResourcePolicy": {
                    "Statement": [
                        {
                            "Action": "secretsmanager:DeleteSecret",
                            "Effect": "Deny",
                            "Principal": {"AWS": "arn:aws:iam::111111111111:root"},
                            "Resource": "*",
                        }
                    ],
                    "Version": "2012-10-17",
                },
                "SecretId": {"Ref": SECRET},
            },
        },
    }


def test_the_security_groups_admit_and_send_exactly_these_rules(tmp_path: Path) -> None:
    """MySQL in from the client group and the rotation function only; the rotation function sends 443 and 3306 only."""
    rendered = Rendered(tmp_path)
    assert rendered.resources(
        "AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"
    ) == {
        DB_GROUP: {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": (
                    "Slurm accounting database - MySQL over TLS from the slurmdbd nodes and the rotation function"
                ),
                # CDK's placeholder for "no egress": a rule that matches no traffic.
                "SecurityGroupEgress": [
                    {
                        "CidrIp": "255.255.255.255/32",
                        "Description": "Disallow all traffic",
                        "FromPort": 252,
                        "IpProtocol": "icmp",
                        "ToPort": 86,
                    }
                ],
                "VpcId": VPC_ID,
            },
        },
        "DbSecurityGroupfromAccountingNodesB3888D9C3306A821A318": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Properties": {
                # What an operator reads beside port 3306 in the console: which node the rule is for.
                "Description": "The node running slurmdbd (the controller)",
                "FromPort": 3306,
                "GroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
                "IpProtocol": "tcp",
                "SourceSecurityGroupId": CLIENT_SG,
                "ToPort": 3306,
            },
        },
        "DbSecurityGroupfromAccountingDbRotationSecurityGroupAE9D20A5IndirectPort2D7F45F7": {
            "Type": "AWS::EC2::SecurityGroupIngress",
            "Properties": {
                "Description": "from AccountingDbRotationSecurityGroupAE9D20A5:{IndirectPort}",
                "FromPort": DATABASE_PORT,
                "GroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
                "IpProtocol": "tcp",
                "SourceSecurityGroupId": {"Fn::GetAtt": [ROTATION_GROUP, "GroupId"]},
                "ToPort": DATABASE_PORT,
            },
        },
        ROTATION_GROUP: {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {
                "GroupDescription": (
                    "Slurm accounting database secret rotation - MySQL to the database, HTTPS to Secrets Manager"
                ),
                # Inline egress replaces EC2's default allow-all: HTTPS out, nothing else but the rule below.
                "SecurityGroupEgress": [
                    {
                        "CidrIp": "0.0.0.0/0",
                        "Description": "Secrets Manager API through the NAT route of the subnets",
                        "FromPort": 443,
                        "IpProtocol": "tcp",
                        "ToPort": 443,
                    }
                ],
                "VpcId": VPC_ID,
            },
        },
        "DbRotationSecurityGrouptoAccountingDbSecurityGroup2B64B247IndirectPortC734B43E": {
            "Type": "AWS::EC2::SecurityGroupEgress",
            "Properties": {
                "Description": "to AccountingDbSecurityGroup2B64B247:{IndirectPort}",
                "DestinationSecurityGroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
                "FromPort": DATABASE_PORT,
                "GroupId": {"Fn::GetAtt": [ROTATION_GROUP, "GroupId"]},
                "IpProtocol": "tcp",
                "ToPort": DATABASE_PORT,
            },
        },
    }


def test_the_group_made_for_slurmdbds_node_sends_only_mysql_to_the_database(tmp_path: Path) -> None:
    """Without a client group: the database's own, admitting nothing, sending TCP 3306 to the database alone.

    Its GroupDescription is create-only: a changed one replaces the group attached to the controller.
    """
    rendered = Rendered(tmp_path, own_client=True)
    client = "DbClientSecurityGroup2C761805"
    groups = rendered.resources("AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupIngress")
    assert groups[client] == {
        "Type": "AWS::EC2::SecurityGroup",
        "Properties": {
            "GroupDescription": (
                "Slurm accounting database clients - the node that runs slurmdbd; MySQL to the database"
            ),
            "SecurityGroupEgress": [
                {
                    "Description": "MySQL over TLS to the Slurm accounting database",
                    "DestinationSecurityGroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
                    "FromPort": 3306,
                    "IpProtocol": "tcp",
                    "ToPort": 3306,
                }
            ],
            "VpcId": VPC_ID,
        },
    }
    assert groups["DbSecurityGroupfromAccountingDbClientSecurityGroup5C8073F1330635EBCB0F"] == {
        "Type": "AWS::EC2::SecurityGroupIngress",
        "Properties": {
            "Description": "The node running slurmdbd (the controller)",
            "FromPort": 3306,
            "GroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
            "IpProtocol": "tcp",
            "SourceSecurityGroupId": {"Fn::GetAtt": [client, "GroupId"]},
            "ToPort": 3306,
        },
    }


def test_the_rotation_function_runs_in_the_given_subnets_with_its_own_group(tmp_path: Path) -> None:
    """Two of the VPC's three private subnets given: the database and its rotation function use those two only."""
    rendered = Rendered(tmp_path, subnet_indexes=(0, 2))
    (subnet_group,) = rendered.resources("AWS::RDS::DBSubnetGroup").values()
    assert subnet_group["Properties"]["SubnetIds"] == [SUBNETS[0], SUBNETS[2]]
    (application,) = rendered.resources("AWS::Serverless::Application").values()
    assert application["Properties"]["Parameters"] == {
        "endpoint": {"Fn::Join": ["", ["https://secretsmanager.us-west-2.", {"Ref": "AWS::URLSuffix"}]]},
        "functionName": "AccountingDbClusterRotationSingleUserBB2740D7",
        "vpcSubnetIds": f"{SUBNETS[0]},{SUBNETS[2]}",
        "vpcSecurityGroupIds": {"Fn::GetAtt": [ROTATION_GROUP, "GroupId"]},
        "excludeCharacters": " %+~`#$&*()|[]{}:;<>?!'/@\"\\",
        "kmsKeyArn": KEY_ARN,
    }


def test_the_secret_attribute_is_the_master_secret_a_grant_scopes_to(tmp_path: Path) -> None:
    """``secret`` is what the Storage stack exports and grants: reading it is reading the master secret alone."""
    rendered = Rendered(tmp_path)
    assert rendered.stack.resolve(rendered.database.secret.secret_arn) == {"Ref": ATTACHMENT}
    (policy,) = rendered.resources("AWS::IAM::Policy").values()
    assert policy["Properties"]["PolicyDocument"] == {
        "Statement": [
            {
                "Action": ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"],
                "Effect": "Allow",
                # The attachment's Ref is the secret's ARN (with the cluster's host and port added to it).
                "Resource": {"Ref": ATTACHMENT},
            }
        ],
        "Version": "2012-10-17",
    }


def test_every_acknowledged_finding_carries_its_reason_for_this_database(tmp_path: Path) -> None:
    """What a reviewer reads in the cloud assembly: each finding on its resource, with its reason; nothing more."""
    rendered = Rendered(tmp_path)
    assert rendered.acknowledged == {
        "Cluster/Resource": {
            "AwsSolutions-RDS6": RDS6,
            "AwsSolutions-RDS10": NO_DELETION_PROTECTION,
            **_in_every_pack("RDSInstanceDeletionProtectionEnabled", NO_DELETION_PROTECTION),
            "AwsSolutions-RDS11": RDS11,
            "AwsSolutions-RDS14": RDS14,
            **{
                finding: reason
                for log in ("audit", "error", "general", "slowquery")
                for finding, reason in _in_every_pack(f"RDSLoggingEnabled[LogExport::{log}]", NO_LOG_EXPORTS).items()
            },
        },
        "Cluster/Writer": {
            **_in_every_pack("RDSEnhancedMonitoringEnabled", NO_ENHANCED_MONITORING),
            **_in_every_pack("RDSInBackupPlan", NO_BACKUP_PLAN),
        },
        "SecurityGroup/from AccountingDbRotationSecurityGroupAE9D20A5:{IndirectPort}": {
            **_in_every_pack("EC2RestrictedCommonPorts", ROTATION_RULE_PORT),
            **_in_every_pack("EC2RestrictedSSH", ROTATION_RULE_PORT),
        },
    }


def test_an_admitted_node_group_is_marked_on_the_database_for_the_reachability_gate(tmp_path: Path) -> None:
    """With ``node_security_group`` the cluster resource says so in its Metadata, beside checkov's skip.

    ``mlcluster.analysis.reachability`` accepts the workers' path to the port only when that mark is there
    (``mlcluster:admitsNodeGroup: true``); without it the gate would refuse the upgrade bridge it was meant to
    allow. Without a node group there is no mark and no rule for it.
    """
    bridged = Rendered(tmp_path / "bridged", node_group=True)
    cluster = bridged.template["Resources"][CLUSTER]
    assert cluster["Metadata"] == {
        "checkov": {"skip": [{"id": "CKV_AWS_162", "comment": RDS6}]},
        "mlcluster:admitsNodeGroup": True,
    }
    assert [
        rule["Properties"]
        for rule in bridged.resources("AWS::EC2::SecurityGroupIngress").values()
        if rule["Properties"].get("SourceSecurityGroupId") == NODE_SG
    ] == [
        {
            "Description": "slurmdbd on the cluster nodes",
            "FromPort": 3306,
            "GroupId": {"Fn::GetAtt": [DB_GROUP, "GroupId"]},
            "IpProtocol": "tcp",
            "SourceSecurityGroupId": NODE_SG,
            "ToPort": 3306,
        }
    ]
    plain = Rendered(tmp_path / "plain")
    assert "mlcluster:admitsNodeGroup" not in plain.template["Resources"][CLUSTER]["Metadata"]


def test_the_endpoint_and_key_attributes_name_this_cluster_and_its_key(tmp_path: Path) -> None:
    """What the Cluster stack reads: ``endpoint`` becomes slurmdbd's StorageHost:StoragePort (and the Storage
    stack's AccountingDatabaseEndpoint output), ``encryption_key`` the key the controller may decrypt the
    master secret with. Either pointing elsewhere leaves slurmdbd unable to connect or to read its password."""
    rendered = Rendered(tmp_path)
    assert rendered.stack.resolve(rendered.database.endpoint) == {
        "Fn::Join": ["", [{"Fn::GetAtt": [CLUSTER, "Endpoint.Address"]}, ":3306"]]
    }
    assert rendered.stack.resolve(rendered.database.encryption_key.key_arn) == KEY_ARN
