"""The Debian packages the real-component tests run, and how a test asks for one of their programs.

``make system-deps`` installs every package of ``tests/system-packages.txt`` (tools/system_deps.sh).
A test that needs a program calls :func:`program`: when the program is missing the test fails
with the command that installs it. It never skips: CI must not pass with the real checks absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE_LIST = ROOT / "tests/system-packages.txt"


def packages() -> list[str]:
    """The package names of ``tests/system-packages.txt`` (one a line; ``#`` starts a comment)."""
    names = (line.split("#", 1)[0].strip() for line in PACKAGE_LIST.read_text().splitlines())
    return [name for name in names if name]


def program(name: str) -> str:
    """The absolute path of program ``name``; the calling test fails (never skips) when it is missing."""
    found = shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / name).is_file()), None
    )
    if found is None:
        pytest.fail(f"{name} is not installed: run `make system-deps` (as root) to install {PACKAGE_LIST.name}")
    return found


def run(*command: str, timeout_s: float = 30, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with a bounded time, capturing text output; the caller checks the exit code."""
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, **kwargs)  # type: ignore[call-overload,no-any-return]
