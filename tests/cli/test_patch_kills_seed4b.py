"""``mlcluster patch``: a planted marker is refused line by line, and a stored restore shows every digest
(issue 27, cli seed 4).

The marker in the backup bucket may be written by anyone who can write the bucket (module docstring of
:mod:`mlcluster.cli.patch`). The refusal must name each bad key, the value found and what is allowed, so the
operator can tell what was changed; a restore from stored digests must show each digest on its own line, so
the operator can compare them with the ones the backup printed.
"""

from __future__ import annotations

from typing import Any

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


def test_steps_that_are_not_an_object_are_refused_naming_the_value_found(
    hyperpod: World,
    shell_node: ShellNode,  # noqa: F811
    aws: Aws,
) -> None:
    """``steps`` as a list (the step names without records): the refusal shows that list, not null."""
    planted = valid_state(hyperpod)
    planted["steps"] = ["backup", "update", "wait"]
    problem = 'steps: ["backup", "update", "wait"] is not allowed; allowed: an object of step records'
    assert " ".join(refusal(hyperpod, [problem]).split()) in refused(hyperpod, shell_node, aws, planted)


def test_a_wait_that_did_not_end_in_service_is_refused_naming_the_status_allowed(
    hyperpod: World,
    shell_node: ShellNode,  # noqa: F811
    aws: Aws,
) -> None:
    """A marker claiming the wait ended in another status would restore onto a cluster still updating."""
    planted = valid_state(hyperpod)
    planted["steps"]["wait"]["status"] = "SystemUpdating"
    problem = 'steps.wait.status: "SystemUpdating" is not allowed; allowed: InService'
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
