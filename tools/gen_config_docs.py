"""Write the environment file's JSON Schema and the docs site's environment file reference.

Both come from the typed configuration in ``mlcluster/config`` (see
``mlcluster.config.docs``). Run ``make config-docs`` after changing a config
section; ``tests/config/test_config_schema.py`` fails while either file is stale.
``--check`` only reports what is stale (exit 1) and writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlcluster.config.docs import REFERENCE_PAGE, SCHEMA_PATH, replace_reference, schema_text

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    """Regenerate (or with ``--check``, compare) the schema file and the reference page."""
    check = "--check" in argv
    targets = {
        ROOT / SCHEMA_PATH: schema_text(),
        ROOT / REFERENCE_PAGE: replace_reference((ROOT / REFERENCE_PAGE).read_text(encoding="utf-8")),
    }
    stale = []
    for path, text in targets.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "stale" if check else "written"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
