"""A spinner on stderr for every wait that can pass two seconds, silent when stderr is not a terminal.

Synthesis (15-25 s), change sets, Run Command and cluster updates all wait.
A terminal user sees what is happening; a script or CI log, whose stderr is
a pipe or a file, gets no spinner frames or control characters at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


@contextmanager
def progress(message: str, console: Console | None = None) -> Iterator[None]:
    """Show ``message`` with a spinner on ``console`` (default: stderr) while the block runs, on a terminal only."""
    from rich.console import Console

    shown = console if console is not None else Console(stderr=True)
    if not shown.is_terminal:
        yield
        return
    with shown.status(message):
        yield
