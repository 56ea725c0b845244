"""The refusal of an update state file this command did not write, read whole (``checked_state`` mutants 131 and
223 of the cli seed-4 sample): each bad field with what is allowed, and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.update import checked_state


def test_a_state_whose_stop_is_no_boolean_is_refused_with_the_field_and_the_way(tmp_path: Path) -> None:
    path = tmp_path / "update-state.json"
    with pytest.raises(CliError) as caught:
        checked_state({"stop": "yes", "surprise": 1}, path, "p4de", "p4de-train", "us-east-2")
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_FAILED
    assert message.startswith(f"{path} is not a state this command wrote; nothing was run:\n  ")
    lines = message.splitlines()
    assert '  stop: "yes" is not allowed; allowed: true or false' in lines
    assert "  surprise: 1 is not allowed; allowed: no such key" in lines
    assert lines[-1] == (
        "  what to do: remove it, check the cluster (`mlcluster status ENV`) and run `mlcluster update` again"
    )
