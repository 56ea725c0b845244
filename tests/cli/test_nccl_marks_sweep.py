"""Smoke's NCCL pass marks, whole, at each rule's edge (issue 27 sweep): the mark a run is judged by, the size it is
judged at, the words the operator reads and the source cited."""

from __future__ import annotations

import pytest

from mlcluster.cli.nccl_marks import ADT_NCCL_README, GIB, MIB, PUBLISHED, PassMark, parse_versions, pass_mark


@pytest.mark.parametrize(
    ("size", "published", "words"),
    [
        (16 * MIB, 105.52, "16 MiB"),
        (128 * MIB, 289.16, "128 MiB"),
        (1 * GIB, 436.95, "1 GiB"),
        (2 * GIB, 443.72, "2 GiB"),
        (4 * GIB, 465.87, "4 GiB"),
        (8 * GIB, 479.28, "8 GiB"),
        (16 * GIB, 487.09, "16 GiB"),
    ],
)
def test_each_published_p5_size_gives_80_percent_of_its_figure(size: int, published: float, words: str) -> None:
    """A run that measured up to ``size`` (and one size nothing was published at) is judged there."""
    assert pass_mark("p5.48xlarge", 2, [size, size + 1, 1]) == PassMark(
        round(published * 0.8, 2),
        size,
        f"80% of the published {published:g} GB/s on 2 x p5.48xlarge at {words}",
        ADT_NCCL_README,
        published,
    )


def test_p4de_published_rows_and_the_sagemaker_prefix() -> None:
    assert pass_mark("ml.p4de.24xlarge", 2, [GIB, 2 * GIB, 4 * GIB]) == PassMark(
        62.66, 2 * GIB, "80% of the published 78.33 GB/s on 2 x p4de.24xlarge at 2 GiB", ADT_NCCL_README, 78.33
    )
    assert pass_mark("p4de.24xlarge", 2, [GIB]) == PassMark(
        61.43, GIB, "80% of the published 76.79 GB/s on 2 x p4de.24xlarge at 1 GiB", ADT_NCCL_README, 76.79
    )


def test_the_published_table_is_two_nodes_with_one_source() -> None:
    assert {(p.instance_type, p.nodes, p.source) for p in PUBLISHED} == {
        ("p5.48xlarge", 2, ADT_NCCL_README),
        ("p4de.24xlarge", 2, ADT_NCCL_README),
    }
    assert len(PUBLISHED) == 9


@pytest.mark.parametrize(
    ("instance_type", "nodes", "sizes", "mark"),
    [
        # another node count, or no size in common: the line-rate rule, in words that say so
        (
            "p5.48xlarge",
            3,
            [16 * GIB],
            PassMark(
                200.0,
                None,
                "no published measurement for 3 x p5.48xlarge; half the line rate 400 GB/s at the peak",
                None,
            ),
        ),
        (
            "ml.p5.48xlarge",
            2,
            [3 * GIB],
            PassMark(
                200.0,
                None,
                "no published measurement for 2 x p5.48xlarge; half the line rate 400 GB/s at the peak",
                None,
            ),
        ),
        (
            "p4d.24xlarge",
            2,
            [GIB],
            PassMark(
                25.0,
                None,
                "no published measurement for 2 x p4d.24xlarge; half the line rate 50 GB/s at the peak",
                None,
            ),
        ),
        ("g5.xlarge", 2, [GIB], None),
        ("x9.unknown", 2, [GIB], None),
    ],
)
def test_without_a_published_run_the_line_rate_rule_or_nothing(
    instance_type: str, nodes: int, sizes: list[int], mark: PassMark | None
) -> None:
    assert pass_mark(instance_type, nodes, sizes) == mark


def test_the_operators_figure_wins_even_at_zero() -> None:
    assert pass_mark("p5.48xlarge", 2, [16 * GIB], 0.0) == PassMark(0.0, None, "--min-busbw 0 GB/s at the peak", None)
    assert pass_mark("g5.xlarge", 2, [], 12.5) == PassMark(12.5, None, "--min-busbw 12.5 GB/s at the peak", None)


def test_versions_take_the_first_of_each_and_their_whole_token() -> None:
    text = (
        "EFA installer version: 1.43.2\n"
        "ip-1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.3-aws\n"
        "NCCL version 2.27.7+cuda12.8\n"
        "NCCL version 2.99.0\n"
        "EFA installer version:1.44.0\n"
    )
    assert parse_versions(text) == {"nccl": "2.27.7+cuda12.8", "aws_ofi_nccl": "1.16.3-aws", "efa_installer": "1.43.2"}
    assert parse_versions("EFA installer version:1.44.0_x\n") == {
        "nccl": None,
        "aws_ofi_nccl": None,
        "efa_installer": "1.44.0_x",
    }
