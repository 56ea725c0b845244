"""FSx for Lustre for /fsx, linked to S3 by data repository associations (DRAs).

Built on the L1 ``CfnFileSystem`` because the L2 ``LustreFileSystem`` has no
metadata configuration, EFA or log configuration. The rules the service
documents (and the L2 checks) are checked here before anything is created,
with the same helpers the ``storage.lustre`` config section uses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mlcluster.config.storage import (
    DRA_EVENTS,
    DRA_EXPORT_DEFAULT,
    METADATA_IOPS_HELP,
    association_conflicts,
    file_system_path_problem,
    lustre_capacity_problem,
    lustre_throughput_problem,
    metadata_iops_valid,
    prefix_problem,
    s3_path_problem,
)
from mlcluster.constructs.data_bucket import REMOVAL_POLICIES, grant_fsx_data_repository_access
from mlcluster.constructs.deployment_name import deployment_suffix
from mlcluster.constructs.nag import acknowledge_compliance

#: The ports Lustre clients and file servers talk on (LNet on 988, the client's 1018-1023 source ports).
LUSTRE_PORTS = ((988, 988), (1018, 1023))
LOG_LEVELS = ("WARN_ERROR", "WARN_ONLY", "ERROR_ONLY", "DISABLED")
#: FSx only writes to CloudWatch log groups whose names start with this.
LOG_GROUP_PREFIX = "/aws/fsx/"
DAILY_TIME = r"([01]\d|2[0-3]):[0-5]\d"
WEEKLY_TIME = r"[1-7]:([01]\d|2[0-3]):[0-5]\d"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataRepositoryAssociationProps:
    """One link between a directory of the file system and an S3 location (a DRA).

    Default settings: ``/data`` linked to the root of the data bucket; new,
    changed and deleted objects imported automatically and new and changed
    files exported automatically (not deleted ones: a file removed from the
    file system keeps its object in the bucket); file metadata imported once when
    the association is created; files striped in 1024 MiB chunks.

    ``file_system_path`` (absolute, e.g. ``/data``), ``data_repository_path``
    (``s3://bucket/prefix/``; default: the data bucket) and
    ``batch_import_metadata_on_create`` cannot change after creation: a new
    value creates a new association. ``data_bucket_prefix`` (e.g.
    ``datasets/``) narrows the default to a prefix of the data bucket.
    """

    file_system_path: str = "/data"
    data_repository_path: str | None = None
    data_bucket_prefix: str | None = None
    auto_import_events: tuple[str, ...] = DRA_EVENTS
    auto_export_events: tuple[str, ...] = DRA_EXPORT_DEFAULT
    batch_import_metadata_on_create: bool = True
    imported_file_chunk_size_mib: int = 1024


class LustreStorage(Construct):
    """An FSx for Lustre file system in one private subnet, with its S3 links.

    Default settings:
    - PERSISTENT_2 SSD, 1200 GiB, 250 MB/s/TiB, LZ4 compression, Lustre 2.15,
      metadata configuration AUTOMATIC (PERSISTENT_2 only).
    - Encrypted at rest with the FSx service key; ``kms_key`` for your own.
    - Daily automatic backups at 05:00 UTC kept 7 days; weekly maintenance
      Sunday 06:00 UTC.
    - Lustre errors and warnings logged to a log group
      ``/aws/fsx/lustre/<unique id>`` kept one year.
    - The file system has a security group of its own, so membership of the
      nodes' all-traffic group never reaches it. Without EFA the group admits
      Lustre only (TCP 988 and 1018-1023) from itself and from
      ``cluster_security_group`` (the clients) and sends Lustre only to both;
      the client group gets the matching ingress from the file system's
      group. With EFA the group allows all traffic to and from itself and the
      client group, and the client group all traffic from it, as the FSx for
      Lustre guide ("EFA-enabled security groups") requires.
    - One DRA, ``/data`` to the whole ``data_bucket`` (when given), importing
      and exporting new, changed and deleted files. Several DRAs are created
      one after another. For an SSE-KMS data bucket the key policy gets the
      statement FSx needs (see ``grant_fsx_data_repository_access``).
    - Removal policy RETAIN for the file system, its DRAs and its log group.
      Deleting a DRA never deletes S3 data: CloudFormation deletes DRAs with
      ``DeleteDataInFileSystem`` false, and ``CfnDataRepositoryAssociation``
      has no property to change that.

    Attributes: ``resource`` (the ``CfnFileSystem``), ``file_system_id``,
    ``dns_name``, ``mount_name``, ``security_group`` (the one the file system
    uses) and ``security_groups``, ``connections`` (default port 988 only) and
    ``client_ports`` (every port a client needs, both ways: 988 and
    1018-1023, all traffic with EFA),
    ``log_group`` (None when logging is off) and
    ``data_repository_associations`` (the ``CfnDataRepositoryAssociation``
    resources in creation order).

    Construct ids are a public contract: the file system is ``Resource`` and
    each DRA is ``Association<Path>`` after its file system path (``/data``
    gives ``AssociationData``, ``/`` gives ``AssociationRoot``), so adding or
    removing one association never replaces the others.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        cluster_security_group: ec2.ISecurityGroup,
        dedicated_security_group: bool = True,
        deployment_type: Literal["PERSISTENT_2", "PERSISTENT_1"] = "PERSISTENT_2",
        storage_capacity_gib: int = 1200,
        throughput_mbps_per_tib: int = 250,
        data_compression: Literal["LZ4", "NONE"] = "LZ4",
        lustre_version: Literal["2.15", "2.12"] = "2.15",
        metadata_mode: Literal["AUTOMATIC", "USER_PROVISIONED"] | None = None,
        metadata_iops: int | None = None,
        efa_enabled: bool = False,
        kms_key: kms.IKey | None = None,
        automatic_backup_retention_days: int = 7,
        daily_backup_start_time: str = "05:00",
        weekly_maintenance_start_time: str = "7:06:00",
        log_level: Literal["WARN_ERROR", "WARN_ONLY", "ERROR_ONLY", "DISABLED"] = "WARN_ERROR",
        log_group_name: str | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_YEAR,
        data_bucket: s3.IBucket | None = None,
        data_repository_associations: Sequence[DataRepositoryAssociationProps] | None = None,
        association_scope: Construct | None = None,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
    ) -> None:
        """Create the file system, its security group, log group and DRAs.

        :param vpc: the VPC of ``subnet`` (the file system's security group lives there).
        :param subnet: the private subnet for the file system; clients should share its zone.
        :param cluster_security_group: the group cluster nodes (the clients) use; the
            file system's group admits Lustre from it, and it gets Lustre from the file system.
        :param dedicated_security_group: give the file system its own group (default). ``False``
            keeps it in ``cluster_security_group``, as before this default changed: the nodes'
            all-traffic group then reaches it. A file system's groups cannot change without
            replacing it (``SecurityGroupIds`` is create-only), so ``False`` is how an existing
            file system stays in place; a warning says so. Default: true.
        :param deployment_type: PERSISTENT_2 or PERSISTENT_1. Default: PERSISTENT_2.
        :param storage_capacity_gib: 1200, 2400 or a multiple of 2400 (with EFA:
            a multiple of 4800/9600/19200/38400 at 1000/500/250/125 MB/s/TiB). Default: 1200.
        :param throughput_mbps_per_tib: PERSISTENT_2: 125, 250, 500, 1000;
            PERSISTENT_1: 50, 100, 200. Default: 250.
        :param data_compression: LZ4 or NONE. Default: LZ4.
        :param lustre_version: the file system type version. Default: 2.15
            (PERSISTENT_2 requires it, because it always has a metadata configuration).
        :param metadata_mode: AUTOMATIC or USER_PROVISIONED, PERSISTENT_2 only.
            Default: AUTOMATIC on PERSISTENT_2, none on PERSISTENT_1.
        :param metadata_iops: Metadata IOPS with USER_PROVISIONED: 1500, 3000,
            6000, or a multiple of 12000 up to 192000. Default: none.
        :param efa_enabled: EFA and GPUDirect Storage support (PERSISTENT_2,
            fixed at creation; the security groups then allow all traffic
            between the file system and its clients). Default: false.
        :param kms_key: the key that encrypts the file system. Default: the FSx service key.
        :param automatic_backup_retention_days: 0 (off) to 90. Default: 7.
        :param daily_backup_start_time: HH:MM UTC. Default: 05:00.
        :param weekly_maintenance_start_time: D:HH:MM UTC, 1 = Monday. Default: 7:06:00.
        :param log_level: WARN_ERROR, WARN_ONLY, ERROR_ONLY or DISABLED. Default: WARN_ERROR.
        :param log_group_name: the log group's name, starting with ``/aws/fsx/``.
            Default: ``/aws/fsx/lustre/<unique id>``.
        :param log_retention: how long Lustre logs are kept. Default: one year.
        :param data_bucket: the bucket DRAs link to by default. Default: none.
        :param data_repository_associations: the DRAs, at most 8. Default: one
            at ``/data`` to ``data_bucket`` if given, else none.
        :param association_scope: where the DRAs are made, e.g. a construct in a
            stack of their own, so that what needs only the file system does not
            wait for their (possibly hours-long) batch imports. Default: this construct.
        :param removal_policy: RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY. Default: RETAIN.
        """
        super().__init__(scope, construct_id)
        if data_repository_associations is None:
            data_repository_associations = (DataRepositoryAssociationProps(),) if data_bucket is not None else ()
        associations = list(data_repository_associations)
        mode = metadata_mode if deployment_type == "PERSISTENT_1" else (metadata_mode or "AUTOMATIC")
        problems = _check_file_system(
            deployment_type=deployment_type,
            storage_capacity_gib=storage_capacity_gib,
            throughput=throughput_mbps_per_tib,
            data_compression=data_compression,
            lustre_version=lustre_version,
            metadata_mode=mode,
            metadata_iops=metadata_iops,
            efa_enabled=efa_enabled,
            automatic_backup_retention_days=automatic_backup_retention_days,
            daily_backup_start_time=daily_backup_start_time,
            weekly_maintenance_start_time=weekly_maintenance_start_time,
            log_level=log_level,
            log_group_name=log_group_name,
            removal_policy=removal_policy,
        )
        repository_paths = _repository_paths(associations, data_bucket, problems)
        bucket_name = data_bucket.bucket_name if data_bucket is not None else None
        bucket_token = bucket_name if bucket_name is not None and cdk.Token.is_unresolved(bucket_name) else None
        problems += _check_associations(associations, repository_paths, bucket_token)
        uses_data_bucket = any(a.data_repository_path is None for a in associations)
        bucket_key = data_bucket.encryption_key if data_bucket is not None and uses_data_bucket else None
        if kms_key is not None and kms_key is bucket_key and isinstance(kms_key, kms.Key):
            problems.append(
                "kms_key: the data bucket's own key cannot also encrypt the file system; its policy must name "
                "the file system, which would need the key first (a dependency cycle); give the file system "
                "another key or none"
            )
        if problems:
            raise ValueError("LustreStorage: " + "; ".join(problems))

        self.security_group: ec2.ISecurityGroup = cluster_security_group
        if dedicated_security_group:
            self.security_group = self._security_group(vpc, cluster_security_group, efa=efa_enabled)
        else:
            warn_shared_group(self, "FSx for Lustre")
        self.security_groups: list[ec2.ISecurityGroup] = [self.security_group]
        self.connections = ec2.Connections(
            security_groups=self.security_groups, default_port=ec2.Port.tcp(LUSTRE_PORTS[0][0])
        )
        #: What clients and file servers talk on: Lustre's two port ranges, or all traffic with EFA. ``connections``'
        #: default port is 988 alone (a ``Port`` holds one range): other clients need every one of these, both
        #: ways (see the constructs guide for the calls, made from the clients' side).
        self.client_ports: list[ec2.Port] = (
            [ec2.Port.all_traffic()] if efa_enabled else [_port(low, high) for low, high in LUSTRE_PORTS]
        )

        self.log_group: logs.LogGroup | None = None
        log_configuration = fsx.CfnFileSystem.LogConfigurationProperty(level=log_level)
        if log_level != "DISABLED":
            # Retained with the file system's data: a fixed name would make a redeploy after a teardown
            # fail with "already exists" (deployment_name.py).
            name = log_group_name or f"{LOG_GROUP_PREFIX}lustre/{cdk.Names.unique_id(self)}-{deployment_suffix()}"
            self.log_group = logs.LogGroup(
                self, "LogGroup", log_group_name=name, retention=log_retention, removal_policy=removal_policy
            )
            # FSx wants the log group ARN without the ':*' suffix the L2 adds.
            destination = cdk.Stack.of(self).format_arn(
                service="logs",
                resource="log-group",
                resource_name=name,
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
            log_configuration = fsx.CfnFileSystem.LogConfigurationProperty(level=log_level, destination=destination)

        persistent_2 = deployment_type == "PERSISTENT_2"
        self.resource = fsx.CfnFileSystem(
            self,
            "Resource",
            file_system_type="LUSTRE",
            file_system_type_version=lustre_version,
            storage_type="SSD",
            storage_capacity=storage_capacity_gib,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[group.security_group_id for group in self.security_groups],
            kms_key_id=kms_key.key_arn if kms_key is not None else None,
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type=deployment_type,
                per_unit_storage_throughput=throughput_mbps_per_tib,
                data_compression_type=data_compression,
                automatic_backup_retention_days=automatic_backup_retention_days,
                daily_automatic_backup_start_time=daily_backup_start_time if automatic_backup_retention_days else None,
                weekly_maintenance_start_time=weekly_maintenance_start_time,
                metadata_configuration=(
                    fsx.CfnFileSystem.MetadataConfigurationProperty(mode=mode or "AUTOMATIC", iops=metadata_iops)
                    if persistent_2
                    else None
                ),
                efa_enabled=True if efa_enabled else None,
                log_configuration=log_configuration,
            ),
        )
        self.resource.apply_removal_policy(removal_policy)
        cdk.Tags.of(self.resource).add("Name", cdk.Names.unique_id(self))
        if self.log_group is not None:
            # The ARN above is a string, not a reference: FSx fails if the group does not exist yet.
            self.resource.node.add_dependency(self.log_group)

        after: list[Construct] = []
        if bucket_key is not None and data_bucket is not None:
            if grant_fsx_data_repository_access(data_bucket, self.resource.ref):
                if isinstance(bucket_key, Construct):
                    after.append(bucket_key)
            else:
                cdk.Annotations.of(self).add_warning_v2(
                    "mlcluster:lustre-imported-bucket-key",
                    "The data bucket's KMS key is imported, so its key policy cannot be changed here. Add the "
                    "statement FSx documents for SSE-KMS buckets (principal AWSServiceRoleForFSxS3Access_<file "
                    "system id>) to that key's policy, or the DRAs cannot read or write objects.",
                )
        self.data_repository_associations = self._associations(
            association_scope or self, associations, repository_paths, removal_policy, after
        )

    @property
    def file_system_id(self) -> str:
        """The file system ID (``fs-...``)."""
        return self.resource.ref

    @property
    def dns_name(self) -> str:
        """The DNS name clients mount."""
        return self.resource.attr_dns_name

    @property
    def mount_name(self) -> str:
        """The Lustre mount name (``mount -t lustre <dns_name>@tcp:/<mount_name> /fsx``)."""
        return self.resource.attr_lustre_mount_name

    def _security_group(self, vpc: ec2.IVpc, client_group: ec2.ISecurityGroup, *, efa: bool) -> ec2.SecurityGroup:
        """The file system's own group, and the client group's ingress from it.

        The client-side rule is a resource of this construct (not of the client
        group's stack), so the network stack never refers to storage.
        """
        group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=(
                "mlcluster FSx for Lustre (EFA): all traffic with cluster nodes and itself"
                if efa
                else "mlcluster FSx for Lustre: Lustre (TCP 988, 1018-1023) with cluster nodes and itself"
            ),
            allow_all_outbound=False,
            disable_inline_rules=True,
        )
        ports = [ec2.Port.all_traffic()] if efa else [_port(low, high) for low, high in LUSTRE_PORTS]
        what = "EFA Lustre" if efa else "Lustre"
        for index, port in enumerate(ports):
            group.add_ingress_rule(group, port, f"{what} between the file servers")
            group.add_ingress_rule(client_group, port, f"{what} from cluster nodes")
            group.add_egress_rule(group, port, f"{what} between the file servers")
            group.add_egress_rule(client_group, port, f"{what} to cluster nodes")
            rule_json = port.to_rule_json()
            rule = ec2.CfnSecurityGroupIngress(
                self,
                f"ClientIngress{index + 1}",
                group_id=client_group.security_group_id,
                source_security_group_id=group.security_group_id,
                description=f"{what} from the file system to cluster nodes",
                ip_protocol=str(rule_json["ipProtocol"]),
                from_port=rule_json.get("fromPort"),
                to_port=rule_json.get("toPort"),
            )
            if efa:
                acknowledge_compliance(
                    rule,
                    "EC2RestrictedCommonPorts",
                    "The source is the EFA-enabled Lustre file system's own security group, not an address "
                    "range; the FSx for Lustre guide requires all traffic from it to the client group.",
                )
        deny_default_egress(group)
        if efa:
            acknowledge_compliance(
                group,
                "EC2RestrictedCommonPorts",
                "The sources are this file system's group and the cluster nodes' group, not address ranges; the "
                "FSx for Lustre guide requires all traffic between them for EFA.",
            )
        return group

    def _associations(
        self,
        scope: Construct,
        associations: list[DataRepositoryAssociationProps],
        repository_paths: list[str],
        removal_policy: cdk.RemovalPolicy,
        after: list[Construct],
    ) -> list[fsx.CfnDataRepositoryAssociation]:
        """One DRA per entry, each waiting for the previous one (parallel creation has failed)."""
        created: list[fsx.CfnDataRepositoryAssociation] = []
        for spec, path in zip(associations, repository_paths, strict=True):
            s3_config = None
            if spec.auto_import_events or spec.auto_export_events:
                s3_config = fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=(
                        fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=list(spec.auto_import_events))
                        if spec.auto_import_events
                        else None
                    ),
                    auto_export_policy=(
                        fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=list(spec.auto_export_events))
                        if spec.auto_export_events
                        else None
                    ),
                )
            association = fsx.CfnDataRepositoryAssociation(
                scope,
                "Association" + association_label(spec.file_system_path),
                file_system_id=self.resource.ref,
                file_system_path=spec.file_system_path,
                data_repository_path=path,
                batch_import_meta_data_on_create=spec.batch_import_metadata_on_create,
                imported_file_chunk_size=spec.imported_file_chunk_size_mib,
                s3=s3_config,
            )
            association.apply_removal_policy(removal_policy)
            for dependency in [*created[-1:], *after]:
                association.node.add_dependency(dependency)
            created.append(association)
        return created


def warn_shared_group(scope: Construct, what: str) -> None:
    """The synth warning for a file system left in the nodes' all-traffic group."""
    cdk.Annotations.of(scope).add_warning_v2(
        "mlcluster:file-system-in-node-group",
        f"{what} is in the cluster nodes' security group (security_group: cluster): anything that joins that "
        "group reaches it on every port. Use security_group: dedicated; for a file system that exists, that "
        "replaces it (SecurityGroupIds cannot change in place): back it up or export its data first.",
    )


def deny_default_egress(group: ec2.SecurityGroup) -> None:
    """Keep EC2's default allow-all egress off a group whose egress rules are all separate resources.

    EC2 removes the default rule only when the group's own ``SecurityGroupEgress``
    lists a rule, and CDK drops its placeholder as soon as any egress rule is
    added, even one it writes as a separate resource (self references, other
    stacks). The placeholder below matches no traffic.
    """
    resource = group.node.default_child
    assert isinstance(resource, ec2.CfnSecurityGroup)
    resource.add_property_override(
        "SecurityGroupEgress",
        [
            {
                "CidrIp": "255.255.255.255/32",
                "Description": "Disallow all traffic",
                "IpProtocol": "icmp",
                "FromPort": 252,
                "ToPort": 86,
            }
        ],
    )


def _port(low: int, high: int) -> ec2.Port:
    return ec2.Port.tcp(low) if low == high else ec2.Port.tcp_range(low, high)


def association_label(file_system_path: str) -> str:
    """The construct-id suffix of the DRA at ``file_system_path``: ``/ml-data/v2`` gives ``MlDataV2``."""
    parts = [part for part in re.split(r"[^A-Za-z0-9]+", file_system_path) if part]
    return "".join(part[:1].upper() + part[1:] for part in parts) or "Root"


def _repository_paths(
    associations: list[DataRepositoryAssociationProps], data_bucket: s3.IBucket | None, problems: list[str]
) -> list[str]:
    """Each DRA's S3 path, the data bucket's when none is given (problems noted as found)."""
    paths: list[str] = []
    for index, spec in enumerate(associations):
        where = f"data_repository_associations[{index}]"
        if spec.data_repository_path is not None:
            if spec.data_bucket_prefix is not None:
                problems.append(
                    f"{where}.data_bucket_prefix: {spec.data_bucket_prefix!r} cannot be combined with "
                    "data_repository_path; give one of them"
                )
            paths.append(spec.data_repository_path)
            continue
        if data_bucket is None:
            problems.append(
                f"{where}.data_repository_path: none given and no data_bucket to default to; "
                "give an s3:// path or pass data_bucket"
            )
            paths.append("")
            continue
        paths.append(f"s3://{data_bucket.bucket_name}/{spec.data_bucket_prefix or ''}")
    return paths


def _check_associations(
    associations: list[DataRepositoryAssociationProps], repository_paths: list[str], bucket_token: str | None
) -> list[str]:
    """Every DRA problem, each naming the association, the value and what is allowed.

    ``bucket_token`` (the data bucket's name, often a token) is shown as
    ``<data bucket>`` in messages.
    """
    problems: list[str] = []
    labels: dict[str, int] = {}
    for index, spec in enumerate(associations):
        where = f"data_repository_associations[{index}]"
        path = spec.file_system_path
        if not cdk.Token.is_unresolved(path):
            problem = file_system_path_problem(path)
            if problem is not None:
                problems.append(f"{where}.file_system_path: {path!r} is not valid; {problem}")
            label = association_label(path)
            if label in labels:
                problems.append(
                    f"{where}.file_system_path: {path!r} gives the same construct id 'Association{label}' as "
                    f"association {labels[label]}; rename one of the directories"
                )
            labels.setdefault(label, index)
        repository = spec.data_repository_path
        if repository is not None and not cdk.Token.is_unresolved(repository):
            problem = s3_path_problem(repository)
            if problem is not None:
                problems.append(f"{where}.data_repository_path: {repository!r} is not valid; {problem}")
        prefix = spec.data_bucket_prefix
        if prefix is not None and (problem := prefix_problem(prefix)) is not None:
            problems.append(f"{where}.data_bucket_prefix: {prefix!r} is not valid; {problem}")
        for key in ("auto_import_events", "auto_export_events"):
            events = list(getattr(spec, key))
            if any(e not in DRA_EVENTS for e in events) or len(set(events)) != len(events):
                problems.append(
                    f"{where}.{key}: {events} is not allowed; use each of {', '.join(DRA_EVENTS)} at most once "
                    "(an empty list turns the policy off)"
                )
        size = spec.imported_file_chunk_size_mib
        if not 1 <= size <= 512000:
            problems.append(f"{where}.imported_file_chunk_size_mib: {size} is not allowed; use 1 to 512000 MiB")
    checkable = [p for p in repository_paths if p]
    if len(checkable) == len(associations):
        for index, key, value, message in association_conflicts(
            [a.file_system_path for a in associations], repository_paths
        ):
            where = f"data_repository_associations[{index}].{key}" if key else "data_repository_associations"
            text = f"{where}: {value!r} is not allowed; {message}"
            problems.append(text.replace(bucket_token, "<data bucket>") if bucket_token else text)
    return problems


def _check_file_system(
    *,
    deployment_type: str,
    storage_capacity_gib: int,
    throughput: int,
    data_compression: str,
    lustre_version: str,
    metadata_mode: str | None,
    metadata_iops: int | None,
    efa_enabled: bool,
    automatic_backup_retention_days: int,
    daily_backup_start_time: str,
    weekly_maintenance_start_time: str,
    log_level: str,
    log_group_name: str | None,
    removal_policy: cdk.RemovalPolicy,
) -> list[str]:
    """Every file system problem, each naming the prop, the value and what is allowed."""
    problems: list[str] = []

    def bad(prop: str, value: object, allowed: str) -> None:
        problems.append(f"{prop}: {value!r} is not allowed; {allowed}")

    if deployment_type not in ("PERSISTENT_2", "PERSISTENT_1"):
        bad("deployment_type", deployment_type, "use 'PERSISTENT_2' or 'PERSISTENT_1'")
        return problems
    persistent_2 = deployment_type == "PERSISTENT_2"
    if (problem := lustre_throughput_problem(deployment_type, throughput)) is not None:
        bad("throughput_mbps_per_tib", throughput, problem)
    problem = lustre_capacity_problem(
        storage_capacity_gib, deployment_type=deployment_type, throughput=throughput, efa_enabled=efa_enabled
    )
    if problem is not None:
        bad("storage_capacity_gib", storage_capacity_gib, problem)
    if data_compression not in ("LZ4", "NONE"):
        bad("data_compression", data_compression, "use 'LZ4' or 'NONE'")
    if lustre_version not in ("2.15", "2.12"):
        bad("lustre_version", lustre_version, "use '2.15' or '2.12'")
    elif persistent_2 and lustre_version != "2.15":
        bad("lustre_version", lustre_version, "PERSISTENT_2 has a metadata configuration, which needs '2.15'")
    if metadata_mode not in (None, "AUTOMATIC", "USER_PROVISIONED"):
        bad("metadata_mode", metadata_mode, "use 'AUTOMATIC' or 'USER_PROVISIONED'")
    elif not persistent_2 and (metadata_mode is not None or metadata_iops is not None):
        bad("metadata_mode", metadata_mode, "PERSISTENT_1 has no metadata configuration; leave metadata_* unset")
    elif metadata_mode == "USER_PROVISIONED" and (metadata_iops is None or not metadata_iops_valid(metadata_iops)):
        bad("metadata_iops", metadata_iops, "required with USER_PROVISIONED; " + METADATA_IOPS_HELP)
    elif metadata_mode == "AUTOMATIC" and metadata_iops is not None:
        bad("metadata_iops", metadata_iops, "only used with metadata_mode='USER_PROVISIONED'")
    if efa_enabled and not persistent_2:
        bad("efa_enabled", True, "EFA needs deployment_type 'PERSISTENT_2' with a metadata configuration")
    if not 0 <= automatic_backup_retention_days <= 90:
        bad("automatic_backup_retention_days", automatic_backup_retention_days, "use 0 (off) to 90 days")
    if not re.fullmatch(DAILY_TIME, daily_backup_start_time):
        bad("daily_backup_start_time", daily_backup_start_time, "use HH:MM in UTC, such as '05:00'")
    if not re.fullmatch(WEEKLY_TIME, weekly_maintenance_start_time):
        bad("weekly_maintenance_start_time", weekly_maintenance_start_time, "use D:HH:MM in UTC (1 = Monday)")
    if log_level not in LOG_LEVELS:
        bad("log_level", log_level, "use one of " + ", ".join(LOG_LEVELS))
    if log_group_name is not None:
        if log_level == "DISABLED":
            bad("log_group_name", log_group_name, "not used with log_level 'DISABLED'; drop it")
        elif not cdk.Token.is_unresolved(log_group_name) and not log_group_name.startswith(LOG_GROUP_PREFIX):
            bad("log_group_name", log_group_name, f"FSx only logs to groups named {LOG_GROUP_PREFIX}...")
    if removal_policy not in REMOVAL_POLICIES:
        bad("removal_policy", str(removal_policy), "use RemovalPolicy.RETAIN, RETAIN_ON_UPDATE_OR_DELETE or DESTROY")
    return problems
