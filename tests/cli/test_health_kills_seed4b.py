"""``mlcluster health``: the note on a node whose answer was cut off says what to do (issue 27, cli seed 4)."""

from __future__ import annotations

import json

from tests.cli.conftest import FakeNode, World


def test_a_node_past_the_output_limit_is_not_checked_with_the_whole_way_forward(
    pcluster: World, node: FakeNode
) -> None:
    """The operator reads the note to decide the next run: fix the nodes listed, or check a smaller partition."""
    node.on("sinfo -h -N", "compute-gpu-st-p5-1|idle|none\ncompute-gpu-st-p5-2|idle|none\n")
    warning = "compute-gpu-st-p5-1 FAIL xid warning: Xid 13 since boot, with a long detail. Action: look up each code\n"
    node.on("mlcluster-health", (warning * (24000 // len(warning) + 1))[:24000], code=0)
    result = pcluster.run("health", "p5", "--json")
    assert result.exit_code == 0, result.output
    nodes = {n["node"]: n for n in json.loads(result.stdout)["nodes"]}
    assert (nodes["compute-gpu-st-p5-2"]["verdict"], nodes["compute-gpu-st-p5-2"]["note"]) == (
        "not checked",
        "output truncated at 24000 characters before its answer; "
        "fix the nodes listed and run again, or check a smaller partition with --partition",
    )
