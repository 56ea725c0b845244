"""The sinfo step's stdout is two outputs split by ``MLC-NODES`` (issue 27, cli seed 4).

``sinfo`` prints the partition table, then ``sinfo -h -N -p P -o '%N %t'`` the node list after the mark. The
partition rows, whose node counts smoke sums into "N of M nodes usable", come from the table alone: a line after
the mark is never counted as a partition row, even one shaped like one (a site's ``sinfo`` wrapper that prints
its default table whatever the options, or a second copy of the table in a re-sent output).
"""

from __future__ import annotations

from mlcluster.cli.parsers import NODES_MARK, SinfoRow, parse_node_states, parse_sinfo
from tests.cli.conftest import transcript


def test_the_partition_rows_end_at_the_node_mark() -> None:
    table, mark, nodes = transcript("sinfo_pcluster.txt").partition(f"{NODES_MARK}\n")
    assert mark
    shaped_like_a_row = "compute-gpu*    up   infinite      8   idle compute-gpu-st-p5-[5-12]\n"
    text = f"{table}{mark}{shaped_like_a_row}{nodes}"
    assert parse_sinfo(text) == [
        SinfoRow("compute-gpu", True, "up", 1, "down*", "compute-gpu-st-p5-4"),
        SinfoRow("compute-gpu", True, "up", 3, "idle", "compute-gpu-st-p5-[1-3]"),
    ]
    assert sum(row.nodes for row in parse_sinfo(text)) == 4
    assert parse_node_states(text) == [
        ("compute-gpu-st-p5-1", "idle"),
        ("compute-gpu-st-p5-2", "idle"),
        ("compute-gpu-st-p5-3", "idle"),
        ("compute-gpu-st-p5-4", "down*"),
    ]
