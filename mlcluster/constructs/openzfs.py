"""FSx for OpenZFS for /home: users' home directories shared over NFS by every node."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from constructs import Construct

from mlcluster.config.storage import OPENZFS_THROUGHPUT_MBPS, openzfs_throughput_problem
from mlcluster.constructs.data_bucket import REMOVAL_POLICIES
from mlcluster.constructs.lustre import DAILY_TIME, WEEKLY_TIME, deny_default_egress, warn_shared_group

#: NFS ports FSx for OpenZFS serves on, over TCP and UDP (portmapper, nfsd, mountd/lockd/statd).
NFS_PORTS = ((111, 111), (2049, 2049), (20001, 20003))
#: OpenZFS root volume compression algorithms.
COMPRESSIONS = ("LZ4", "ZSTD", "NONE")
#: FSx allows at most this many client configurations per NFS export.
MAX_NFS_CLIENTS = 25
#: Export options: read-write; snapshots visible under .zfs; root on the nodes stays root, because
#: node set-up scripts create and chown each user's home directory as root.
DEFAULT_NFS_EXPORT_OPTIONS = ("rw", "crossmnt", "no_root_squash")


class OpenZfsHome(Construct):
    """An FSx for OpenZFS file system whose root volume holds /home.

    Default settings:
    - SINGLE_AZ_HA_2 (a standby file server in the same zone; offered in far
      more regions than SINGLE_AZ_HA_1), 512 GiB SSD, 320 MB/s, LZ4
      compression on the root volume.
    - The root volume is exported over NFS only to ``nfs_client_cidrs`` (the
      CIDR blocks of the subnets the cluster's nodes use, not the whole VPC),
      read-write with ``crossmnt`` and ``no_root_squash``; never to ``*``.
    - Encrypted at rest with the FSx service key; ``kms_key`` for your own.
    - Daily automatic backups at 05:00 UTC kept 7 days, tags copied to
      backups and volumes; weekly maintenance Sunday 06:00 UTC.
    - The file system has a security group of its own that admits NFS (TCP
      and UDP 111, 2049, 20001-20003) from ``cluster_security_group`` only and
      sends only to it, so root on any other instance in the VPC neither
      reaches the export by address nor by joining the nodes' group.
    - Removal policy RETAIN. With DESTROY the file system is deleted even
      if users made child volumes or snapshots.

    Attributes: ``resource`` (the ``CfnFileSystem``, id ``Resource``),
    ``file_system_id``, ``dns_name``, ``root_volume_id``, ``security_group``
    and ``security_groups``, ``connections`` (NFS port 2049).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        cluster_security_group: ec2.ISecurityGroup,
        nfs_client_cidrs: Sequence[str],
        dedicated_security_group: bool = True,
        deployment_type: Literal[
            "SINGLE_AZ_HA_2", "SINGLE_AZ_HA_1", "SINGLE_AZ_2", "SINGLE_AZ_1", "MULTI_AZ_1"
        ] = "SINGLE_AZ_HA_2",
        standby_subnet: ec2.ISubnet | None = None,
        route_table_ids: Sequence[str] | None = None,
        storage_capacity_gib: int = 512,
        throughput_capacity_mbps: int = 320,
        data_compression: Literal["LZ4", "ZSTD", "NONE"] = "LZ4",
        nfs_export_options: Sequence[str] = DEFAULT_NFS_EXPORT_OPTIONS,
        kms_key: kms.IKey | None = None,
        automatic_backup_retention_days: int = 7,
        daily_backup_start_time: str = "05:00",
        weekly_maintenance_start_time: str = "7:06:00",
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the file system and its security group.

        :param vpc: the VPC of ``subnet`` (the file system's security group lives there).
        :param subnet: the private subnet of the (preferred) file server.
        :param cluster_security_group: the group cluster nodes use; the only source NFS is admitted from.
        :param nfs_client_cidrs: IPv4 CIDR blocks that may mount /home (1 to 25): the
            cluster nodes' subnets.
        :param dedicated_security_group: give the file system its own group admitting NFS from
            ``cluster_security_group`` only (default). ``False`` keeps it in that group, as before
            this default changed, so an existing file system is not replaced; a warning says so.
        :param deployment_type: SINGLE_AZ_HA_2, SINGLE_AZ_HA_1, SINGLE_AZ_2,
            SINGLE_AZ_1 or MULTI_AZ_1. Default: SINGLE_AZ_HA_2.
        :param standby_subnet: MULTI_AZ_1 only: the standby file server's subnet
            (another zone). Default: none.
        :param route_table_ids: MULTI_AZ_1 only: route tables of the clients'
            subnets, where FSx adds the endpoint route. Default: the route tables
            of ``subnet`` and ``standby_subnet``.
        :param storage_capacity_gib: 64 to 524288. Default: 512.
        :param throughput_capacity_mbps: SINGLE_AZ_1, SINGLE_AZ_HA_1: 64, 128,
            256, 512, 1024, 2048, 3072, 4096; SINGLE_AZ_2, SINGLE_AZ_HA_2,
            MULTI_AZ_1: 160, 320, 640, 1280, 2560, 3840, 5120, 7680, 10240. Default: 320.
        :param data_compression: LZ4, ZSTD or NONE. Default: LZ4.
        :param nfs_export_options: NFS export options (exports(5)). Default:
            rw, crossmnt, no_root_squash.
        :param kms_key: the key that encrypts the file system. Default: the FSx service key.
        :param automatic_backup_retention_days: 0 (off) to 90. Default: 7.
        :param daily_backup_start_time: HH:MM UTC. Default: 05:00.
        :param weekly_maintenance_start_time: D:HH:MM UTC, 1 = Monday. Default: 7:06:00.
        :param removal_policy: RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY. Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        multi_az = deployment_type == "MULTI_AZ_1"
        problems = _check_props(
            deployment_type=deployment_type,
            multi_az=multi_az,
            standby_subnet=standby_subnet,
            route_table_ids=route_table_ids,
            nfs_client_cidrs=nfs_client_cidrs,
            storage_capacity_gib=storage_capacity_gib,
            throughput_capacity_mbps=throughput_capacity_mbps,
            data_compression=data_compression,
            nfs_export_options=nfs_export_options,
            automatic_backup_retention_days=automatic_backup_retention_days,
            daily_backup_start_time=daily_backup_start_time,
            weekly_maintenance_start_time=weekly_maintenance_start_time,
            removal_policy=removal_policy,
        )
        if problems:
            raise ValueError("OpenZfsHome: " + "; ".join(problems))

        self.security_group: ec2.ISecurityGroup = cluster_security_group
        if dedicated_security_group:
            self.security_group = _nfs_security_group(self, vpc, cluster_security_group)
        else:
            warn_shared_group(self, "FSx for OpenZFS (/home)")
        self.security_groups: list[ec2.ISecurityGroup] = [self.security_group]
        self.connections = ec2.Connections(security_groups=self.security_groups, default_port=ec2.Port.tcp(2049))

        subnets = [subnet, standby_subnet] if multi_az and standby_subnet is not None else [subnet]
        if multi_az and route_table_ids is None:
            route_table_ids = [s.route_table.route_table_id for s in subnets]
        exports = fsx.CfnFileSystem.NfsExportsProperty(
            client_configurations=[
                fsx.CfnFileSystem.ClientConfigurationsProperty(clients=cidr, options=list(nfs_export_options))
                for cidr in nfs_client_cidrs
            ]
        )
        destroy = removal_policy == cdk.RemovalPolicy.DESTROY
        self.resource = fsx.CfnFileSystem(
            self,
            "Resource",
            file_system_type="OPENZFS",
            storage_type="SSD",
            storage_capacity=storage_capacity_gib,
            subnet_ids=[s.subnet_id for s in subnets],
            security_group_ids=[group.security_group_id for group in self.security_groups],
            kms_key_id=kms_key.key_arn if kms_key is not None else None,
            open_zfs_configuration=fsx.CfnFileSystem.OpenZFSConfigurationProperty(
                deployment_type=deployment_type,
                throughput_capacity=throughput_capacity_mbps,
                automatic_backup_retention_days=automatic_backup_retention_days,
                daily_automatic_backup_start_time=daily_backup_start_time if automatic_backup_retention_days else None,
                weekly_maintenance_start_time=weekly_maintenance_start_time,
                copy_tags_to_backups=True,
                copy_tags_to_volumes=True,
                preferred_subnet_id=subnet.subnet_id if multi_az else None,
                route_table_ids=list(route_table_ids) if multi_az and route_table_ids is not None else None,
                options=["DELETE_CHILD_VOLUMES_AND_SNAPSHOTS"] if destroy else None,
                root_volume_configuration=fsx.CfnFileSystem.RootVolumeConfigurationProperty(
                    data_compression_type=data_compression,
                    copy_tags_to_snapshots=True,
                    nfs_exports=[exports],
                ),
            ),
        )
        self.resource.apply_removal_policy(removal_policy)
        cdk.Tags.of(self.resource).add("Name", cdk.Names.unique_id(self))

    @property
    def file_system_id(self) -> str:
        """The file system ID (``fs-...``)."""
        return self.resource.ref

    @property
    def dns_name(self) -> str:
        """The DNS name clients mount (``mount -t nfs -o nfsvers=4.1 <dns_name>:/fsx/ /home``)."""
        return self.resource.attr_dns_name

    @property
    def root_volume_id(self) -> str:
        """The root volume's ID (``fsvol-...``)."""
        return self.resource.attr_root_volume_id


def _nfs_security_group(
    scope: Construct, vpc: ec2.IVpc, cluster_security_group: ec2.ISecurityGroup
) -> ec2.SecurityGroup:
    """A group admitting NFS from the cluster group only, and sending only to it (NFS callbacks)."""
    group = ec2.SecurityGroup(
        scope,
        "SecurityGroup",
        vpc=vpc,
        description="mlcluster FSx for OpenZFS /home: NFS from cluster nodes only",
        allow_all_outbound=False,
        disable_inline_rules=True,
    )
    for low, high in NFS_PORTS:
        for port in (ec2.Port.tcp_range(low, high), ec2.Port.udp_range(low, high)):
            group.add_ingress_rule(cluster_security_group, port, "NFS from cluster nodes")
    group.add_egress_rule(cluster_security_group, ec2.Port.all_traffic(), "NFS replies and callbacks to cluster nodes")
    deny_default_egress(group)
    return group


def _check_props(
    *,
    deployment_type: str,
    multi_az: bool,
    standby_subnet: ec2.ISubnet | None,
    route_table_ids: Sequence[str] | None,
    nfs_client_cidrs: Sequence[str],
    storage_capacity_gib: int,
    throughput_capacity_mbps: int,
    data_compression: str,
    nfs_export_options: Sequence[str],
    automatic_backup_retention_days: int,
    daily_backup_start_time: str,
    weekly_maintenance_start_time: str,
    removal_policy: cdk.RemovalPolicy,
) -> list[str]:
    """Every problem at once, each naming the prop, the value and what is allowed."""
    problems: list[str] = []

    def bad(prop: str, value: object, allowed: str) -> None:
        problems.append(f"{prop}: {value!r} is not allowed; {allowed}")

    if deployment_type not in OPENZFS_THROUGHPUT_MBPS:
        bad("deployment_type", deployment_type, "use one of " + ", ".join(OPENZFS_THROUGHPUT_MBPS))
    elif (problem := openzfs_throughput_problem(deployment_type, throughput_capacity_mbps)) is not None:
        bad("throughput_capacity_mbps", throughput_capacity_mbps, problem)
    if multi_az and standby_subnet is None:
        bad("standby_subnet", None, "MULTI_AZ_1 needs a standby subnet in another zone")
    if not multi_az and standby_subnet is not None:
        bad("standby_subnet", standby_subnet.subnet_id, f"only used with MULTI_AZ_1, not {deployment_type}; drop it")
    if not multi_az and route_table_ids is not None:
        bad("route_table_ids", list(route_table_ids), f"only used with MULTI_AZ_1, not {deployment_type}; drop them")
    if not 1 <= len(nfs_client_cidrs) <= MAX_NFS_CLIENTS:
        bad("nfs_client_cidrs", list(nfs_client_cidrs), f"give 1 to {MAX_NFS_CLIENTS} CIDR blocks: the nodes' subnets")
    for cidr in nfs_client_cidrs:
        if cdk.Token.is_unresolved(cidr):
            continue
        try:
            network = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            bad("nfs_client_cidrs", cidr, "use IPv4 CIDR blocks such as '10.0.0.0/16' (never '*')")
            continue
        if network.prefixlen == 0:
            bad("nfs_client_cidrs", cidr, "exporting /home to every address is not allowed; use the nodes' subnets")
    if not 64 <= storage_capacity_gib <= 524288:
        bad("storage_capacity_gib", storage_capacity_gib, "use 64 to 524288 GiB")
    if data_compression not in COMPRESSIONS:
        bad("data_compression", data_compression, "use one of " + ", ".join(COMPRESSIONS))
    if not nfs_export_options or any(not re.fullmatch(r"[a-z_]+(=[\w.:/-]+)?", o) for o in nfs_export_options):
        bad("nfs_export_options", list(nfs_export_options), "give exports(5) options such as 'rw', 'crossmnt'")
    if not 0 <= automatic_backup_retention_days <= 90:
        bad("automatic_backup_retention_days", automatic_backup_retention_days, "use 0 (off) to 90 days")
    if not re.fullmatch(DAILY_TIME, daily_backup_start_time):
        bad("daily_backup_start_time", daily_backup_start_time, "use HH:MM in UTC, such as '05:00'")
    if not re.fullmatch(WEEKLY_TIME, weekly_maintenance_start_time):
        bad("weekly_maintenance_start_time", weekly_maintenance_start_time, "use D:HH:MM in UTC (1 = Monday)")
    if removal_policy not in REMOVAL_POLICIES:
        bad("removal_policy", str(removal_policy), "use RemovalPolicy.RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY")
    return problems
