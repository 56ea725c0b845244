"""OpenZfsHome on rendered CloudFormation: defaults, every option, every validation error.

One app holds a stack per variant and is synthesized once with cdk-nag's
AwsSolutions pack on (synth fails on any unacknowledged finding); the
templates are then checked one property at a time and linted by cfn-lint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.openzfs import OpenZfsHome
from tests.support import cfn_lint

ENV = cdk.Environment(account="111111111111", region="us-east-1")
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
ROUTE_TABLES = ["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"]
CLUSTER_SG = "sg-0123456789abcdef0"
VPC_CIDR = "10.0.0.0/16"


def network(stack: cdk.Stack) -> dict[str, Any]:
    """The props every OpenZfsHome needs, from an existing VPC (no resources)."""
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        vpc_cidr_block=VPC_CIDR,
        availability_zones=["us-east-1a", "us-east-1b"],
        private_subnet_ids=SUBNETS,
        private_subnet_route_table_ids=ROUTE_TABLES,
    )
    group = ec2.SecurityGroup.from_security_group_id(stack, "ClusterSg", CLUSTER_SG)
    return {"vpc": vpc, "subnet": vpc.private_subnets[0], "cluster_security_group": group}


def home(stack: cdk.Stack, **props: Any) -> OpenZfsHome:
    return OpenZfsHome(stack, "Home", **{**network(stack), "nfs_client_cidrs": [VPC_CIDR], **props})


def standby(stack: cdk.Stack) -> ec2.ISubnet:
    return ec2.Subnet.from_subnet_attributes(
        stack, "Standby", subnet_id=SUBNETS[1], route_table_id=ROUTE_TABLES[1], availability_zone="us-east-1b"
    )


VARIANTS: dict[str, Callable[[cdk.Stack], OpenZfsHome]] = {
    "Default": lambda st: home(st),
    "Options": lambda st: home(
        st,
        nfs_client_cidrs=[VPC_CIDR, "10.1.0.0/16"],
        nfs_export_options=("rw", "crossmnt"),
        weekly_maintenance_start_time="2:03:00",
        daily_backup_start_time="01:30",
        automatic_backup_retention_days=14,
        storage_capacity_gib=2048,
        throughput_capacity_mbps=1280,
    ),
    "Gen1": lambda st: home(
        st,
        deployment_type="SINGLE_AZ_1",
        throughput_capacity_mbps=64,
        storage_capacity_gib=64,
        data_compression="ZSTD",
        automatic_backup_retention_days=0,
        kms_key=kms.Key(st, "HomeKey", enable_key_rotation=True),
    ),
    "SharedGroup": lambda st: home(st, dedicated_security_group=False),
    "MultiAz": lambda st: home(st, deployment_type="MULTI_AZ_1", standby_subnet=standby(st)),
    "MultiAzRoutes": lambda st: home(
        st, deployment_type="MULTI_AZ_1", standby_subnet=standby(st), route_table_ids=["rtb-0fedcba9876543210"]
    ),
    "Destroy": lambda st: home(st, removal_policy=cdk.RemovalPolicy.DESTROY),
}


class Built:
    """The synthesized variants."""

    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.stacks: dict[str, cdk.Stack] = {}
        self.homes: dict[str, OpenZfsHome] = {}
        self.templates: dict[str, Template] = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    result = Built(out)
    app = cdk.App(outdir=str(out))
    for name, make in VARIANTS.items():
        stack = cdk.Stack(app, name, env=ENV)
        result.stacks[name] = stack
        result.homes[name] = make(stack)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # raises on any unacknowledged cdk-nag finding
    result.templates = {name: Template.from_stack(stack) for name, stack in result.stacks.items()}
    return result


def file_system(t: Template) -> dict[str, Any]:
    (resource,) = t.find_resources("AWS::FSx::FileSystem").values()
    return resource  # type: ignore[no-any-return]


def zfs(t: Template) -> dict[str, Any]:
    return file_system(t)["Properties"]["OpenZFSConfiguration"]  # type: ignore[no-any-return]


def test_default_file_system(built: Built) -> None:
    props = file_system(built.templates["Default"])["Properties"]
    assert props["FileSystemType"] == "OPENZFS"
    assert props["StorageType"] == "SSD"
    assert props["StorageCapacity"] == 512
    assert props["SubnetIds"] == [SUBNETS[0]]
    assert CLUSTER_SG not in str(props["SecurityGroupIds"])  # its own group, not the nodes'
    assert "KmsKeyId" not in props
    config = props["OpenZFSConfiguration"]
    assert config["DeploymentType"] == "SINGLE_AZ_HA_2"
    assert config["ThroughputCapacity"] == 320
    assert config["AutomaticBackupRetentionDays"] == 7
    assert config["DailyAutomaticBackupStartTime"] == "05:00"
    assert config["WeeklyMaintenanceStartTime"] == "7:06:00"
    assert config["CopyTagsToBackups"] is True
    assert config["CopyTagsToVolumes"] is True
    for key in ("PreferredSubnetId", "RouteTableIds", "Options"):
        assert key not in config


def test_root_volume_exported_to_the_given_cidrs_only(built: Built) -> None:
    root = zfs(built.templates["Default"])["RootVolumeConfiguration"]
    assert root["DataCompressionType"] == "LZ4"
    assert root["CopyTagsToSnapshots"] is True
    assert root["NfsExports"] == [
        {"ClientConfigurations": [{"Clients": VPC_CIDR, "Options": ["rw", "crossmnt", "no_root_squash"]}]}
    ]


def test_attributes(built: Built) -> None:
    fs = built.homes["Default"]
    stack = built.stacks["Default"]
    (fs_id,) = built.templates["Default"].find_resources("AWS::FSx::FileSystem")
    assert stack.resolve(fs.file_system_id) == {"Ref": fs_id}
    assert stack.resolve(fs.dns_name) == {"Fn::GetAtt": [fs_id, "DNSName"]}
    assert stack.resolve(fs.root_volume_id) == {"Fn::GetAtt": [fs_id, "RootVolumeId"]}
    assert fs.resource.node.id == "Resource"


def test_options(built: Built) -> None:
    props = file_system(built.templates["Options"])["Properties"]
    config = props["OpenZFSConfiguration"]
    assert props["StorageCapacity"] == 2048
    assert config["ThroughputCapacity"] == 1280
    assert config["AutomaticBackupRetentionDays"] == 14
    assert config["DailyAutomaticBackupStartTime"] == "01:30"
    assert config["WeeklyMaintenanceStartTime"] == "2:03:00"
    assert config["RootVolumeConfiguration"]["NfsExports"] == [
        {
            "ClientConfigurations": [
                {"Clients": VPC_CIDR, "Options": ["rw", "crossmnt"]},
                {"Clients": "10.1.0.0/16", "Options": ["rw", "crossmnt"]},
            ]
        }
    ]


def test_first_generation_with_own_key_and_no_backups(built: Built) -> None:
    t = built.templates["Gen1"]
    props = file_system(t)["Properties"]
    (key_id,) = t.find_resources("AWS::KMS::Key")
    assert props["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert props["StorageCapacity"] == 64
    config = props["OpenZFSConfiguration"]
    assert config["DeploymentType"] == "SINGLE_AZ_1"
    assert config["ThroughputCapacity"] == 64
    assert config["AutomaticBackupRetentionDays"] == 0
    assert "DailyAutomaticBackupStartTime" not in config
    assert config["RootVolumeConfiguration"]["DataCompressionType"] == "ZSTD"


def test_own_security_group_admits_nfs_from_the_nodes_only(built: Built) -> None:
    t = built.templates["Default"]
    ((group_id, group),) = t.find_resources("AWS::EC2::SecurityGroup").items()
    # Only the placeholder inline: EC2's default allow-all egress is off, the rules below are all there is.
    assert group["Properties"]["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]
    me = {"Fn::GetAtt": [group_id, "GroupId"]}
    ingress = {
        (r["Properties"]["IpProtocol"], r["Properties"]["FromPort"], r["Properties"]["ToPort"])
        for r in t.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == me and r["Properties"]["SourceSecurityGroupId"] == CLUSTER_SG
    }
    assert ingress == {
        (protocol, low, high) for protocol in ("tcp", "udp") for low, high in ((111, 111), (2049, 2049), (20001, 20003))
    }
    assert len(t.find_resources("AWS::EC2::SecurityGroupIngress")) == 6
    (egress,) = t.find_resources("AWS::EC2::SecurityGroupEgress").values()
    assert egress["Properties"]["GroupId"] == me
    assert egress["Properties"]["DestinationSecurityGroupId"] == CLUSTER_SG
    assert egress["Properties"]["IpProtocol"] == "-1"
    assert file_system(t)["Properties"]["SecurityGroupIds"] == [me]
    assert built.homes["Default"].security_group.node.id == "SecurityGroup"


def test_shared_group_keeps_an_existing_file_system_in_place_and_warns(built: Built) -> None:
    t = built.templates["SharedGroup"]
    t.resource_count_is("AWS::EC2::SecurityGroup", 0)
    assert file_system(t)["Properties"]["SecurityGroupIds"] == [CLUSTER_SG]
    warnings = Annotations.from_stack(built.stacks["SharedGroup"]).find_warning(
        "*", Match.string_like_regexp("FSx for OpenZFS \\(/home\\) is in the cluster nodes' security group")
    )
    assert len(warnings) == 1


def test_multi_az_uses_both_subnets_and_their_route_tables(built: Built) -> None:
    props = file_system(built.templates["MultiAz"])["Properties"]
    assert props["SubnetIds"] == SUBNETS
    config = props["OpenZFSConfiguration"]
    assert config["DeploymentType"] == "MULTI_AZ_1"
    assert config["PreferredSubnetId"] == SUBNETS[0]
    assert config["RouteTableIds"] == ROUTE_TABLES


def test_multi_az_explicit_route_tables(built: Built) -> None:
    assert zfs(built.templates["MultiAzRoutes"])["RouteTableIds"] == ["rtb-0fedcba9876543210"]


def test_retained_by_default(built: Built) -> None:
    fs = file_system(built.templates["Default"])
    assert fs["DeletionPolicy"] == "Retain"
    assert fs["UpdateReplacePolicy"] == "Retain"


def test_destroy_only_when_asked_and_then_with_child_volumes(built: Built) -> None:
    fs = file_system(built.templates["Destroy"])
    assert fs["DeletionPolicy"] == "Delete"
    assert fs["UpdateReplacePolicy"] == "Delete"
    assert fs["Properties"]["OpenZFSConfiguration"]["Options"] == ["DELETE_CHILD_VOLUMES_AND_SNAPSHOTS"]


def test_cfn_lint_clean(built: Built) -> None:
    files = sorted(str(p) for p in built.outdir.glob("*.template.json"))
    assert len(files) == len(VARIANTS)
    assert cfn_lint(files) == {f: [] for f in files}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"deployment_type": "SINGLE_AZ_3"},
            r"deployment_type: 'SINGLE_AZ_3' .*use one of SINGLE_AZ_1, SINGLE_AZ_HA_1",
        ),
        (
            {"deployment_type": "SINGLE_AZ_1"},
            r"throughput_capacity_mbps: 320 .*allowed for SINGLE_AZ_1: 64, 128, 256, 512, 1024, 2048, 3072, 4096 MB/s",
        ),
        (
            {"deployment_type": "SINGLE_AZ_HA_1", "throughput_capacity_mbps": 160},
            r"throughput_capacity_mbps: 160 .*allowed for SINGLE_AZ_HA_1: 64,",
        ),
        (
            {"throughput_capacity_mbps": 64},
            r"throughput_capacity_mbps: 64 .*allowed for SINGLE_AZ_HA_2: 160, 320, 640, 1280, 2560, 3840, 5120, 7680, 10240",
        ),
        ({"deployment_type": "MULTI_AZ_1"}, r"standby_subnet: None .*MULTI_AZ_1 needs a standby subnet"),
        ({"standby_subnet": "standby"}, r"standby_subnet: 'subnet-0123456789abcdef1' .*only used with MULTI_AZ_1"),
        ({"route_table_ids": ["rtb-01234567"]}, r"route_table_ids: \['rtb-01234567'\] .*only used with MULTI_AZ_1"),
        ({"nfs_client_cidrs": []}, r"nfs_client_cidrs: \[\] .*give 1 to 25 CIDR blocks"),
        ({"nfs_client_cidrs": [f"10.{i}.0.0/16" for i in range(26)]}, r"nfs_client_cidrs: .*give 1 to 25"),
        ({"nfs_client_cidrs": ["*"]}, r"nfs_client_cidrs: '\*' .*IPv4 CIDR blocks .*never '\*'"),
        ({"nfs_client_cidrs": ["10.0.0.1/16"]}, r"nfs_client_cidrs: '10.0.0.1/16' .*IPv4 CIDR blocks"),
        ({"nfs_client_cidrs": ["0.0.0.0/0"]}, r"nfs_client_cidrs: '0.0.0.0/0' .*to every address is not allowed"),
        ({"storage_capacity_gib": 32}, r"storage_capacity_gib: 32 .*64 to 524288 GiB"),
        ({"storage_capacity_gib": 600000}, r"storage_capacity_gib: 600000 .*64 to 524288 GiB"),
        ({"data_compression": "GZIP"}, r"data_compression: 'GZIP' .*use one of LZ4, ZSTD, NONE"),
        ({"nfs_export_options": ()}, r"nfs_export_options: \[\] .*exports\(5\) options"),
        ({"nfs_export_options": ("rw; rm -rf",)}, r"nfs_export_options: \['rw; rm -rf'\]"),
        ({"automatic_backup_retention_days": -1}, r"automatic_backup_retention_days: -1 .*0 \(off\) to 90 days"),
        ({"daily_backup_start_time": "24:00"}, r"daily_backup_start_time: '24:00' .*HH:MM"),
        ({"weekly_maintenance_start_time": "0:01:00"}, r"weekly_maintenance_start_time: '0:01:00' .*D:HH:MM"),
        (
            {"removal_policy": cdk.RemovalPolicy.SNAPSHOT},
            r"removal_policy: .*RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY",
        ),
    ],
)
def test_rejects_bad_props(props: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    if props.get("standby_subnet") == "standby":
        props = {**props, "standby_subnet": standby(stack)}
    with pytest.raises(ValueError, match=r"^OpenZfsHome: .*" + message):
        home(stack, **props)


def test_token_cidrs_are_not_checked() -> None:
    stack = cdk.Stack(cdk.App(), "Tokens")
    cidr = cdk.CfnParameter(stack, "Cidr").value_as_string
    fs = home(stack, nfs_client_cidrs=[cidr])
    assert '{"Ref": "Cidr"}' in json.dumps(stack.resolve(fs.resource.open_zfs_configuration))
