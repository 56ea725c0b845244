"""Pass marks for ``mlcluster smoke``'s NCCL all_reduce_perf, from published measurements.

A pass mark must catch a node whose EFA path is broken (NCCL on TCP sockets,
or one EFA device of several), and a fraction of the line rate is too loose
for that: on 2 x p5.48xlarge, half the 3200 Gbit/s line rate is 200 GB/s,
while working nodes reach more than twice that. So where someone published a
measured all_reduce_perf run for an instance type and node count, the mark
is :data:`PUBLISHED_FRACTION` of the published out-of-place ``busbw`` at the
largest message size both runs measured. Where nothing is published, the
smoke test says so and falls back to the line-rate rule of
:mod:`mlcluster.cli.expectations` (half of ``Gbit/s / 8``).

Every row of :data:`PUBLISHED` cites its source, pinned to the commit read:

- awsome-distributed-training (aws-samples), ``micro-benchmarks/nccl-tests/README.md``,
  section "Results": all_reduce_perf from 8 B to 16 GiB on 2 x p5.48xlarge
  (16 GPUs) and from 8 B to 2 GiB on 2 x p4de.24xlarge, float sum, one row per
  size. The figures below are that table's out-of-place busbw column, copied
  exactly. The README does not say which NCCL, aws-ofi-nccl or EFA installer
  versions produced the runs (its Dockerfile defaults at that commit are
  NCCL v2.27.7-1, aws-ofi-nccl v1.16.3, EFA installer 1.43.2), which is why
  the smoke test records the versions it ran with next to its result.

No published multi-node run was found for the other EFA types (p4d, p5e,
p5en, p6, g5, g6, trn1, ...): they use the line-rate rule. p4d.24xlarge has
the same network as p4de.24xlarge (4 x 100 Gbit/s EFA) but is not the type
measured, so it is not borrowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from mlcluster.cli.expectations import expectation

#: The awsome-distributed-training nccl-tests README, at the commit read.
ADT_NCCL_README: Final = (
    "https://github.com/aws-samples/awsome-distributed-training/blob/"
    "0162aacd5da07d424e13f44bef8dd2c4cfcc66e4/micro-benchmarks/nccl-tests/README.md#results"
)

#: Fraction of the published busbw a run must reach at the same message size.
PUBLISHED_FRACTION: Final = 0.8

MIB: Final = 2**20
GIB: Final = 2**30


@dataclass(frozen=True)
class Published:
    """One published measurement: out-of-place busbw of all_reduce_perf at one message size."""

    instance_type: str
    nodes: int
    size_bytes: int
    busbw_gbytes: float
    source: str


#: Published measurements: instance type, nodes, message size (bytes), out-of-place busbw (GB/s), source.
PUBLISHED: Final = (
    Published("p5.48xlarge", 2, 16 * MIB, 105.52, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 128 * MIB, 289.16, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 1 * GIB, 436.95, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 2 * GIB, 443.72, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 4 * GIB, 465.87, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 8 * GIB, 479.28, ADT_NCCL_README),
    Published("p5.48xlarge", 2, 16 * GIB, 487.09, ADT_NCCL_README),
    Published("p4de.24xlarge", 2, 1 * GIB, 76.79, ADT_NCCL_README),
    Published("p4de.24xlarge", 2, 2 * GIB, 78.33, ADT_NCCL_README),
)


@dataclass(frozen=True)
class PassMark:
    """The bus bandwidth a run must reach at ``size_bytes`` (``None``: at its peak), and why."""

    pass_gbytes: float
    size_bytes: int | None
    basis: str
    source: str | None
    published_gbytes: float | None = None


def pass_mark(
    instance_type: str, nodes: int, measured_sizes: Iterable[int], min_busbw: float | None = None
) -> PassMark | None:
    """The pass mark for a run of ``nodes`` x ``instance_type`` that measured ``measured_sizes``.

    ``min_busbw`` (the operator's own figure) wins; then a published
    measurement at the largest size the run also measured; then the
    line-rate rule. ``None`` when the type has no EFA figure at all.
    """
    name = instance_type.removeprefix("ml.")
    if min_busbw is not None:
        return PassMark(min_busbw, None, f"--min-busbw {min_busbw:g} GB/s at the peak", None)
    sizes = set(measured_sizes)
    rows = [p for p in PUBLISHED if p.instance_type == name and p.nodes == nodes and p.size_bytes in sizes]
    if rows:
        row = max(rows, key=lambda p: p.size_bytes)
        return PassMark(
            round(row.busbw_gbytes * PUBLISHED_FRACTION, 2),
            row.size_bytes,
            f"{PUBLISHED_FRACTION:.0%} of the published {row.busbw_gbytes:g} GB/s on {nodes} x {name} "
            f"at {_size(row.size_bytes)}",
            row.source,
            row.busbw_gbytes,
        )
    line = expectation(name)
    if line is None:
        return None
    return PassMark(
        line.pass_gbytes,
        None,
        f"no published measurement for {nodes} x {name}; half the line rate {line.line_rate_gbytes:g} GB/s at the peak",
        None,
    )


def _size(size_bytes: int) -> str:
    return f"{size_bytes // GIB} GiB" if size_bytes >= GIB else f"{size_bytes // MIB} MiB"


_VERSIONS = {
    "nccl": re.compile(r"NCCL version (?P<v>[\w.+-]+)"),
    "aws_ofi_nccl": re.compile(r"Initializing aws-ofi-nccl (?P<v>[\w.+-]+)"),
    "efa_installer": re.compile(r"EFA installer version:\s*(?P<v>[\w.+-]+)"),
}


def parse_versions(text: str) -> dict[str, str | None]:
    """The NCCL, aws-ofi-nccl and EFA installer versions an NCCL_DEBUG=INFO run printed (``None``: not seen)."""
    found: dict[str, str | None] = {}
    for key, pattern in _VERSIONS.items():
        match = pattern.search(text)
        found[key] = match["v"] if match else None
    return found
