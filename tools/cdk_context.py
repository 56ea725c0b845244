"""Write ``mlcluster/cdk_context.json``: the ``context`` of the repository's ``cdk.json``, shipped in the wheel.

The ``mlcluster`` command synthesizes with these feature flags when it finds
no ``cdk.json`` (see :mod:`mlcluster.appdir`). Run ``make cdk-context`` after
editing ``cdk.json``'s context; ``tests/test_appdir.py`` fails while the copy
is stale. ``--check`` only reports (exit 1) and writes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlcluster.appdir import CDK_JSON, PACKAGED_CONTEXT, read_context

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "mlcluster" / PACKAGED_CONTEXT


def render(context: dict[str, object]) -> str:
    """The file's text: the context, keys sorted, two-space indent, a final newline."""
    return json.dumps(context, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    """Regenerate (or with ``--check``, compare) the packaged copy of the flags."""
    text = render(read_context(ROOT / CDK_JSON))
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if current == text:
        return 0
    if "--check" in argv:
        print(f"{TARGET.relative_to(ROOT)}: stale (run `make cdk-context`)")
        return 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"{TARGET.relative_to(ROOT)}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
