"""What NCCL all_reduce_perf across nodes should reach, per instance type.

Source of the network figures: EC2 ``DescribeInstanceTypes``
``NetworkInfo.NetworkPerformance`` for each type, kept beside the other
instance-type facts in :mod:`mlcluster.pcluster.instance_types` (the one
sourced table that also feeds the EFA check and the Slurm layout;
``tests/cli/test_expectations.py`` compares every entry with moto's
snapshot of that API). Why they bound the result: nccl-tests defines bus bandwidth so that
it is comparable to the speed of the slowest link, independent of the number
of ranks (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``); across nodes that link
is the node's network, so large-message ``busbw`` in GB/s approaches
``Gbit/s / 8``.

The pass mark is our choice, not a measurement: :data:`PASS_FRACTION` of
that line rate. A working EFA path reaches most of the line rate at 1-8 GiB
messages; a broken one (NCCL falling back to TCP sockets, or one EFA device
of several) lands far below it, so half the line rate separates the two
with room for tuning differences. Measure your own cluster and pass
``--min-busbw`` to hold it to a tighter figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mlcluster.pcluster.instance_types import INSTANCE_TYPES, NETWORK_GBITS

#: Fraction of the line rate a multi-node all_reduce must reach to pass.
PASS_FRACTION: Final = 0.5

SOURCE: Final = "EC2 DescribeInstanceTypes NetworkPerformance; busbw as defined by nccl-tests doc/PERFORMANCE.md"


@dataclass(frozen=True)
class Expectation:
    """The line rate of one instance type and the bus bandwidth that passes."""

    instance_type: str
    line_rate_gbytes: float
    pass_gbytes: float


def expectation(instance_type: str, min_busbw: float | None = None) -> Expectation | None:
    """The expectation for ``instance_type`` (``ml.`` prefix allowed), or ``None`` when it is not in the table."""
    name = instance_type.removeprefix("ml.")
    gbits = NETWORK_GBITS.get(name)
    info = INSTANCE_TYPES.get(name)
    if gbits is None or info is None or not info.efa:
        return None
    line_rate = gbits / 8
    return Expectation(name, line_rate, min_busbw if min_busbw is not None else line_rate * PASS_FRACTION)
