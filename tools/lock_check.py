"""Compare what a venv has installed with the lock it was made from.

    .venv/bin/python tools/lock_check.py requirements/main.txt .venv

Prints one line a difference (a package missing, one the lock does not name, a
version other than the lock's) and exits 1 when there is any. The lock's
environment markers are evaluated for the interpreter running this (every venv
is made by the same ``$(PYTHON)``), so a package the lock keeps for another
platform (``colorama ; sys_platform == 'win32'``) is not expected here.
``make test-latest`` runs it to show how far the newest releases have moved
from the lock; ``tests/test_locks.py`` requires no
difference at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name


def read_lock(text: str, environment: dict[str, str] | None = None) -> dict[str, str]:
    """``name -> version`` of every requirement of a hashed lock that applies in ``environment``.

    A lock line is ``name==version [; marker] \\`` followed by ``--hash`` lines; anything else
    that names a package (a range, a URL, an editable) is refused: it would not be a lock.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip().rstrip("\\").strip()
        if not line or line.startswith(("#", "--hash=")):
            continue
        requirement, _, marker = line.partition(";")
        name, sep, version = requirement.strip().partition("==")
        if not sep or not version or any(c in version for c in "<>=!~*, "):
            raise ValueError(f"line {number}: {raw.strip()!r} is not `name==version` (a lock pins exact versions)")
        if marker.strip() and not Marker(marker.strip()).evaluate(environment):  # None: this interpreter
            continue
        pins[canonicalize_name(name)] = version.strip()
    return pins


def installed(venv: Path) -> dict[str, str]:
    """``name -> version`` of every distribution in ``venv`` (pip and setuptools too), editables left out."""
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed.stdout)}


def differences(locked: dict[str, str], found: dict[str, str]) -> list[str]:
    """One sentence a package whose presence or version differs, sorted by name."""
    lines = []
    for name in sorted(locked.keys() | found.keys()):
        want, have = locked.get(name), found.get(name)
        if want == have:
            continue
        if have is None:
            lines.append(f"{name}: the lock has {want}, not installed")
        elif want is None:
            lines.append(f"{name}: {have} installed, not in the lock")
        else:
            lines.append(f"{name}: the lock has {want}, {have} installed")
    return lines


def check(lock: Path, venv: Path) -> list[str]:
    """The differences between ``venv`` and ``lock``."""
    return differences(read_lock(lock.read_text(encoding="utf-8")), installed(venv))


def main(argv: list[str]) -> int:
    """``LOCK VENV``: print the differences; exit 1 when there are any, 2 on wrong arguments."""
    if len(argv) != 2:
        print("usage: lock_check.py LOCK VENV", file=sys.stderr)
        return 2
    lock, venv = Path(argv[0]), Path(argv[1])
    found = check(lock, venv)
    for line in found:
        print(f"{venv} vs {lock}: {line}")
    if not found:
        print(f"{venv} vs {lock}: equal")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
