"""LustreStorage and its DRAs on rendered CloudFormation: defaults, every option, every validation error.

One app holds a stack per variant and is synthesized once with cdk-nag's
AwsSolutions pack on (synth fails on any unacknowledged finding); the
templates are then checked one property at a time and linted by cfn-lint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import cx_api
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from mlcluster.constructs.data_bucket import DataBucket
from mlcluster.constructs.lustre import DataRepositoryAssociationProps, LustreStorage, association_label
from tests.support import cfn_lint

ENV = cdk.Environment(account="111111111111", region="us-east-1")
SUBNET = "subnet-0123456789abcdef0"
CLUSTER_SG = "sg-0123456789abcdef0"
IMPORTED_KEY = "arn:aws:kms:us-east-1:111111111111:key/11111111-2222-3333-4444-555555555555"
Dra = DataRepositoryAssociationProps


def network(stack: cdk.Stack) -> dict[str, Any]:
    """The props every LustreStorage needs, from an existing VPC (no resources)."""
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["us-east-1a"],
        private_subnet_ids=[SUBNET],
        private_subnet_route_table_ids=["rtb-0123456789abcdef0"],
    )
    group = ec2.SecurityGroup.from_security_group_id(stack, "ClusterSg", CLUSTER_SG)
    return {"vpc": vpc, "subnet": vpc.private_subnets[0], "cluster_security_group": group}


def data_bucket(stack: cdk.Stack, **props: Any) -> s3.IBucket:
    return DataBucket(stack, "Data", **props).bucket


#: Each variant builds LustreStorage("Lustre") in its own stack.
VARIANTS: dict[str, Callable[[cdk.Stack], LustreStorage]] = {
    "Default": lambda st: LustreStorage(st, "Lustre", **network(st), data_bucket=data_bucket(st)),
    "KmsBucket": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_bucket=data_bucket(st, encryption="kms"),
        kms_key=kms.Key(st, "FsKey", enable_key_rotation=True),
    ),
    "ImportedKeyBucket": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_bucket=s3.Bucket.from_bucket_attributes(
            st, "Imported", bucket_name="imported-data", encryption_key=kms.Key.from_key_arn(st, "Key", IMPORTED_KEY)
        ),
    ),
    "Persistent1": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        deployment_type="PERSISTENT_1",
        throughput_mbps_per_tib=100,
        storage_capacity_gib=2400,
        lustre_version="2.12",
    ),
    "UserIops": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        storage_capacity_gib=4800,
        throughput_mbps_per_tib=500,
        metadata_mode="USER_PROVISIONED",
        metadata_iops=12000,
    ),
    "Efa": lambda st: LustreStorage(
        st, "Lustre", **network(st), efa_enabled=True, storage_capacity_gib=4800, throughput_mbps_per_tib=1000
    ),
    "SharedGroup": lambda st: LustreStorage(st, "Lustre", **network(st), dedicated_security_group=False),
    "Options": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_compression="NONE",
        automatic_backup_retention_days=0,
        weekly_maintenance_start_time="1:02:30",
        log_level="ERROR_ONLY",
        log_group_name="/aws/fsx/lustre-custom",
        log_retention=logs.RetentionDays.ONE_MONTH,
    ),
    "BackupTime": lambda st: LustreStorage(
        st, "Lustre", **network(st), automatic_backup_retention_days=30, daily_backup_start_time="23:15"
    ),
    "LogsOff": lambda st: LustreStorage(st, "Lustre", **network(st), log_level="DISABLED"),
    "ManyDras": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_bucket=data_bucket(st),
        data_repository_associations=[
            Dra(file_system_path="/data", data_bucket_prefix="data/"),
            Dra(
                file_system_path="/ckpt",
                data_bucket_prefix="ckpt/",
                auto_import_events=(),
                auto_export_events=("NEW", "CHANGED"),
                batch_import_metadata_on_create=False,
                imported_file_chunk_size_mib=2048,
            ),
            Dra(
                file_system_path="/public/sets",
                data_repository_path="s3://other-bucket/sets/",
                auto_import_events=(),
                auto_export_events=(),
            ),
        ],
    ),
    "Root": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_bucket=data_bucket(st),
        data_repository_associations=[Dra(file_system_path="/")],
    ),
    "Destroy": lambda st: LustreStorage(
        st,
        "Lustre",
        **network(st),
        data_bucket=data_bucket(st, removal_policy=cdk.RemovalPolicy.DESTROY),
        removal_policy=cdk.RemovalPolicy.DESTROY,
    ),
}


class Built:
    """The synthesized variants."""

    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.stacks: dict[str, cdk.Stack] = {}
        self.lustre: dict[str, LustreStorage] = {}
        self.templates: dict[str, Template] = {}
        self.assembly: cx_api.CloudAssembly


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("cdk.out")
    result = Built(out)
    app = cdk.App(outdir=str(out))
    for name, make in VARIANTS.items():
        stack = cdk.Stack(app, name, env=ENV)
        result.stacks[name] = stack
        result.lustre[name] = make(stack)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    result.assembly = app.synth()  # raises on any unacknowledged cdk-nag finding
    result.templates = {name: Template.from_stack(stack) for name, stack in result.stacks.items()}
    return result


def file_system(t: Template) -> dict[str, Any]:
    (resource,) = t.find_resources("AWS::FSx::FileSystem").values()
    return resource  # type: ignore[no-any-return]


def lustre_config(t: Template) -> dict[str, Any]:
    return file_system(t)["Properties"]["LustreConfiguration"]  # type: ignore[no-any-return]


def associations(t: Template) -> dict[str, Any]:
    return t.find_resources("AWS::FSx::DataRepositoryAssociation")


def logical_id(t: Template, kind: str, fragment: str) -> str:
    (found,) = [k for k in t.find_resources(kind) if fragment in k]
    return found


# -- the file system ----------------------------------------------------------


def test_default_file_system(built: Built) -> None:
    props = file_system(built.templates["Default"])["Properties"]
    assert props["FileSystemType"] == "LUSTRE"
    assert props["FileSystemTypeVersion"] == "2.15"
    assert props["StorageType"] == "SSD"
    assert props["StorageCapacity"] == 1200
    assert props["SubnetIds"] == [SUBNET]
    assert CLUSTER_SG not in str(props["SecurityGroupIds"])  # its own group, not the nodes'
    assert "KmsKeyId" not in props
    config = props["LustreConfiguration"]
    assert config["DeploymentType"] == "PERSISTENT_2"
    assert config["PerUnitStorageThroughput"] == 250
    assert config["DataCompressionType"] == "LZ4"
    assert config["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}
    assert config["AutomaticBackupRetentionDays"] == 7
    assert config["DailyAutomaticBackupStartTime"] == "05:00"
    assert config["WeeklyMaintenanceStartTime"] == "7:06:00"
    assert "EfaEnabled" not in config


def test_logs_to_an_fsx_log_group(built: Built) -> None:
    t = built.templates["Default"]
    (group_id, group) = next(iter(t.find_resources("AWS::Logs::LogGroup").items()))
    # Retained, so named per deployment: the last group of the stack id ends the name (deployment_name.py),
    # and a redeploy after a teardown does not meet the kept group's name.
    (prefix, suffix) = group["Properties"]["LogGroupName"]["Fn::Join"][1]
    stack_uuid = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    assert suffix == {"Fn::Select": [4, {"Fn::Split": ["-", stack_uuid]}]}
    assert prefix.startswith("/aws/fsx/lustre/") and prefix.endswith("-")
    assert group["Properties"]["RetentionInDays"] == 365
    fs = file_system(t)
    assert fs["Properties"]["LustreConfiguration"]["LogConfiguration"] == {
        "Level": "WARN_ERROR",
        # The stack's account and region are known, so aws-cdk-lib writes the partition literally.
        "Destination": {"Fn::Join": ["", [f"arn:aws:logs:us-east-1:111111111111:log-group:{prefix}", suffix]]},
    }
    assert group_id in fs["DependsOn"]


def test_attributes(built: Built) -> None:
    lustre = built.lustre["Default"]
    stack = built.stacks["Default"]
    fs_id = logical_id(built.templates["Default"], "AWS::FSx::FileSystem", "Lustre")
    assert stack.resolve(lustre.file_system_id) == {"Ref": fs_id}
    assert stack.resolve(lustre.dns_name) == {"Fn::GetAtt": [fs_id, "DNSName"]}
    assert stack.resolve(lustre.mount_name) == {"Fn::GetAtt": [fs_id, "LustreMountName"]}
    assert lustre.resource.node.id == "Resource"


def test_persistent_1(built: Built) -> None:
    props = file_system(built.templates["Persistent1"])["Properties"]
    assert props["FileSystemTypeVersion"] == "2.12"
    assert props["StorageCapacity"] == 2400
    assert props["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_1"
    assert props["LustreConfiguration"]["PerUnitStorageThroughput"] == 100
    assert "MetadataConfiguration" not in props["LustreConfiguration"]


def test_no_data_bucket_no_associations(built: Built) -> None:
    assert associations(built.templates["Persistent1"]) == {}
    assert built.lustre["Persistent1"].data_repository_associations == []


def test_user_provisioned_metadata(built: Built) -> None:
    config = lustre_config(built.templates["UserIops"])
    assert config["MetadataConfiguration"] == {"Mode": "USER_PROVISIONED", "Iops": 12000}
    assert config["PerUnitStorageThroughput"] == 500


def test_efa(built: Built) -> None:
    props = file_system(built.templates["Efa"])["Properties"]
    assert props["LustreConfiguration"]["EfaEnabled"] is True
    assert props["LustreConfiguration"]["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}
    assert props["FileSystemTypeVersion"] == "2.15"
    assert props["StorageCapacity"] == 4800


def security_rules(t: Template, protocol: str = "tcp") -> tuple[str, set[tuple[str, str, str, int, int]]]:
    """The file system's group and every rule as (direction, group, peer, from, to); ``fs`` names its group.

    Every rule must carry ``protocol``: with ``"-1"`` EC2 ignores the ports and admits everything, so a
    Lustre-only group's rules must all be "tcp" whatever their ports say.
    """
    group_id = logical_id(t, "AWS::EC2::SecurityGroup", "LustreSecurityGroup")
    me = {"Fn::GetAtt": [group_id, "GroupId"]}
    rules = set()
    for kind, peer_key in (
        ("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
        ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId"),
    ):
        for rule in t.find_resources(kind).values():
            p = rule["Properties"]
            assert p["IpProtocol"] == protocol
            group, peer = ("fs" if ref == me else ref for ref in (p["GroupId"], p[peer_key]))
            rules.add((kind.rsplit(":", 1)[1], group, peer, p.get("FromPort", -1), p.get("ToPort", -1)))
    return group_id, rules


@pytest.mark.parametrize("variant", ["Default", "Persistent1"])
def test_own_security_group_admits_lustre_only(built: Built, variant: str) -> None:
    t = built.templates[variant]
    group_id, rules = security_rules(t)
    group = t.find_resources("AWS::EC2::SecurityGroup")[group_id]["Properties"]
    # allow_all_outbound=False: CDK's placeholder egress only, so the rules below are all that is allowed.
    assert group["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]
    ports = ((988, 988), (1018, 1023))
    assert rules == {
        *(
            (d, "fs", peer, lo, hi)
            for d in ("SecurityGroupIngress", "SecurityGroupEgress")
            for peer in ("fs", CLUSTER_SG)
            for lo, hi in ports
        ),
        # The client group admits Lustre from the file system (the rule lives with the file system).
        *(("SecurityGroupIngress", CLUSTER_SG, "fs", lo, hi) for lo, hi in ports),
    }
    assert file_system(t)["Properties"]["SecurityGroupIds"] == [{"Fn::GetAtt": [group_id, "GroupId"]}]
    lustre = built.lustre[variant]
    assert lustre.security_group.node.id == "SecurityGroup"
    assert lustre.security_groups == [lustre.security_group]


def test_shared_group_keeps_an_existing_file_system_in_place_and_warns(built: Built) -> None:
    """security_group: cluster: no group of its own (SecurityGroupIds is create-only), with a warning."""
    t = built.templates["SharedGroup"]
    t.resource_count_is("AWS::EC2::SecurityGroup", 0)
    t.resource_count_is("AWS::EC2::SecurityGroupIngress", 0)
    assert file_system(t)["Properties"]["SecurityGroupIds"] == [CLUSTER_SG]
    assert built.lustre["SharedGroup"].security_group.security_group_id == CLUSTER_SG
    warnings = Annotations.from_stack(built.stacks["SharedGroup"]).find_warning(
        "*", Match.string_like_regexp("FSx for Lustre is in the cluster nodes' security group")
    )
    assert len(warnings) == 1


def test_efa_security_group_allows_all_traffic_with_itself_and_the_clients(built: Built) -> None:
    """The FSx for Lustre guide: an EFA-enabled file system's group allows all traffic in and out with
    itself and with the clients' group."""
    _, rules = security_rules(built.templates["Efa"], protocol="-1")
    assert rules == {
        ("SecurityGroupIngress", "fs", "fs", -1, -1),
        ("SecurityGroupIngress", "fs", CLUSTER_SG, -1, -1),
        ("SecurityGroupEgress", "fs", "fs", -1, -1),
        ("SecurityGroupEgress", "fs", CLUSTER_SG, -1, -1),
        ("SecurityGroupIngress", CLUSTER_SG, "fs", -1, -1),
    }


def test_options(built: Built) -> None:
    t = built.templates["Options"]
    config = lustre_config(t)
    assert config["DataCompressionType"] == "NONE"
    assert config["AutomaticBackupRetentionDays"] == 0
    assert "DailyAutomaticBackupStartTime" not in config
    assert config["WeeklyMaintenanceStartTime"] == "1:02:30"
    assert config["LogConfiguration"]["Level"] == "ERROR_ONLY"
    assert config["LogConfiguration"]["Destination"].endswith("log-group:/aws/fsx/lustre-custom")
    t.has_resource_properties("AWS::Logs::LogGroup", {"LogGroupName": "/aws/fsx/lustre-custom", "RetentionInDays": 30})


def test_backup_window(built: Built) -> None:
    config = lustre_config(built.templates["BackupTime"])
    assert config["AutomaticBackupRetentionDays"] == 30
    assert config["DailyAutomaticBackupStartTime"] == "23:15"


def test_logging_disabled(built: Built) -> None:
    t = built.templates["LogsOff"]
    t.resource_count_is("AWS::Logs::LogGroup", 0)
    assert lustre_config(t)["LogConfiguration"] == {"Level": "DISABLED"}
    assert built.lustre["LogsOff"].log_group is None


# -- data repository associations ---------------------------------------------


def test_default_association(built: Built) -> None:
    t = built.templates["Default"]
    (dra_id, dra) = next(iter(associations(t).items()))
    (bucket_id,) = t.find_resources("AWS::S3::Bucket", {"Properties": {"LoggingConfiguration": Match.any_value()}})
    assert "LustreAssociationData" in dra_id
    assert dra["Properties"] == {
        "FileSystemId": {"Ref": logical_id(t, "AWS::FSx::FileSystem", "Lustre")},
        "FileSystemPath": "/data",
        "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/"]]},
        "BatchImportMetaDataOnCreate": True,
        "ImportedFileChunkSize": 1024,
        "S3": {
            "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            # Not DELETED: a file removed from the file system keeps its object in the bucket.
            "AutoExportPolicy": {"Events": ["NEW", "CHANGED"]},
        },
    }
    assert "DependsOn" not in dra


def test_many_associations_one_after_another(built: Built) -> None:
    t = built.templates["ManyDras"]
    found = associations(t)
    by_path = {d["Properties"]["FileSystemPath"]: (k, d) for k, d in found.items()}
    assert set(by_path) == {"/data", "/ckpt", "/public/sets"}
    data_id, data = by_path["/data"]
    ckpt_id, ckpt = by_path["/ckpt"]
    sets_id, sets = by_path["/public/sets"]
    assert [data_id, ckpt_id, sets_id] == [
        logical_id(t, "AWS::FSx::DataRepositoryAssociation", f"Association{label}")
        for label in ("Data", "Ckpt", "PublicSets")
    ]
    assert "DependsOn" not in data
    assert ckpt["DependsOn"] == [data_id]
    assert sets["DependsOn"] == [ckpt_id]
    assert data["Properties"]["DataRepositoryPath"]["Fn::Join"][1][-1] == "/data/"
    assert ckpt["Properties"]["DataRepositoryPath"]["Fn::Join"][1][-1] == "/ckpt/"
    assert ckpt["Properties"]["S3"] == {"AutoExportPolicy": {"Events": ["NEW", "CHANGED"]}}
    assert ckpt["Properties"]["BatchImportMetaDataOnCreate"] is False
    assert ckpt["Properties"]["ImportedFileChunkSize"] == 2048
    assert sets["Properties"]["DataRepositoryPath"] == "s3://other-bucket/sets/"
    assert "S3" not in sets["Properties"]
    assert len(built.lustre["ManyDras"].data_repository_associations) == 3


def test_root_association(built: Built) -> None:
    (dra_id, dra) = next(iter(associations(built.templates["Root"]).items()))
    assert "LustreAssociationRoot" in dra_id
    assert dra["Properties"]["FileSystemPath"] == "/"


def test_kms_data_bucket_key_lets_this_file_system_in(built: Built) -> None:
    t = built.templates["KmsBucket"]
    fs_id = logical_id(t, "AWS::FSx::FileSystem", "Lustre")
    fs_key = logical_id(t, "AWS::KMS::Key", "FsKey")
    bucket_key = logical_id(t, "AWS::KMS::Key", "DataKey")
    assert file_system(t)["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [fs_key, "Arn"]}
    statements = t.find_resources("AWS::KMS::Key")[bucket_key]["Properties"]["KeyPolicy"]["Statement"]
    (fsx,) = [s for s in statements if "ArnLike" in s.get("Condition", {})]
    assert {"Ref": fs_id} in fsx["Condition"]["ArnLike"]["aws:PrincipalArn"]["Fn::Join"][1]
    (dra,) = associations(t).values()
    assert bucket_key in dra["DependsOn"]


def warnings(built: Built, name: str) -> dict[str, str]:
    artifact = built.assembly.get_stack_by_name(name)
    return {m.id: str(m.entry.data) for m in artifact.messages if m.level == cx_api.SynthesisMessageLevel.WARNING}


def test_imported_bucket_key_warns(built: Built) -> None:
    found = warnings(built, "ImportedKeyBucket")
    assert list(found) == ["/ImportedKeyBucket/Lustre"]
    assert re.search(r"KMS key is imported.*AWSServiceRoleForFSxS3Access", found["/ImportedKeyBucket/Lustre"])
    assert warnings(built, "KmsBucket") == {}
    (dra,) = associations(built.templates["ImportedKeyBucket"]).values()
    assert dra["Properties"]["DataRepositoryPath"] == "s3://imported-data/"


@pytest.mark.parametrize(
    ("path", "label"),
    [("/", "Root"), ("/data", "Data"), ("/data/", "Data"), ("/ml-data/v2", "MlDataV2"), ("/a_b.c", "ABC")],
)
def test_association_label(path: str, label: str) -> None:
    assert association_label(path) == label


# -- retention ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::Logs::LogGroup"])
def test_retained_by_default(built: Built, kind: str) -> None:
    for name in ("Default", "ManyDras"):
        found = built.templates[name].find_resources(kind)
        assert found
        for resource in found.values():
            assert resource["DeletionPolicy"] == "Retain"
            assert resource["UpdateReplacePolicy"] == "Retain"


@pytest.mark.parametrize("kind", ["AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::Logs::LogGroup"])
def test_destroy_only_when_asked(built: Built, kind: str) -> None:
    found = built.templates["Destroy"].find_resources(kind)
    assert found
    for resource in found.values():
        assert resource["DeletionPolicy"] == "Delete"
        assert resource["UpdateReplacePolicy"] == "Delete"


# -- nag and lint -------------------------------------------------------------


def test_cfn_lint_clean(built: Built) -> None:
    files = sorted(str(p) for p in built.outdir.glob("*.template.json"))
    assert len(files) == len(VARIANTS)
    assert cfn_lint(files) == {f: [] for f in files}


# -- validation ---------------------------------------------------------------


def paths(*fs_paths: str) -> list[DataRepositoryAssociationProps]:
    return [Dra(file_system_path=p, data_bucket_prefix=f"p{i}/") for i, p in enumerate(fs_paths)]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"deployment_type": "SCRATCH_2"},
            r"deployment_type: 'SCRATCH_2' is not allowed; use 'PERSISTENT_2' or 'PERSISTENT_1'",
        ),
        (
            {"throughput_mbps_per_tib": 200},
            r"throughput_mbps_per_tib: 200 .*allowed for PERSISTENT_2: 125, 250, 500, 1000 MB/s/TiB",
        ),
        (
            {"deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 125},
            r"throughput_mbps_per_tib: 125 .*allowed for PERSISTENT_1: 50, 100, 200 MB/s/TiB",
        ),
        ({"storage_capacity_gib": 1000}, r"storage_capacity_gib: 1000 .*1200, 2400, or a multiple of 2400 GiB"),
        ({"storage_capacity_gib": 3600}, r"storage_capacity_gib: 3600 .*1200, 2400, or a multiple of 2400 GiB"),
        (
            {"efa_enabled": True, "storage_capacity_gib": 2400, "throughput_mbps_per_tib": 1000},
            r"storage_capacity_gib: 2400 .*allowed with EFA at 1000 MB/s/TiB: a multiple of 4800 GiB",
        ),
        (
            {"efa_enabled": True, "storage_capacity_gib": 9600},
            r"storage_capacity_gib: 9600 .*allowed with EFA at 250 MB/s/TiB: a multiple of 19200 GiB",
        ),
        (
            {"efa_enabled": True, "deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 50},
            r"efa_enabled: True .*EFA needs deployment_type 'PERSISTENT_2'",
        ),
        ({"lustre_version": "2.10"}, r"lustre_version: '2.10' .*use '2.15' or '2.12'"),
        (
            {"lustre_version": "2.12"},
            r"lustre_version: '2.12' .*PERSISTENT_2 has a metadata configuration, which needs '2.15'",
        ),
        ({"metadata_mode": "MANUAL"}, r"metadata_mode: 'MANUAL' .*use 'AUTOMATIC' or 'USER_PROVISIONED'"),
        (
            {"deployment_type": "PERSISTENT_1", "throughput_mbps_per_tib": 50, "metadata_mode": "AUTOMATIC"},
            r"metadata_mode: 'AUTOMATIC' .*PERSISTENT_1 has no metadata configuration",
        ),
        (
            {"metadata_mode": "USER_PROVISIONED"},
            r"metadata_iops: None .*required with USER_PROVISIONED; allowed: 1500, 3000",
        ),
        (
            {"metadata_mode": "USER_PROVISIONED", "metadata_iops": 5000},
            r"metadata_iops: 5000 .*1500, 3000, 6000, 12000, or a multiple of 12000 up to 192000",
        ),
        ({"metadata_mode": "USER_PROVISIONED", "metadata_iops": 204000}, r"metadata_iops: 204000 .*up to 192000"),
        (
            {"metadata_mode": "AUTOMATIC", "metadata_iops": 3000},
            r"metadata_iops: 3000 .*only used with metadata_mode='USER_PROVISIONED'",
        ),
        ({"metadata_iops": 3000}, r"metadata_iops: 3000 .*only used with metadata_mode='USER_PROVISIONED'"),
        ({"data_compression": "ZSTD"}, r"data_compression: 'ZSTD' .*use 'LZ4' or 'NONE'"),
        ({"automatic_backup_retention_days": 91}, r"automatic_backup_retention_days: 91 .*0 \(off\) to 90 days"),
        ({"daily_backup_start_time": "5:00"}, r"daily_backup_start_time: '5:00' .*HH:MM in UTC"),
        ({"weekly_maintenance_start_time": "8:06:00"}, r"weekly_maintenance_start_time: '8:06:00' .*D:HH:MM"),
        ({"log_level": "INFO"}, r"log_level: 'INFO' .*use one of WARN_ERROR, WARN_ONLY, ERROR_ONLY, DISABLED"),
        ({"log_group_name": "/fsx/logs"}, r"log_group_name: '/fsx/logs' .*FSx only logs to groups named /aws/fsx/"),
        (
            {"log_group_name": "/aws/fsx/x", "log_level": "DISABLED"},
            r"log_group_name: '/aws/fsx/x' .*not used with log_level 'DISABLED'",
        ),
        (
            {"removal_policy": cdk.RemovalPolicy.SNAPSHOT},
            r"removal_policy: .*use RemovalPolicy.RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY",
        ),
        (
            {"data_repository_associations": paths(*(f"/d{i}" for i in range(9)))},
            r"data_repository_associations: '9 associations' .*at most 8 per file system",
        ),
        (
            {"data_repository_associations": paths("/", "/data")},
            r"data_repository_associations\[0\].file_system_path: '/' .*must be the only association",
        ),
        (
            {"data_repository_associations": paths("/data", "/data/")},
            r"\[1\].file_system_path: '/data/' .*the same as association 0",
        ),
        (
            {"data_repository_associations": paths("/data", "/data/sub")},
            r"\[1\].file_system_path: '/data/sub' .*overlaps '/data' of association 0; paths must not be nested",
        ),
        (
            {
                "data_repository_associations": [
                    Dra(file_system_path="/a", data_bucket_prefix="x/"),
                    Dra(file_system_path="/b", data_bucket_prefix="x/y/"),
                ]
            },
            r"\[1\].data_repository_path: 's3://data-bucket/x/y/' .*overlaps 's3://data-bucket/x/' of association 0",
        ),
        (
            {
                "data_repository_associations": [
                    Dra(file_system_path="/a"),
                    Dra(file_system_path="/b", data_repository_path="s3://data-bucket"),
                ]
            },
            r"\[1\].data_repository_path: 's3://data-bucket' .*the same as association 0",
        ),
        (
            {"data_repository_associations": [Dra(file_system_path="data")]},
            r"\[0\].file_system_path: 'data' is not valid; allowed: an absolute path",
        ),
        (
            {"data_repository_associations": [Dra(file_system_path="/a/../b")]},
            r"file_system_path: '/a/../b' is not valid",
        ),
        (
            {"data_repository_associations": [Dra(data_repository_path="s3:/x")]},
            r"data_repository_path: 's3:/x' is not valid; allowed: an S3 URI",
        ),
        (
            {"data_repository_associations": [Dra(data_repository_path="s3://Bad_Bucket/")]},
            r"'s3://Bad_Bucket/' is not valid",
        ),
        (
            {"data_repository_associations": [Dra(data_repository_path="s3://bucket//x/")]},
            r"'s3://bucket//x/' is not valid",
        ),
        (
            {"data_repository_associations": [Dra(data_bucket_prefix="data")]},
            r"data_bucket_prefix: 'data' is not valid; allowed: a key prefix ending in '/'",
        ),
        (
            {"data_repository_associations": [Dra(data_repository_path="s3://b-1/", data_bucket_prefix="x/")]},
            r"data_bucket_prefix: 'x/' cannot be combined with data_repository_path",
        ),
        (
            {"data_repository_associations": [Dra(auto_import_events=("NEW", "NEW"))]},
            r"auto_import_events: \['NEW', 'NEW'\] .*at most once",
        ),
        (
            {"data_repository_associations": [Dra(auto_export_events=("MOVED",))]},
            r"auto_export_events: \['MOVED'\] .*NEW, CHANGED, DELETED",
        ),
        (
            {"data_repository_associations": [Dra(imported_file_chunk_size_mib=0)]},
            r"imported_file_chunk_size_mib: 0 .*1 to 512000 MiB",
        ),
        (
            {"data_repository_associations": paths("/a-b", "/a_b")},
            r"'/a_b' gives the same construct id 'AssociationAB' as association 0",
        ),
    ],
)
def test_rejects_bad_props(props: dict[str, Any], message: str) -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    bucket = s3.Bucket.from_bucket_name(stack, "Bucket", "data-bucket")
    with pytest.raises(ValueError, match=r"^LustreStorage: .*" + message):
        LustreStorage(stack, "Lustre", **network(stack), data_bucket=bucket, **props)


def test_association_needs_a_bucket_or_a_path() -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    with pytest.raises(ValueError, match=r"\[0\].data_repository_path: none given and no data_bucket to default to"):
        LustreStorage(stack, "Lustre", **network(stack), data_repository_associations=[Dra()])


def test_bucket_key_cannot_also_encrypt_the_file_system() -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    bucket = DataBucket(stack, "Data", encryption="kms")
    with pytest.raises(ValueError, match=r"kms_key: the data bucket's own key cannot also encrypt the file system"):
        LustreStorage(stack, "Lustre", **network(stack), data_bucket=bucket.bucket, kms_key=bucket.encryption_key)


def test_data_bucket_token_shown_plainly_in_errors() -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    bucket = DataBucket(stack, "Data").bucket
    with pytest.raises(ValueError, match=r"'s3://<data bucket>/' .*the same as association 0") as raised:
        LustreStorage(
            stack,
            "Lustre",
            **network(stack),
            data_bucket=bucket,
            data_repository_associations=[Dra(file_system_path="/a"), Dra(file_system_path="/b")],
        )
    assert "${Token" not in str(raised.value)


def test_reports_every_problem_at_once() -> None:
    stack = cdk.Stack(cdk.App(), "Bad")
    with pytest.raises(ValueError) as raised:
        LustreStorage(stack, "Lustre", **network(stack), storage_capacity_gib=100, data_compression="GZIP")
    assert "storage_capacity_gib: 100" in str(raised.value)
    assert "data_compression: 'GZIP'" in str(raised.value)
