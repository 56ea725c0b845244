"""Run ParallelCluster's schema and validators on one cluster configuration, with the caller's AWS access.

This file runs as a script under a Python that has the ``aws-parallelcluster``
package (it pins CDK v1 and jsii 1.85, so it cannot share mlcluster's own
environment); it imports nothing from mlcluster. ``mlcluster preflight``
(``mlcluster/cli/pcluster_live.py``) starts it with the operator's credentials
and region in the environment::

    <pcluster python> live_validate.py < {"cluster_name": "...", "config": {...}}

It does what ``pcluster create-cluster --dryrun`` does
(``Cluster._validate_and_parse_config`` in ParallelCluster 3.16): load the
configuration with ``ClusterSchema(cluster_name=...)``, then ``validate()`` the
model, whose validators call EC2, S3, IAM and FSx. It prints one JSON document:
``version`` (the installed ParallelCluster), ``schema`` (key path and message
pairs) and ``failures`` (level, validator, message). Exit status 0 whenever it
could read its input; 2 otherwise; 3 (:data:`EXIT_NO_PCLUSTER`) when this Python
has no ``aws-parallelcluster``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

#: The exit status that says this Python has no aws-parallelcluster (mlcluster/cli/pcluster_live.py reads it).
EXIT_NO_PCLUSTER = 3


def key_paths(messages: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Flatten marshmallow's nested error messages into ``(key path, message)`` pairs."""
    if isinstance(messages, dict):
        for key, value in messages.items():
            sub = (
                path
                if key == "_schema"
                else (f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
            )
            yield from key_paths(value, sub)
    elif isinstance(messages, list):
        for item in messages:
            yield from key_paths(item, path) if isinstance(item, (dict, list)) else [(path or "(top level)", str(item))]
    else:
        yield path or "(top level)", str(messages)


def validate(cluster_name: str, config: dict[str, Any]) -> dict[str, Any]:
    """What ``pcluster create-cluster --dryrun`` finds in ``config``: schema errors, then validator failures."""
    # Present only in the ParallelCluster Python this file runs in, not where mypy checks mlcluster.
    from marshmallow import ValidationError  # type: ignore[import-not-found]
    from pcluster.schemas.cluster_schema import ClusterSchema  # type: ignore[import-not-found]
    from pcluster.validators.common import ValidatorContext  # type: ignore[import-not-found]

    try:
        model = ClusterSchema(cluster_name=cluster_name).load(config)
    except ValidationError as exc:
        return {"schema": [list(p) for p in key_paths(exc.messages)], "failures": []}
    try:
        failures = model.validate(None, ValidatorContext())
    except Exception as exc:  # pcluster turns any error here into "Invalid cluster configuration: ..."
        message = f"Invalid cluster configuration: {exc}"
        return {"schema": [], "failures": [{"level": "ERROR", "validator": "(validate)", "message": message}]}
    return {
        "schema": [],
        "failures": [{"level": f.level.name, "validator": f.validator_type, "message": f.message} for f in failures],
    }


def installed_version() -> str:
    """The installed ``aws-parallelcluster`` version (its validators are that release's)."""
    from importlib.metadata import version

    return version("aws-parallelcluster")


def main() -> int:
    """Read the request from stdin, print the findings as JSON on stdout."""
    try:
        request = json.load(sys.stdin)
        cluster_name, config = str(request["cluster_name"]), dict(request["config"])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"live_validate.py: the request on stdin cannot be read: {exc}", file=sys.stderr)
        return 2
    try:
        import pcluster  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        print(f"{sys.executable} has no aws-parallelcluster package", file=sys.stderr)
        return EXIT_NO_PCLUSTER
    logging.disable(logging.CRITICAL)
    result = validate(cluster_name, config)
    json.dump({"version": installed_version(), **result}, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
