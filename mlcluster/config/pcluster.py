"""The ``cluster.pcluster:`` section: an AWS ParallelCluster 3 cluster with Slurm."""

from __future__ import annotations

from typing import Literal

from mlcluster.config.schema import Issues, section, setting

EC2_INSTANCE = r"[a-z][a-z0-9-]*\.[a-z0-9]+"
EC2_HELP = "allowed: an EC2 instance type such as 'p5.48xlarge'"
NAME = r"[a-z][a-z0-9-]{0,24}"
NAME_HELP = "allowed: 1-25 lowercase letters, digits and '-', starting with a letter"
POLICY_ARN = r"arn:aws[a-z-]*:iam::(aws|\d{12}):policy/.+"
CR_ID = r"cr-[0-9a-f]{17}"
RG_ARN = r"arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]+"


@section
class ComputeResourceConfig:
    """One instance type in a queue."""

    name: str = setting(pattern=NAME, allowed=NAME_HELP)
    instance_type: str = setting(pattern=EC2_INSTANCE, allowed=EC2_HELP)
    min_count: int = setting(default=0, minimum=0, maximum=5000)
    max_count: int = setting(default=1, minimum=1, maximum=5000)
    efa: bool = True
    placement_group: bool = True
    capacity_reservation_id: str | None = setting(
        default=None, pattern=CR_ID, allowed="allowed: an ID such as 'cr-0123456789abcdef0'"
    )
    capacity_reservation_group: str | None = setting(
        default=None,
        pattern=r"[A-Za-z0-9_.-]{1,128}|" + RG_ARN,
        allowed="allowed: the name of a group in capacity_reservation_groups, or a resource group ARN",
    )
    sockets: int | None = setting(default=None, minimum=1, maximum=16)
    cores_per_socket: int | None = setting(default=None, minimum=1, maximum=512)
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
        if (self.sockets is None) != (self.cores_per_socket is None):
            issues.add("sockets", self.sockets, "give sockets and cores_per_socket together")


@section
class QueueConfig:
    """A Slurm queue (partition)."""

    name: str = setting(pattern=NAME, allowed=NAME_HELP)
    capacity_type: Literal["ONDEMAND", "SPOT", "CAPACITY_BLOCK"] = "ONDEMAND"
    compute_resources: tuple[ComputeResourceConfig, ...] = setting(allowed="at least one compute resource")

    def check(self, issues: Issues) -> None:
        if not self.compute_resources:
            issues.add("compute_resources", [], "give at least one compute resource")


@section
class PclusterConfig:
    """A ParallelCluster cluster: head node, queues, shared storage."""

    version: str = setting(
        default="3.16.1", pattern=r"3\.\d+\.\d+", allowed="allowed: a ParallelCluster 3 version such as '3.16.1'"
    )
    queues: tuple[QueueConfig, ...] = setting(allowed="at least one queue")

    def check(self, issues: Issues) -> None:
        if not self.queues:
            issues.add("queues", [], "give at least one queue")
