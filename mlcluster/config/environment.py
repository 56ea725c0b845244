"""The whole environment file and how it is found and loaded."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from mlcluster.config import awsdata
from mlcluster.config.hyperpod import HyperPodConfig, check_lustre_efa
from mlcluster.config.network import ACCOUNT, NetworkConfig, check_zones
from mlcluster.config.observability import ObservabilityConfig, check_observability
from mlcluster.config.pcluster import DENIED_SLURM_SETTINGS, PclusterConfig, parse_version
from mlcluster.config.schema import ConfigError, Issues, Problem, load_section, section, setting
from mlcluster.config.storage import DEFAULT_ACCOUNTING_DATABASE, StorageConfig
from mlcluster.config.yamlfile import read_yaml

#: Retention periods CloudWatch Logs accepts, in days.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)

#: Extra cdk-nag packs an environment may list; AwsSolutions always runs.
COMPLIANCE_PACKS = ("nist-800-53-r5", "hipaa-security", "pci-dss-3.2.1")

ENV_NAME = r"[a-z][a-z0-9-]{0,19}"
#: File name endings read as environment files (compared case-insensitively).
SUFFIXES = (".yaml", ".yml")


@section
class ComplianceConfig:
    """cdk-nag packs that run on this environment in addition to AwsSolutions."""

    packs: tuple[Literal["nist-800-53-r5", "hipaa-security", "pci-dss-3.2.1"], ...] = setting(
        default=(), doc="cdk-nag packs checked at synth in addition to AwsSolutions"
    )

    def check(self, issues: Issues) -> None:
        if len(set(self.packs)) != len(self.packs):
            issues.add("packs", list(self.packs), "each pack may appear once")


@section
class RetentionConfig:
    """What happens to data and logs when stacks are deleted."""

    on_delete: Literal["retain", "destroy"] = setting(
        default="retain",
        doc="`destroy` only for throw-away environments: the data bucket, file systems and logs go with the stacks",
    )
    log_retention_days: int = setting(
        default=365,
        one_of=LOG_RETENTION_DAYS,
        allowed="allowed: " + ", ".join(str(d) for d in LOG_RETENTION_DAYS),
        doc="days CloudWatch Logs keeps the environment's logs",
    )

    #: Construct paths (below the environment) of data-bearing resources this
    #: file explicitly lets the next deploy replace, delete or weaken, one resource
    #: each, e.g. ``Storage/Lustre``. The synth-time guard (``mlcluster.lockfile``)
    #: refuses every other such change, and an entry that names several resources
    #: or allows nothing any more.
    allow_replacement: tuple[str, ...] = setting(
        default=(),
        pattern=r"(Storage|DataRepository|Cluster|Network|Observability)(/[A-Za-z0-9_.-]+)*",
        allowed="allowed: construct paths below the environment, e.g. 'Storage/Lustre' or 'Cluster/Cluster'",
        doc="the data-bearing resources (one construct path each: `Storage/Lustre`, "
        "`DataRepository/Lustre/AssociationData`, `Cluster/Cluster`, ...) the next deploy may replace, delete or "
        "keep less well; the synth-time guard refuses every other such change, and an entry still in the file "
        "after its deploy (see Day two)",
    )

    @property
    def keeps_data(self) -> bool:
        return self.on_delete == "retain"


@section
class ClusterConfig:
    """Which cluster runs on the network and storage, if any."""

    #: JSON Schema form of "the backend's section is required" (see ``docs``).
    SCHEMA_RULES: ClassVar[dict[str, Any]] = {
        "allOf": [
            {
                "if": {"required": ["backend"], "properties": {"backend": {"const": name}}},
                "then": {"required": [name], "properties": {name: {"type": "object"}}},
            }
            for name in ("pcluster", "hyperpod")
        ]
    }

    backend: Literal["none", "pcluster", "hyperpod"] = setting(
        default="none", doc="the cluster on top of network and storage, with its section of the same name"
    )
    name: str | None = setting(
        default=None,
        pattern=r"[a-zA-Z][a-zA-Z0-9-]{0,59}",
        allowed="allowed: 1-60 letters, digits and hyphens starting with a letter (default: mlcluster-<environment>)",
        doc="the cluster's name (default: mlcluster-<environment>); unique per account and region",
    )
    hyperpod: HyperPodConfig | None = setting(default=None, doc="required with backend: hyperpod")
    pcluster: PclusterConfig | None = setting(default=None, doc="required with backend: pcluster")

    def check(self, issues: Issues) -> None:
        if self.backend == "hyperpod" and self.name is not None and self.name.endswith("-"):
            issues.add("name", self.name, "HyperPod cluster names end in a letter or digit")
        for backend in ("hyperpod", "pcluster"):
            section_value = getattr(self, backend)
            if self.backend == backend and section_value is None:
                issues.add(backend, None, f"required with backend: {backend}")
            if self.backend != backend and section_value is not None:
                issues.add(backend, "...", f"only used with backend: {backend} (backend is {self.backend!r})")


@section
class EnvironmentConfig:
    """One deployable environment: network, storage and an optional cluster."""

    description: str = setting(default="", doc="shown in the stacks' descriptions")
    account: str | None = setting(
        default=None,
        pattern=ACCOUNT,
        allowed="allowed: a 12-digit AWS account ID, quoted",
        doc='the account to deploy to, quoted (`"012345678901"`); unset: the credentials\' account',
    )
    region: str | None = setting(
        default=None,
        choices=awsdata.REGIONS,
        doc="the region to deploy to; unset: the CLI's region (the zones must then be in it)",
    )
    tags: dict[str, str] = setting(default={}, doc="tags on every resource, plus `mlcluster:environment: <name>`")
    compliance: ComplianceConfig = setting(default=ComplianceConfig())
    retention: RetentionConfig = setting(default=RetentionConfig())
    network: NetworkConfig = setting(
        allowed="a network section", doc="the VPC, its subnets and zones (`network:` below)"
    )
    storage: StorageConfig = setting(default=StorageConfig())
    cluster: ClusterConfig = setting(default=ClusterConfig())
    observability: ObservabilityConfig = setting(
        default=ObservabilityConfig(), doc="CloudWatch dashboard and alarms in their own stack (`observability:` below)"
    )

    def check(self, issues: Issues) -> None:
        check_zones(issues, self.network, self.region)
        check_observability(issues, self)
        hyperpod = self.cluster.hyperpod
        if self.storage.lustre.efa_enabled and self.cluster.backend == "hyperpod" and hyperpod is not None:
            existing = self.network.existing
            ids = existing.private_subnet_ids if existing is not None else ()
            zone = ids[0] if ids else self.network.primary_zone_label
            check_lustre_efa(issues, hyperpod, file_system_zone=zone)
        check_accounting(issues, self)
        check_private_folders_unlinked(issues, self)
        for key, value in self.tags.items():
            if not 1 <= len(key) <= 128 or key.lower().startswith("aws:"):
                issues.add(f"tags.{key}", key, "allowed: tag keys of 1-128 characters not starting with 'aws:'")
            if len(value) > 256:
                issues.add(f"tags.{key}", value, "allowed: tag values of at most 256 characters")


#: The first ParallelCluster release whose ``SlurmSettings.Database`` takes ``DatabaseName`` (cookbook and
#: CLI CHANGELOG, 3.8.0), which the managed path always sets.
DATABASE_NAME_SINCE = (3, 8, 0)


def check_accounting(issues: Issues, config: EnvironmentConfig) -> None:
    """The managed accounting database's rules that span sections.

    An Aurora DB subnet group needs subnets in at least two zones; a managed mode needs the database;
    a cluster must use the database: HyperPod's controller with ``accounting.mode: managed`` (slurmdbd's
    default database, ``slurm_acct_db``), ParallelCluster's head node always (as slurmdbd's own user, in
    ``database_name``), which excludes bringing your own database (``cluster.pcluster.slurm.accounting``) and
    ``admit_node_group`` (the HyperPod upgrade bridge: with ParallelCluster that group is every queue's).
    """
    database = config.storage.accounting
    hyperpod = config.cluster.hyperpod if config.cluster.backend == "hyperpod" else None
    managed = hyperpod is not None and hyperpod.lifecycle.accounting.mode == "managed"
    if managed and database is None:
        issues.add(
            "cluster.hyperpod.lifecycle.accounting.mode",
            "managed",
            "needs a storage.accounting section (the database it uses); or use local or remote",
        )
    if database is None:
        return
    existing = config.network.existing
    zones = len(existing.private_subnet_ids) if existing is not None else 1 + len(config.network.extra_zones)
    if zones < 2:
        issues.add(
            "storage.accounting",
            "a database in one zone",
            "an Aurora DB subnet group needs private subnets in at least two zones: add network.extra_zones "
            "(or list two private subnets of different zones in network.existing)",
        )
    pcluster = config.cluster.pcluster if config.cluster.backend == "pcluster" else None
    if pcluster is not None and parse_version(pcluster.version) < DATABASE_NAME_SINCE:
        since = ".".join(map(str, DATABASE_NAME_SINCE))
        issues.add(
            "cluster.pcluster.version",
            pcluster.version,
            "storage.accounting sets SlurmSettings.Database.DatabaseName, which ParallelCluster has only from "
            f"{since}: allowed: {since} or later (or remove storage.accounting)",
        )
    if pcluster is not None and pcluster.slurm.accounting is not None:
        issues.add(
            "cluster.pcluster.slurm.accounting",
            "a database of your own",
            "the head node already uses storage.accounting (the managed database): remove one of the two",
        )
    elif pcluster is not None:
        # ParallelCluster writes the accounting settings itself once SlurmSettings.Database is set.
        denied = DENIED_SLURM_SETTINGS["accounting"]
        for name in pcluster.slurm.custom_settings:
            if name.lower() in denied:
                issues.add(
                    f"cluster.pcluster.slurm.custom_settings.{name}",
                    name,
                    "with storage.accounting ParallelCluster manages this Slurm setting and refuses it here; "
                    "not allowed: " + ", ".join(denied),
                )
    if pcluster is not None and database.admit_node_group:
        issues.add(
            "storage.accounting.admit_node_group",
            True,
            "every ParallelCluster queue carries network.security_group, so this would let every job reach the "
            "database's port 3306; the setting only bridges a HyperPod cluster created before the controller's "
            "client group: allowed with ParallelCluster: false",
        )
    if config.cluster.backend == "hyperpod" and not managed:
        issues.add(
            "storage.accounting",
            "a database no cluster uses",
            "set cluster.hyperpod.lifecycle.accounting.mode: managed, or remove storage.accounting",
        )
    if config.cluster.backend == "hyperpod" and database.database_name != DEFAULT_ACCOUNTING_DATABASE:
        issues.add(
            "storage.accounting.database_name",
            database.database_name,
            f"HyperPod's controller keeps slurmdbd's default database: allowed: {DEFAULT_ACCOUNTING_DATABASE} "
            "(the setting names ParallelCluster's SlurmSettings.Database.DatabaseName)",
        )


def check_private_folders_unlinked(issues: Issues, config: EnvironmentConfig) -> None:
    """No data repository association of a HyperPod cluster's Lustre covers a folder the nodes keep private.

    HyperPod's nodes keep on Lustre (mounted at /fsx) the SSH key store and, without the secondary EBS
    volume, the controller's state (``/fsx/.mlcluster``), and the users' homes (``/fsx/home`` with
    ``home_on_fsx``). ``/home`` stays private when the homes move (OpenZFS, ``home_on_fsx: false``): nodes
    not yet re-provisioned still use it, and the old homes keep each user's key. A DRA over one of them, or
    over a folder above it (``/``), exports private keys to the bucket and imports whatever a writer of the
    bucket puts there (an ``authorized_keys``, a shell start-up file), owner and mode included: FSx applies the
    object's ``x-amz-meta-file-owner`` and ``-file-permissions`` (setuid excepted), "POSIX metadata support for
    data repositories", https://docs.aws.amazon.com/fsx/latest/LustreGuide/posix-metadata-support.html.
    """
    if config.cluster.backend != "hyperpod":
        return
    private = {
        "/.mlcluster": "the nodes' SSH key store and the controller's state (/fsx/.mlcluster)",
        "/home": "the users' homes (/fsx/home, or where they were before they moved)",
    }
    for index, association in enumerate(config.storage.lustre.data_repository_associations):
        linked = association.file_system_path.rstrip("/") + "/"
        for folder, what in private.items():
            if (folder + "/").startswith(linked) or linked.startswith(folder + "/"):
                issues.add(
                    f"storage.lustre.data_repository_associations[{index}].file_system_path",
                    association.file_system_path,
                    f"links {what} to S3: their keys would be exported and whoever can write the bucket could "
                    f"plant files there; allowed: a folder outside {folder} such as /data; a "
                    "deployed link goes first, its files kept: 'aws fsx delete-data-repository-association "
                    "--association-id ID --no-delete-data-in-file-system' (ids: 'aws fsx "
                    "describe-data-repository-associations'; upgrade note in mlcluster's docs/upgrading.md)",
                )


#: Buckets whose names begin so are open to object writes by AWSGlueServiceRole (an AWS managed policy).
GLUE_BUCKET_PREFIX = "aws-glue-"


@section
class Environment:
    """A loaded environment: its name (the file's stem), source and settings."""

    name: str
    source: str
    config: EnvironmentConfig

    @property
    def cluster_name(self) -> str:
        return self.config.cluster.name or f"mlcluster-{self.name}"


def load_environment(path: Path) -> Environment:
    """Read and validate one environment file; raise ``ConfigError`` on any problem."""
    source = str(path)
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(
            source, [Problem("(file name)", path.name, "allowed: an environment file named <name>.yaml or <name>.yml")]
        )
    if not re.fullmatch(ENV_NAME, path.stem):
        raise ConfigError(
            source,
            [
                Problem(
                    "(file name)", path.stem, "allowed: 1-20 lowercase letters, digits and '-', starting with a letter"
                )
            ],
        )
    if path.stem.startswith(GLUE_BUCKET_PREFIX):
        # Every stack, and so every generated bucket name, begins with the environment's name; the AWS managed
        # policy AWSGlueServiceRole grants object writes and deletes on every bucket named "aws-glue-*".
        raise ConfigError(
            source,
            [
                Problem(
                    "(file name)",
                    path.stem,
                    f"the buckets' generated names would begin {GLUE_BUCKET_PREFIX!r}, where the AWS managed policy "
                    "AWSGlueServiceRole grants object writes and deletes; allowed: a name not beginning with it",
                )
            ],
        )
    document = read_yaml(path)
    if not isinstance(document.data, Mapping):
        raise ConfigError(source, [Problem("(top level)", document.data, "expected a mapping of settings")])
    config = load_section(EnvironmentConfig, document.data, source, document.hints)
    if config.cluster.backend != "none" and "sagemaker" in path.stem:
        # The cluster stack's script buckets are named after the environment; AWS managed policies grant
        # object writes on every bucket whose name contains "sagemaker", and those scripts run as root on nodes.
        raise ConfigError(
            source,
            [
                Problem(
                    "(file name)",
                    path.stem,
                    "allowed: a name without 'sagemaker' for an environment with a cluster (its node-script bucket "
                    "names carry it, and AWS managed policies grant writes to buckets named so)",
                )
            ],
        )
    return Environment(name=path.stem, source=source, config=config)


def environment_files(directory: Path) -> list[Path]:
    """Every ``*.yaml`` and ``*.yml`` file in ``directory`` (any case), sorted by name."""
    if not directory.is_dir():
        raise ConfigError(str(directory), [Problem("(directory)", str(directory), "no such directory")])
    # Not filtered on is_file(): a directory or dangling link named like an environment is reported, not skipped.
    return sorted(p for p in directory.iterdir() if p.suffix.lower() in SUFFIXES)


def load_files(files: Sequence[Path]) -> list[Environment]:
    """Load ``files``, report every problem of every file together, then the names they share.

    Raises ``ConfigError`` listing each file's problems, or the names two
    files would both claim (see :mod:`mlcluster.config.names`).
    """
    from mlcluster.config.names import check_unique

    loaded: list[Environment] = []
    failures: list[ConfigError] = []
    for path in files:
        try:
            loaded.append(load_environment(path))
        except ConfigError as exc:
            failures.append(exc)
    if failures:
        raise ConfigError.combine(failures)
    check_unique(loaded)
    return loaded


def load_environments(directory: Path, selected: Iterable[str] | None = None) -> list[Environment]:
    """Load every ``*.yaml`` and ``*.yml`` in ``directory``, or only the ``selected`` names.

    Raises ``ConfigError`` naming an unknown selection or the problems of
    every file that fails (all files are checked before any is used).
    """
    paths = environment_files(directory)
    if selected is not None:
        wanted = [s for s in selected if s]
        stems = sorted({p.stem for p in paths})
        unknown = [s for s in wanted if s not in stems]
        if unknown:
            raise ConfigError(
                str(directory),
                [
                    Problem(
                        "-c env", ",".join(unknown), "allowed: " + (", ".join(stems) or "no environment files found")
                    )
                ],
            )
        chosen = [p for p in paths if p.stem in wanted]
        loaded = load_files(chosen) if chosen else []
        if loaded:
            _check_unique_among(loaded, [p for p in paths if p not in chosen])
        paths = chosen
    if not paths:
        raise ConfigError(str(directory), [Problem("(directory)", str(directory), "add at least one <name>.yaml")])
    return loaded if selected is not None else load_files(paths)


def _check_unique_among(loaded: list[Environment], others: Sequence[Path]) -> None:
    """Names the selected environments share with the files not selected (deployed too, from another synth).

    A file that does not load is skipped here: its own synth reports it.
    """
    from mlcluster.config.names import collisions

    rest: list[Environment] = []
    for path in others:
        try:
            rest.append(load_environment(path))
        except ConfigError:
            continue
    # The unselected first: a pair is reported on the selected file, naming the other one.
    found = [(env, problem) for env, problem in collisions([*rest, *loaded]) if any(env is e for e in loaded)]
    if found:
        raise ConfigError.combine([ConfigError(env.source, [problem]) for env, problem in found])


__all__ = [
    "COMPLIANCE_PACKS",
    "ClusterConfig",
    "ComplianceConfig",
    "Environment",
    "EnvironmentConfig",
    "HyperPodConfig",
    "PclusterConfig",
    "RetentionConfig",
    "environment_files",
    "load_environment",
    "load_environments",
    "load_files",
]
