"""The update plan's text when a rollback would need the stop for several changes (fresh sample seed 6)."""

from __future__ import annotations

from mlcluster.cli import update
from tests.cli.test_update_sweep import change, plan


def test_each_change_whose_rollback_needs_the_stop_is_named_once_in_order() -> None:
    """Two queues added in place whose removal on a rollback needs the stop: both are named, separated by '; '
    (``render_plan`` mutant 41 of the seed-6 sample joined them with another separator)."""
    forward = [
        change(f"Scheduling.SlurmQueues[{name}]", "in_place", None, {"Name": name}, "SUPPORTED") for name in ("a", "b")
    ]
    back = [
        change(f"Scheduling.SlurmQueues[{name}]", "fleet_stop", {"Name": name}, None, "COMPUTE_FLEET_STOP")
        for name in ("a", "b")
    ]
    lines = update.render_plan(plan(changes=forward, rollback=back, queues=[update.QueueInfo("gpu", (), 2)]))
    stops = next(line for line in lines if line.startswith("what stops:"))
    assert (
        "(else the stack stops in UPDATE_ROLLBACK_FAILED): Scheduling.SlurmQueues[a] back to - (policy "
        "COMPUTE_FLEET_STOP); Scheduling.SlurmQueues[b] back to - (policy COMPUTE_FLEET_STOP). To keep the fleet "
        "running" in stops
    )
