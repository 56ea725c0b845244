"""``mlcluster smoke --json``: the node the steps ran on, as a script reads it (issue 27, cli sample seed 3, survivors).

Driven like ``test_smoke``: moto's SSM Run Command, the node's answers from transcripts.
"""

from __future__ import annotations

import json

from tests.cli.conftest import FakeNode, World


def test_smoke_json_names_the_head_node_with_text_fields_only(pcluster: World, node: FakeNode) -> None:
    """On ParallelCluster the steps run on the head node; ``node`` is an object of strings, as on HyperPod
    (a script reads ``.node.message | length``), with what the stack knows of the head node and empty text for
    what it does not (no DescribeInstances is made for it)."""
    node.on("sinfo", "", code=-1, status="Failed")
    result = pcluster.run("smoke", "p5", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["node"] == {
        "group": "head-node",
        "instance_id": pcluster.head_node,
        "instance_type": "",
        "status": "",
        "message": "",
        "ssm_target": pcluster.head_node,
    }
