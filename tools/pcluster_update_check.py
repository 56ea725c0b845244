"""List what ParallelCluster's own update check says about changing one cluster configuration into another.

Run it with the ParallelCluster virtualenv (aws-parallelcluster pins CDK v1
and cannot share a venv with mlcluster)::

    .venv-pcluster/bin/python tools/pcluster_update_check.py OLD.json NEW.json

It builds ``pcluster.config.config_patch.ConfigPatch``, the comparison
``pcluster update-cluster`` (and the ``Custom::PclusterCluster`` resource)
runs before an update, and prints one JSON line per change it found:
``{"path": ..., "key": ..., "policy": ...}``, the policy being the name of
the field's ``UpdatePolicy`` (``UNSUPPORTED`` for a change ParallelCluster
refuses whatever the cluster's state). The comparison needs no AWS call: it
walks the two configurations along ParallelCluster's schema, so values that
are CloudFormation intrinsics compare as the objects they are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from pcluster.config.config_patch import ConfigPatch


def changes(old: dict[str, object], new: dict[str, object]) -> list[dict[str, str]]:
    """The changes ParallelCluster's ConfigPatch finds from ``old`` to ``new``, with their update policies."""
    patch = ConfigPatch(SimpleNamespace(name="mlcluster-update-check"), old, new)
    return [
        {"path": ".".join(change.path), "key": str(change.key), "policy": change.update_policy.name}
        for change in patch.changes
    ]


def main() -> int:
    """Print the changes between the two files given, one JSON object a line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the cluster configuration deployed (JSON)")
    parser.add_argument("new", type=Path, help="the cluster configuration to deploy (JSON)")
    args = parser.parse_args()
    old = json.loads(args.old.read_text())
    new = json.loads(args.new.read_text())
    for change in changes(old, new):
        sys.stdout.write(json.dumps(change, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
