"""``mlcluster patch``: what the operator watches while a root step runs on the controller (issue 27, cli seed 3).

The backup and the restore each run for minutes as root on the controller; the spinner line on a terminal
is all the operator sees meanwhile. It names the environment, the step and the node, so a stuck step can be
told from the other and looked for on the right instance.
"""

from __future__ import annotations

import re

import pytest

from mlcluster.cli import patch as patch_module
from tests.cli.conftest import Aws, FakeNode, World
from tests.cli.test_patch import BACKUP_OUTPUT, Cluster

#: Control sequences rich writes to a terminal (colour, cursor moves, line erases).
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_spinner_names_the_environment_step_and_node_of_each_root_step(
    hyperpod: World, node: FakeNode, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.on("mlcluster-backup backup", BACKUP_OUTPUT)
    node.on("mlcluster-backup restore", "restored 4 paths from S3\n")
    # The operator's terminal: rich draws its status line only on one (TTY_COMPATIBLE, rich's own switch).
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TERM", "xterm")
    cluster = Cluster(hyperpod, aws, polls_updating=1)
    monkeypatch.setattr(patch_module.time, "sleep", cluster.sleep)
    result = hyperpod.run("patch", "hyperpod", "--yes")
    assert result.exit_code == 0, result.output
    shown = [line.strip() for line in ANSI.sub("", result.stderr).replace("\r", "\n").splitlines()]
    controller = "i-0c0a1b2c3d4e5f601"

    def first(text: str) -> int:
        """The first line showing ``text`` after the spinner's frame (any frame: the spinner turns with time)."""
        found = [i for i, line in enumerate(shown) if line.endswith(f" {text}")]
        assert found, (text, shown)
        return found[0]

    backup = first(f"mlcluster patch hyperpod: backup: running on {controller}")
    restore = first(f"mlcluster patch hyperpod: restore: running on {controller}")
    assert backup < shown.index("UpdateClusterSoftware requested for ml-hyperpod") < restore
