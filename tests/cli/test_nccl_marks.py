"""Smoke's NCCL pass marks against the published measurements they cite (issue 26, finding 5)."""

from __future__ import annotations

import pytest

from mlcluster.cli.nccl_marks import ADT_NCCL_README, GIB, MIB, PUBLISHED, PUBLISHED_FRACTION, parse_versions, pass_mark
from tests.cli.conftest import transcript

#: The issue's figures from the awsome-distributed-training README, rounded there to whole GB/s.
QUOTED = {16 * MIB: 105, 128 * MIB: 289, 2 * GIB: 443, 16 * GIB: 487}


def test_every_row_cites_its_source_pinned_to_a_commit() -> None:
    assert PUBLISHED
    for row in PUBLISHED:
        assert row.source == ADT_NCCL_README
        assert "/blob/0162aacd5da07d424e13f44bef8dd2c4cfcc66e4/" in row.source
    p5 = {r.size_bytes: r.busbw_gbytes for r in PUBLISHED if (r.instance_type, r.nodes) == ("p5.48xlarge", 2)}
    assert {size: int(p5[size]) for size in QUOTED} == QUOTED


def test_two_p5_at_16_gib_pass_at_80_percent_of_487() -> None:
    mark = pass_mark("ml.p5.48xlarge", 2, [8 * GIB, 16 * GIB])
    assert mark is not None
    assert (mark.size_bytes, mark.published_gbytes, mark.pass_gbytes) == (16 * GIB, 487.09, 389.67)
    assert mark.pass_gbytes >= PUBLISHED_FRACTION * 487.09 - 0.01
    assert mark.pass_gbytes > 400 * 0.5  # the old rule: half the 3200 Gbit/s line rate
    assert mark.source == ADT_NCCL_README
    assert mark.basis == "80% of the published 487.09 GB/s on 2 x p5.48xlarge at 16 GiB"


def test_the_largest_size_both_runs_measured_is_judged() -> None:
    mark = pass_mark("p5.48xlarge", 2, [GIB, 2 * GIB, 3 * GIB])  # 3 GiB: nothing published there
    assert mark is not None and (mark.size_bytes, mark.published_gbytes) == (2 * GIB, 443.72)


@pytest.mark.parametrize(
    ("instance_type", "nodes"),
    [("p4d.24xlarge", 2), ("p5.48xlarge", 4), ("p5en.48xlarge", 2)],
)
def test_no_published_run_says_so_and_uses_the_line_rate(instance_type: str, nodes: int) -> None:
    mark = pass_mark(instance_type, nodes, [GIB, 8 * GIB])
    assert mark is not None and mark.source is None and mark.size_bytes is None
    assert mark.basis.startswith(f"no published measurement for {nodes} x {instance_type}; half the line rate ")


def test_operator_figure_wins_and_types_without_efa_have_none() -> None:
    mine = pass_mark("p5.48xlarge", 2, [16 * GIB], min_busbw=450.0)
    assert mine is not None and (mine.pass_gbytes, mine.size_bytes) == (450.0, None)
    assert pass_mark("g5.xlarge", 2, [GIB]) is None


def test_versions_from_the_run_output() -> None:
    # smoke's filter keeps nccl-tests' header, not NCCL's own version line: the transcript has no "NCCL version"
    assert parse_versions(transcript("all_reduce_p5.txt")) == {
        "nccl": None,
        "aws_ofi_nccl": "1.16.3",
        "efa_installer": "1.43.2",
    }
    line = "ip-10-1-4-190:48213:48213 [0] NCCL INFO NCCL version 2.27.7+cuda12.8\n"
    assert parse_versions(line)["nccl"] == "2.27.7+cuda12.8"
    assert parse_versions("") == {"nccl": None, "aws_ofi_nccl": None, "efa_installer": None}
