"""The ``storage:`` section: data bucket, FSx for Lustre with DRAs, optional OpenZFS /home.

Service limits checked here are the ones the FSx and S3 APIs document. The
rule helpers below are shared with the constructs in
``mlcluster.constructs`` so a value the config accepts is one the construct
accepts, and users who build the constructs directly get the same checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from mlcluster.config.schema import Issues, section, setting

KMS_KEY_ARN = r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}|arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:alias/.+"
KMS_HELP = "allowed: a KMS key ARN (arn:aws:kms:<region>:<account>:key/<uuid>) or alias ARN"
BUCKET_NAME = (
    r"(?!xn--)(?!sthree-)(?!amzn-s3-demo-)(?!.*\.\.)(?!.*-s3alias$)(?!.*--ol-s3$)(?!.*--x-s3$)"
    r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
)
BUCKET_HELP = (
    "allowed: 3-63 characters of lowercase letters, digits, '.' and '-', starting and ending "
    "with a letter or digit, no '..', not formatted as an IP address, no reserved prefix or suffix"
)
EVENTS = Literal["NEW", "CHANGED", "DELETED"]

#: The file events a DRA can import or export automatically.
DRA_EVENTS = ("NEW", "CHANGED", "DELETED")
#: What a DRA exports by default: not ``DELETED``, so a file removed on the file system ('rm -rf'
#: included) does not delete its object in the bucket, the file system's only second copy.
DRA_EXPORT_DEFAULT = ("NEW", "CHANGED")
#: FSx for Lustre allows at most this many data repository associations per file system.
MAX_DATA_REPOSITORY_ASSOCIATIONS = 8
#: Throughput per unit of storage (MB/s/TiB) of SSD Lustre file systems, by deployment type.
LUSTRE_THROUGHPUT_MBPS_PER_TIB: dict[str, tuple[int, ...]] = {
    "PERSISTENT_2": (125, 250, 500, 1000),
    "PERSISTENT_1": (50, 100, 200),
}
#: EFA-enabled PERSISTENT_2 file systems grow in these steps (GiB) per throughput tier.
LUSTRE_EFA_CAPACITY_STEP_GIB: dict[int, int] = {1000: 4800, 500: 9600, 250: 19200, 125: 38400}
METADATA_IOPS_HELP = "allowed: 1500, 3000, 6000, 12000, or a multiple of 12000 up to 192000"
_OPENZFS_GEN1 = (64, 128, 256, 512, 1024, 2048, 3072, 4096)
_OPENZFS_GEN2 = (160, 320, 640, 1280, 2560, 3840, 5120, 7680, 10240)
#: Throughput capacity (MB/s) of FSx for OpenZFS, by deployment type (the *_1 types are the older generation).
OPENZFS_THROUGHPUT_MBPS: dict[str, tuple[int, ...]] = {
    "SINGLE_AZ_1": _OPENZFS_GEN1,
    "SINGLE_AZ_HA_1": _OPENZFS_GEN1,
    "SINGLE_AZ_2": _OPENZFS_GEN2,
    "SINGLE_AZ_HA_2": _OPENZFS_GEN2,
    "MULTI_AZ_1": _OPENZFS_GEN2,
}
S3_PATH_HELP = "allowed: an S3 URI such as 's3://my-bucket/prefix/' (a valid bucket name, then an optional prefix)"
FS_PATH_HELP = "allowed: an absolute path such as '/data' or '/data/sets/' without '//', '.' or '..' parts"
PREFIX_HELP = "allowed: a key prefix ending in '/', such as 'datasets/', not starting with '/' and without '//'"


def _join(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values)


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid general-purpose S3 bucket name, or None."""
    parts = name.split(".")
    looks_like_ip = len(parts) == 4 and all(p.isdigit() for p in parts)
    if looks_like_ip or not re.fullmatch(BUCKET_NAME, name):
        return BUCKET_HELP
    return None


def lustre_throughput_problem(deployment_type: str, throughput: int) -> str | None:
    """Why ``throughput`` (MB/s/TiB) does not fit ``deployment_type``, or None."""
    allowed = LUSTRE_THROUGHPUT_MBPS_PER_TIB.get(deployment_type)
    if allowed is None or throughput in allowed:
        return None
    return f"allowed for {deployment_type}: {_join(allowed)} MB/s/TiB"


def lustre_capacity_problem(
    capacity_gib: int, *, deployment_type: str, throughput: int, efa_enabled: bool
) -> str | None:
    """Why ``capacity_gib`` is not a valid SSD Lustre capacity for these settings, or None."""
    if efa_enabled and deployment_type == "PERSISTENT_2":
        step = LUSTRE_EFA_CAPACITY_STEP_GIB.get(throughput)
        if step is not None and (capacity_gib < step or capacity_gib % step):
            return (
                f"allowed with EFA at {throughput} MB/s/TiB: a multiple of {step} GiB "
                f"(EFA steps: {', '.join(f'{s} GiB at {t}' for t, s in LUSTRE_EFA_CAPACITY_STEP_GIB.items())})"
            )
        return None
    if capacity_gib in (1200, 2400) or (capacity_gib > 0 and capacity_gib % 2400 == 0):
        return None
    return f"allowed for {deployment_type} SSD: 1200, 2400, or a multiple of 2400 GiB"


def metadata_iops_valid(iops: int) -> bool:
    """True if ``iops`` is a Metadata IOPS value SSD Lustre file systems accept."""
    return iops in (1500, 3000, 6000) or (iops % 12000 == 0 and 12000 <= iops <= 192000)


def openzfs_throughput_problem(deployment_type: str, throughput: int) -> str | None:
    """Why ``throughput`` (MB/s) does not fit the OpenZFS ``deployment_type``, or None."""
    allowed = OPENZFS_THROUGHPUT_MBPS.get(deployment_type)
    if allowed is None or throughput in allowed:
        return None
    return f"allowed for {deployment_type}: {_join(allowed)} MB/s"


def file_system_path_problem(path: str) -> str | None:
    """Why ``path`` is not a valid DRA file system path, or None."""
    if not path.startswith("/") or len(path) > 4096 or "\0" in path:
        return FS_PATH_HELP
    # Only trailing slashes go: "//home" has an empty part (a file system may read it as "/home").
    parts = path[1:].rstrip("/").split("/")
    if path != "/" and any(part in ("", ".", "..") for part in parts):
        return FS_PATH_HELP
    return None


def s3_path_problem(path: str) -> str | None:
    """Why ``path`` is not a well-formed ``s3://bucket/prefix/`` URI, or None."""
    match = re.fullmatch(r"s3://([^/]+)(/.*)?", path)
    if match is None or len(path) > 4357:
        return S3_PATH_HELP
    if bucket_name_problem(match.group(1)) is not None:
        return S3_PATH_HELP
    prefix = (match.group(2) or "/")[1:]
    if "//" in prefix or prefix.startswith("/") or "\0" in prefix:
        return S3_PATH_HELP
    return None


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` is not a usable key prefix for a DRA into the data bucket, or None."""
    if not prefix.endswith("/") or prefix.startswith("/") or "//" in prefix or "\0" in prefix:
        return PREFIX_HELP
    return None


def _as_dir(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def association_conflicts(
    file_system_paths: Sequence[str], repository_paths: Sequence[str]
) -> list[tuple[int, str, str, str]]:
    """Conflicts between the DRAs of one file system, as ``(index, key, value, message)``.

    A file system has at most 8 associations; ``/`` may only be the sole
    file system path; file system paths must differ and not nest in each
    other; S3 paths (with any prefix) must differ and not nest either.
    ``repository_paths`` are compared as strings, so two paths into the same
    bucket must spell the bucket the same way (the same token in CDK).
    """
    found: list[tuple[int, str, str, str]] = []
    count = len(file_system_paths)
    if count > MAX_DATA_REPOSITORY_ASSOCIATIONS:
        found.append(
            (
                MAX_DATA_REPOSITORY_ASSOCIATIONS,
                "",
                f"{count} associations",
                f"allowed: at most {MAX_DATA_REPOSITORY_ASSOCIATIONS} per file system; merge or remove some",
            )
        )
    if "/" in file_system_paths and count > 1:
        index = list(file_system_paths).index("/")
        found.append(
            (
                index,
                "file_system_path",
                "/",
                "'/' links the whole file system and must be the only association; use subdirectories instead",
            )
        )
        return found
    for key, paths in (("file_system_path", file_system_paths), ("data_repository_path", repository_paths)):
        dirs = [_as_dir(p) for p in paths]
        for j, later in enumerate(dirs):
            for i, earlier in enumerate(dirs[:j]):
                if later == earlier:
                    found.append((j, key, paths[j], f"the same as association {i}; each association needs its own"))
                elif later.startswith(earlier) or earlier.startswith(later):
                    found.append(
                        (
                            j,
                            key,
                            paths[j],
                            f"overlaps {paths[i]!r} of association {i}; paths must not be nested in each other",
                        )
                    )
    return found


#: An AWS Backup schedule: a cron expression in UTC, as the BackupPlan rule takes it.
BACKUP_SCHEDULE = r"cron\([^()\s]+( [^()\s]+){5}\)"
BACKUP_SCHEDULE_HELP = "allowed: an AWS Backup cron expression in UTC, such as 'cron(0 5 * * ? *)' (daily at 05:00)"


@section
class DataBucketBackupConfig:
    """An AWS Backup plan for the data bucket: scheduled recovery points in a vault under the environment key."""

    schedule: str = setting(
        default="cron(0 5 * * ? *)",
        pattern=BACKUP_SCHEDULE,
        allowed=BACKUP_SCHEDULE_HELP,
        doc="when AWS Backup takes a recovery point of the data bucket (cron, UTC)",
    )
    retention_days: int = setting(
        default=35, minimum=1, maximum=36500, doc="days each recovery point is kept before AWS Backup deletes it"
    )


@section
class DataBucketConfig:
    """The S3 bucket that holds datasets and checkpoints."""

    name: str | None = setting(
        default=None,
        pattern=BUCKET_NAME,
        allowed=BUCKET_HELP,
        doc="the bucket's name, unique in all of AWS (default: generated by CloudFormation)",
    )
    encryption: Literal["s3", "kms"] = setting(default="s3", doc="SSE-S3, or SSE-KMS with kms_key_arn or a new key")
    kms_key_arn: str | None = setting(
        default=None, pattern=KMS_KEY_ARN, allowed=KMS_HELP, doc="the key for encryption: kms (default: a new key)"
    )
    abort_incomplete_multipart_upload_days: int = setting(
        default=7, minimum=1, maximum=365, doc="days before unfinished multipart uploads are cleaned up"
    )
    noncurrent_version_expiration_days: int | None = setting(
        default=None, minimum=1, maximum=36500, doc="days before overwritten versions expire (default: never)"
    )
    access_log_retention_days: int = setting(
        default=365, minimum=1, maximum=36500, doc="days the bucket's access logs are kept"
    )
    backup: DataBucketBackupConfig | None = None

    def check(self, issues: Issues) -> None:
        if self.kms_key_arn is not None and self.encryption != "kms":
            issues.add("kms_key_arn", self.kms_key_arn, "only used with encryption: kms")
        if self.name is not None and bucket_name_problem(self.name) is not None:
            issues.add("name", self.name, BUCKET_HELP)


@section
class DataRepositoryAssociationConfig:
    """A link between a Lustre path and an S3 prefix (a DRA)."""

    file_system_path: str = setting(
        default="/data",
        pattern=r"/[^\0]{0,4095}",
        allowed=FS_PATH_HELP,
        doc="the directory under /fsx linked to S3 (HyperPod: not /, /.mlcluster or /home)",
    )
    data_repository_path: str | None = setting(
        default=None,
        pattern=r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\0]*)?",
        allowed="allowed: an S3 URI such as 's3://my-bucket/prefix/'; leave it out to use the data bucket",
    )
    data_bucket_prefix: str | None = setting(default=None, pattern=r"[^/\0][^\0]*/", allowed=PREFIX_HELP)
    auto_import_events: tuple[EVENTS, ...] = setting(
        default=("NEW", "CHANGED", "DELETED"), doc="S3 changes copied into Lustre automatically"
    )
    auto_export_events: tuple[EVENTS, ...] = setting(
        default=DRA_EXPORT_DEFAULT,
        doc="Lustre changes copied to S3 automatically (add `DELETED` and a file removed from Lustre deletes its "
        "object too)",
    )
    batch_import_metadata_on_create: bool = setting(
        default=True, doc="list the existing objects in Lustre when the association is created"
    )
    imported_file_chunk_size_mib: int = setting(
        default=1024, minimum=1, maximum=512000, doc="stripe size of imported files (MiB)"
    )

    def check(self, issues: Issues) -> None:
        if self.data_repository_path is not None and self.data_bucket_prefix is not None:
            issues.add(
                "data_bucket_prefix",
                self.data_bucket_prefix,
                "give data_repository_path or data_bucket_prefix, not both",
            )
        problem = file_system_path_problem(self.file_system_path)
        if problem is not None:
            issues.add("file_system_path", self.file_system_path, problem)
        if self.data_repository_path is not None:
            problem = s3_path_problem(self.data_repository_path)
            if problem is not None:
                issues.add("data_repository_path", self.data_repository_path, problem)
        if self.data_bucket_prefix is not None:
            problem = prefix_problem(self.data_bucket_prefix)
            if problem is not None:
                issues.add("data_bucket_prefix", self.data_bucket_prefix, problem)
        for key in ("auto_import_events", "auto_export_events"):
            events = getattr(self, key)
            if len(set(events)) != len(events):
                issues.add(key, list(events), "each event may appear once")


@section
class MetadataConfig:
    """Lustre metadata performance (PERSISTENT_2 only).

    ``mode`` left out means AUTOMATIC on PERSISTENT_2 and no metadata
    configuration on PERSISTENT_1, which has none.
    """

    mode: Literal["AUTOMATIC", "USER_PROVISIONED"] | None = setting(
        default=None, doc="AUTOMATIC on PERSISTENT_2 when left out; PERSISTENT_1 has none"
    )
    iops: int | None = setting(
        default=None, doc="with USER_PROVISIONED: " + METADATA_IOPS_HELP.removeprefix("allowed: ")
    )

    def check(self, issues: Issues) -> None:
        if self.mode != "USER_PROVISIONED" and self.iops is not None:
            issues.add("iops", self.iops, "only used with mode: USER_PROVISIONED")
        if self.mode == "USER_PROVISIONED":
            if self.iops is None:
                issues.add("iops", None, "required with mode: USER_PROVISIONED; " + METADATA_IOPS_HELP)
            elif not metadata_iops_valid(self.iops):
                issues.add("iops", self.iops, METADATA_IOPS_HELP)


@section
class LustreConfig:
    """FSx for Lustre, mounted at /fsx on every node."""

    deployment_type: Literal["PERSISTENT_2", "PERSISTENT_1"] = setting(
        default="PERSISTENT_2", doc="the SSD deployment type"
    )
    storage_capacity_gib: int = setting(
        default=1200, doc="1200, 2400 or a multiple of 2400 GiB (EFA: the step of its throughput tier)"
    )
    throughput_mbps_per_tib: int = setting(
        default=250, doc="PERSISTENT_2: 125, 250, 500, 1000; PERSISTENT_1: 50, 100, 200"
    )
    data_compression: Literal["LZ4", "NONE"] = setting(default="LZ4", doc="compression of stored data")
    lustre_version: Literal["2.15", "2.12"] = setting(default="2.15", doc="quote it: '2.15' (PERSISTENT_2 needs 2.15)")
    metadata: MetadataConfig = setting(default=MetadataConfig())
    efa_enabled: bool = setting(default=False, doc="EFA between clients and the file system (PERSISTENT_2 only)")
    kms_key_arn: str | None = setting(
        default=None, pattern=KMS_KEY_ARN, allowed=KMS_HELP, doc="a customer managed key (default: the FSx key)"
    )
    automatic_backup_retention_days: int = setting(
        default=7, minimum=0, maximum=90, doc="days automatic daily backups are kept (0: none)"
    )
    daily_backup_start_time: str = setting(
        default="05:00", pattern=r"([01]\d|2[0-3]):[0-5]\d", allowed="allowed: HH:MM in UTC, such as '05:00'"
    )
    weekly_maintenance_start_time: str = setting(
        default="7:06:00",
        pattern=r"[1-7]:([01]\d|2[0-3]):[0-5]\d",
        allowed="allowed: D:HH:MM (1 = Monday), such as '7:06:00'",
    )
    log_level: Literal["WARN_ERROR", "WARN_ONLY", "ERROR_ONLY", "DISABLED"] = setting(
        default="WARN_ERROR", doc="what the file system logs to CloudWatch Logs"
    )
    security_group: Literal["cluster", "dedicated"] = setting(
        default="dedicated",
        doc="a group of its own admitting Lustre from the nodes; cluster: the nodes' group (only to keep a file "
        "system created before this default; changing it replaces the file system)",
    )
    data_repository_associations: tuple[DataRepositoryAssociationConfig, ...] = setting(
        default=(DataRepositoryAssociationConfig(),), doc="links to S3 (default: /data to the data bucket)"
    )

    def check(self, issues: Issues) -> None:
        deployment = self.deployment_type
        throughput = self.throughput_mbps_per_tib
        problem = lustre_throughput_problem(deployment, throughput)
        if problem is not None:
            issues.add("throughput_mbps_per_tib", throughput, problem)
        problem = lustre_capacity_problem(
            self.storage_capacity_gib, deployment_type=deployment, throughput=throughput, efa_enabled=self.efa_enabled
        )
        if problem is not None:
            issues.add("storage_capacity_gib", self.storage_capacity_gib, problem)
        if deployment == "PERSISTENT_2" and self.lustre_version != "2.15":
            issues.add(
                "lustre_version",
                self.lustre_version,
                "allowed with PERSISTENT_2: '2.15' (a metadata configuration, always set here, needs Lustre 2.15)",
            )
        if deployment == "PERSISTENT_1" and self.metadata.mode is not None:
            issues.add("metadata.mode", self.metadata.mode, "PERSISTENT_1 has no metadata configuration; remove it")
        if self.efa_enabled and deployment != "PERSISTENT_2":
            issues.add("efa_enabled", True, "EFA needs deployment_type: PERSISTENT_2 (with Lustre 2.15)")


@section
class OpenZfsConfig:
    """FSx for OpenZFS for /home, exported over NFS to the cluster nodes' subnets only."""

    deployment_type: Literal["SINGLE_AZ_1", "SINGLE_AZ_2", "SINGLE_AZ_HA_1", "SINGLE_AZ_HA_2", "MULTI_AZ_1"] = setting(
        default="SINGLE_AZ_HA_2", doc="the *_1 types are the older generation, not offered in every region"
    )
    storage_capacity_gib: int = setting(default=512, minimum=64, maximum=524288, doc="size of /home (GiB)")
    throughput_capacity_mbps: int = setting(
        default=320, doc="MB/s; the allowed values depend on deployment_type (the message lists them)"
    )
    data_compression: Literal["ZSTD", "LZ4", "NONE"] = setting(default="LZ4", doc="compression of stored data")
    kms_key_arn: str | None = setting(
        default=None, pattern=KMS_KEY_ARN, allowed=KMS_HELP, doc="a customer managed key (default: the FSx key)"
    )
    automatic_backup_retention_days: int = setting(
        default=7, minimum=0, maximum=90, doc="days automatic daily backups are kept (0: none)"
    )
    daily_backup_start_time: str = setting(
        default="05:00", pattern=r"([01]\d|2[0-3]):[0-5]\d", allowed="allowed: HH:MM in UTC, such as '05:00'"
    )
    weekly_maintenance_start_time: str = setting(
        default="7:06:00",
        pattern=r"[1-7]:([01]\d|2[0-3]):[0-5]\d",
        allowed="allowed: D:HH:MM (1 = Monday), such as '7:06:00'",
    )
    security_group: Literal["cluster", "dedicated"] = setting(
        default="dedicated",
        doc="a group of its own admitting NFS from the nodes; cluster: the nodes' group (only to keep a file "
        "system created before this default; changing it replaces the file system)",
    )

    def check(self, issues: Issues) -> None:
        problem = openzfs_throughput_problem(self.deployment_type, self.throughput_capacity_mbps)
        if problem is not None:
            issues.add("throughput_capacity_mbps", self.throughput_capacity_mbps, problem)


#: slurmdbd's own default database (its ``StorageLoc``), which HyperPod's controller keeps.
DEFAULT_ACCOUNTING_DATABASE = "slurm_acct_db"

#: MySQL's system schemas (MySQL 8.0 manual, "MySQL System Schema", "INFORMATION_SCHEMA Tables", "MySQL Performance
#: Schema", "MySQL sys Schema"; Aurora MySQL 3 is MySQL 8.0). slurmdbd's user is granted ALL PRIVILEGES on
#: ``database_name``.*: on ``mysql`` that covers the grant tables (ALTER USER of any account, the master's included).
MYSQL_SYSTEM_SCHEMAS = ("information_schema", "mysql", "performance_schema", "sys")


def system_schema_matched(name: str) -> str | None:
    """The system schema a database-level grant on ``name`` would cover, or None.

    MySQL reads ``_`` and ``%`` in the database of ``GRANT ... ON db.*`` as LIKE wildcards (MySQL 8.0 manual,
    "GRANT Statement", "Object Quoting Guidelines"), so ``my_ql`` or ``_____`` would cover ``mysql`` as surely as
    ``mysql``; ``database_name``'s pattern already refuses ``%``. Names such as ``mysql_x`` or ``sys_`` (another
    length) cover none.
    """
    for schema in MYSQL_SYSTEM_SCHEMAS:
        if len(name) == len(schema) and all(ours in ("_", theirs) for ours, theirs in zip(name, schema, strict=True)):
            return schema
    return None


#: Aurora Serverless v2 capacity is set in half ACUs; 0 (auto-pause) needs Aurora MySQL 3.08.0 or later.
ACU_HELP = "allowed: 0 to 256 Aurora capacity units in steps of 0.5"


def acu_problem(value: float) -> str | None:
    """Why ``value`` is not an Aurora Serverless v2 capacity (0-256 ACUs in half steps), or None."""
    if 0 <= value <= 256 and float(value * 2).is_integer():
        return None
    return ACU_HELP


@section
class AccountingDatabaseStorageConfig:
    """A managed Slurm accounting database that outlives clusters: Aurora MySQL Serverless v2.

    It lives in the Storage stack, in the private subnets (at least two zones: an Aurora subnet group
    needs them), encrypted with the environment key, TLS only, reachable from the client group of the
    node that runs slurmdbd alone (HyperPod's controller, ParallelCluster's head node; and from every
    node's group while ``admit_node_group`` bridges an upgrade). The master credentials are a Secrets
    Manager secret that a single-user rotation function renews.
    ``cluster.hyperpod.lifecycle.accounting.mode: managed`` points the controller's slurmdbd at it;
    with ``cluster.backend: pcluster`` the head node's slurmdbd logs in as a user of its own
    (``slurmdbd``, made through the RDS Data API) with a bare-password secret
    (``SlurmSettings.Database``).
    """

    min_capacity_acu: float = setting(
        default=0,
        minimum=0,
        maximum=256,
        doc="the least capacity (ACUs, half steps); 0 pauses the database after auto_pause_minutes without "
        "connections (slurmdbd keeps one open while a cluster runs, so it pauses only with no cluster)",
    )
    max_capacity_acu: float = setting(
        default=2, minimum=1, maximum=256, doc="the most capacity (ACUs, half steps) the database scales up to"
    )
    auto_pause_minutes: int = setting(
        default=60, minimum=5, maximum=1440, doc="idle minutes before a database with min_capacity_acu 0 pauses"
    )
    backup_retention_days: int = setting(
        default=35, minimum=1, maximum=35, doc="days Aurora keeps automated backups (point-in-time restore)"
    )
    rotation_days: int = setting(
        default=30, minimum=1, maximum=1000, doc="days between rotations of the master password"
    )
    alarm_volume_gib: int = setting(
        default=50, minimum=1, maximum=131072, doc="alarm (observability) when the database holds more than this"
    )
    alarm_busy_percent: int = setting(
        default=90,
        minimum=10,
        maximum=100,
        doc="alarm (observability) when the database's CPU or its use of max_capacity_acu stays at or above this "
        "share for 15 minutes",
    )
    database_name: str = setting(
        default=DEFAULT_ACCOUNTING_DATABASE,
        pattern=r"[0-9a-z_]{1,64}",
        allowed="allowed: 1-64 lowercase letters, digits and '_'",
        doc="ParallelCluster: the database slurmdbd keeps its tables in (SlurmSettings.Database.DatabaseName), the "
        "same for every cluster of the environment, so a replaced cluster writes to the same history; HyperPod keeps "
        "slurm_acct_db; never one of MySQL's system schemas (information_schema, mysql, performance_schema, sys)",
    )
    admit_node_group: bool = setting(
        default=False,
        doc="HyperPod only: also admit MySQL from every cluster node's group (network.security_group), as before the "
        "controller had a client group of its own: set true while upgrading an environment whose HyperPod cluster "
        "was created before that group (its running controller lacks it), recreate the cluster, then set false "
        "(docs/upgrading.md); refused with ParallelCluster, whose every queue carries that group",
    )

    def check(self, issues: Issues) -> None:
        for key in ("min_capacity_acu", "max_capacity_acu"):
            value = getattr(self, key)
            if acu_problem(value) is not None:
                issues.add(key, value, ACU_HELP)
        if self.min_capacity_acu > self.max_capacity_acu:
            issues.add("min_capacity_acu", self.min_capacity_acu, f"at most max_capacity_acu ({self.max_capacity_acu})")
        schema = system_schema_matched(self.database_name)
        if schema is not None:
            issues.add(
                "database_name",
                self.database_name,
                f"it names MySQL's system schema {schema} (slurmdbd's user gets ALL PRIVILEGES on the database, and "
                "MySQL reads '_' in a granted database's name as any one character): allowed: a name of your own "
                f"such as {DEFAULT_ACCOUNTING_DATABASE}, none of {', '.join(MYSQL_SYSTEM_SCHEMAS)} nor one of their "
                "length with '_' in place of some letters",
            )


@section
class StorageConfig:
    """Data that outlives clusters: the bucket, Lustre and optional OpenZFS.

    The FSx and S3 rules are checked with the allowed values in the message:
    PERSISTENT_2 throughput 125/250/500/1000 MB/s/TiB; capacity 1200, 2400 or
    a multiple of 2400 GiB; at most 8 DRAs, paths neither repeated nor
    nested, ``/`` only alone; EFA needs PERSISTENT_2, Lustre 2.15, a metadata
    configuration and its capacity steps; OpenZFS throughput per deployment
    type.
    """

    data_bucket: DataBucketConfig = setting(default=DataBucketConfig())
    lustre: LustreConfig = setting(default=LustreConfig())
    openzfs: OpenZfsConfig | None = None
    accounting: AccountingDatabaseStorageConfig | None = None

    def check(self, issues: Issues) -> None:
        associations = self.lustre.data_repository_associations
        bucket = f"s3://{self.data_bucket.name or '<data bucket>'}/"
        repository_paths = [a.data_repository_path or bucket + (a.data_bucket_prefix or "") for a in associations]
        conflicts = association_conflicts([a.file_system_path for a in associations], repository_paths)
        for index, key, value, message in conflicts:
            where = "lustre.data_repository_associations" + (f"[{index}].{key}" if key else "")
            issues.add(where, value, message)
