"""Pre-deploy checks for a ParallelCluster environment.

These catch, before anything is deployed, the mistakes that otherwise show
up an hour into a stack creation: a placement group on reserved capacity
(instances fail with insufficient capacity), queues away from the Lustre
zone, cluster names ParallelCluster or CloudFormation refuse, EFA on
instance types without it, socket layouts Slurm cannot match. Each finding
is an error (the deployment would fail or misbehave) or a warning (it works,
but probably not as intended), with the key path in the environment file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from mlcluster.config.environment import Environment
from mlcluster.config.network import NetworkConfig
from mlcluster.config.pcluster import MAX_TAGS, PclusterConfig
from mlcluster.pcluster.instance_types import lookup
from mlcluster.pcluster.render import efa_enabled, placement_group_enabled

BASE = "cluster.pcluster"
CLUSTER_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9-]*")
#: ParallelCluster's cluster name limits (3.16 ``constants.py``).
MAX_CLUSTER_NAME = 60
MAX_CLUSTER_NAME_WITH_ACCOUNTING = 40
#: ParallelCluster's AMIs ship Enroot and Pyxis from 3.11 (the cookbook's enroot resource and install_pyxis recipe).
MIN_ENROOT_MINOR = 11


@dataclass(frozen=True)
class Finding:
    """One problem found before deployment."""

    level: Literal["error", "warning"]
    path: str
    message: str

    def render(self) -> str:
        """``<level>: <key path>: <message>``."""
        return f"{self.level}: {self.path}: {self.message}"


class PreDeployError(Exception):
    """At least one pre-deploy check failed; ``findings`` holds every finding (errors and warnings)."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        super().__init__("\n".join(f.render() for f in self.findings if f.level == "error"))


def _cr_path(qi: int, ci: int, key: str) -> str:
    return f"{BASE}.queues[{qi}].compute_resources[{ci}].{key}"


def check_cluster_name(name: str, *, stack_name: str | None = None, accounting: bool = False) -> list[Finding]:
    """ParallelCluster's name rules, and the custom resource's: the name differs from its stack's."""
    limit = MAX_CLUSTER_NAME_WITH_ACCOUNTING if accounting else MAX_CLUSTER_NAME
    found: list[Finding] = []
    if not CLUSTER_NAME.fullmatch(name):
        found.append(
            Finding("error", "cluster.name", f"{name!r}: use letters, digits and hyphens, starting with a letter")
        )
    if len(name) > limit:
        why = " with Slurm accounting (slurm.accounting or storage.accounting)" if accounting else ""
        found.append(
            Finding("error", "cluster.name", f"{name!r} has {len(name)} characters; at most {limit} allowed{why}")
        )
    if stack_name is not None and name == stack_name:
        found.append(
            Finding(
                "error",
                "cluster.name",
                f"{name!r} equals the CloudFormation stack name; ParallelCluster creates its own stack "
                "under the cluster name, so the two must differ",
            )
        )
    return found


def check_placement(cfg: PclusterConfig) -> list[Finding]:
    """Placement groups against reservations, capacity blocks, zones and EFA."""
    found: list[Finding] = []
    for qi, queue in enumerate(cfg.queues):
        multi_zone = len(queue.zones) > 1
        for ci, cr in enumerate(queue.compute_resources):
            reserved = cr.reserved or queue.capacity_type == "CAPACITY_BLOCK"
            what = "a capacity block" if queue.capacity_type == "CAPACITY_BLOCK" else "a targeted capacity reservation"
            if cr.placement_group is True and cr.placement_group_name is None and reserved:
                found.append(
                    Finding(
                        "error",
                        _cr_path(qi, ci, "placement_group"),
                        f"{cr.name} launches into {what}, which brings its own placement; a new placement group "
                        "conflicts with it and launches fail with insufficient capacity. Set placement_group: false "
                        "(or leave it out), or name the group the reservation was made in with placement_group_name",
                    )
                )
            if multi_zone and (cr.placement_group is True or cr.placement_group_name is not None):
                found.append(
                    Finding(
                        "error",
                        _cr_path(qi, ci, "placement_group"),
                        f"queue {queue.name} spans {len(queue.zones)} zones and a placement group cannot; "
                        "use one zone or placement_group: false",
                    )
                )
            if multi_zone and efa_enabled(cr):
                found.append(
                    Finding(
                        "error",
                        _cr_path(qi, ci, "efa"),
                        f"queue {queue.name} spans {len(queue.zones)} zones and EFA does not work across zones; "
                        "use one zone or efa: false",
                    )
                )
            if efa_enabled(cr) and not reserved and not multi_zone and not placement_group_enabled(queue, cr):
                found.append(
                    Finding(
                        "warning",
                        _cr_path(qi, ci, "placement_group"),
                        f"{cr.name} uses EFA without a placement group or reservation; instances may land far "
                        "apart and collective operations slow down",
                    )
                )
    return found


def check_instance_types(cfg: PclusterConfig) -> list[Finding]:
    """EFA support and Slurm socket layouts against the instance-type table."""
    found: list[Finding] = []
    for qi, queue in enumerate(cfg.queues):
        for ci, cr in enumerate(queue.compute_resources):
            info = lookup(cr.instance_type)
            if info is None and cr.sockets is not None and cr.threads_per_core is None:
                found.append(
                    Finding(
                        "error",
                        _cr_path(qi, ci, "threads_per_core"),
                        f"{cr.instance_type} is not in mlcluster's instance-type table; give threads_per_core with "
                        "sockets and cores_per_socket (Slurm sets CPUs to their product)",
                    )
                )
            if info is None:
                if cr.efa is None:
                    found.append(
                        Finding(
                            "warning",
                            _cr_path(qi, ci, "instance_type"),
                            f"{cr.instance_type} is not in mlcluster's instance-type table, so EFA is left off "
                            "and EFA support cannot be checked; set efa explicitly",
                        )
                    )
                continue
            if cr.efa is True and not info.efa:
                found.append(
                    Finding(
                        "error", _cr_path(qi, ci, "efa"), f"{cr.instance_type} does not support EFA; set efa: false"
                    )
                )
            if cr.sockets is not None and cr.cores_per_socket is not None:
                threads = cr.threads_per_core or info.threads_per_core
                cpus = cr.sockets * cr.cores_per_socket * threads
                if cpus != info.vcpus:
                    found.append(
                        Finding(
                            "error",
                            _cr_path(qi, ci, "sockets"),
                            f"sockets x cores_per_socket x threads_per_core = {cr.sockets} x {cr.cores_per_socket} x "
                            f"{threads} = {cpus}, but {cr.instance_type} has {info.vcpus} vCPUs "
                            f"({info.cores} cores x {info.threads_per_core} threads); Slurm would set the node's "
                            "CPUs to the product or reject the node (measure the layout with slurmd -C)",
                        )
                    )
    return found


def check_zones(cfg: PclusterConfig, *, zone_labels: Sequence[str], lustre_zone: str) -> list[Finding]:
    """Queue zones exist in the network and include the zone of FSx for Lustre."""
    found: list[Finding] = []
    known = list(zone_labels)
    for qi, queue in enumerate(cfg.queues):
        zones = list(queue.zones) or [lustre_zone]
        unknown = [z for z in zones if z not in known]
        if unknown:
            found.append(
                Finding(
                    "error",
                    f"{BASE}.queues[{qi}].zones",
                    f"{', '.join(unknown)}: no private subnet there; allowed: {', '.join(known)}",
                )
            )
            continue
        if lustre_zone not in zones:
            found.append(
                Finding(
                    "error",
                    f"{BASE}.queues[{qi}].zones",
                    f"queue {queue.name} runs in {', '.join(zones)} but FSx for Lustre is in {lustre_zone}; every "
                    "read of /fsx would cross zones (latency and inter-zone transfer charges). Include "
                    f"{lustre_zone} or leave zones out",
                )
            )
        elif len(zones) > 1:
            found.append(
                Finding(
                    "warning",
                    f"{BASE}.queues[{qi}].zones",
                    f"queue {queue.name} also runs outside {lustre_zone}, the zone of FSx for Lustre; nodes there "
                    "reach /fsx across zones",
                )
            )
    return found


def check_node_scripts(cfg: PclusterConfig) -> list[Finding]:
    """Accelerator queues that miss their software, and queues mixing accelerators."""
    found: list[Finding] = []
    minor = int(cfg.version.split(".")[1])
    if cfg.node_scripts.docker_enroot_pyxis and minor < MIN_ENROOT_MINOR and cfg.custom_ami is None:
        found.append(
            Finding(
                "warning",
                f"{BASE}.version",
                f"ParallelCluster {cfg.version} AMIs carry no Enroot (it ships from 3.{MIN_ENROOT_MINOR}); the "
                "enroot_pyxis node script, which installs no unverified packages, fails on every node: use 3.11 "
                "or later, a custom AMI with Enroot, or node_scripts.docker_enroot_pyxis: false",
            )
        )
    if cfg.node_scripts.docker_group:
        found.append(
            Finding(
                "warning",
                f"{BASE}.node_scripts.docker_group",
                "adds the default user to the docker group on every node; docker group members are root there "
                "(they can mount / into a container); users can build images with rootless Podman instead",
            )
        )
    for qi, queue in enumerate(cfg.queues):
        kinds = {info.accelerator for cr in queue.compute_resources if (info := lookup(cr.instance_type))}
        if "neuron" in kinds and not cfg.node_scripts.neuron and queue.custom_ami is None and cfg.custom_ami is None:
            found.append(
                Finding(
                    "warning",
                    f"{BASE}.node_scripts.neuron",
                    f"queue {queue.name} has Neuron instances but neither the Neuron node script nor a custom AMI; "
                    "ParallelCluster's AMIs carry no Neuron driver",
                )
            )
        if {"neuron", "nvidia"} <= kinds:
            found.append(
                Finding(
                    "warning",
                    f"{BASE}.queues[{qi}].compute_resources",
                    f"queue {queue.name} mixes NVIDIA and Neuron instances; every node gets both software stacks "
                    "and jobs cannot tell them apart; use one queue per accelerator",
                )
            )
    return found


def ssh_source(cfg: PclusterConfig) -> str:
    """Where SSH to the head and login nodes may come from, in words."""
    cidr = cfg.head_node.ssh_allowed_cidr
    if cidr is None:
        return "the VPC's CIDR"
    return "the whole internet (0.0.0.0/0)" if cidr == "0.0.0.0/0" else cidr


def access_summary(cfg: PclusterConfig) -> list[str]:
    """Which nodes are reachable from where, one line per node group (printed before deploying)."""
    head = cfg.head_node
    ssm = "; Session Manager" if head.ssm else "; no Session Manager"
    public = head.subnet == "public"
    where = "public subnet with an Elastic IP" if public else "private subnet behind NAT, no public IP"
    lines = [f"head node: {where}; SSH from {ssh_source(cfg)}{ssm}"]
    login = cfg.login_nodes
    if login is not None:
        if login.internet_facing:
            where = "public subnet with public IPs, internet-facing load balancer"
        else:
            where = "private subnet behind NAT, internal load balancer (VPC and peered networks)"
        lines.append(f"login nodes ({login.count}): {where}; SSH from {ssh_source(cfg)}{ssm}")
    for queue in cfg.queues:
        qssm = "Session Manager" if queue.ssm else "no Session Manager"
        lines.append(
            f"queue {queue.name}: private subnets behind NAT, no public IP; reachable only from the cluster's "
            f"nodes; {qssm}"
        )
    return lines


def check_access(cfg: PclusterConfig, *, existing_network: bool = False, public_subnet: bool = True) -> list[Finding]:
    """Nodes nobody can reach, nodes the internet can reach, and nodes that cannot get out.

    ``existing_network``: the subnets are the user's (``network.existing``);
    ``public_subnet``: the network has a public subnet in the primary zone.
    """
    head = cfg.head_node
    login = cfg.login_nodes
    found: list[Finding] = []
    if head.subnet == "private" and not head.ssm and login is None:
        found.append(
            Finding(
                "warning",
                f"{BASE}.head_node.ssm",
                "the head node is in a private subnet without Session Manager and there are no login nodes; "
                "it is reachable only from inside the VPC (peering or a bastion)",
            )
        )
    exposed = [
        name
        for name, public in (
            ("the head node", head.subnet == "public"),
            ("the login nodes' load balancer", login is not None and login.internet_facing),
        )
        if public
    ]
    if head.ssh_from_internet and exposed:
        found.append(
            Finding(
                "warning",
                f"{BASE}.head_node.ssh_allowed_cidr",
                "SSH is open to the whole internet (allow_ssh_from_internet: true) on " + " and ".join(exposed),
            )
        )
    if login is not None and login.internet_facing and head.ssh_allowed_cidr is None:
        found.append(
            Finding(
                "warning",
                f"{BASE}.login_nodes.internet_facing",
                "the login nodes' load balancer faces the internet but admits SSH only from the VPC's CIDR "
                "(ssh_allowed_cidr is not set); set head_node.ssh_allowed_cidr to your network's CIDR",
            )
        )
    if head.key_name is not None and cfg.os.startswith("ubuntu"):
        found.append(
            Finding(
                "warning",
                f"{BASE}.head_node.key_name",
                f"{cfg.os} accepts only ed25519 key pairs; ParallelCluster refuses the cluster if {head.key_name} "
                "is an RSA key",
            )
        )
    if not public_subnet:
        for key, public in (
            ("head_node.subnet", head.subnet == "public"),
            ("login_nodes.internet_facing", login is not None and login.internet_facing),
        ):
            if public:
                found.append(
                    Finding(
                        "error",
                        f"{BASE}.{key}",
                        "needs a public subnet, and the network has none (network.existing.public_subnet_id); "
                        "give one or keep these nodes in the private subnet",
                    )
                )
    if login is not None and login.internet_facing and existing_network:
        found.append(
            Finding(
                "warning",
                f"{BASE}.login_nodes.internet_facing",
                "login nodes go into network.existing.public_subnet_id, whose route to the internet gateway makes "
                "their load balancer internet-facing; that subnet must map public IPs on launch "
                "(MapPublicIpOnLaunch), or the nodes cannot get out and the cluster creation fails",
            )
        )
    return found


def check_storage(cfg: PclusterConfig, *, openzfs_available: bool) -> list[Finding]:
    """/home on OpenZFS needs the OpenZFS file system in the storage section."""
    if cfg.shared_storage.home_on_openzfs and not openzfs_available:
        return [
            Finding(
                "error",
                f"{BASE}.shared_storage.home_on_openzfs",
                "needs FSx for OpenZFS: add storage.openzfs to the environment",
            )
        ]
    return []


def check_tags(cfg: PclusterConfig, extra_tags: Mapping[str, str]) -> list[Finding]:
    """ParallelCluster accepts at most 40 tags, counting the environment's."""
    merged = {**extra_tags, **cfg.tags}
    if len(merged) > MAX_TAGS:
        return [
            Finding(
                "error",
                f"{BASE}.tags",
                f"{len(merged)} tags with the environment's; ParallelCluster allows at most {MAX_TAGS}",
            )
        ]
    return []


def check_cluster(
    cfg: PclusterConfig,
    *,
    cluster_name: str,
    zone_labels: Sequence[str],
    lustre_zone: str,
    stack_name: str | None = None,
    openzfs_available: bool = False,
    extra_tags: Mapping[str, str] | None = None,
    existing_network: bool = False,
    public_subnet: bool = True,
    managed_accounting: bool = False,
) -> list[Finding]:
    """Every pre-deploy check, errors first (``managed_accounting``: the environment's ``storage.accounting``)."""
    accounting = cfg.slurm.accounting is not None or managed_accounting
    found = [
        *check_cluster_name(cluster_name, stack_name=stack_name, accounting=accounting),
        *check_placement(cfg),
        *check_instance_types(cfg),
        *check_zones(cfg, zone_labels=zone_labels, lustre_zone=lustre_zone),
        *check_node_scripts(cfg),
        *check_access(cfg, existing_network=existing_network, public_subnet=public_subnet),
        *check_storage(cfg, openzfs_available=openzfs_available),
        *check_tags(cfg, extra_tags or {}),
    ]
    return sorted(found, key=lambda f: f.level != "error")


def network_zone_labels(network: NetworkConfig) -> list[str]:
    """The labels queues may use in ``zones``, primary (FSx) zone first.

    Zone names or IDs as written in the ``network:`` section; with
    ``network.existing``, the private subnet IDs (the first holds FSx).
    """
    if network.existing is not None:
        return list(network.existing.private_subnet_ids)
    return [network.primary_zone_label, *(z.label for z in network.extra_zones)]


def check_environment(env: Environment, *, stack_name: str | None = None) -> list[Finding]:
    """The pre-deploy checks for an environment whose cluster backend is ParallelCluster (else none)."""
    cfg = env.config.cluster.pcluster
    if env.config.cluster.backend != "pcluster" or cfg is None:
        return []
    labels = network_zone_labels(env.config.network)
    return check_cluster(
        cfg,
        cluster_name=env.cluster_name,
        zone_labels=labels,
        lustre_zone=labels[0],
        stack_name=stack_name,
        openzfs_available=env.config.storage.openzfs is not None,
        extra_tags=env.config.tags,
        existing_network=env.config.network.existing is not None,
        public_subnet=env.config.network.existing is None or env.config.network.existing.public_subnet_id is not None,
        managed_accounting=env.config.storage.accounting is not None,
    )


def raise_for_errors(findings: Sequence[Finding]) -> list[Finding]:
    """Raise ``PreDeployError`` when any finding is an error; otherwise return the warnings."""
    if any(f.level == "error" for f in findings):
        raise PreDeployError(list(findings))
    return [f for f in findings if f.level == "warning"]
