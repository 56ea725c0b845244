"""Render the ParallelCluster 3 cluster configuration.

``render_cluster_config`` turns the ``cluster.pcluster:`` section and the
deploy-time values (``DeployInputs``: subnet, security group, file system
and bucket IDs, often CDK tokens) into the configuration as a Python dict,
ready to be the ``ClusterConfiguration`` of a ``Custom::PclusterCluster``
resource. Tokens pass through untouched; CloudFormation resolves them.

What the renderer decides for you, and why:

- The head node and login nodes sit in the private subnet behind NAT
  unless the file asks for ``public``: a public head node gets an Elastic
  IP, a public (``internet_facing``) login pool an internet-facing load
  balancer, and its nodes public IPs from the subnet (the network maps them
  only then).
- IMDSv2 only (``Imds.ImdsSupport: v2.0``) and IMDS restricted to root on
  the head node (``HeadNode.Imds.Secured``).
- Session Manager through mlcluster's own node policy (no
  ``ssm:GetParameter*``), on the head and login nodes by default and on a
  queue only when it asks (compute nodes leave IMDS open to jobs); every
  role ParallelCluster creates carries the permissions boundary.
- With a Prometheus workspace (``collector_policy_arn``), the head node
  runs the metrics collector step and gets ``aps:RemoteWrite`` on that
  workspace; no other node does.
- Every node role may read the node scripts (``Iam.S3Access`` on the
  script prefix) and the S3 scripts of your own custom actions. A queue's
  node-script action carries the SHA-256 of every file ``run.sh`` fetches
  (``--sha256``): ``run.sh`` refuses a file changed in the bucket before any
  step runs. The head node's and the login pool's action carries no digest
  (they trust the script bucket's write lock), because
  ParallelCluster refuses any change to their ``CustomActions`` on update:
  their arguments stay the same across script releases, queue additions
  and collector settings.
- EFA follows the instance type unless set; the placement group is always
  explicit (ParallelCluster requires that with EFA) and off for reserved
  capacity, whose own placement a new group would contradict (seed 000).
- Slurm ``Sockets``/``CoresPerSocket``/``ThreadsPerCore`` from the
  instance-type table (or your override), always all three, go into the
  compute resource's ``CustomSlurmSettings``.
- Every compute node gets mlcluster's node health tool, and slurm.conf names it as
  ``HealthCheckProgram`` (``SlurmSettings.CustomSlurmSettings``; ParallelCluster denies
  ``Prolog`` there, not this): a node failing a critical quick check drains itself with the
  reason (``node_scripts.health_check``, on by default). Your own ``HealthCheck*`` settings in
  ``slurm.custom_settings`` win.
- FSx for Lustre is mounted at /fsx, optional OpenZFS at /home, optional
  EBS at /apps; root volumes are encrypted gp3.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlcluster.config.pcluster import (
    ComputeResourceConfig,
    CustomActionConfig,
    PclusterConfig,
    QueueConfig,
)
from mlcluster.lifecycle.pcluster import (
    ENTRY_SCRIPT,
    HEALTH_CHECK_PROGRAM,
    node_files,
    node_script_sha256,
)
from mlcluster.pcluster.instance_types import SlurmLayout, lookup, slurm_layout

#: Log retention periods (days) ParallelCluster 3.16 accepts for ``RetentionInDays``.
PCLUSTER_LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)

#: Slurm's health check on ParallelCluster compute nodes: mlcluster's quick checks every 5 minutes,
#: spread over the interval (CYCLE), in any node state; a node failing a critical check drains itself
#: with the reason (the health_check step installs the program; the same settings as HyperPod's).
HEALTH_CHECK_SETTINGS = {
    "HealthCheckProgram": HEALTH_CHECK_PROGRAM,
    "HealthCheckInterval": "300",
    "HealthCheckNodeState": "ANY,CYCLE",
}

_TOKEN = re.compile(r"[$#]\{Token\[[^\]]+\]\}")
_S3_URL = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>.+)")


class RenderError(ValueError):
    """A deploy-time input is missing or does not fit the configuration."""


def is_token(value: str) -> bool:
    """True when ``value`` holds an unresolved CDK token (a deploy-time value)."""
    return _TOKEN.search(value) is not None


@dataclass(frozen=True, kw_only=True)
class ZoneSubnet:
    """A private subnet and the zone label it is known by in the environment file.

    ``zone`` is the availability zone name or ID as written in the
    ``network:`` section (or the subnet ID itself for ``network.existing``).
    """

    zone: str
    subnet_id: str


@dataclass(frozen=True, kw_only=True)
class ManagedAccounting:
    """The environment's managed Slurm accounting database, as the head node's slurmdbd uses it.

    :param uri: ``host:port`` of the database (``SlurmSettings.Database.Uri``).
    :param user_name: slurmdbd's own database user (``UserName``).
    :param password_secret_arn: the secret holding that user's bare password (``PasswordSecretArn``).
    :param database_name: the database slurmdbd keeps its tables in, the same for every cluster (``DatabaseName``).
    :param client_security_group_id: the only group the database admits: the head node's alone.
    :param policy_arn: a managed policy that lets the head node decrypt the secret (the environment key,
        through Secrets Manager only); ParallelCluster grants ``GetSecretValue`` on it itself.
    """

    uri: str
    user_name: str
    password_secret_arn: str
    database_name: str
    client_security_group_id: str
    policy_arn: str


@dataclass(frozen=True, kw_only=True)
class DeployInputs:
    """The deploy-time values a cluster configuration needs (strings may be CDK tokens).

    :param region: the cluster's region (``Region`` in the configuration).
    :param private_subnets: the private subnets, primary zone (the one with FSx for Lustre) first.
    :param public_subnet_id: the primary zone's public subnet, for a head node or login nodes in ``public``.
    :param security_group_ids: extra security groups for every node (the one FSx and EFA traffic use).
    :param vpc_cidr: the VPC's CIDR: the default source allowed to reach SSH on the head and login nodes.
    :param lustre_file_system_id: the FSx for Lustre file system mounted at /fsx.
    :param node_script_bucket: the bucket holding the node scripts.
    :param node_script_prefix: the key prefix of the node scripts, ending in ``/``.
    :param openzfs_volume_id: the FSx for OpenZFS volume for /home, when ``home_on_openzfs``.
    :param node_script_policy_arn: a managed policy that reads the node scripts; login nodes need it
        because ParallelCluster offers no ``S3Access`` for them.
    :param session_manager_policy_arn: the node policy for Session Manager (no ``ssm:GetParameter*``),
        attached to the head node and login nodes with ``head_node.ssm`` and to queues with ``ssm``.
    :param collector_policy_arn: the head node's policy to remote-write to the environment's Prometheus
        workspace; when given, the head node also runs the ``collector`` step (observability.prometheus).
    :param permissions_boundary_arn: the permissions boundary of every role ParallelCluster creates
        (``Iam.PermissionsBoundary``); the provider role may create roles only with it.
    :param reservation_group_arns: capacity reservation group ARNs by group name.
    :param log_retention_days: CloudWatch log retention (rounded up to a value ParallelCluster accepts).
    :param retain_logs: keep the cluster's log group when the cluster is deleted.
    :param retain_home: keep the /home volume when the cluster is deleted, unless
        ``home_volume.deletion_policy`` says otherwise (``retention.on_delete``: False for ``destroy``).
    :param tags: tags for every cluster resource (the configuration's own tags win).
    :param exporters: every node runs the metrics exporters step (``observability.prometheus.enabled``).
    :param node_script_sha256: file name -> hex SHA-256 of the node scripts uploaded to the prefix, carried
        by the queues' node-script actions; default: the files of this package, as the stack uploads them.
    :param accounting: the managed accounting database (``storage.accounting``): ``SlurmSettings.Database``
        points at it, and the head node alone gets its client group and its secret's key policy. Default: none
        (``slurm.accounting``, your own database, or no accounting).
    """

    region: str
    private_subnets: tuple[ZoneSubnet, ...]
    public_subnet_id: str | None
    security_group_ids: tuple[str, ...]
    vpc_cidr: str
    lustre_file_system_id: str
    node_script_bucket: str
    node_script_prefix: str = "pcluster/"
    openzfs_volume_id: str | None = None
    node_script_policy_arn: str | None = None
    session_manager_policy_arn: str | None = None
    collector_policy_arn: str | None = None
    permissions_boundary_arn: str | None = None
    reservation_group_arns: Mapping[str, str] = field(default_factory=dict)
    log_retention_days: int = 365
    retain_logs: bool = True
    retain_home: bool = True
    tags: Mapping[str, str] = field(default_factory=dict)
    exporters: bool = False
    node_script_sha256: Mapping[str, str] = field(default_factory=node_script_sha256)
    accounting: ManagedAccounting | None = None

    def __post_init__(self) -> None:
        """Reject inputs that cannot make a valid configuration, naming the input."""
        if not self.private_subnets:
            raise RenderError("private_subnets: give at least one private subnet (the primary zone's first)")
        if not self.security_group_ids:
            raise RenderError("security_group_ids: give the node security group")
        prefix = self.node_script_prefix
        if not is_token(prefix) and (prefix.startswith("/") or not prefix.endswith("/")):
            raise RenderError(
                f"node_script_prefix: {prefix!r} is not valid; allowed: a key prefix ending in '/', "
                "not starting with '/', such as 'pcluster/'"
            )
        if self.log_retention_days < 1:
            raise RenderError(f"log_retention_days: {self.log_retention_days} is not valid; allowed: 1 or more")

    @property
    def primary_zone(self) -> str:
        """The zone label of the primary zone (where FSx for Lustre is)."""
        return self.private_subnets[0].zone

    def subnet_for(self, zone: str) -> str:
        """The private subnet ID for ``zone`` (a zone label or a subnet ID)."""
        for item in self.private_subnets:
            if zone in (item.zone, item.subnet_id):
                return item.subnet_id
        known = ", ".join(s.zone for s in self.private_subnets)
        raise RenderError(f"no private subnet in zone {zone!r}; zones with private subnets: {known}")


# ---------------------------------------------------------------- decisions


def efa_enabled(cr: ComputeResourceConfig) -> bool:
    """EFA as configured, else on when the instance type supports it (off for unknown types)."""
    if cr.efa is not None:
        return cr.efa
    info = lookup(cr.instance_type)
    return info is not None and info.efa


def placement_group_enabled(queue: QueueConfig, cr: ComputeResourceConfig) -> bool:
    """The placement group as configured, else on only for EFA on unreserved capacity in one zone.

    Reserved capacity (a targeted ODCR, a reservation group, a capacity block)
    comes with its own placement; a new placement group conflicts with it and
    launches fail with insufficient capacity. Placement groups cannot span zones.
    """
    if cr.placement_group_name is not None:
        return True
    if cr.placement_group is not None:
        return cr.placement_group
    reserved = cr.reserved or queue.capacity_type == "CAPACITY_BLOCK"
    return efa_enabled(cr) and not reserved and len(queue.zones) <= 1


def socket_settings(cr: ComputeResourceConfig) -> dict[str, int]:
    """Slurm ``Sockets``/``CoresPerSocket``/``ThreadsPerCore`` for ``cr``: the override, else the table, else none.

    All three or none: with sockets and cores but no threads, Slurm resets the
    node's CPUs to sockets x cores, half the vCPUs when SMT is on.
    """
    layout = slurm_layout(cr.instance_type)
    if cr.sockets is not None and cr.cores_per_socket is not None:
        info = lookup(cr.instance_type)
        threads = cr.threads_per_core or (info.threads_per_core if info is not None else None)
        if threads is None:
            raise RenderError(
                f"threads_per_core: {cr.instance_type} is not in the instance-type table; give threads_per_core "
                "with sockets and cores_per_socket"
            )
        return SlurmLayout(cr.sockets, cr.cores_per_socket, threads).settings()
    return layout.settings() if layout is not None else {}


def login_subnet(cfg: PclusterConfig) -> str:
    """``public`` when the login pool (and its load balancer) faces the internet, else ``private``."""
    return "public" if cfg.login_nodes is not None and cfg.login_nodes.internet_facing else "private"


def _container_steps(cfg: PclusterConfig) -> list[str]:
    """Container steps every node runs; ``docker_group`` only when the file asks for it."""
    if not cfg.node_scripts.docker_enroot_pyxis:
        return []
    return ["docker", "docker_group", "enroot_pyxis"] if cfg.node_scripts.docker_group else ["docker", "enroot_pyxis"]


def _exporter_steps(exporters: bool) -> list[str]:
    """The metrics exporters step, last (after the Neuron SDK it monitors), when Prometheus is on."""
    return ["exporters"] if exporters else []


def head_node_steps(cfg: PclusterConfig, *, exporters: bool = False) -> list[str]:
    """The node-script steps the head node runs (``exporters``: Prometheus metrics exporters too)."""
    return _container_steps(cfg) + _exporter_steps(exporters)


def login_node_steps(cfg: PclusterConfig, *, exporters: bool = False) -> list[str]:
    """The node-script steps login nodes run (containers are started from them too)."""
    return _container_steps(cfg) + _exporter_steps(exporters) if cfg.login_nodes is not None else []


def queue_steps(cfg: PclusterConfig, queue: QueueConfig, *, exporters: bool = False) -> list[str]:
    """The node-script steps a queue's nodes run, chosen by their accelerators and EFA.

    With ``node_scripts.health_check`` every queue installs the node health tool: slurm.conf names
    it as the HealthCheckProgram of every slurmd (``health_check_settings``).
    """
    steps = _container_steps(cfg)
    pairs = [(cr, lookup(cr.instance_type)) for cr in queue.compute_resources]
    if cfg.node_scripts.nccl_efa and any(
        info is not None and info.accelerator == "nvidia" and efa_enabled(cr) for cr, info in pairs
    ):
        steps.append("nccl_efa")
    if cfg.node_scripts.neuron and any(info is not None and info.accelerator == "neuron" for _, info in pairs):
        steps.append("neuron")
    return [*steps, *_exporter_steps(exporters), *(["health_check"] if cfg.node_scripts.health_check else [])]


def health_check_settings(cfg: PclusterConfig) -> dict[str, str]:
    """The Slurm health-check settings mlcluster adds, less those ``slurm.custom_settings`` sets.

    slurmd runs HealthCheckProgram as root on every compute node every HealthCheckInterval seconds
    (and when it starts; slurm.conf(5)); ParallelCluster leaves these to CustomSlurmSettings (its
    deny-list has Prolog and Epilog, not these). Your own setting of a key wins (keys compare
    case-insensitively, as Slurm's do).
    """
    if not cfg.node_scripts.health_check:
        return {}
    own = {key.lower() for key in cfg.slurm.custom_settings}
    return {key: value for key, value in HEALTH_CHECK_SETTINGS.items() if key.lower() not in own}


def log_retention(days: int) -> int:
    """The shortest retention ParallelCluster accepts that keeps logs at least ``days`` days."""
    for allowed in PCLUSTER_LOG_RETENTION_DAYS:
        if allowed >= days:
            return allowed
    return PCLUSTER_LOG_RETENTION_DAYS[-1]


# ---------------------------------------------------------------- pieces


def _ssm_policy(inputs: DeployInputs) -> str:
    if inputs.session_manager_policy_arn is None:
        raise RenderError(
            "session_manager_policy_arn: Session Manager (ssm) is on for some nodes; pass the node policy "
            "for Session Manager (AmazonSSMManagedInstanceCore is not used: it reads every SSM parameter)"
        )
    return inputs.session_manager_policy_arn


def efa_off_types(queue: QueueConfig) -> list[str]:
    """The queue's EFA-capable instance types whose compute resource has EFA off (``efa: false``).

    The health_check step expects no EFA device on these (``run.sh --no-efa``): the instance type
    alone would make every node expect its full EFA count, fail, drain and be replaced in a loop.
    A node cannot tell which compute resource it belongs to, so a type listed here with EFA on in
    another compute resource of the queue expects none there either (a missed check, never a loop).
    """
    off = []
    for cr in queue.compute_resources:
        info = lookup(cr.instance_type)
        if info is not None and info.efa and not efa_enabled(cr) and cr.instance_type not in off:
            off.append(cr.instance_type)
    return off


def _node_action(inputs: DeployInputs, role: str, steps: Sequence[str], options: Sequence[str] = ()) -> dict[str, Any]:
    """``run.sh`` with the node's steps, its other options (``options``: ``--no-efa``) and what vouches for the
    files it fetches.

    Compute nodes: a digest per fetched file (``--sha256``), in the configuration only the deploy writes,
    not in the bucket. Head and login nodes: no digest (``run.sh`` then trusts the bucket): ParallelCluster
    marks their ``CustomActions`` ``UpdatePolicy.UNSUPPORTED``, so arguments that changed with every script
    release or queue would make every later update fail. Their arguments are exactly the form clusters were
    deployed with before the manifest existed (role, source, steps), so no deployed cluster sees them change;
    they depend only on the bucket, the prefix and the steps, which change only when the environment's
    file changes them.
    """
    source = f"s3://{inputs.node_script_bucket}/{inputs.node_script_prefix}"
    if role != "compute":
        return {
            "Script": f"{source}{ENTRY_SCRIPT}",
            "Args": ["--role", role, "--source", source, *options, *steps],
        }
    manifest: list[str] = []
    for name in node_files(steps):
        if name not in inputs.node_script_sha256:
            raise RenderError(f"node_script_sha256: no SHA-256 for {name}, which the {role} nodes' steps fetch")
        manifest += ["--sha256", f"{name}={inputs.node_script_sha256[name]}"]
    return {
        "Script": f"{source}{ENTRY_SCRIPT}",
        "Args": ["--role", role, "--source", source, *manifest, *options, *steps],
    }


def _user_action(action: CustomActionConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"Script": action.script}
    if action.args:
        out["Args"] = list(action.args)
    return out


def _custom_actions(
    inputs: DeployInputs,
    role: str,
    steps: Sequence[str],
    events: Mapping[str, Sequence[CustomActionConfig]],
    options: Sequence[str] = (),
) -> dict[str, Any]:
    """``CustomActions``: mlcluster's node scripts (with run.sh ``options``) first in OnNodeConfigured, then yours."""
    out: dict[str, Any] = {}
    for event, actions in events.items():
        sequence = [_node_action(inputs, role, steps, options)] if event == "OnNodeConfigured" and steps else []
        sequence += [_user_action(a) for a in actions]
        if sequence:
            out[event] = {"Sequence": sequence}
    return out


def _s3_access(
    inputs: DeployInputs, steps: Sequence[str], actions: Sequence[CustomActionConfig]
) -> list[dict[str, Any]]:
    """Read access to the node scripts (when the node runs any) and to S3 scripts of your actions."""
    entries: list[dict[str, Any]] = []
    if steps:
        entries.append(
            {
                "BucketName": inputs.node_script_bucket,
                "KeyName": f"{inputs.node_script_prefix}*",
                "EnableWriteAccess": False,
            }
        )
    for action in actions:
        match = _S3_URL.fullmatch(action.script)
        if match is None:
            continue
        entry = {"BucketName": match["bucket"], "KeyName": match["key"], "EnableWriteAccess": False}
        if entry not in entries:
            entries.append(entry)
    return entries


def _iam(s3_access: list[dict[str, Any]], policies: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s3_access:
        out["S3Access"] = s3_access
    unique = list(dict.fromkeys(policies))
    if unique:
        out["AdditionalIamPolicies"] = [{"Policy": p} for p in unique]
    return out


def _root_volume(size: int) -> dict[str, Any]:
    return {"RootVolume": {"Size": size, "VolumeType": "gp3", "Encrypted": True}}


def _ssh_source(cfg: PclusterConfig, inputs: DeployInputs) -> str:
    return cfg.head_node.ssh_allowed_cidr or inputs.vpc_cidr


def _public_or_private(inputs: DeployInputs, subnet: str, what: str) -> str:
    if subnet == "private":
        return inputs.private_subnets[0].subnet_id
    if inputs.public_subnet_id is None:
        raise RenderError(f"public_subnet_id: {what} is in the public subnet, but no public subnet was given")
    return inputs.public_subnet_id


def _head_node(cfg: PclusterConfig, inputs: DeployInputs) -> dict[str, Any]:
    head = cfg.head_node
    collector = inputs.collector_policy_arn
    steps = [*head_node_steps(cfg, exporters=inputs.exporters), *(["collector"] if collector is not None else [])]
    actions = head.custom_actions
    all_actions = [*actions.on_node_start, *actions.on_node_configured, *actions.on_node_updated]
    policies = ([_ssm_policy(inputs)] if head.ssm else []) + list(head.additional_iam_policies)
    if collector is not None:
        policies.append(collector)
    managed = inputs.accounting
    if managed is not None:
        policies.append(managed.policy_arn)
    ssh: dict[str, Any] = {"AllowedIps": _ssh_source(cfg, inputs)}
    if head.key_name is not None:
        ssh["KeyName"] = head.key_name
    networking: dict[str, Any] = {
        "SubnetId": _public_or_private(inputs, head.subnet, "the head node"),
        # The accounting database's client group on the head node alone (it runs slurmdbd).
        "AdditionalSecurityGroups": [
            *inputs.security_group_ids,
            *([managed.client_security_group_id] if managed is not None else []),
        ],
    }
    if head.subnet == "public":
        # The only way out of a public subnet that maps no public IPs: ParallelCluster adds an Elastic IP.
        networking["ElasticIp"] = True
    out: dict[str, Any] = {
        "InstanceType": head.instance_type,
        "Networking": networking,
        "Ssh": ssh,
        "LocalStorage": _root_volume(head.root_volume_gib),
        "Imds": {"Secured": True},
    }
    custom = _custom_actions(
        inputs,
        "head",
        steps,
        {
            "OnNodeStart": actions.on_node_start,
            "OnNodeConfigured": actions.on_node_configured,
            "OnNodeUpdated": actions.on_node_updated,
        },
    )
    if custom:
        out["CustomActions"] = custom
    iam = _iam(_s3_access(inputs, steps, all_actions), policies)
    if iam:
        out["Iam"] = iam
    return out


def _placement_group(queue: QueueConfig, cr: ComputeResourceConfig) -> dict[str, Any]:
    if cr.placement_group_name is not None:
        return {"Enabled": True, "Name": cr.placement_group_name}
    return {"Enabled": placement_group_enabled(queue, cr)}


def _capacity_target(cr: ComputeResourceConfig, inputs: DeployInputs) -> dict[str, str] | None:
    if cr.capacity_reservation_id is not None:
        return {"CapacityReservationId": cr.capacity_reservation_id}
    ref = cr.capacity_reservation_group
    if ref is None:
        return None
    if ref.startswith("arn:"):
        return {"CapacityReservationResourceGroupArn": ref}
    arn = inputs.reservation_group_arns.get(ref)
    if arn is None:
        known = ", ".join(inputs.reservation_group_arns) or "none"
        raise RenderError(
            f"reservation_group_arns: no ARN for capacity reservation group {ref!r}; groups given: {known}"
        )
    return {"CapacityReservationResourceGroupArn": arn}


def _compute_resource(queue: QueueConfig, cr: ComputeResourceConfig, inputs: DeployInputs) -> dict[str, Any]:
    out: dict[str, Any] = {
        "Name": cr.name,
        "InstanceType": cr.instance_type,
        "MinCount": cr.min_count,
        "MaxCount": cr.max_count,
        "Efa": {"Enabled": efa_enabled(cr)},
        "Networking": {"PlacementGroup": _placement_group(queue, cr)},
    }
    target = _capacity_target(cr, inputs)
    if target is not None:
        out["CapacityReservationTarget"] = target
    slurm: dict[str, Any] = {**socket_settings(cr), **cr.custom_slurm_settings}
    if slurm:
        out["CustomSlurmSettings"] = slurm
    return out


def _queue(cfg: PclusterConfig, queue: QueueConfig, inputs: DeployInputs) -> dict[str, Any]:
    zones = queue.zones or (inputs.primary_zone,)
    steps = queue_steps(cfg, queue, exporters=inputs.exporters)
    actions = queue.custom_actions
    policies = ([_ssm_policy(inputs)] if queue.ssm else []) + list(queue.additional_iam_policies)
    out: dict[str, Any] = {
        "Name": queue.name,
        "CapacityType": queue.capacity_type,
        "Networking": {
            "SubnetIds": [inputs.subnet_for(z) for z in zones],
            "AdditionalSecurityGroups": list(inputs.security_group_ids),
        },
        "ComputeResources": [_compute_resource(queue, cr, inputs) for cr in queue.compute_resources],
        "ComputeSettings": {"LocalStorage": _root_volume(queue.root_volume_gib)},
        "JobExclusiveAllocation": queue.job_exclusive_allocation,
    }
    no_efa = efa_off_types(queue) if "health_check" in steps else []
    custom = _custom_actions(
        inputs,
        "compute",
        steps,
        {"OnNodeStart": actions.on_node_start, "OnNodeConfigured": actions.on_node_configured},
        ["--no-efa", ",".join(no_efa)] if no_efa else [],
    )
    if custom:
        out["CustomActions"] = custom
    iam = _iam(_s3_access(inputs, steps, [*actions.on_node_start, *actions.on_node_configured]), policies)
    if iam:
        out["Iam"] = iam
    if queue.custom_ami is not None:
        out["Image"] = {"CustomAmi": queue.custom_ami}
    if queue.custom_slurm_settings:
        out["CustomSlurmSettings"] = dict(queue.custom_slurm_settings)
    return out


def _slurm_settings(cfg: PclusterConfig, inputs: DeployInputs) -> dict[str, Any]:
    slurm = cfg.slurm
    out: dict[str, Any] = {
        "ScaledownIdletime": slurm.scaledown_idle_minutes,
        "QueueUpdateStrategy": slurm.queue_update_strategy,
    }
    settings = {**health_check_settings(cfg), **slurm.custom_settings}
    if settings:
        out["CustomSlurmSettings"] = [{key: value} for key, value in settings.items()]
    managed = inputs.accounting
    db = slurm.accounting
    if managed is not None and db is not None:
        raise RenderError(
            "accounting: slurm.accounting (your own database) and the managed database exclude each other"
        )
    if managed is not None:
        out["Database"] = {
            "Uri": managed.uri,
            "UserName": managed.user_name,
            "PasswordSecretArn": managed.password_secret_arn,
            "DatabaseName": managed.database_name,
        }
    elif db is not None:
        database: dict[str, Any] = {
            "Uri": db.uri,
            "UserName": db.user_name,
            "PasswordSecretArn": db.password_secret_arn,
        }
        if db.database_name is not None:
            database["DatabaseName"] = db.database_name
        out["Database"] = database
    return out


def _shared_storage(cfg: PclusterConfig, inputs: DeployInputs) -> list[dict[str, Any]]:
    storage: list[dict[str, Any]] = [
        {
            "Name": "fsx",
            "MountDir": "/fsx",
            "StorageType": "FsxLustre",
            "FsxLustreSettings": {"FileSystemId": inputs.lustre_file_system_id},
        }
    ]
    if cfg.shared_storage.home_on_openzfs:
        if inputs.openzfs_volume_id is None:
            raise RenderError("openzfs_volume_id: shared_storage.home_on_openzfs needs the OpenZFS volume ID")
        storage.append(
            {
                "Name": "home",
                "MountDir": "/home",
                "StorageType": "FsxOpenZfs",
                "FsxOpenZfsSettings": {"VolumeId": inputs.openzfs_volume_id},
            }
        )
    elif cfg.shared_storage.home_volume.enabled:
        # /home on a volume of its own that outlives the head node and the cluster (issue 33).
        home = cfg.shared_storage.home_volume
        policy = home.deletion_policy or ("Retain" if inputs.retain_home else "Delete")
        storage.append(
            {
                "Name": "home",
                "MountDir": "/home",
                "StorageType": "Ebs",
                "EbsSettings": {
                    "Size": home.size_gib,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeletionPolicy": policy,
                },
            }
        )
    apps = cfg.shared_storage.apps
    if apps is not None:
        storage.append(
            {
                "Name": "apps",
                "MountDir": "/apps",
                "StorageType": "Ebs",
                "EbsSettings": {
                    "Size": apps.size_gib,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeletionPolicy": apps.deletion_policy,
                },
            }
        )
    return storage


def _monitoring(cfg: PclusterConfig, inputs: DeployInputs) -> dict[str, Any]:
    mon = cfg.monitoring
    return {
        "DetailedMonitoring": mon.detailed_monitoring,
        "Logs": {
            "CloudWatch": {
                "Enabled": mon.logs,
                "RetentionInDays": log_retention(inputs.log_retention_days),
                "DeletionPolicy": "Retain" if inputs.retain_logs else "Delete",
            }
        },
        "Dashboards": {"CloudWatch": {"Enabled": mon.dashboards}},
        "Alarms": {"Enabled": mon.alarms},
    }


def _login_nodes(cfg: PclusterConfig, inputs: DeployInputs) -> dict[str, Any] | None:
    login = cfg.login_nodes
    if login is None:
        return None
    steps = login_node_steps(cfg, exporters=inputs.exporters)
    policies = [_ssm_policy(inputs)] if cfg.head_node.ssm else []
    if steps:
        if inputs.node_script_policy_arn is None:
            raise RenderError(
                "node_script_policy_arn: login nodes run node scripts from S3 and ParallelCluster has no "
                "S3Access for login nodes; pass a managed policy that reads the node-script prefix"
            )
        policies.append(inputs.node_script_policy_arn)
    pool: dict[str, Any] = {
        "Name": "login",
        "InstanceType": login.instance_type,
        "Count": login.count,
        "Networking": {
            # ParallelCluster puts the load balancer in this subnet, internet-facing when it routes to an IGW.
            "SubnetIds": [_public_or_private(inputs, login_subnet(cfg), "the login nodes")],
            "AdditionalSecurityGroups": list(inputs.security_group_ids),
        },
        "Ssh": {"AllowedIps": _ssh_source(cfg, inputs)},
    }
    if steps:
        pool["CustomActions"] = {"OnNodeConfigured": {"Sequence": [_node_action(inputs, "login", steps)]}}
    iam = _iam([], policies)
    if iam:
        pool["Iam"] = iam
    return {"Pools": [pool]}


def render_cluster_config(cfg: PclusterConfig, inputs: DeployInputs) -> dict[str, Any]:
    """The ParallelCluster 3 cluster configuration for ``cfg`` with ``inputs`` filled in.

    Raises ``RenderError`` naming the input when one is missing (a public
    subnet for a public head node, a zone without a private subnet, a
    reservation group without an ARN, the OpenZFS volume for /home).
    """
    image: dict[str, Any] = {"Os": cfg.os}
    if cfg.custom_ami is not None:
        image["CustomAmi"] = cfg.custom_ami
    config: dict[str, Any] = {
        "Region": inputs.region,
        "Image": image,
        "Imds": {"ImdsSupport": "v2.0"},
        "HeadNode": _head_node(cfg, inputs),
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": _slurm_settings(cfg, inputs),
            "SlurmQueues": [_queue(cfg, q, inputs) for q in cfg.queues],
        },
        "SharedStorage": _shared_storage(cfg, inputs),
        "Monitoring": _monitoring(cfg, inputs),
    }
    if inputs.permissions_boundary_arn is not None:
        config["Iam"] = {"PermissionsBoundary": inputs.permissions_boundary_arn}
    login = _login_nodes(cfg, inputs)
    if login is not None:
        config["LoginNodes"] = login
    tags = {**inputs.tags, **cfg.tags}
    if tags:
        config["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
    return config


def attached_policy_arns(config: Mapping[str, Any], partition: str) -> list[str]:
    """Every ``AdditionalIamPolicies`` ARN of a rendered configuration, plus the one ParallelCluster adds itself.

    ParallelCluster 3.16 attaches CloudWatchAgentServerPolicy to each node role
    when CloudWatch logs are on (``_add_node_role`` in its cluster templates).
    """
    groups = [config["HeadNode"], *config["Scheduling"]["SlurmQueues"], *config.get("LoginNodes", {}).get("Pools", [])]
    arns = [entry["Policy"] for group in groups for entry in group.get("Iam", {}).get("AdditionalIamPolicies", [])]
    if config.get("Monitoring", {}).get("Logs", {}).get("CloudWatch", {}).get("Enabled", True):
        arns.append(f"arn:{partition}:iam::aws:policy/CloudWatchAgentServerPolicy")
    return list(dict.fromkeys(arns))


def user_script_objects(cfg: PclusterConfig, partition: str = "aws") -> list[str]:
    """The S3 object ARNs of your own custom-action scripts (ParallelCluster's validators read them)."""
    head = cfg.head_node.custom_actions
    actions = [*head.on_node_start, *head.on_node_configured, *head.on_node_updated]
    for queue in cfg.queues:
        actions += [*queue.custom_actions.on_node_start, *queue.custom_actions.on_node_configured]
    arns = []
    for action in actions:
        match = _S3_URL.fullmatch(action.script)
        if match is not None:
            arns.append(f"arn:{partition}:s3:::{match['bucket']}/{match['key']}")
    return list(dict.fromkeys(arns))
