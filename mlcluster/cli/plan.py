"""What an environment file asks AWS for: node groups, file systems, NAT gateways, volumes.

``preflight`` checks these against the account and ``cost`` prices them; both
read them from here, so the two commands count the same nodes. Every item
carries the key path in the environment file it comes from, so a message can
say which line to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlcluster.config import Environment
from mlcluster.config.observability import grafana_enabled, prometheus_enabled

#: An availability zone ID such as ``use2-az1`` (a name is ``us-east-2a``).
ZONE_ID = re.compile(r"[a-z]{2,5}\d+-az\d+")


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one instance type that the environment runs, between ``min_count`` and ``max_count``."""

    key: str
    role: str
    instance_type: str
    min_count: int
    max_count: int
    zones: tuple[str, ...]
    reservation_id: str | None = None
    capacity_block: bool = False
    root_volume_gib: int = 0
    training_plan_arn: str | None = None
    #: Spot capacity, limited by the Spot vCPU quotas rather than the On-Demand ones.
    spot: bool = False

    @property
    def sagemaker(self) -> bool:
        """True for HyperPod (``ml.``) instances, billed and limited by SageMaker rather than EC2."""
        return self.instance_type.startswith("ml.")

    @property
    def ec2_type(self) -> str:
        """The EC2 instance type behind the group (``ml.`` removed)."""
        return self.instance_type.removeprefix("ml.")


@dataclass(frozen=True)
class FileSystem:
    """An FSx file system the Storage stack creates."""

    key: str
    kind: str  # "LUSTRE" or "OPENZFS"
    deployment_type: str
    capacity_gib: int
    throughput: int  # MB/s/TiB for Lustre, MB/s for OpenZFS


@dataclass(frozen=True)
class Plan:
    """Everything the environment deploys that a quota limits or a price list prices."""

    groups: tuple[NodeGroup, ...]
    file_systems: tuple[FileSystem, ...]
    nat_gateways: int
    new_vpc: bool
    zones: tuple[str, ...]
    extra_volumes_gib: tuple[tuple[str, int], ...]
    prometheus: bool
    grafana: bool
    #: The managed accounting database's capacity range in ACUs (``storage.accounting``), or None without one.
    accounting_acu: tuple[float, float] | None = None

    @property
    def uses_zone_ids(self) -> bool:
        return any(ZONE_ID.fullmatch(z) for z in self.zones)


def _zones(own: tuple[str, ...], primary: tuple[str, ...]) -> tuple[str, ...]:
    return own or primary


def plan_of(env: Environment) -> Plan:
    """The resources ``env`` deploys, read from its loaded configuration."""
    cfg = env.config
    net = cfg.network
    primary = (net.primary_zone_label,) if net.primary_zone_label else ()
    all_zones = primary + tuple(z.label for z in net.extra_zones)
    groups: list[NodeGroup] = []
    volumes: list[tuple[str, int]] = []
    cluster = cfg.cluster
    if cluster.backend == "pcluster" and cluster.pcluster is not None:
        pc = cluster.pcluster
        base = "cluster.pcluster"
        groups.append(
            NodeGroup(
                f"{base}.head_node.instance_type",
                "head node",
                pc.head_node.instance_type,
                1,
                1,
                primary,
                root_volume_gib=pc.head_node.root_volume_gib,
            )
        )
        for qi, queue in enumerate(pc.queues):
            for ci, cr in enumerate(queue.compute_resources):
                groups.append(
                    NodeGroup(
                        f"{base}.queues[{qi}].compute_resources[{ci}]",
                        f"queue {queue.name}/{cr.name}",
                        cr.instance_type,
                        cr.min_count,
                        cr.max_count,
                        _zones(queue.zones, primary),
                        reservation_id=cr.capacity_reservation_id,
                        capacity_block=queue.capacity_type == "CAPACITY_BLOCK",
                        root_volume_gib=queue.root_volume_gib,
                        spot=queue.capacity_type == "SPOT",
                    )
                )
        if pc.login_nodes is not None:
            groups.append(
                NodeGroup(
                    f"{base}.login_nodes",
                    "login nodes",
                    pc.login_nodes.instance_type,
                    pc.login_nodes.count,
                    pc.login_nodes.count,
                    primary,
                    root_volume_gib=pc.head_node.root_volume_gib,
                )
            )
        if pc.shared_storage.home_volume.enabled and not pc.shared_storage.home_on_openzfs:
            volumes.append((f"{base}.shared_storage.home_volume.size_gib", pc.shared_storage.home_volume.size_gib))
        if pc.shared_storage.apps is not None:
            volumes.append((f"{base}.shared_storage.apps.size_gib", pc.shared_storage.apps.size_gib))
    if cluster.backend == "hyperpod" and cluster.hyperpod is not None:
        for key, group in cluster.hyperpod.groups():
            groups.append(
                NodeGroup(
                    f"cluster.hyperpod.{key}",
                    f"instance group {group.instance_group_name}",
                    group.instance_type,
                    group.instance_count,
                    group.instance_count,
                    _zones(group.zones, primary),
                    training_plan_arn=group.training_plan_arn,
                )
            )
    lustre = cfg.storage.lustre
    file_systems = [
        FileSystem(
            "storage.lustre",
            "LUSTRE",
            lustre.deployment_type,
            lustre.storage_capacity_gib,
            lustre.throughput_mbps_per_tib,
        )
    ]
    zfs = cfg.storage.openzfs
    if zfs is not None:
        file_systems.append(
            FileSystem(
                "storage.openzfs",
                "OPENZFS",
                zfs.deployment_type,
                zfs.storage_capacity_gib,
                zfs.throughput_capacity_mbps,
            )
        )
    database = cfg.storage.accounting
    accounting_acu = None if database is None else (database.min_capacity_acu, database.max_capacity_acu)
    nat = 0 if net.existing is not None else 1 if net.nat_gateways == "one" else 1 + len(net.extra_zones)
    return Plan(
        groups=tuple(groups),
        file_systems=tuple(file_systems),
        nat_gateways=nat,
        new_vpc=net.existing is None,
        zones=all_zones,
        extra_volumes_gib=tuple(volumes),
        prometheus=prometheus_enabled(cfg),
        grafana=grafana_enabled(cfg),
        accounting_acu=accounting_acu,
    )
