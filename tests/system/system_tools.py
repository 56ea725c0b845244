"""The Debian packages the real-component tests run, and how a test asks for one of their programs.

``make system-deps`` installs every package of ``tests/system-packages.txt`` (tools/system_deps.sh).
A test that needs a program calls :func:`program`: when the program is missing the test fails
with the command that installs it. It never skips: CI must not pass with the real checks absent.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
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


def until(what: str, ready: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``ready`` every quarter second; the test fails naming ``what`` when it is not true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def mysql_tcp(port: int, user: str, password: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The MariaDB client over TCP to ``127.0.0.1:port`` as ``user``, no option files, with ``options``."""
    return run(
        "mysql",
        "--no-defaults",
        "--protocol=TCP",
        "--host=127.0.0.1",
        f"--port={port}",
        f"--user={user}",
        f"--password={password}",
        *options,
    )
