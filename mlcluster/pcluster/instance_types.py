"""EC2 instance-type facts the renderer and the pre-deploy checks need.

``INSTANCE_TYPES`` holds, for the x86 instance families used for ML
training, inference and head nodes: default vCPUs, physical cores, EFA
support and the accelerator (NVIDIA GPU or AWS Neuron device) with its count.
The values are EC2 ``DescribeInstanceTypes`` data (``VCpuInfo``,
``NetworkInfo.EfaSupported``, ``GpuInfo``, ``NeuronInfo``); a test compares
them with the snapshot of that API shipped in moto.

``SOCKET_LAYOUT`` holds the Slurm ``Sockets``/``CoresPerSocket`` for the
instance types where they are documented, as reported by ``slurmd -C`` on
the instance (ParallelCluster does not set them, so Slurm sees one core per
socket; aws-parallelcluster issue 5797). Only measured values are listed;
for other types give ``sockets`` and ``cores_per_socket`` in the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Accelerator = Literal["nvidia", "neuron"]


@dataclass(frozen=True)
class InstanceType:
    """What mlcluster needs to know about one instance type."""

    vcpus: int
    cores: int
    efa: bool
    accelerator: Accelerator | None
    accelerators: int


def _t(vcpus: int, cores: int, efa: bool, accelerator: Accelerator | None, accelerators: int) -> InstanceType:
    return InstanceType(vcpus=vcpus, cores=cores, efa=efa, accelerator=accelerator, accelerators=accelerators)


#: Instance types by name (x86 only; bare metal left out).
INSTANCE_TYPES: dict[str, InstanceType] = {
    "p3dn.24xlarge": _t(96, 48, True, "nvidia", 8),
    "p4d.24xlarge": _t(96, 48, True, "nvidia", 8),
    "p4de.24xlarge": _t(96, 48, True, "nvidia", 8),
    "p5.4xlarge": _t(16, 8, True, "nvidia", 1),
    "p5.48xlarge": _t(192, 96, True, "nvidia", 8),
    "p5e.48xlarge": _t(192, 96, True, "nvidia", 8),
    "p5en.48xlarge": _t(192, 96, True, "nvidia", 8),
    "p6-b200.48xlarge": _t(192, 96, True, "nvidia", 8),
    "p6-b300.48xlarge": _t(192, 96, True, "nvidia", 8),
    "trn1.2xlarge": _t(8, 4, False, "neuron", 1),
    "trn1.32xlarge": _t(128, 64, True, "neuron", 16),
    "trn1n.32xlarge": _t(128, 64, True, "neuron", 16),
    "trn2.3xlarge": _t(12, 6, True, "neuron", 1),
    "trn2.48xlarge": _t(192, 96, True, "neuron", 16),
    "inf2.xlarge": _t(4, 2, False, "neuron", 1),
    "inf2.8xlarge": _t(32, 16, False, "neuron", 1),
    "inf2.24xlarge": _t(96, 48, False, "neuron", 6),
    "inf2.48xlarge": _t(192, 96, False, "neuron", 12),
    "g4dn.xlarge": _t(4, 2, False, "nvidia", 1),
    "g4dn.2xlarge": _t(8, 4, False, "nvidia", 1),
    "g4dn.4xlarge": _t(16, 8, False, "nvidia", 1),
    "g4dn.8xlarge": _t(32, 16, True, "nvidia", 1),
    "g4dn.12xlarge": _t(48, 24, True, "nvidia", 4),
    "g4dn.16xlarge": _t(64, 32, True, "nvidia", 1),
    "g5.xlarge": _t(4, 2, False, "nvidia", 1),
    "g5.2xlarge": _t(8, 4, False, "nvidia", 1),
    "g5.4xlarge": _t(16, 8, False, "nvidia", 1),
    "g5.8xlarge": _t(32, 16, True, "nvidia", 1),
    "g5.12xlarge": _t(48, 24, True, "nvidia", 4),
    "g5.16xlarge": _t(64, 32, True, "nvidia", 1),
    "g5.24xlarge": _t(96, 48, True, "nvidia", 4),
    "g5.48xlarge": _t(192, 96, True, "nvidia", 8),
    "g6.xlarge": _t(4, 2, False, "nvidia", 1),
    "g6.2xlarge": _t(8, 4, False, "nvidia", 1),
    "g6.4xlarge": _t(16, 8, False, "nvidia", 1),
    "g6.8xlarge": _t(32, 16, True, "nvidia", 1),
    "g6.12xlarge": _t(48, 24, True, "nvidia", 4),
    "g6.16xlarge": _t(64, 32, True, "nvidia", 1),
    "g6.24xlarge": _t(96, 48, True, "nvidia", 4),
    "g6.48xlarge": _t(192, 96, True, "nvidia", 8),
    "g6e.xlarge": _t(4, 2, False, "nvidia", 1),
    "g6e.2xlarge": _t(8, 4, False, "nvidia", 1),
    "g6e.4xlarge": _t(16, 8, False, "nvidia", 1),
    "g6e.8xlarge": _t(32, 16, True, "nvidia", 1),
    "g6e.12xlarge": _t(48, 24, True, "nvidia", 4),
    "g6e.16xlarge": _t(64, 32, True, "nvidia", 1),
    "g6e.24xlarge": _t(96, 48, True, "nvidia", 4),
    "g6e.48xlarge": _t(192, 96, True, "nvidia", 8),
    "c5n.large": _t(2, 1, False, None, 0),
    "c5n.xlarge": _t(4, 2, False, None, 0),
    "c5n.2xlarge": _t(8, 4, False, None, 0),
    "c5n.4xlarge": _t(16, 8, False, None, 0),
    "c5n.9xlarge": _t(36, 18, True, None, 0),
    "c5n.18xlarge": _t(72, 36, True, None, 0),
    "hpc6a.48xlarge": _t(96, 96, True, None, 0),
    "hpc7a.12xlarge": _t(24, 24, True, None, 0),
    "hpc7a.24xlarge": _t(48, 48, True, None, 0),
    "hpc7a.48xlarge": _t(96, 96, True, None, 0),
    "hpc7a.96xlarge": _t(192, 192, True, None, 0),
    "m5.large": _t(2, 1, False, None, 0),
    "m5.xlarge": _t(4, 2, False, None, 0),
    "m5.2xlarge": _t(8, 4, False, None, 0),
    "m5.4xlarge": _t(16, 8, False, None, 0),
    "m5.8xlarge": _t(32, 16, False, None, 0),
    "m5.12xlarge": _t(48, 24, False, None, 0),
    "m5.16xlarge": _t(64, 32, False, None, 0),
    "m5.24xlarge": _t(96, 48, False, None, 0),
    "m6i.large": _t(2, 1, False, None, 0),
    "m6i.xlarge": _t(4, 2, False, None, 0),
    "m6i.2xlarge": _t(8, 4, False, None, 0),
    "m6i.4xlarge": _t(16, 8, False, None, 0),
    "m6i.8xlarge": _t(32, 16, False, None, 0),
    "m6i.12xlarge": _t(48, 24, False, None, 0),
    "m6i.16xlarge": _t(64, 32, False, None, 0),
    "m6i.24xlarge": _t(96, 48, False, None, 0),
    "m6i.32xlarge": _t(128, 64, True, None, 0),
    "m7i.large": _t(2, 1, False, None, 0),
    "m7i.xlarge": _t(4, 2, False, None, 0),
    "m7i.2xlarge": _t(8, 4, False, None, 0),
    "m7i.4xlarge": _t(16, 8, False, None, 0),
    "m7i.8xlarge": _t(32, 16, False, None, 0),
    "m7i.12xlarge": _t(48, 24, False, None, 0),
    "m7i.16xlarge": _t(64, 32, False, None, 0),
    "m7i.24xlarge": _t(96, 48, False, None, 0),
    "m7i.48xlarge": _t(192, 96, True, None, 0),
    "c5.large": _t(2, 1, False, None, 0),
    "c5.xlarge": _t(4, 2, False, None, 0),
    "c5.2xlarge": _t(8, 4, False, None, 0),
    "c5.4xlarge": _t(16, 8, False, None, 0),
    "c5.9xlarge": _t(36, 18, False, None, 0),
    "c5.12xlarge": _t(48, 24, False, None, 0),
    "c5.18xlarge": _t(72, 36, False, None, 0),
    "c5.24xlarge": _t(96, 48, False, None, 0),
    "c6i.large": _t(2, 1, False, None, 0),
    "c6i.xlarge": _t(4, 2, False, None, 0),
    "c6i.2xlarge": _t(8, 4, False, None, 0),
    "c6i.4xlarge": _t(16, 8, False, None, 0),
    "c6i.8xlarge": _t(32, 16, False, None, 0),
    "c6i.12xlarge": _t(48, 24, False, None, 0),
    "c6i.16xlarge": _t(64, 32, False, None, 0),
    "c6i.24xlarge": _t(96, 48, False, None, 0),
    "c6i.32xlarge": _t(128, 64, True, None, 0),
    "c7i.large": _t(2, 1, False, None, 0),
    "c7i.xlarge": _t(4, 2, False, None, 0),
    "c7i.2xlarge": _t(8, 4, False, None, 0),
    "c7i.4xlarge": _t(16, 8, False, None, 0),
    "c7i.8xlarge": _t(32, 16, False, None, 0),
    "c7i.12xlarge": _t(48, 24, False, None, 0),
    "c7i.16xlarge": _t(64, 32, False, None, 0),
    "c7i.24xlarge": _t(96, 48, False, None, 0),
    "c7i.48xlarge": _t(192, 96, True, None, 0),
    "r5.large": _t(2, 1, False, None, 0),
    "r5.xlarge": _t(4, 2, False, None, 0),
    "r5.2xlarge": _t(8, 4, False, None, 0),
    "r5.4xlarge": _t(16, 8, False, None, 0),
    "r5.8xlarge": _t(32, 16, False, None, 0),
    "r5.12xlarge": _t(48, 24, False, None, 0),
    "r5.16xlarge": _t(64, 32, False, None, 0),
    "r5.24xlarge": _t(96, 48, False, None, 0),
    "r6i.large": _t(2, 1, False, None, 0),
    "r6i.xlarge": _t(4, 2, False, None, 0),
    "r6i.2xlarge": _t(8, 4, False, None, 0),
    "r6i.4xlarge": _t(16, 8, False, None, 0),
    "r6i.8xlarge": _t(32, 16, False, None, 0),
    "r6i.12xlarge": _t(48, 24, False, None, 0),
    "r6i.16xlarge": _t(64, 32, False, None, 0),
    "r6i.24xlarge": _t(96, 48, False, None, 0),
    "r6i.32xlarge": _t(128, 64, True, None, 0),
}

#: ``(Sockets, CoresPerSocket)`` measured with ``slurmd -C`` (seed 000; aws-parallelcluster#5797).
SOCKET_LAYOUT: dict[str, tuple[int, int]] = {
    "p5.48xlarge": (2, 48),
    "p4de.24xlarge": (2, 24),
    "p4d.24xlarge": (2, 24),
}


def lookup(instance_type: str) -> InstanceType | None:
    """The facts for ``instance_type``, or None when it is not in the table."""
    return INSTANCE_TYPES.get(instance_type)


def socket_layout(instance_type: str) -> tuple[int, int] | None:
    """``(Sockets, CoresPerSocket)`` for ``instance_type`` when measured, else None."""
    return SOCKET_LAYOUT.get(instance_type)
