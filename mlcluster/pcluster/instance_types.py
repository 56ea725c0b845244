"""EC2 instance-type facts the renderer and the pre-deploy checks need (one table, sourced).

``INSTANCE_TYPES`` holds, for the x86 instance families used for ML
training, inference and head nodes: default vCPUs, physical cores, threads
per core, EFA support, the accelerator (NVIDIA GPU or AWS Neuron device)
with its count, and, for every accelerated type, the number of CPU sockets
Slurm should be told about.

Sources, beside the values they give:

- vCPUs, cores, threads per core, EFA, accelerators: EC2
  ``DescribeInstanceTypes`` (``VCpuInfo.DefaultVCpus``, ``DefaultCores``,
  ``DefaultThreadsPerCore``, ``NetworkInfo.EfaSupported``, ``GpuInfo``,
  ``NeuronInfo``) as shipped in moto 5.2.5's ``ec2/resources/instance_types.json.gz``,
  read 2026-11-23; ``tests/pcluster/test_pcluster_instance_types.py`` compares
  every row with it.
- Sockets: ``MEASURED`` rows from ``slurmd -C`` on the instance (seed 000;
  aws-parallelcluster issue 5797, 2024-01). Other accelerated rows, read
  2026-11-23: the full-host sizes (all cores of a two-socket host:
  p3dn.24xlarge, p5e/p5en/p6 .48xlarge, trn1/trn1n .32xlarge, trn2/inf2/g5/
  g6/g6e .48xlarge) have 2 sockets, and smaller sizes, which are slices of one
  socket, 1. Slurm checks the node's total against the hardware and only
  logs a differing socket split ("Node reconfigured socket/core
  boundaries", aws-parallelcluster issue 6449), so the total is what must
  be right: ``sockets x cores_per_socket x threads_per_core == vcpus``,
  which a test checks on every row.

ParallelCluster writes ``CPUs=<vCPUs>`` on the node line; giving Slurm
``Sockets`` and ``CoresPerSocket`` without ``ThreadsPerCore`` makes it
recompute CPUs as sockets x cores (half the vCPUs with SMT on), so the
renderer always gives all three (``slurm_layout``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

Accelerator = Literal["nvidia", "neuron"]


@dataclass(frozen=True)
class InstanceType:
    """What mlcluster needs to know about one instance type.

    ``sockets`` is None where mlcluster gives Slurm no layout (types without
    accelerators: Slurm then counts ``CPUs`` only).
    """

    vcpus: int
    cores: int
    efa: bool
    accelerator: Accelerator | None
    accelerators: int
    sockets: int | None = None

    @property
    def threads_per_core(self) -> int:
        """Hardware threads per physical core (2 with SMT, 1 without)."""
        return self.vcpus // self.cores


class SlurmLayout(NamedTuple):
    """The Slurm node layout: ``Sockets``, ``CoresPerSocket``, ``ThreadsPerCore``."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int

    def settings(self) -> dict[str, int]:
        """As ParallelCluster ``CustomSlurmSettings`` of a compute resource."""
        return {
            "Sockets": self.sockets,
            "CoresPerSocket": self.cores_per_socket,
            "ThreadsPerCore": self.threads_per_core,
        }


def _t(
    vcpus: int, cores: int, efa: bool, accelerator: Accelerator | None, accelerators: int, sockets: int | None = None
) -> InstanceType:
    return InstanceType(
        vcpus=vcpus, cores=cores, efa=efa, accelerator=accelerator, accelerators=accelerators, sockets=sockets
    )


#: Instance types by name (x86 only; bare metal left out).
INSTANCE_TYPES: dict[str, InstanceType] = {
    "p3dn.24xlarge": _t(96, 48, True, "nvidia", 8, 2),
    "p4d.24xlarge": _t(96, 48, True, "nvidia", 8, 2),
    "p4de.24xlarge": _t(96, 48, True, "nvidia", 8, 2),
    "p5.4xlarge": _t(16, 8, True, "nvidia", 1, 1),
    "p5.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "p5e.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "p5en.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "p6-b200.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "p6-b300.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "trn1.2xlarge": _t(8, 4, False, "neuron", 1, 1),
    "trn1.32xlarge": _t(128, 64, True, "neuron", 16, 2),
    "trn1n.32xlarge": _t(128, 64, True, "neuron", 16, 2),
    "trn2.3xlarge": _t(12, 6, True, "neuron", 1, 1),
    "trn2.48xlarge": _t(192, 96, True, "neuron", 16, 2),
    "inf2.xlarge": _t(4, 2, False, "neuron", 1, 1),
    "inf2.8xlarge": _t(32, 16, False, "neuron", 1, 1),
    "inf2.24xlarge": _t(96, 48, False, "neuron", 6, 1),
    "inf2.48xlarge": _t(192, 96, False, "neuron", 12, 2),
    "g4dn.xlarge": _t(4, 2, False, "nvidia", 1, 1),
    "g4dn.2xlarge": _t(8, 4, False, "nvidia", 1, 1),
    "g4dn.4xlarge": _t(16, 8, False, "nvidia", 1, 1),
    "g4dn.8xlarge": _t(32, 16, True, "nvidia", 1, 1),
    "g4dn.12xlarge": _t(48, 24, True, "nvidia", 4, 1),
    "g4dn.16xlarge": _t(64, 32, True, "nvidia", 1, 1),
    "g5.xlarge": _t(4, 2, False, "nvidia", 1, 1),
    "g5.2xlarge": _t(8, 4, False, "nvidia", 1, 1),
    "g5.4xlarge": _t(16, 8, False, "nvidia", 1, 1),
    "g5.8xlarge": _t(32, 16, True, "nvidia", 1, 1),
    "g5.12xlarge": _t(48, 24, True, "nvidia", 4, 1),
    "g5.16xlarge": _t(64, 32, True, "nvidia", 1, 1),
    "g5.24xlarge": _t(96, 48, True, "nvidia", 4, 1),
    "g5.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "g6.xlarge": _t(4, 2, False, "nvidia", 1, 1),
    "g6.2xlarge": _t(8, 4, False, "nvidia", 1, 1),
    "g6.4xlarge": _t(16, 8, False, "nvidia", 1, 1),
    "g6.8xlarge": _t(32, 16, True, "nvidia", 1, 1),
    "g6.12xlarge": _t(48, 24, True, "nvidia", 4, 1),
    "g6.16xlarge": _t(64, 32, True, "nvidia", 1, 1),
    "g6.24xlarge": _t(96, 48, True, "nvidia", 4, 1),
    "g6.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
    "g6e.xlarge": _t(4, 2, False, "nvidia", 1, 1),
    "g6e.2xlarge": _t(8, 4, False, "nvidia", 1, 1),
    "g6e.4xlarge": _t(16, 8, False, "nvidia", 1, 1),
    "g6e.8xlarge": _t(32, 16, True, "nvidia", 1, 1),
    "g6e.12xlarge": _t(48, 24, True, "nvidia", 4, 1),
    "g6e.16xlarge": _t(64, 32, True, "nvidia", 1, 1),
    "g6e.24xlarge": _t(96, 48, True, "nvidia", 4, 1),
    "g6e.48xlarge": _t(192, 96, True, "nvidia", 8, 2),
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

#: Network bandwidth per instance in Gbit/s, for the NVIDIA GPU types with EFA: EC2 ``DescribeInstanceTypes``
#: ``NetworkInfo.NetworkPerformance`` (moto 5.2.5's snapshot, read 2026-11-23). The operator's NCCL smoke
#: test derives its pass mark from it (``mlcluster.cli.expectations``).
NETWORK_GBITS: dict[str, int] = {
    "p3dn.24xlarge": 100,
    "p4d.24xlarge": 400,
    "p4de.24xlarge": 400,
    "p5.4xlarge": 100,
    "p5.48xlarge": 3200,
    "p5e.48xlarge": 3200,
    "p5en.48xlarge": 3200,
    "p6-b200.48xlarge": 3200,
    "p6-b300.48xlarge": 6400,
    "g4dn.8xlarge": 50,
    "g4dn.12xlarge": 50,
    "g4dn.16xlarge": 50,
    "g5.8xlarge": 25,
    "g5.12xlarge": 40,
    "g5.16xlarge": 25,
    "g5.24xlarge": 50,
    "g5.48xlarge": 100,
    "g6.8xlarge": 25,
    "g6.12xlarge": 40,
    "g6.16xlarge": 25,
    "g6.24xlarge": 50,
    "g6.48xlarge": 100,
    "g6e.8xlarge": 25,
    "g6e.12xlarge": 100,
    "g6e.16xlarge": 35,
    "g6e.24xlarge": 200,
    "g6e.48xlarge": 400,
}

#: Rows whose socket count was measured with ``slurmd -C`` (seed 000; aws-parallelcluster#5797).
MEASURED = frozenset({"p5.48xlarge", "p4de.24xlarge", "p4d.24xlarge"})

#: ``(Sockets, CoresPerSocket)`` of every type with a layout (derived from ``INSTANCE_TYPES``).
SOCKET_LAYOUT: dict[str, tuple[int, int]] = {
    name: (info.sockets, info.cores // info.sockets) for name, info in INSTANCE_TYPES.items() if info.sockets
}


def lookup(instance_type: str) -> InstanceType | None:
    """The facts for ``instance_type``, or None when it is not in the table."""
    return INSTANCE_TYPES.get(instance_type)


def socket_layout(instance_type: str) -> tuple[int, int] | None:
    """``(Sockets, CoresPerSocket)`` for ``instance_type`` when the table gives one, else None."""
    return SOCKET_LAYOUT.get(instance_type)


def slurm_layout(instance_type: str) -> SlurmLayout | None:
    """Sockets, cores per socket and threads per core for ``instance_type``, when the table gives a layout."""
    info = lookup(instance_type)
    if info is None or not info.sockets:
        return None
    return SlurmLayout(info.sockets, info.cores // info.sockets, info.threads_per_core)
