"""Write ParallelCluster's update policy of every cluster configuration key to a data file mlcluster reads.

Run it with the ParallelCluster virtualenv (aws-parallelcluster pins CDK v1
and cannot share a venv with mlcluster, so mlcluster cannot import it)::

    .venv-pcluster/bin/python tools/pcluster_update_policies.py mlcluster/pcluster/update_policies.json

It walks ``pcluster.schemas.cluster_schema.ClusterSchema`` the way
``pcluster.config.config_patch.ConfigPatch`` does (the comparison
``pcluster update-cluster`` and ``Custom::PclusterCluster`` run before an
update) and records, for every field: the name of its ``UpdatePolicy``
(``UNSUPPORTED`` when the schema gives none, as ConfigPatch assumes), its
nested fields, and for a list of sections the key that pairs old and new
items (``update_key``; ConfigPatch matches items by it, and an item whose
key changed is one removal and one addition). The file names the
ParallelCluster version it was read from; ``tests/pcluster/
test_update_policy_contract.py`` regenerates it and fails when it differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pcluster.config.update_policy import UpdatePolicy
from pcluster.schemas.cluster_schema import ClusterSchema


def fields(schema: Any) -> dict[str, Any]:
    """The update policy tree of ``schema``'s declared fields, in ConfigPatch's order."""
    out: dict[str, Any] = {}
    for field in schema.declared_fields.values():
        node: dict[str, Any] = {"policy": field.metadata.get("update_policy", UpdatePolicy.UNSUPPORTED).name}
        if hasattr(field, "nested"):
            if getattr(field, "many", False):
                node["list_key"] = field.metadata.get("update_key")
            node["fields"] = fields(field.schema)
        out[field.data_key] = node
    return out


def policies() -> dict[str, Any]:
    """The whole data file: the ParallelCluster version and the tree from the cluster schema's root."""
    return {
        "pcluster_version": version("aws-parallelcluster"),
        "fields": fields(ClusterSchema(cluster_name="mlcluster-update-policies")),
    }


def render() -> str:
    """The data file's text (stable: two runs on one ParallelCluster give the same bytes)."""
    return json.dumps(policies(), indent=1) + "\n"


def main() -> int:
    """Write the data file to the path given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the JSON (mlcluster/pcluster/update_policies.json)")
    args = parser.parse_args()
    args.out.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
