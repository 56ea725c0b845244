"""``mlcluster patch``: a planted marker is refused line by line, and a stored restore shows every digest
(issue 27, cli seed 4).

The marker in the backup bucket may be written by anyone who can write the bucket (module docstring of
:mod:`mlcluster.cli.patch`). The refusal must name each bad key, the value found and what is allowed, so the
operator can tell what was changed; a restore from stored digests must show each digest on its own line, so
the operator can compare them with the ones the backup printed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cli.conftest import Aws, World
from tests.cli.test_patch import (  # noqa: F401 (shell_node: the fixture)
    DB_SHA,
    STATE_KEY,
    STATE_SHA,
    ShellNode,
    plant,
    shell_node,
    valid_state,
)


def refusal(world: World, problems: list[str]) -> str:
    """The whole message of a refused marker with ``problems``, as the operator reads it."""
    return (
        f"s3://{world.backup_bucket}/{STATE_KEY} is not a state this command wrote; nothing was run:\n  "
        + "\n  ".join(problems)
        + "\n  what to do: find out who changed it (the bucket is versioned; look at its versions and "
        "CloudTrail); delete it to start a new patch run"
    )


def refused(world: World, node: ShellNode, aws: Aws, planted: dict[str, Any]) -> str:
    """Run ``patch`` on the planted marker; it must stop before any root step or AWS change."""
    plant(world, planted)
    result = world.run("patch", "hyperpod", "--yes", input="20261127T101500Z\n")
    assert result.exit_code == 1, result.output
    assert node.commands == [] and node.calls() == []
    assert "UpdateClusterSoftware" not in aws.operations()
    return " ".join(result.stderr.split())


def _steps_as_a_list(planted: dict[str, Any]) -> None:
    planted["steps"] = ["backup", "update", "wait"]


def _wait_not_in_service(planted: dict[str, Any]) -> None:
    planted["steps"]["wait"]["status"] = "SystemUpdating"


@pytest.mark.parametrize(
    ("plant_bad", "problem"),
    [
        # ``steps`` as a list (the step names without records): the refusal shows that list, not null.
        (_steps_as_a_list, 'steps: ["backup", "update", "wait"] is not allowed; allowed: an object of step records'),
        # A marker claiming the wait ended in another status would restore onto a cluster still updating.
        (_wait_not_in_service, 'steps.wait.status: "SystemUpdating" is not allowed; allowed: InService'),
    ],
    ids=["steps-not-an-object", "wait-not-in-service"],
)
def test_a_marker_field_this_command_never_writes_is_refused_naming_the_value_and_what_is_allowed(
    hyperpod: World,
    shell_node: ShellNode,  # noqa: F811
    aws: Aws,
    plant_bad: Callable[[dict[str, Any]], None],
    problem: str,
) -> None:
    planted = valid_state(hyperpod)
    plant_bad(planted)
    assert " ".join(refusal(hyperpod, [problem]).split()) in refused(hyperpod, shell_node, aws, planted)


def test_a_stored_restore_lists_each_digest_on_its_own_line(
    hyperpod: World,
    shell_node: ShellNode,  # noqa: F811
    aws: Aws,
) -> None:
    """Both archives' digests, one per line in name order, between the step times and the question."""
    planted = valid_state(hyperpod)
    planted["steps"]["backup"]["digests"] = {"slurmctld-state.tar.gz": STATE_SHA, "accounting.sql.gz": DB_SHA}
    plant(hyperpod, planted)
    result = hyperpod.run("patch", "hyperpod", "--yes", input="20261127T101500Z\n")
    assert result.exit_code == 0, result.output
    uri = planted["backup_uri"]
    assert (
        "  backup   2026-11-27T10:15:00Z\n"
        "  update   2026-11-27T10:16:00Z\n"
        "  wait     2026-11-27T11:16:00Z\n"
        f"  accounting.sql.gz  sha256 {DB_SHA}\n"
        f"  slurmctld-state.tar.gz  sha256 {STATE_SHA}\n"
        f"root on the controller will load these files from {uri}; "
    ) in result.stderr
    assert [call[0] for call in shell_node.calls()] == ["restore"]
