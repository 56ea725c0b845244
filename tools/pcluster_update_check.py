"""List what ParallelCluster's own update check says about changing one cluster configuration into another.

Run it with the ParallelCluster virtualenv (aws-parallelcluster pins CDK v1
and cannot share a venv with mlcluster)::

    .venv-pcluster/bin/python tools/pcluster_update_check.py [--outcomes] OLD.json NEW.json

It builds ``pcluster.config.config_patch.ConfigPatch``, the comparison
``pcluster update-cluster`` (and the ``Custom::PclusterCluster`` resource)
runs before an update, and prints one JSON line per change it found:
``{"path": ..., "key": ..., "policy": ...}``, the policy being the name of
the field's ``UpdatePolicy`` (``UNSUPPORTED`` for a change ParallelCluster
refuses whatever the cluster's state). The comparison needs no AWS call: it
walks the two configurations along ParallelCluster's schema, so values that
are CloudFormation intrinsics compare as the objects they are.

With ``--outcomes`` each line also carries ``item`` (an added or removed
list item's key, e.g. the queue's name) and the result of the policy's own
check (``SUCCEEDED``, ``ACTION NEEDED``, ``FAILED``, or ``ERROR: ...`` when
the check raises) on a cluster whose compute fleet runs (``running``) and on
one whose fleet is stopped (``stopped``); the head node runs, and a login
pool runs when OLD gives it a ``Count`` above 0 (ParallelCluster's default
is 1). ``mlcluster.pcluster.update_policy`` must agree with these
(tests/pcluster/test_update_policy_contract.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pcluster.config.config_patch import ConfigPatch
from pcluster.schemas.cluster_schema import ClusterSchema


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str]]:
    """The changes ParallelCluster's ConfigPatch finds from ``old`` to ``new``, with their update policies."""
    patch = ConfigPatch(SimpleNamespace(name="mlcluster-update-check"), old, new)
    return [
        {"path": ".".join(change.path), "key": str(change.key), "policy": change.update_policy.name}
        for change in patch.changes
    ]


def _login_pools(config: dict[str, Any]) -> set[str]:
    pools = (config.get("LoginNodes") or {}).get("Pools") or []
    return {pool.get("Name") for pool in pools if int(pool.get("Count", 1)) > 0}


def _cluster(old: dict[str, Any], *, fleet_running: bool) -> SimpleNamespace:
    """The cluster state ConfigPatch's checks read: compute capacity, login nodes, the head node."""
    pools = _login_pools(old)

    def login_running(pool_name: str | None = None) -> bool:
        return pool_name in pools if pool_name else bool(pools)

    return SimpleNamespace(
        name="mlcluster-update-check",
        has_running_capacity=lambda: fleet_running,
        has_running_login_nodes=login_running,
        head_node_instance=SimpleNamespace(state="running"),
    )


def _list_key(path: list[str], key: str) -> str | None:
    """The ``update_key`` of the list field ``key`` under ``path`` in the cluster schema."""
    schema: Any = ClusterSchema(cluster_name="mlcluster-update-check")
    for part in [*path, key]:
        name = part.split("[", 1)[0]
        field = next(f for f in schema.declared_fields.values() if f.data_key == name)
        if part == key:
            return field.metadata.get("update_key")
        schema = field.schema
    return None


def _check(change: Any, patch: ConfigPatch) -> str:
    try:
        result = change.update_policy.check(change, patch)[0]
    except Exception as error:  # a check that raises fails the update too: report it, do not stop
        return f"ERROR: {type(error).__name__}: {error}"
    return str(result.value)


def outcomes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, str | None]]:
    """``changes`` with each list change's item and its policy's check with the fleet running and stopped."""
    running = ConfigPatch(_cluster(old, fleet_running=True), old, new)
    stopped = ConfigPatch(_cluster(old, fleet_running=False), old, new)
    out: list[dict[str, str | None]] = []
    for change, same in zip(running.changes, stopped.changes, strict=True):
        item = None
        if change.is_list:
            value = change.new_value if change.new_value is not None else change.old_value
            item = str(value.get(_list_key(list(change.path), change.key)))
        out.append(
            {
                "path": ".".join(change.path),
                "key": str(change.key),
                "policy": change.update_policy.name,
                "item": item,
                "running": _check(change, running),
                "stopped": _check(same, stopped),
            }
        )
    return out


def main() -> int:
    """Print the changes between the two files given, one JSON object a line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", action="store_true", help="add each change's item and check results")
    parser.add_argument("old", type=Path, help="the cluster configuration deployed (JSON)")
    parser.add_argument("new", type=Path, help="the cluster configuration to deploy (JSON)")
    args = parser.parse_args()
    old = json.loads(args.old.read_text())
    new = json.loads(args.new.read_text())
    for change in outcomes(old, new) if args.outcomes else changes(old, new):
        sys.stdout.write(json.dumps(change, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
