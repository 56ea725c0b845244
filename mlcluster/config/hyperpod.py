"""The ``cluster.hyperpod:`` section: a SageMaker HyperPod cluster with Slurm."""

from __future__ import annotations

from typing import ClassVar, Literal

from mlcluster.config.awsdata import HYPERPOD_INSTANCE_TYPES
from mlcluster.config.schema import Issues, section, setting
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

GROUP_NAME = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
GROUP_HELP = "allowed: 1-63 letters, digits and hyphens, starting and ending with a letter or digit"
ML_INSTANCE = r"ml\.[a-z0-9-]+\.[a-z0-9]+"
ML_HELP = "allowed: a SageMaker instance type such as 'ml.p5.48xlarge'"
KMS_KEY = r"[a-zA-Z0-9:/_-]{1,2048}"
KMS_HELP = "allowed: a KMS key ID or ARN (letters, digits and :/_-)"
#: The ScheduleExpression AWS::SageMaker::Cluster accepts (its resource schema's pattern):
#: ``cron(minute hour day-of-month month day-of-week year)``, e.g. ``cron(0 3 ? * SUN *)``, in UTC.
CRON = (
    r"cron\((?:[0-5][0-9]|[0-9]|) (?:[01][0-9]|2[0-3]|[0-9]) (?:[1-9]|0[1-9]|[12][0-9]|3[01]|\?) "
    r"(?:[1-9]|0[1-9]|1[0-2]|\*|\*/(?:[1-9]|1[0-2])|) "
    r"(?:MON|TUE|WED|THU|FRI|SAT|SUN|[1-7]|\?|L|(?:[1-7]#[1-5])|(?:[1-7]L)) (?:20[2-9][0-9]|\*|)\)"
)
#: The deep health checks AWS::SageMaker::Cluster takes. botocore also knows ``MultiNodeTrainingValidation``,
#: but CloudFormation's resource schema (as bundled in cfn-lint 1.58) does not, so it cannot be asked for here.
#: Re-checked 2026-11-23 with aws-cdk-lib 2.275.0 (``CfnCluster`` takes any strings), cfn-lint 1.58.0's
#: schema (``DeepHealthCheckType``: InstanceStress, InstanceConnectivity) and botocore 1.44.5 (all three).
DeepHealthCheck = Literal["InstanceStress", "InstanceConnectivity"]
DEEP_HEALTH_CHECK_NOTE = (
    "botocore knows MultiNodeTrainingValidation, but CloudFormation's AWS::SageMaker::Cluster resource schema "
    "(its DeepHealthCheckType) does not, so the stack could not ask for it"
)

#: The HyperPod instance types that reach an EFA-enabled FSx for Lustre file system over EFA. The FSx
#: for Lustre user guide ("Working with EFA-enabled file systems", prerequisites,
#: https://docs.aws.amazon.com/fsx/latest/LustreGuide/efa-file-systems.html) asks for "Nitro v4 (or
#: higher) EC2 instances that support EFA, excluding the trn2 instance family". Here: the sizes whose
#: ``NetworkInfo.EfaSupported`` is true (EC2 DescribeInstanceTypes as moto 5.2.5 ships it; the guide's
#: own EFA-interface table for p6e-gb200.36xlarge, which moto lacks) in the families the EC2 instance
#: type guide lists as Nitro v4, v5 or v6 (accelerated computing: G6, G6e, Gr6, G7e, P5, P5e, P5en,
#: P6-B200, P6-B300, P6e-GB200, Trn1, Trn1n; general purpose: M6a), read 2026-11-23. Other types
#: (Nitro v3 such as p4d, g5 and c5n; trn2; types whose Nitro version was not checked here) mount an
#: EFA-enabled file system over TCP (ENA), which the guide says such file systems accept.
LUSTRE_EFA_INSTANCE_TYPES = frozenset(
    f"ml.{name}"
    for name in (
        *("p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"),
        *("p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge"),
        *(f"{family}.{size}xlarge" for family in ("g6", "g6e") for size in (8, 12, 16, 24, 48)),
        *("gr6.8xlarge", "g7e.8xlarge", "g7e.12xlarge", "g7e.24xlarge", "g7e.48xlarge"),
        *("trn1.32xlarge", "trn1n.32xlarge", "m6a.48xlarge"),
    )
)


def lustre_efa_capable(instance_type: str) -> bool:
    """Whether nodes of ``instance_type`` reach an EFA-enabled FSx for Lustre file system over EFA."""
    return instance_type in LUSTRE_EFA_INSTANCE_TYPES


@section
class PatchScheduleConfig:
    """When HyperPod patches a group's nodes (the group's ``ScheduledUpdateConfig``), and how many at a time."""

    schedule_expression: str = setting(
        pattern=CRON,
        allowed="allowed: a cron expression such as 'cron(0 3 ? * SUN *)'",
        doc="when the update starts (UTC): cron(minute hour day-of-month month day-of-week year)",
    )
    max_batch_size: int | None = setting(
        default=None,
        minimum=1,
        maximum=6758,
        doc="nodes updated at once (RollingUpdatePolicy.MaximumBatchSize, INSTANCE_COUNT); unset: the service's",
    )
    wait_interval_seconds: int | None = setting(
        default=None, minimum=0, maximum=3600, doc="seconds between batches; unset: the service's default"
    )


#: Why a root volume size is refused: the API sizes each node's root volume itself.
ROOT_VOLUME_SIZE_REASON = (
    "HyperPod sizes each node's root volume itself: CreateCluster's ClusterEbsVolumeConfig takes no size for it "
    "(with RootVolume true, VolumeSizeInGB cannot be given: 'the size of the root volume is determined for you'). "
    "Leave it out; ebs_volume_size_gib sizes the secondary volume at /opt/sagemaker, where mlcluster keeps "
    "container data and the controller's state"
)


@section
class InstanceGroupConfig:
    """One HyperPod instance group (one ``InstanceGroups`` entry of CreateCluster)."""

    #: Keys users ask for that the service does not offer, refused with the reason.
    REFUSED_KEYS: ClassVar[dict[str, str]] = {
        "root_volume_size_gib": ROOT_VOLUME_SIZE_REASON,
        "root_volume_size": ROOT_VOLUME_SIZE_REASON,
    }

    instance_group_name: str = setting(pattern=GROUP_NAME, allowed=GROUP_HELP)
    instance_type: str = setting(pattern=ML_INSTANCE, allowed=ML_HELP, choices=HYPERPOD_INSTANCE_TYPES)
    instance_count: int = setting(default=1, minimum=0, maximum=6758)
    threads_per_core: int = setting(
        default=1, one_of=(1, 2), doc="1 turns simultaneous multithreading off, 2 on (ThreadsPerCore)"
    )
    ebs_volume_size_gib: int = setting(
        default=500,
        minimum=1,
        maximum=16384,
        doc="the secondary EBS volume at /opt/sagemaker; the root volume's size is the service's (not settable)",
    )
    ebs_volume_kms_key_id: str | None = setting(
        default=None, pattern=KMS_KEY, allowed=KMS_HELP, doc="KMS key of the secondary volume; unset: an AWS owned key"
    )
    root_volume_kms_key_id: str | None = setting(
        default=None, pattern=KMS_KEY, allowed=KMS_HELP, doc="KMS key of the root volume; unset: an AWS owned key"
    )
    deep_health_checks: tuple[DeepHealthCheck, ...] | None = setting(
        default=None,
        allowed=DEEP_HEALTH_CHECK_NOTE,
        doc="checks every new node passes before it joins (not MultiNodeTrainingValidation: CloudFormation lacks it); "
        "unset: both on GPU and Trainium types with EFA, none on others; [] turns them off. They add minutes to hours "
        "to every creation, scale-up and replacement of the group's nodes",
    )
    training_plan_arn: str | None = setting(
        default=None,
        pattern=r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/[a-z0-9-]+",
        allowed="allowed: a SageMaker training plan ARN",
    )
    zones: tuple[str, ...] = setting(
        default=(),
        doc="zones as named in network: whose private subnets this group uses (OverrideVpcConfig); "
        "empty: the primary zone's",
    )
    patch_schedule: PatchScheduleConfig | None = setting(
        default=None, doc="when and how HyperPod patches this group's nodes (ScheduledUpdateConfig); unset: never"
    )

    def deep_checks(self) -> tuple[DeepHealthCheck, ...]:
        """The deep health checks the group gets: as set, or (unset) both for accelerated types with EFA.

        HyperPod runs them (when asked) on every new node before it joins: a GPU or Trainium node
        with a bad device or link is then replaced instead of failing the first job. They take from
        minutes to hours per node (HyperPod docs), which is why other types get none by default:
        the multi-device training types with EFA (p4d, p5, trn1.32xlarge, ...) are the ones they are
        made for, not a single-GPU g5.xlarge, an inf2 or a trn1.2xlarge.
        """
        if self.deep_health_checks is not None:
            return self.deep_health_checks
        kind = INSTANCE_TYPES.get(self.instance_type.removeprefix("ml."))
        wanted = kind is not None and kind.accelerator is not None and kind.efa
        return ("InstanceStress", "InstanceConnectivity") if wanted else ()

    def check(self, issues: Issues) -> None:
        checks = self.deep_health_checks or ()
        if len(set(checks)) != len(checks):
            issues.add("deep_health_checks", list(checks), "name each check at most once")
        if len(set(self.zones)) != len(self.zones):
            issues.add("zones", list(self.zones), "name each zone at most once")


@section
class WorkerGroupConfig(InstanceGroupConfig):
    """A worker group and the Slurm partition its nodes join."""

    partition_name: str | None = setting(
        default=None,
        pattern=r"[A-Za-z0-9_-]{1,64}",
        allowed="allowed: letters, digits, '_' and '-' (default: the group name)",
    )


#: Prefix of the system users the node steps create (``mlc-exporter``, ``mlc-collector``).
SYSTEM_USER_PREFIX = "mlc-"


@section
class PosixUser:
    """A user created on every node with the same UID."""

    name: str = setting(pattern=r"[a-z_][a-z0-9_-]{0,31}", allowed="allowed: a POSIX user name such as 'alice'")
    uid: int = setting(minimum=1000, maximum=60000)

    def check(self, issues: Issues) -> None:
        if self.name.startswith(SYSTEM_USER_PREFIX):
            issues.add(
                "name",
                self.name,
                f"names starting with {SYSTEM_USER_PREFIX!r} belong to the node steps' system users "
                "(mlc-collector may reach the instance role's credentials); choose another name",
            )


@section
class AccountingConfig:
    """Slurm accounting on the controller.

    ``local``: MariaDB on the controller (lost with it); ``remote``: a database you bring (``endpoint``
    and ``secret_arn``); ``managed``: the environment's ``storage.accounting`` database, which outlives
    the cluster (the nodes see it as ``remote``, with its endpoint and master secret); ``none``: off.
    """

    mode: Literal["none", "local", "remote", "managed"] = setting(
        default="local",
        doc="local: MariaDB on the controller; remote: endpoint and secret_arn; managed: the environment's "
        "storage.accounting database; none: no accounting",
    )
    endpoint: str | None = setting(
        default=None, pattern=r"[A-Za-z0-9.-]+(:\d{1,5})?", allowed="allowed: host or host:port of the database"
    )
    secret_arn: str | None = setting(
        default=None,
        pattern=r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+",
        allowed="allowed: a Secrets Manager secret ARN holding username and password",
    )

    def check(self, issues: Issues) -> None:
        if self.mode == "remote":
            if self.endpoint is None:
                issues.add("endpoint", None, "required with mode: remote")
            if self.secret_arn is None:
                issues.add("secret_arn", None, "required with mode: remote")
        elif self.endpoint is not None or self.secret_arn is not None:
            issues.add(
                "mode",
                self.mode,
                "endpoint and secret_arn are only used with mode: remote (managed takes both from storage.accounting)",
            )


@section
class LifecycleConfig:
    """Which lifecycle features the nodes run."""

    users: tuple[PosixUser, ...] = ()
    accounting: AccountingConfig = setting(default=AccountingConfig())
    docker: bool = True
    enroot_pyxis: bool = True
    home_on_fsx: bool = True
    #: Set by mlcluster from observability.prometheus.enabled; true in the file is refused (it was the older switch).
    observability: bool = setting(
        default=False,
        doc="not set here: exporters run on every node when observability.prometheus.enabled is true",
    )
    #: Members of the docker group are root on the node: only when asked for, with a synth warning.
    docker_group: bool = setting(
        default=False, doc="the cluster users join the docker group: root-equivalent on every node (synth warns)"
    )
    #: Rootless Podman for every cluster user, to build images without root.
    rootless_podman: bool = setting(default=True, doc="rootless Podman for every cluster user, to build images")
    #: How long workers and login nodes wait for slurmctld; unset: 720, as long as CloudFormation waits
    #: for an AWS::SageMaker::Cluster to be created.
    controller_wait_minutes: int | None = setting(
        default=None, minimum=1, maximum=720, doc="how long workers and login nodes wait for slurmctld; unset: 720"
    )

    def check(self, issues: Issues) -> None:
        if self.docker_group and not self.docker:
            issues.add("docker_group", True, "the docker group needs docker: true")
        if self.observability:
            issues.add(
                "observability",
                True,
                "replaced by observability.prometheus.enabled: true (a Prometheus workspace, exporters on every "
                "node and a collector on the controller); remove this key",
            )
        names = [u.name for u in self.users]
        uids = [u.uid for u in self.users]
        if len(set(names)) != len(names):
            issues.add("users", names, "user names must be unique")
        if len(set(uids)) != len(uids):
            issues.add("users", uids, "UIDs must be unique")
        if self.enroot_pyxis and not self.docker:
            issues.add("enroot_pyxis", True, "Enroot and Pyxis import images through Docker; set docker: true")


@section
class HyperPodConfig:
    """A HyperPod cluster: controller, optional login, worker groups."""

    controller: InstanceGroupConfig = setting(
        default=InstanceGroupConfig(instance_group_name="controller-machine", instance_type="ml.m5.12xlarge")
    )
    login: InstanceGroupConfig | None = None
    workers: tuple[WorkerGroupConfig, ...] = setting(allowed="at least one worker group")
    node_recovery: Literal["Automatic", "None"] = setting(
        default="Automatic", doc="Automatic: HyperPod replaces or reboots faulty nodes; None: it only labels them"
    )
    data_bucket_access: Literal["none", "read", "read_write"] = setting(
        default="read", doc="what every group's role may do in the data bucket; read_write only when asked"
    )
    slurm_config_strategy: Literal["Managed", "Overwrite", "Merge"] | None = setting(
        default=None,
        doc="HyperPod's own Slurm configuration (Orchestrator.Slurm) with each group's node type and partition; "
        "unset: the lifecycle scripts configure Slurm",
    )
    lifecycle: LifecycleConfig = setting(default=LifecycleConfig())
    patch_operator_role_arns: tuple[str, ...] = setting(
        default=(),
        pattern=r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}",
        allowed="allowed: IAM role ARNs (arn:aws:iam::123456789012:role/NAME), roles that exist",
        doc="roles whose sessions run `mlcluster patch`: the only principals besides the controller and the "
        "CloudFormation execution role that may use the patch backup bucket's KMS key",
    )

    def groups(self) -> list[tuple[str, InstanceGroupConfig]]:
        """Every instance group with its key path under ``cluster.hyperpod``: controller, login, workers."""
        found: list[tuple[str, InstanceGroupConfig]] = [("controller", self.controller)]
        if self.login is not None:
            found.append(("login", self.login))
        found += [(f"workers[{i}]", worker) for i, worker in enumerate(self.workers)]
        return found

    def lustre_efa_groups(self) -> list[str]:
        """The instance groups whose nodes reach an EFA-enabled FSx for Lustre over EFA (by instance type)."""
        return [group.instance_group_name for _, group in self.groups() if lustre_efa_capable(group.instance_type)]

    def check(self, issues: Issues) -> None:
        if not self.workers:
            issues.add("workers", [], "give at least one worker group")
        if self.controller.instance_count != 1:
            issues.add("controller.instance_count", self.controller.instance_count, "allowed: 1 (one Slurm controller)")
        names = [group.instance_group_name for _, group in self.groups()]
        if len(set(names)) != len(names):
            issues.add("workers", names, "instance group names must be unique across controller, login and workers")


def check_lustre_efa(issues: Issues, hyperpod: HyperPodConfig, *, file_system_zone: str) -> None:
    """Refuse what cannot work with an EFA-enabled FSx for Lustre: EFA clients outside its zone.

    EFA traffic does not leave an Availability Zone, and the FSx for Lustre guide
    ("Working with EFA-enabled file systems", prerequisites) requires the file system in "the same
    Availability Zone and /16 CIDR as your EFA-enabled client instances". A group whose instance type
    configures EFA for Lustre (:data:`LUSTRE_EFA_INSTANCE_TYPES`) must therefore stay in the file
    system's zone (``file_system_zone``, as ``zones`` names it). Paths are reported from the top of
    the environment file.
    """
    for path, group in hyperpod.groups():
        outside = [zone for zone in group.zones if zone != file_system_zone]
        if outside and lustre_efa_capable(group.instance_type):
            issues.add(
                f"cluster.hyperpod.{path}.zones",
                list(group.zones),
                f"{group.instance_type} nodes reach the EFA-enabled FSx for Lustre file system "
                f"(storage.lustre.efa_enabled) over EFA, and EFA does not leave a zone: the file system is in "
                f"{file_system_zone!r}, not in {', '.join(repr(z) for z in outside)}. Allowed: zones: "
                f"[{file_system_zone}] or no zones; or storage.lustre.efa_enabled: false",
            )
