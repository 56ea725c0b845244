"""What NCCL all_reduce_perf across nodes should reach, per instance type.

Source of the network figures: EC2 ``DescribeInstanceTypes``
``NetworkInfo.NetworkPerformance`` for each type (the snapshot of that API
shipped with moto; ``tests/cli/test_expectations.py`` compares every entry
with it). Why they bound the result: nccl-tests defines bus bandwidth so that
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

#: Network bandwidth per instance, Gbit/s (EC2 DescribeInstanceTypes NetworkPerformance), NVIDIA GPU + EFA types.
NETWORK_GBITS: Final[dict[str, int]] = {
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
    if gbits is None:
        return None
    line_rate = gbits / 8
    return Expectation(name, line_rate, min_busbw if min_busbw is not None else line_rate * PASS_FRACTION)
