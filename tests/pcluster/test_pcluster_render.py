"""The rendered ParallelCluster configuration, setting by setting."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mlcluster.lifecycle.pcluster import node_files, node_script_sha256
from mlcluster.pcluster.render import (
    ManagedAccounting,
    RenderError,
    ZoneSubnet,
    log_retention,
    render_cluster_config,
)
from tests.pcluster.pcluster_support import (
    BOUNDARY,
    BUCKET,
    FSX,
    GROUP_ARN,
    PRIVATE_A,
    PRIVATE_B,
    PUBLIC,
    SCRIPT_POLICY,
    SESSION_POLICY,
    SG,
    ZFS_VOLUME,
    archetype,
    get,
    inputs,
    pcluster,
)

SSM = SESSION_POLICY
#: The health check every rendering carries unless node_scripts.health_check is off (slurm.conf(5)).
HEALTH_CHECK = [
    {"HealthCheckProgram": "/usr/local/sbin/mlcluster-health-check"},
    {"HealthCheckInterval": "300"},
    {"HealthCheckNodeState": "ANY,CYCLE"},
]
NODE_SCRIPTS_S3 = {"BucketName": BUCKET, "KeyName": "pcluster/*", "EnableWriteAccess": False}
CR0 = "Scheduling.SlurmQueues[0].ComputeResources[0]"
Q0 = "Scheduling.SlurmQueues[0]"


def one(resource: str = "", queue: str = "", top: str = "") -> str:
    """A pcluster section with one queue and one compute resource, in YAML, plus extra lines."""
    return f"""
queues:
  - name: train
    {queue}
    compute_resources:
      - name: gpu
        {resource}
{top}
"""


def manifest(*steps: str) -> list[str]:
    """The ``--sha256 NAME=HEX`` arguments of the files run.sh fetches for ``steps``, from the package's files."""
    digests = node_script_sha256()
    return [arg for name in node_files(steps) for arg in ("--sha256", f"{name}={digests[name]}")]


def node_action(role: str, *steps: str) -> dict[str, Any]:
    """The node-script action: compute nodes carry the manifest, head and login nodes the pre-manifest form."""
    source = f"s3://{BUCKET}/pcluster/"
    vouch = manifest(*steps) if role == "compute" else []
    return {"Script": f"{source}run.sh", "Args": ["--role", role, "--source", source, *vouch, *steps]}


def render(yaml_text: str, **overrides: Any) -> dict[str, Any]:
    return render_cluster_config(pcluster(yaml_text), inputs(**overrides))


P5 = "instance_type: p5.48xlarge"

CASES: list[tuple[str, str, dict[str, Any], str, Any]] = [
    # (id, pcluster YAML, input overrides, path, expected)
    ("region", one(P5), {}, "Region", "us-east-1"),
    ("os", one(P5, top="os: ubuntu2404"), {}, "Image", {"Os": "ubuntu2404"}),
    ("custom ami", one(P5, top="custom_ami: ami-0123456789abcdef0"), {}, "Image.CustomAmi", "ami-0123456789abcdef0"),
    ("imds v2 only", one(P5), {}, "Imds", {"ImdsSupport": "v2.0"}),
    # head node
    ("head instance type", one(P5), {}, "HeadNode.InstanceType", "m5.8xlarge"),
    ("head private by default", one(P5), {}, "HeadNode.Networking.SubnetId", PRIVATE_A),
    (
        "head public subnet with elastic ip",
        one(P5, top="head_node: {subnet: public}"),
        {},
        "HeadNode.Networking",
        {"SubnetId": PUBLIC, "AdditionalSecurityGroups": [SG], "ElasticIp": True},
    ),
    (
        "head private subnet without elastic ip",
        one(P5, top="head_node: {subnet: private}"),
        {},
        "HeadNode.Networking",
        {"SubnetId": PRIVATE_A, "AdditionalSecurityGroups": [SG]},
    ),
    ("head security group", one(P5), {}, "HeadNode.Networking.AdditionalSecurityGroups", [SG]),
    ("head imds secured", one(P5), {}, "HeadNode.Imds", {"Secured": True}),
    ("head ssh from vpc", one(P5), {}, "HeadNode.Ssh", {"AllowedIps": "10.0.0.0/16"}),
    (
        "head key and ssh cidr",
        one(P5, top="head_node: {key_name: ops, ssh_allowed_cidr: 192.0.2.0/24}"),
        {},
        "HeadNode.Ssh",
        {"AllowedIps": "192.0.2.0/24", "KeyName": "ops"},
    ),
    (
        "head root volume",
        one(P5, top="head_node: {root_volume_gib: 500}"),
        {},
        "HeadNode.LocalStorage.RootVolume",
        {"Size": 500, "VolumeType": "gp3", "Encrypted": True},
    ),
    ("head ssm policy", one(P5), {}, "HeadNode.Iam.AdditionalIamPolicies", [{"Policy": SSM}]),
    (
        "queues without ssm by default",
        one(P5),
        {},
        f"{Q0}.Iam",
        {"S3Access": [NODE_SCRIPTS_S3]},
    ),
    (
        "queue ssm when asked",
        one(P5, queue="ssm: true"),
        {},
        f"{Q0}.Iam.AdditionalIamPolicies",
        [{"Policy": SSM}],
    ),
    ("permissions boundary", one(P5), {}, "Iam", {"PermissionsBoundary": BOUNDARY}),
    (
        "head extra policies without ssm",
        one(
            P5,
            top="head_node: {ssm: false, additional_iam_policies: ['arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess']}",
        ),
        {},
        "HeadNode.Iam.AdditionalIamPolicies",
        [{"Policy": "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"}],
    ),
    ("head reads node scripts", one(P5), {}, "HeadNode.Iam.S3Access", [NODE_SCRIPTS_S3]),
    (
        "head runs docker and pyxis",
        one(P5),
        {},
        "HeadNode.CustomActions",
        {"OnNodeConfigured": {"Sequence": [node_action("head", "docker", "enroot_pyxis")]}},
    ),
    (
        "head user actions after ours",
        one(
            P5,
            top="""head_node:
  custom_actions:
    on_node_start: [{script: "https://example.com/start.sh"}]
    on_node_configured: [{script: "s3://team-scripts/setup/users.sh", args: [alice, bob]}]
    on_node_updated: [{script: "s3://team-scripts/setup/update.sh"}]""",
        ),
        {},
        "HeadNode.CustomActions",
        {
            "OnNodeStart": {"Sequence": [{"Script": "https://example.com/start.sh"}]},
            "OnNodeConfigured": {
                "Sequence": [
                    node_action("head", "docker", "enroot_pyxis"),
                    {"Script": "s3://team-scripts/setup/users.sh", "Args": ["alice", "bob"]},
                ]
            },
            "OnNodeUpdated": {"Sequence": [{"Script": "s3://team-scripts/setup/update.sh"}]},
        },
    ),
    (
        "head reads user action buckets",
        one(P5, top="head_node: {custom_actions: {on_node_configured: [{script: 's3://team-scripts/a/b.sh'}]}}"),
        {},
        "HeadNode.Iam.S3Access",
        [NODE_SCRIPTS_S3, {"BucketName": "team-scripts", "KeyName": "a/b.sh", "EnableWriteAccess": False}],
    ),
    (
        "node scripts under another prefix",
        one(P5),
        {"node_script_prefix": "env/dev/pcluster/"},
        "HeadNode.Iam.S3Access[0].KeyName",
        "env/dev/pcluster/*",
    ),
    # queues
    ("queue subnet is the primary zone", one(P5), {}, f"{Q0}.Networking.SubnetIds", [PRIVATE_A]),
    (
        "queue in two zones",
        one("instance_type: g5.xlarge", queue="zones: [us-east-1a, us-east-1b]"),
        {},
        f"{Q0}.Networking.SubnetIds",
        [PRIVATE_A, PRIVATE_B],
    ),
    (
        "queue by subnet id",
        one(P5, queue=f"zones: [{PRIVATE_B}]"),
        {},
        f"{Q0}.Networking.SubnetIds",
        [PRIVATE_B],
    ),
    ("queue security group", one(P5), {}, f"{Q0}.Networking.AdditionalSecurityGroups", [SG]),
    ("capacity type", one(P5, queue="capacity_type: SPOT"), {}, f"{Q0}.CapacityType", "SPOT"),
    ("job exclusive default", one(P5), {}, f"{Q0}.JobExclusiveAllocation", False),
    ("job exclusive", one(P5, queue="job_exclusive_allocation: true"), {}, f"{Q0}.JobExclusiveAllocation", True),
    (
        "queue root volume",
        one(P5, queue="root_volume_gib: 400"),
        {},
        f"{Q0}.ComputeSettings.LocalStorage.RootVolume",
        {"Size": 400, "VolumeType": "gp3", "Encrypted": True},
    ),
    (
        "queue custom ami",
        one(P5, queue="custom_ami: ami-0123456789abcdef1"),
        {},
        f"{Q0}.Image",
        {"CustomAmi": "ami-0123456789abcdef1"},
    ),
    (
        "queue slurm settings",
        one(P5, queue="custom_slurm_settings: {MaxTime: '2-00:00:00'}"),
        {},
        f"{Q0}.CustomSlurmSettings",
        {"MaxTime": "2-00:00:00"},
    ),
    (
        "queue policies",
        one(P5, queue="ssm: false"),
        {},
        f"{Q0}.Iam",
        {"S3Access": [NODE_SCRIPTS_S3]},
    ),
    ("compute resource counts", one(P5 + "\n        min_count: 2\n        max_count: 8"), {}, f"{CR0}.MaxCount", 8),
    ("min count", one(P5 + "\n        min_count: 2\n        max_count: 8"), {}, f"{CR0}.MinCount", 2),
    # EFA and placement groups
    ("efa follows p5", one(P5), {}, f"{CR0}.Efa", {"Enabled": True}),
    ("no efa on g5.xlarge", one("instance_type: g5.xlarge"), {}, f"{CR0}.Efa", {"Enabled": False}),
    ("efa off", one(P5 + "\n        efa: false"), {}, f"{CR0}.Efa", {"Enabled": False}),
    ("efa off for unknown type", one("instance_type: m7a.large"), {}, f"{CR0}.Efa", {"Enabled": False}),
    ("placement group for efa", one(P5), {}, f"{CR0}.Networking.PlacementGroup", {"Enabled": True}),
    (
        "no placement group without efa",
        one("instance_type: g5.xlarge"),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": False},
    ),
    (
        "no placement group on a targeted odcr",
        one(P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0"),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": False},
    ),
    (
        "no placement group on a capacity block",
        one(
            P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        min_count: 2\n        max_count: 2",
            queue="capacity_type: CAPACITY_BLOCK",
        ),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": False},
    ),
    (
        "no placement group across zones",
        one(P5 + "\n        efa: false", queue="zones: [us-east-1a, us-east-1b]"),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": False},
    ),
    (
        "explicit placement group",
        one("instance_type: g5.xlarge\n        placement_group: true"),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": True},
    ),
    # reservations
    (
        "odcr by id",
        one(P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0"),
        {},
        f"{CR0}.CapacityReservationTarget",
        {"CapacityReservationId": "cr-0123456789abcdef0"},
    ),
    (
        "reservation group by name",
        one(
            P5 + "\n        capacity_reservation_group: p4de-pool",
            top="capacity_reservation_groups: [{name: p4de-pool, reservation_ids: [cr-0123456789abcdef1]}]",
        ),
        {},
        f"{CR0}.CapacityReservationTarget",
        {"CapacityReservationResourceGroupArn": GROUP_ARN},
    ),
    (
        "reservation group by arn",
        one(P5 + "\n        capacity_reservation_group: arn:aws:resource-groups:us-east-1:123456789012:group/shared"),
        {},
        f"{CR0}.CapacityReservationTarget",
        {"CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-east-1:123456789012:group/shared"},
    ),
    # sockets
    (
        "p5 sockets",
        one(P5),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 48, "ThreadsPerCore": 2},
    ),
    (
        "p4de sockets",
        one("instance_type: p4de.24xlarge"),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 24, "ThreadsPerCore": 2},
    ),
    (
        "p4d sockets",
        one("instance_type: p4d.24xlarge"),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 24, "ThreadsPerCore": 2},
    ),
    (
        "sockets override",
        one("instance_type: trn1.32xlarge\n        sockets: 2\n        cores_per_socket: 32"),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 32, "ThreadsPerCore": 2},
    ),
    (
        "own placement group with its reservation",
        one(P5 + "\n        capacity_reservation_id: cr-0123456789abcdef0\n        placement_group_name: p5-odcr-pg"),
        {},
        f"{CR0}.Networking.PlacementGroup",
        {"Enabled": True, "Name": "p5-odcr-pg"},
    ),
    (
        "rocky9 with its image",
        one(P5, top="os: rocky9\ncustom_ami: ami-0123456789abcdef0"),
        {},
        "Image",
        {"Os": "rocky9", "CustomAmi": "ami-0123456789abcdef0"},
    ),
    (
        "threads override without smt",
        one(
            "instance_type: hpc7a.96xlarge\n        sockets: 2\n        cores_per_socket: 96\n        threads_per_core: 1"
        ),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 96, "ThreadsPerCore": 1},
    ),
    (
        "unknown type with the whole layout",
        one(
            "instance_type: c6a.48xlarge\n        efa: false\n        sockets: 2\n        cores_per_socket: 48\n        threads_per_core: 2"
        ),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 48, "ThreadsPerCore": 2},
    ),
    (
        "sockets with custom settings",
        one(P5 + "\n        custom_slurm_settings: {RealMemory: '1900000'}"),
        {},
        f"{CR0}.CustomSlurmSettings",
        {"Sockets": 2, "CoresPerSocket": 48, "ThreadsPerCore": 2, "RealMemory": "1900000"},
    ),
    # node scripts per queue
    (
        "gpu queue gets nccl",
        one(P5),
        {},
        f"{Q0}.CustomActions.OnNodeConfigured.Sequence",
        [node_action("compute", "docker", "enroot_pyxis", "nccl_efa", "health_check")],
    ),
    (
        "gpu queue without efa gets no nccl",
        one(P5 + "\n        efa: false"),
        {},
        f"{Q0}.CustomActions.OnNodeConfigured.Sequence[0].Args",
        # The health check expects no EFA device on p5 here (else every node drains and is replaced).
        [
            *node_action("compute", "docker", "enroot_pyxis", "health_check")["Args"][:-3],
            "--no-efa",
            "p5.48xlarge",
            "docker",
            "enroot_pyxis",
            "health_check",
        ],
    ),
    (
        "efa off and no health check: no --no-efa",
        one(P5 + "\n        efa: false", top="node_scripts: {health_check: false}"),
        {},
        f"{Q0}.CustomActions.OnNodeConfigured.Sequence[0].Args",
        node_action("compute", "docker", "enroot_pyxis")["Args"],
    ),
    (
        "trainium queue gets neuron",
        one("instance_type: trn1.32xlarge"),
        {},
        f"{Q0}.CustomActions.OnNodeConfigured.Sequence[0].Args",
        node_action("compute", "docker", "enroot_pyxis", "neuron", "health_check")["Args"],
    ),
    (
        "queue user actions",
        one(P5, queue="custom_actions: {on_node_start: [{script: 'https://example.com/a.sh', args: [x]}]}"),
        {},
        f"{Q0}.CustomActions.OnNodeStart",
        {"Sequence": [{"Script": "https://example.com/a.sh", "Args": ["x"]}]},
    ),
    # slurm
    (
        "slurm settings",
        one(P5, top="slurm: {scaledown_idle_minutes: 30, queue_update_strategy: TERMINATE}"),
        {},
        "Scheduling.SlurmSettings",
        {"ScaledownIdletime": 30, "QueueUpdateStrategy": "TERMINATE", "CustomSlurmSettings": HEALTH_CHECK},
    ),
    ("scheduler", one(P5), {}, "Scheduling.Scheduler", "slurm"),
    ("drain by default", one(P5), {}, "Scheduling.SlurmSettings.QueueUpdateStrategy", "DRAIN"),
    (
        "cluster slurm settings",
        one(P5, top="slurm: {custom_settings: {MaxJobCount: '20000', MinJobAge: '600'}}"),
        {},
        "Scheduling.SlurmSettings.CustomSlurmSettings",
        [*HEALTH_CHECK, {"MaxJobCount": "20000"}, {"MinJobAge": "600"}],
    ),
    (
        "health check settings you set win",
        one(P5, top="slurm: {custom_settings: {healthcheckprogram: /opt/site/nhc, HealthCheckInterval: '60'}}"),
        {},
        "Scheduling.SlurmSettings.CustomSlurmSettings",
        [{"HealthCheckNodeState": "ANY,CYCLE"}, {"healthcheckprogram": "/opt/site/nhc"}, {"HealthCheckInterval": "60"}],
    ),
    (
        "health check on a queue without other node scripts",
        one(P5, top="node_scripts: {docker_enroot_pyxis: false, nccl_efa: false}"),
        {},
        f"{Q0}.CustomActions.OnNodeConfigured.Sequence",
        [node_action("compute", "health_check")],
    ),
    (
        "accounting database",
        one(
            P5,
            top="""slurm:
  accounting:
    uri: db.internal:3306
    user_name: slurm
    password_secret_arn: arn:aws:secretsmanager:us-east-1:123456789012:secret:slurmdb
    database_name: train_acct""",
        ),
        {},
        "Scheduling.SlurmSettings.Database",
        {
            "Uri": "db.internal:3306",
            "UserName": "slurm",
            "PasswordSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:slurmdb",
            "DatabaseName": "train_acct",
        },
    ),
    # storage
    (
        "lustre only (/home on the head node: its own volume switched off)",
        one(P5, top="shared_storage: {home_volume: {enabled: false}}"),
        {},
        "SharedStorage",
        [{"Name": "fsx", "MountDir": "/fsx", "StorageType": "FsxLustre", "FsxLustreSettings": {"FileSystemId": FSX}}],
    ),
    (
        "home volume by default",
        one(P5),
        {},
        "SharedStorage[1]",
        {
            "Name": "home",
            "MountDir": "/home",
            "StorageType": "Ebs",
            "EbsSettings": {"Size": 100, "VolumeType": "gp3", "Encrypted": True, "DeletionPolicy": "Retain"},
        },
    ),
    (
        "home volume deleted with the cluster where retention.on_delete is destroy",
        one(P5),
        {"retain_home": False},
        "SharedStorage[1].EbsSettings.DeletionPolicy",
        "Delete",
    ),
    (
        "home volume kept where the file says so, even with on_delete destroy",
        one(P5, top="shared_storage: {home_volume: {deletion_policy: Retain}}"),
        {"retain_home": False},
        "SharedStorage[1].EbsSettings.DeletionPolicy",
        "Retain",
    ),
    (
        "home volume deleted where the file says so",
        one(P5, top="shared_storage: {home_volume: {deletion_policy: Delete}}"),
        {},
        "SharedStorage[1].EbsSettings.DeletionPolicy",
        "Delete",
    ),
    (
        "home volume as a snapshot",
        one(P5, top="shared_storage: {home_volume: {size_gib: 500, deletion_policy: Snapshot}}"),
        {},
        "SharedStorage[1].EbsSettings",
        {"Size": 500, "VolumeType": "gp3", "Encrypted": True, "DeletionPolicy": "Snapshot"},
    ),
    (
        "openzfs home",
        one(P5, top="shared_storage: {home_on_openzfs: true}"),
        {},
        "SharedStorage[1]",
        {
            "Name": "home",
            "MountDir": "/home",
            "StorageType": "FsxOpenZfs",
            "FsxOpenZfsSettings": {"VolumeId": ZFS_VOLUME},
        },
    ),
    (
        "apps volume",
        one(P5, top="shared_storage: {apps: {size_gib: 300, deletion_policy: Retain}}"),
        {},
        "SharedStorage[2]",
        {
            "Name": "apps",
            "MountDir": "/apps",
            "StorageType": "Ebs",
            "EbsSettings": {"Size": 300, "VolumeType": "gp3", "Encrypted": True, "DeletionPolicy": "Retain"},
        },
    ),
    # monitoring
    (
        "monitoring defaults",
        one(P5),
        {},
        "Monitoring",
        {
            "DetailedMonitoring": False,
            "Logs": {"CloudWatch": {"Enabled": True, "RetentionInDays": 365, "DeletionPolicy": "Retain"}},
            "Dashboards": {"CloudWatch": {"Enabled": True}},
            "Alarms": {"Enabled": True},
        },
    ),
    (
        "monitoring choices",
        one(P5, top="monitoring: {logs: false, dashboards: false, alarms: false, detailed_monitoring: true}"),
        {"log_retention_days": 30, "retain_logs": False},
        "Monitoring",
        {
            "DetailedMonitoring": True,
            "Logs": {"CloudWatch": {"Enabled": False, "RetentionInDays": 30, "DeletionPolicy": "Delete"}},
            "Dashboards": {"CloudWatch": {"Enabled": False}},
            "Alarms": {"Enabled": False},
        },
    ),
    (
        "retention rounded up",
        one(P5),
        {"log_retention_days": 1096},
        "Monitoring.Logs.CloudWatch.RetentionInDays",
        1827,
    ),
    # login nodes
    (
        "login nodes",
        one(P5, top="login_nodes: {instance_type: c5.2xlarge, count: 2}"),
        {},
        "LoginNodes",
        {
            "Pools": [
                {
                    "Name": "login",
                    "InstanceType": "c5.2xlarge",
                    "Count": 2,
                    "Networking": {"SubnetIds": [PRIVATE_A], "AdditionalSecurityGroups": [SG]},
                    "Ssh": {"AllowedIps": "10.0.0.0/16"},
                    "CustomActions": {
                        "OnNodeConfigured": {"Sequence": [node_action("login", "docker", "enroot_pyxis")]}
                    },
                    "Iam": {"AdditionalIamPolicies": [{"Policy": SSM}, {"Policy": SCRIPT_POLICY}]},
                }
            ]
        },
    ),
    (
        "internet-facing login nodes",
        one(P5, top="login_nodes: {internet_facing: true}"),
        {},
        "LoginNodes.Pools[0].Networking.SubnetIds",
        [PUBLIC],
    ),
    # tags
    (
        "tags merged",
        one(P5, top="tags: {Team: ml, Project: override}"),
        {"tags": {"Project": "mlcluster", "Environment": "dev"}},
        "Tags",
        [
            {"Key": "Project", "Value": "override"},
            {"Key": "Environment", "Value": "dev"},
            {"Key": "Team", "Value": "ml"},
        ],
    ),
]


@pytest.mark.parametrize(("text", "overrides", "path", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rendered(text: str, overrides: dict[str, Any], path: str, expected: Any) -> None:
    assert get(render(text, **overrides), path) == expected


ABSENT = [
    # (id, pcluster YAML, overrides, path that must not exist)
    ("no key pair", one(P5), {}, "HeadNode.Ssh.KeyName"),
    ("no reservation", one(P5), {}, f"{CR0}.CapacityReservationTarget"),
    ("no layout for a type without accelerators", one("instance_type: c5n.18xlarge"), {}, f"{CR0}.CustomSlurmSettings"),
    ("no database", one(P5), {}, "Scheduling.SlurmSettings.Database"),
    ("no login nodes", one(P5), {}, "LoginNodes"),
    ("no tags", one(P5), {}, "Tags"),
    ("no queue image", one(P5), {}, f"{Q0}.Image"),
    (
        "no node scripts",
        one(P5, top="node_scripts: {docker_enroot_pyxis: false, nccl_efa: false, neuron: false}"),
        {},
        "HeadNode.CustomActions",
    ),
    (
        "no node-script access without node scripts",
        one(
            P5,
            queue="ssm: false",
            top="node_scripts: {docker_enroot_pyxis: false, nccl_efa: false, health_check: false}",
        ),
        {},
        f"{Q0}.Iam",
    ),
    (
        "no health check settings when health_check is off",
        one(P5, top="node_scripts: {health_check: false}"),
        {},
        "Scheduling.SlurmSettings.CustomSlurmSettings",
    ),
    (
        "no login node scripts without docker",
        one(P5, top="login_nodes: {}\nnode_scripts: {docker_enroot_pyxis: false}"),
        {"node_script_policy_arn": None},
        "LoginNodes.Pools[0].CustomActions",
    ),
]


@pytest.mark.parametrize(("text", "overrides", "path"), [c[1:] for c in ABSENT], ids=[c[0] for c in ABSENT])
def test_absent(text: str, overrides: dict[str, Any], path: str) -> None:
    config = render(text, **overrides)
    with pytest.raises((KeyError, IndexError)):
        get(config, path)


def test_archetype_p5_on_odcr() -> None:
    config = render_cluster_config(archetype("p5-odcr"), inputs())
    (queue,) = config["Scheduling"]["SlurmQueues"]
    (resource,) = queue["ComputeResources"]
    assert resource["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0123456789abcdef0"}
    assert resource["Networking"]["PlacementGroup"] == {"Enabled": False}
    assert resource["Efa"] == {"Enabled": True}
    assert (resource["MinCount"], resource["MaxCount"]) == (4, 4)
    assert queue["JobExclusiveAllocation"] is True
    assert [s["MountDir"] for s in config["SharedStorage"]] == ["/fsx", "/home", "/apps"]


def test_archetype_p4de_training_and_g5_inference() -> None:
    config = render_cluster_config(archetype("p4de-g5"), inputs())
    train, infer = config["Scheduling"]["SlurmQueues"]
    assert train["ComputeResources"][0]["CapacityReservationTarget"] == {
        "CapacityReservationResourceGroupArn": GROUP_ARN
    }
    assert train["ComputeResources"][0]["CustomSlurmSettings"] == {
        "Sockets": 2,
        "CoresPerSocket": 24,
        "ThreadsPerCore": 2,
    }
    assert infer["ComputeResources"][0]["CustomSlurmSettings"] == {
        "Sockets": 1,
        "CoresPerSocket": 24,
        "ThreadsPerCore": 2,
    }
    assert train["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"][-2:] == ["nccl_efa", "health_check"]
    g5 = infer["ComputeResources"][0]
    assert (g5["MinCount"], g5["MaxCount"], g5["Efa"], g5["Networking"]["PlacementGroup"]) == (
        0,
        10,
        {"Enabled": False},
        {"Enabled": False},
    )
    assert "nccl_efa" not in infer["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
    assert config["Scheduling"]["SlurmSettings"]["ScaledownIdletime"] == 15
    assert config["LoginNodes"]["Pools"][0]["Count"] == 1


def test_archetype_trn1_with_neuron() -> None:
    config = render_cluster_config(archetype("trn1-neuron"), inputs())
    (queue,) = config["Scheduling"]["SlurmQueues"]
    args = queue["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
    assert args[-4:] == ["docker", "enroot_pyxis", "neuron", "health_check"]
    assert queue["ComputeResources"][0]["Efa"] == {"Enabled": True}
    assert queue["ComputeResources"][0]["Networking"]["PlacementGroup"] == {"Enabled": True}
    assert config["Image"] == {"Os": "ubuntu2204"}
    assert config["HeadNode"]["Ssh"]["KeyName"] == "trn-key"
    assert config["SharedStorage"][1]["FsxOpenZfsSettings"] == {"VolumeId": ZFS_VOLUME}


ERRORS = [
    # (id, pcluster YAML, overrides, fragment of the error)
    (
        "unknown type without threads",
        one("instance_type: c6a.48xlarge\n        efa: false\n        sockets: 2\n        cores_per_socket: 48"),
        {},
        "threads_per_core: c6a.48xlarge is not in the instance-type table",
    ),
    (
        "ssm without the session manager policy",
        one(P5),
        {"session_manager_policy_arn": None},
        "session_manager_policy_arn: Session Manager (ssm) is on",
    ),
    (
        "public head without public subnet",
        one(P5, top="head_node: {subnet: public}"),
        {"public_subnet_id": None},
        "public_subnet_id: the head node",
    ),
    (
        "internet-facing login without public subnet",
        one(P5, top="login_nodes: {internet_facing: true}"),
        {"public_subnet_id": None},
        "public_subnet_id: the login nodes",
    ),
    ("zone without subnet", one(P5, queue="zones: [us-east-1c]"), {}, "no private subnet in zone 'us-east-1c'"),
    (
        "group without arn",
        one(
            P5 + "\n        capacity_reservation_group: pool",
            top="capacity_reservation_groups: [{name: pool, reservation_ids: [cr-0123456789abcdef1]}]",
        ),
        {},
        "reservation_group_arns: no ARN for capacity reservation group 'pool'",
    ),
    (
        "home without volume",
        one(P5, top="shared_storage: {home_on_openzfs: true}"),
        {"openzfs_volume_id": None},
        "openzfs_volume_id",
    ),
    (
        "login without policy",
        one(P5, top="login_nodes: {}"),
        {"node_script_policy_arn": None},
        "node_script_policy_arn",
    ),
    ("bad prefix", one(P5), {"node_script_prefix": "/pcluster"}, "node_script_prefix: '/pcluster'"),
    ("no private subnets", one(P5), {"private_subnets": ()}, "private_subnets"),
    ("no security group", one(P5), {"security_group_ids": ()}, "security_group_ids"),
]


@pytest.mark.parametrize(("text", "overrides", "fragment"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_render_errors_name_the_input(text: str, overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(RenderError) as err:
        render(text, **overrides)
    assert fragment in str(err.value)


def test_zone_labels_by_id() -> None:
    zones = (ZoneSubnet(zone="use1-az4", subnet_id=PRIVATE_A), ZoneSubnet(zone="use1-az6", subnet_id=PRIVATE_B))
    config = render(one(P5 + "\n        efa: false", queue="zones: [use1-az6]"), private_subnets=zones)
    assert get(config, f"{Q0}.Networking.SubnetIds") == [PRIVATE_B]


@pytest.mark.parametrize(("days", "kept"), [(1, 1), (2, 3), (365, 365), (366, 400), (2192, 3653), (9999, 3653)])
def test_log_retention_rounds_up(days: int, kept: int) -> None:
    assert log_retention(days) == kept


HEAD_CHOICES = {"private": "", "public": "head_node: {subnet: public}"}
LOGIN_CHOICES = {"none": "", "internal": "login_nodes: {}", "internet": "login_nodes: {internet_facing: true}"}


@pytest.mark.parametrize("login", sorted(LOGIN_CHOICES))
@pytest.mark.parametrize("head", sorted(HEAD_CHOICES))
def test_every_access_combination_has_a_way_out(head: str, login: str) -> None:
    """Each head-node subnet x login-pool choice: private nodes sit behind NAT, public ones get a public address.

    A node in the public subnet reaches nothing without a public address (the
    subnet maps none unless login nodes face the internet), so the head node
    there must carry ``ElasticIp``; login nodes go public only when asked,
    which is what makes ParallelCluster's load balancer internet-facing.
    """
    text = one(P5, top="\n".join(t for t in (HEAD_CHOICES[head], LOGIN_CHOICES[login]) if t))
    config = render_cluster_config(pcluster(text), inputs())
    networking = config["HeadNode"]["Networking"]
    if head == "public":
        assert networking["SubnetId"] == PUBLIC
        assert networking["ElasticIp"] is True
    else:
        assert networking["SubnetId"] == PRIVATE_A
        assert "ElasticIp" not in networking
    if login == "none":
        assert "LoginNodes" not in config
    else:
        (pool,) = config["LoginNodes"]["Pools"]
        assert pool["Networking"]["SubnetIds"] == [PUBLIC if login == "internet" else PRIVATE_A]
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert PUBLIC not in queue["Networking"]["SubnetIds"]


def test_queues_carry_a_digest_per_file_the_head_node_trusts_the_bucket() -> None:
    """The queue's manifest is in the cluster configuration (written by the deploy), not in the bucket; the head
    node's action has none (ParallelCluster refuses to update it), and fetches the collector's files too."""
    collector = "arn:aws:iam::123456789012:policy/parallelcluster/collector"
    config = render(one(P5), collector_policy_arn=collector, exporters=True)
    head = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"]
    assert head == [
        "--role",
        "head",
        "--source",
        f"s3://{BUCKET}/pcluster/",
        "docker",
        "enroot_pyxis",
        "exporters",
        "collector",
    ]
    queue = get(config, f"{Q0}.CustomActions.OnNodeConfigured.Sequence[0].Args")
    steps = ["docker", "enroot_pyxis", "nccl_efa", "exporters", "health_check"]
    assert queue == ["--role", "compute", "--source", f"s3://{BUCKET}/pcluster/", *manifest(*steps), *steps]
    assert f"exporter_units.sh={node_script_sha256()['exporter_units.sh']}" in queue
    # Without a digest for a file a compute node fetches, nothing is rendered.
    digests = {k: v for k, v in node_script_sha256().items() if k != "docker.sh"}
    with pytest.raises(
        RenderError, match=re.escape("node_script_sha256: no SHA-256 for docker.sh, which the compute nodes")
    ):
        render(one(P5), node_script_sha256=digests)


def test_efa_off_types_reach_the_health_check_step_per_queue() -> None:
    """Every EFA-capable type with EFA off in a queue, once; not a type without EFA, not EFA left on."""
    config = render(
        """
queues:
  - name: train
    compute_resources:
      - {name: a, instance_type: p4de.24xlarge, efa: false}
      - {name: b, instance_type: trn1.32xlarge, efa: false}
      - {name: c, instance_type: p5.48xlarge}
      - {name: d, instance_type: m5.xlarge, efa: false}
  - name: other
    compute_resources:
      - {name: e, instance_type: p5.48xlarge}
"""
    )
    train, other = (
        q["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Args"] for q in config["Scheduling"]["SlurmQueues"]
    )
    at = train.index("--no-efa")
    assert train[at : at + 2] == ["--no-efa", "p4de.24xlarge,trn1.32xlarge"]
    assert train[at + 2 :][-1] == "health_check"  # after the manifest, before the steps
    assert "--no-efa" not in other


MANAGED = ManagedAccounting(
    uri="acct.cluster-x.us-west-2.rds.amazonaws.com:3306",
    user_name="slurmdbd",
    password_secret_arn="arn:aws:secretsmanager:us-west-2:123456789012:secret:slurmdbd-AbCdEf",
    database_name="slurm_acct_db",
    client_security_group_id="sg-0accounting0client",
    policy_arn="arn:aws:iam::123456789012:policy/parallelcluster/accounting-key",
)


def test_the_managed_database_goes_to_slurm_settings_and_the_head_node_alone() -> None:
    config = render(one(P5, top="login_nodes: {instance_type: m5.xlarge}"), accounting=MANAGED)
    assert get(config, "Scheduling.SlurmSettings.Database") == {
        "Uri": MANAGED.uri,
        "UserName": "slurmdbd",
        "PasswordSecretArn": MANAGED.password_secret_arn,
        "DatabaseName": "slurm_acct_db",
    }
    assert get(config, "HeadNode.Networking.AdditionalSecurityGroups") == [SG, MANAGED.client_security_group_id]
    assert {"Policy": MANAGED.policy_arn} in get(config, "HeadNode.Iam.AdditionalIamPolicies")
    others = [*config["Scheduling"]["SlurmQueues"], *config["LoginNodes"]["Pools"]]
    assert len(others) == 2
    for group in others:
        assert MANAGED.client_security_group_id not in str(group), group["Name"]
        assert MANAGED.policy_arn not in str(group), group["Name"]


def test_the_managed_database_and_a_database_of_your_own_exclude_each_other() -> None:
    own = """slurm:
  accounting:
    uri: db.internal:3306
    user_name: slurm
    password_secret_arn: arn:aws:secretsmanager:us-east-1:123456789012:secret:slurmdb"""
    with pytest.raises(RenderError, match="exclude each other"):
        render(one(P5, top=own), accounting=MANAGED)
