"""The ``cluster.pcluster:`` section: an AWS ParallelCluster 3 cluster with Slurm.

The fields mirror the ParallelCluster configuration file in snake case and
leave out what mlcluster provides itself (subnets, security groups, file
system IDs, the node-script bucket): those are deploy-time values the
renderer (``mlcluster.pcluster.render``) fills in. Rules that need only this
section live in the ``check()`` methods; rules that need the instance-type
table or other sections are pre-deploy checks (``mlcluster.pcluster.checks``).
"""

from __future__ import annotations

import re
from typing import Literal

from mlcluster.config.awsdata import EC2_INSTANCE_TYPES
from mlcluster.config.network import AZ_ID, AZ_NAME, SUBNET_ID, parse_cidr
from mlcluster.config.schema import Issues, section, setting
from mlcluster.pcluster.provider_iam import allowed_text, attachable

EC2_INSTANCE = r"[a-z][a-z0-9-]*\.[a-z0-9]+"
EC2_HELP = "allowed: an EC2 instance type such as 'p5.48xlarge'"
NAME = r"[a-z][a-z0-9-]{0,24}"
NAME_HELP = "allowed: 1-25 lowercase letters, digits and '-', starting with a letter"
POLICY_ARN = r"arn:aws[a-z-]*:iam::(aws|\d{12}):policy/.+"
POLICY_HELP = "allowed: IAM managed policy ARNs such as 'arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess'"
CR_ID = r"cr-[0-9a-f]{17}"
CR_ARN = r"arn:aws[a-z-]*:ec2:[a-z0-9-]+:\d{12}:capacity-reservation/cr-[0-9a-f]{17}"
RG_ARN = r"arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]+"
GROUP_NAME = r"[A-Za-z0-9_.-]{1,64}"
AMI_ID = r"ami-[0-9a-f]{8}([0-9a-f]{9})?"
AMI_HELP = "allowed: an AMI ID such as 'ami-0123456789abcdef0'"
SCRIPT_URL = r"(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/|https://)[^\s]+"
SCRIPT_HELP = "allowed: an s3:// or https:// URL of a script"
SECRET_ARN = r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+"
SLURM_KEY = r"[A-Za-z][A-Za-z0-9_]*"
PREFIX_LIST = r"pl-[0-9a-f]{8,17}"

#: The first ParallelCluster release whose schema no longer accepts ``alinux2``
#: (3.16's ``SUPPORTED_OSES`` lists every other ``os`` value).
ALINUX2_DROPPED_IN = (3, 16, 0)

#: Custom Slurm settings ParallelCluster 3.16 refuses, per level (its
#: ``SLURM_SETTINGS_DENY_LIST``; keys compare case-insensitively).
DENIED_SLURM_SETTINGS = {
    "cluster": (
        "epilog",
        "grestypes",
        "launchparameters",
        "prolog",
        "reconfigflags",
        "resumefailprogram",
        "resumeprogram",
        "resumetimeout",
        "slurmctldhost",
        "slurmctldlogfile",
        "slurmctldparameters",
        "slurmdlogfile",
        "slurmuser",
        "suspendexcnodes",
        "suspendprogram",
        "suspendtime",
        "taskplugin",
        "treewidth",
    ),
    "accounting": (
        "accountingstoragetype",
        "accountingstoragehost",
        "accountingstorageport",
        "accountingstorageuser",
        "jobacctgathertype",
    ),
    "queue": ("nodes", "partitionname", "resumetimeout", "state", "suspendtime", "oversubscribe"),
    "compute_resource": ("cpus", "gres", "nodeaddr", "nodehostname", "nodename", "state", "weight"),
}

#: Operating systems ParallelCluster supports but publishes no image for: they need ``custom_ami``.
OS_WITHOUT_IMAGES = ("rocky8", "rocky9")

#: ParallelCluster limits (3.16 ``constants.py``).
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES = 50
MAX_TAGS = 40


def parse_version(version: str) -> tuple[int, int, int]:
    """``"3.16.1"`` -> ``(3, 16, 1)``; the field pattern guarantees three numbers."""
    major, minor, patch = (int(part) for part in version.split("."))
    return major, minor, patch


def _check_slurm_settings(issues: Issues, key: str, settings: dict[str, str], denied: tuple[str, ...]) -> None:
    for name in settings:
        if name.lower() in denied:
            issues.add(
                f"{key}.{name}",
                name,
                "ParallelCluster manages this Slurm setting and refuses it here; not allowed: " + ", ".join(denied),
            )


@section
class CustomActionConfig:
    """One script ParallelCluster runs at a node event, with its arguments."""

    script: str = setting(pattern=SCRIPT_URL, allowed=SCRIPT_HELP)
    args: tuple[str, ...] = ()


@section
class CustomActionsConfig:
    """Your own scripts for queue nodes; they run after mlcluster's node scripts."""

    on_node_start: tuple[CustomActionConfig, ...] = ()
    on_node_configured: tuple[CustomActionConfig, ...] = ()


@section
class HeadNodeCustomActionsConfig(CustomActionsConfig):
    """Your own scripts for the head node, including after a cluster update."""

    on_node_updated: tuple[CustomActionConfig, ...] = ()


#: SSH sources that mean "the whole internet"; refused unless the file says so (``allow_ssh_from_internet``).
WORLD_CIDRS = ("0.0.0.0/0", "::/0")


@section
class HeadNodeConfig:
    """The head node: Slurm controller and the default login host.

    ``subnet: private`` (the default) puts it in the primary zone's private
    subnet: it reaches the internet through the NAT gateway, has no public
    IP, and you reach it with Session Manager (``ssm``) or SSH from inside the
    VPC. ``subnet: public`` puts it in the public subnet with an Elastic IP
    (``HeadNode.Networking.ElasticIp``), the only way a node there gets out,
    since mlcluster's public subnets map no public IPs on launch.

    IMDSv2 is always required and IMDS is restricted to root on the head node
    (``Imds.Secured``); these are not settings. ``ssm`` lets Session Manager
    reach the head and login nodes without SSH keys (mlcluster's own policy:
    registration and session channels, no ``ssm:GetParameter*``); ``ssh_allowed_cidr`` is
    where SSH may come from (the head node and the login nodes' load
    balancer), the VPC's CIDR by default. ``0.0.0.0/0`` (the whole internet)
    is refused unless ``allow_ssh_from_internet`` is true.
    """

    instance_type: str = setting(
        default="m5.8xlarge", pattern=EC2_INSTANCE, allowed=EC2_HELP, choices=EC2_INSTANCE_TYPES
    )
    subnet: Literal["public", "private"] = "private"
    ssm: bool = True
    key_name: str | None = setting(
        default=None, pattern=r"[\x20-\x7e]{1,255}", allowed="allowed: the name of an existing EC2 key pair"
    )
    ssh_allowed_cidr: str | None = setting(
        default=None, allowed="allowed: an IPv4 CIDR block or a prefix list ID (default: the VPC's CIDR)"
    )
    allow_ssh_from_internet: bool = False
    root_volume_gib: int = setting(default=200, minimum=40, maximum=16384)
    additional_iam_policies: tuple[str, ...] = setting(default=(), pattern=POLICY_ARN, allowed=POLICY_HELP)
    custom_actions: HeadNodeCustomActionsConfig = setting(default=HeadNodeCustomActionsConfig())

    def check(self, issues: Issues) -> None:
        cidr = self.ssh_allowed_cidr
        if cidr in WORLD_CIDRS and not self.allow_ssh_from_internet:
            issues.add(
                "ssh_allowed_cidr",
                cidr,
                "opens SSH to the whole internet; give your network's CIDR or a prefix list, use Session Manager "
                "(ssm), or set head_node.allow_ssh_from_internet: true to mean it",
            )
        elif cidr is not None and parse_cidr(cidr) is None and not _is_prefix_list(cidr):
            issues.add("ssh_allowed_cidr", cidr, "allowed: an IPv4 CIDR block such as '10.0.0.0/16' or 'pl-0123abcd'")
        _check_attachable(issues, self.additional_iam_policies)

    @property
    def ssh_from_internet(self) -> bool:
        """True when SSH is open to every IPv4 address."""
        return self.ssh_allowed_cidr == "0.0.0.0/0"


def _check_attachable(issues: Issues, policies: tuple[str, ...]) -> None:
    """Each policy must be one ParallelCluster's provider may attach (else the create fails at the node role)."""
    for index, arn in enumerate(policies):
        if re.fullmatch(POLICY_ARN, arn) and not attachable(arn):
            issues.add(
                f"additional_iam_policies[{index}]",
                arn,
                "ParallelCluster's provider cannot attach this policy to the node role; allowed: " + allowed_text(),
            )


def _is_prefix_list(value: str) -> bool:
    return re.fullmatch(PREFIX_LIST, value) is not None


@section
class ComputeResourceConfig:
    """One instance type in a queue (a ParallelCluster compute resource).

    ``sockets``, ``cores_per_socket`` and ``threads_per_core`` override the
    Slurm layout of the instance-type table (threads default to the table's);
    their product must equal the instance's vCPUs.

    ``efa`` and ``placement_group`` left out are decided for you: EFA is on
    when the instance type supports it; a placement group is used for EFA
    instances unless the capacity comes from a reservation or capacity block,
    whose own placement would conflict with a new group.
    ``placement_group_name`` names a cluster placement group you own (for
    example the one your capacity reservation was made in); the nodes launch
    into it instead of a group ParallelCluster makes.
    """

    name: str = setting(pattern=NAME, allowed=NAME_HELP)
    instance_type: str = setting(pattern=EC2_INSTANCE, allowed=EC2_HELP, choices=EC2_INSTANCE_TYPES)
    min_count: int = setting(default=0, minimum=0, maximum=5000)
    max_count: int = setting(default=1, minimum=1, maximum=5000)
    efa: bool | None = None
    placement_group: bool | None = None
    placement_group_name: str | None = setting(
        default=None,
        pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}",
        allowed="allowed: the name of a cluster placement group you created (1-255 letters, digits, '.', '_', '-')",
    )
    capacity_reservation_id: str | None = setting(
        default=None, pattern=CR_ID, allowed="allowed: an ID such as 'cr-0123456789abcdef0'"
    )
    capacity_reservation_group: str | None = setting(
        default=None,
        pattern=GROUP_NAME + "|" + RG_ARN,
        allowed="allowed: the name of a group in capacity_reservation_groups, or a resource group ARN",
    )
    sockets: int | None = setting(default=None, minimum=1, maximum=16)
    cores_per_socket: int | None = setting(default=None, minimum=1, maximum=512)
    threads_per_core: int | None = setting(default=None, minimum=1, maximum=2)
    custom_slurm_settings: dict[str, str] = setting(default={})

    def check(self, issues: Issues) -> None:
        if self.min_count > self.max_count:
            issues.add("min_count", self.min_count, f"must not exceed max_count ({self.max_count})")
        if self.capacity_reservation_id is not None and self.capacity_reservation_group is not None:
            issues.add(
                "capacity_reservation_group",
                self.capacity_reservation_group,
                "give capacity_reservation_id or capacity_reservation_group, not both",
            )
        if self.placement_group_name is not None and self.placement_group is False:
            issues.add(
                "placement_group",
                False,
                f"placement_group_name ({self.placement_group_name}) launches into that group; remove "
                "placement_group or set it to true",
            )
        if (self.sockets is None) != (self.cores_per_socket is None):
            issues.add("sockets", self.sockets, "give sockets and cores_per_socket together")
        if self.threads_per_core is not None and self.sockets is None:
            issues.add("threads_per_core", self.threads_per_core, "give it with sockets and cores_per_socket")
        _check_slurm_settings(
            issues, "custom_slurm_settings", dict(self.custom_slurm_settings), DENIED_SLURM_SETTINGS["compute_resource"]
        )
        overridden = {k.lower() for k in self.custom_slurm_settings} & {"sockets", "corespersocket", "threadspercore"}
        if overridden:
            issues.add(
                "custom_slurm_settings",
                sorted(overridden),
                "set sockets, cores_per_socket and threads_per_core with their own keys, not in custom_slurm_settings",
            )

    @property
    def reserved(self) -> bool:
        """True when the instances come from a capacity reservation (by ID or group)."""
        return self.capacity_reservation_id is not None or self.capacity_reservation_group is not None


@section
class QueueConfig:
    """A Slurm queue (partition).

    ``zones`` picks the private subnets the queue launches into, by the zone
    labels used in the ``network:`` section (or subnet IDs with
    ``network.existing``); empty means the primary zone, where FSx for Lustre is.
    ``ssm`` lets Session Manager reach the nodes (off by default: jobs on
    compute nodes can read the instance profile, so every node policy is a
    job's policy; mlcluster's Session Manager policy has no
    ``ssm:GetParameter*``, unlike AmazonSSMManagedInstanceCore).
    """

    name: str = setting(pattern=NAME, allowed=NAME_HELP)
    capacity_type: Literal["ONDEMAND", "SPOT", "CAPACITY_BLOCK"] = "ONDEMAND"
    compute_resources: tuple[ComputeResourceConfig, ...] = setting(allowed="at least one compute resource")
    zones: tuple[str, ...] = setting(
        default=(),
        pattern=f"{AZ_NAME}|{AZ_ID}|{SUBNET_ID}",
        allowed="allowed: zone names or IDs from the network section (or subnet IDs with network.existing)",
    )
    job_exclusive_allocation: bool = False
    ssm: bool = False
    root_volume_gib: int = setting(default=200, minimum=40, maximum=16384)
    custom_ami: str | None = setting(default=None, pattern=AMI_ID, allowed=AMI_HELP)
    additional_iam_policies: tuple[str, ...] = setting(default=(), pattern=POLICY_ARN, allowed=POLICY_HELP)
    custom_actions: CustomActionsConfig = setting(default=CustomActionsConfig())
    custom_slurm_settings: dict[str, str] = setting(default={})

    def check(self, issues: Issues) -> None:
        if not self.compute_resources:
            issues.add("compute_resources", [], "give at least one compute resource")
        if len(self.compute_resources) > MAX_COMPUTE_RESOURCES:
            issues.add("compute_resources", len(self.compute_resources), f"allowed: at most {MAX_COMPUTE_RESOURCES}")
        if self.name == "default":
            issues.add("name", self.name, "ParallelCluster forbids the queue name 'default'; choose another")
        names = [cr.name for cr in self.compute_resources]
        if len(set(names)) != len(names):
            issues.add("compute_resources", names, "compute resource names must be unique within a queue")
        if len(set(self.zones)) != len(self.zones):
            issues.add("zones", list(self.zones), "each zone may appear once")
        _check_attachable(issues, self.additional_iam_policies)
        _check_slurm_settings(
            issues, "custom_slurm_settings", dict(self.custom_slurm_settings), DENIED_SLURM_SETTINGS["queue"]
        )
        for index, cr in enumerate(self.compute_resources):
            where = f"compute_resources[{index}]"
            if self.capacity_type == "SPOT" and cr.reserved:
                issues.add(
                    "capacity_type",
                    "SPOT",
                    f"{where} ({cr.name}) uses a capacity reservation, which serves on-demand launches only; "
                    "use capacity_type ONDEMAND (or CAPACITY_BLOCK for a capacity block)",
                )
            if self.capacity_type == "CAPACITY_BLOCK":
                if cr.capacity_reservation_id is None:
                    issues.add(
                        f"{where}.capacity_reservation_id",
                        None,
                        "required with capacity_type CAPACITY_BLOCK: the capacity block's reservation ID",
                    )
                if cr.min_count != cr.max_count or cr.min_count == 0:
                    issues.add(
                        f"{where}.min_count",
                        cr.min_count,
                        f"with capacity_type CAPACITY_BLOCK min_count must equal max_count ({cr.max_count}) "
                        "and be at least 1 (capacity block nodes are static)",
                    )


@section
class AccountingDatabaseConfig:
    """An existing MySQL-compatible database for Slurm accounting (slurmdbd on the head node)."""

    uri: str = setting(
        pattern=r"[A-Za-z0-9.-]+(:\d{1,5})?", allowed="allowed: host or host:port of the database, e.g. 'db:3306'"
    )
    user_name: str = setting(pattern=r"[A-Za-z0-9_]{1,64}", allowed="allowed: a database user name")
    password_secret_arn: str = setting(
        pattern=SECRET_ARN, allowed="allowed: the ARN of a Secrets Manager secret holding the password"
    )
    database_name: str | None = setting(
        default=None, pattern=r"[0-9a-z_]{1,64}", allowed="allowed: 1-64 lowercase letters, digits and '_'"
    )


@section
class SlurmSettingsConfig:
    """Cluster-wide Slurm settings."""

    scaledown_idle_minutes: int = setting(default=10, minimum=-1, maximum=525600)
    queue_update_strategy: Literal["DRAIN", "TERMINATE", "COMPUTE_FLEET_STOP"] = "DRAIN"
    custom_settings: dict[str, str] = setting(default={})
    accounting: AccountingDatabaseConfig | None = None

    def check(self, issues: Issues) -> None:
        _check_slurm_settings(issues, "custom_settings", dict(self.custom_settings), DENIED_SLURM_SETTINGS["cluster"])
        if self.accounting is not None:
            _check_slurm_settings(
                issues, "custom_settings", dict(self.custom_settings), DENIED_SLURM_SETTINGS["accounting"]
            )


@section
class AppsVolumeConfig:
    """An EBS volume on the head node, shared over NFS at /apps."""

    size_gib: int = setting(default=200, minimum=1, maximum=16384)
    deletion_policy: Literal["Delete", "Retain", "Snapshot"] = "Snapshot"


@section
class HomeVolumeConfig:
    """An EBS volume for /home when it is not on OpenZFS, kept when the cluster goes.

    ParallelCluster attaches it to the head node, mounts it at /home and shares it over NFS
    (``SharedStorage`` of type ``Ebs``): the users' homes live on a volume of their own, not on
    the head node's root volume, so deleting the cluster, a new cluster or a lost head node
    leaves them in the account (``Retain``), or in a snapshot (``Snapshot``). Unset, the policy
    follows ``retention.on_delete``: ``Retain`` for ``retain``, ``Delete`` for ``destroy`` (a
    throw-away environment leaves nothing billing). A new cluster gets a new, empty volume: the
    kept one is listed by ``mlcluster status`` and its files are copied over by hand.
    ``enabled: false`` leaves /home on the head node (synth warns).
    """

    enabled: bool = True
    size_gib: int = setting(default=100, minimum=1, maximum=16384)
    deletion_policy: Literal["Delete", "Retain", "Snapshot"] | None = setting(
        default=None,
        doc="what ParallelCluster does with the volume when the cluster is deleted; unset: Retain, or Delete "
        "with retention.on_delete: destroy",
    )


@section
class SharedStorageConfig:
    """Shared file systems. FSx for Lustre is always mounted at /fsx; /home on OpenZFS or its own EBS volume."""

    home_on_openzfs: bool = False
    home_volume: HomeVolumeConfig = setting(default=HomeVolumeConfig())
    apps: AppsVolumeConfig | None = None


@section
class MonitoringConfig:
    """CloudWatch logs, dashboard, alarms and EC2 detailed monitoring.

    Log retention and deletion follow the environment's ``retention:`` section.
    """

    logs: bool = True
    dashboards: bool = True
    alarms: bool = True
    detailed_monitoring: bool = False


@section
class LoginNodesConfig:
    """A pool of login nodes behind a Network Load Balancer (ParallelCluster 3.7+).

    By default the pool sits in the primary zone's private subnet behind NAT,
    and its load balancer is internal: reachable from the VPC (and peered
    networks), plus Session Manager when ``head_node.ssm`` is on.
    ``internet_facing: true`` puts the pool in the public subnet, where
    ParallelCluster makes the load balancer internet-facing; the nodes then
    get public IPs on launch (their only way out there), and SSH is admitted
    from ``head_node.ssh_allowed_cidr``.
    """

    instance_type: str = setting(
        default="m5.2xlarge", pattern=EC2_INSTANCE, allowed=EC2_HELP, choices=EC2_INSTANCE_TYPES
    )
    count: int = setting(default=1, minimum=1, maximum=100)
    internet_facing: bool = False


@section
class CapacityReservationGroupConfig:
    """A capacity reservation group (a resource group pooling reservations) that mlcluster creates."""

    name: str = setting(pattern=GROUP_NAME, allowed="allowed: 1-64 letters, digits, '_', '.' and '-'")
    reservation_ids: tuple[str, ...] = setting(
        pattern=f"{CR_ID}|{CR_ARN}",
        allowed="allowed: IDs such as 'cr-0123456789abcdef0' or capacity reservation ARNs (for shared ones)",
    )

    def check(self, issues: Issues) -> None:
        if not self.reservation_ids:
            issues.add("reservation_ids", [], "give at least one capacity reservation")
        ids = [r.rsplit("/", 1)[-1] for r in self.reservation_ids]
        if len(set(ids)) != len(ids):
            issues.add("reservation_ids", list(self.reservation_ids), "each reservation may appear once")


@section
class NodeScriptsConfig:
    """Which mlcluster node scripts run (OnNodeConfigured).

    Each applies where it fits: Docker (root only), rootless Podman, Enroot
    and Pyxis on every node; NCCL with aws-ofi-nccl and nccl-tests on queues
    with NVIDIA GPUs and EFA; the Neuron SDK on queues with Trainium or
    Inferentia. ``docker_group`` adds the OS's default user to the ``docker``
    group on every node, which makes that user root there: off unless asked.
    ``health_check`` installs mlcluster's node health tool on every compute node
    and names it Slurm's HealthCheckProgram: every 5 minutes, a node failing a
    critical quick check (GPU or EFA count, Xid, ECC, Neuron devices) drains
    itself, the failed checks in its reason (``scontrol show node``).
    """

    docker_enroot_pyxis: bool = True
    nccl_efa: bool = True
    neuron: bool = True
    docker_group: bool = False
    health_check: bool = True


@section
class PclusterConfig:
    """A ParallelCluster cluster: head node, queues, shared storage, monitoring."""

    version: str = setting(
        default="3.16.1", pattern=r"3\.\d+\.\d+", allowed="allowed: a ParallelCluster 3 version such as '3.16.1'"
    )
    os: Literal["alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9", "rocky8", "rocky9", "alinux2"] = (
        "alinux2023"
    )
    custom_ami: str | None = setting(default=None, pattern=AMI_ID, allowed=AMI_HELP)
    head_node: HeadNodeConfig = setting(default=HeadNodeConfig())
    queues: tuple[QueueConfig, ...] = setting(allowed="at least one queue")
    slurm: SlurmSettingsConfig = setting(default=SlurmSettingsConfig())
    shared_storage: SharedStorageConfig = setting(default=SharedStorageConfig())
    monitoring: MonitoringConfig = setting(default=MonitoringConfig())
    login_nodes: LoginNodesConfig | None = None
    tags: dict[str, str] = setting(default={})
    capacity_reservation_groups: tuple[CapacityReservationGroupConfig, ...] = ()
    node_scripts: NodeScriptsConfig = setting(default=NodeScriptsConfig())

    def check(self, issues: Issues) -> None:
        if not self.queues:
            issues.add("queues", [], "give at least one queue")
        if len(self.queues) > MAX_QUEUES:
            issues.add("queues", len(self.queues), f"allowed: at most {MAX_QUEUES} queues")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            issues.add("queues", names, "queue names must be unique")
        total = sum(len(q.compute_resources) for q in self.queues)
        if total > MAX_COMPUTE_RESOURCES:
            issues.add("queues", total, f"allowed: at most {MAX_COMPUTE_RESOURCES} compute resources in all queues")
        if self.os in OS_WITHOUT_IMAGES and self.custom_ami is None:
            issues.add(
                "os",
                self.os,
                "ParallelCluster publishes no image for this operating system; give custom_ami (an image built "
                "with pcluster build-image from a Rocky Linux AMI) or choose one of: "
                + ", ".join(o for o in ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9")),
            )
        if self.os == "alinux2" and parse_version(self.version) >= ALINUX2_DROPPED_IN:
            issues.add(
                "os",
                self.os,
                f"ParallelCluster {self.version} no longer offers alinux2; use alinux2023 "
                "(or pin version to a release before 3.16)",
            )
        groups = [g.name for g in self.capacity_reservation_groups]
        if len(set(groups)) != len(groups):
            issues.add("capacity_reservation_groups", groups, "group names must be unique")
        for qi, queue in enumerate(self.queues):
            for ci, cr in enumerate(queue.compute_resources):
                ref = cr.capacity_reservation_group
                if ref is not None and not ref.startswith("arn:") and ref not in groups:
                    issues.add(
                        f"queues[{qi}].compute_resources[{ci}].capacity_reservation_group",
                        ref,
                        "no such group; allowed: " + (", ".join(groups) or "(capacity_reservation_groups is empty)"),
                    )
        if len(self.tags) > MAX_TAGS:
            issues.add("tags", len(self.tags), f"allowed: at most {MAX_TAGS} tags")
        for key, value in self.tags.items():
            if key.startswith("parallelcluster:") or not 1 <= len(key) <= 128 or len(value) > 256:
                issues.add(
                    f"tags.{key}",
                    key,
                    "allowed: keys of 1-128 characters not starting with 'parallelcluster:', values up to 256",
                )
