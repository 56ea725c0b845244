"""Check ParallelCluster cluster configurations against ParallelCluster's own schema, offline.

Run it with the ParallelCluster virtualenv (aws-parallelcluster pins CDK v1
and cannot share a venv with mlcluster)::

    .venv-pcluster/bin/python tools/pcluster_schema_check.py config.yaml [more.yaml ...]

Each file (YAML or JSON) is loaded with
``pcluster.schemas.cluster_schema.ClusterSchema(cluster_name=...).load(cfg)``,
the same schema ``pcluster create-cluster`` and the ``Custom::PclusterCluster``
resource apply. The script prints ``OK <file>`` or one line per problem,
``<file>: <key path>: <message>``, and exits 1 when any file has a problem
(2 for bad usage).

Offline and deterministic: the schema never needs AWS, but building the
cluster model describes capacity reservations "softly" (a failure is only
logged). To keep that from reaching a real endpoint or waiting on a
network, the script pins a region, dummy credentials, no shared config,
no instance metadata, one attempt, and an AWS endpoint on a closed local
port, so such calls fail at once. Give configurations without deploy-time
tokens: ``mlcluster.pcluster.placeholders.check_ready_config`` makes them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

#: Environment that keeps botocore offline and fast (see the module docstring).
OFFLINE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "1",
    "AWS_RETRY_MODE": "standard",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
}
DEFAULT_REGION = "us-east-1"


def key_paths(messages: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Flatten marshmallow's nested error messages into ``(key path, message)`` pairs."""
    if isinstance(messages, dict):
        for key, value in messages.items():
            if key == "_schema":
                sub = path
            elif isinstance(key, int):
                sub = f"{path}[{key}]"
            else:
                sub = f"{path}.{key}" if path else str(key)
            yield from key_paths(value, sub)
    elif isinstance(messages, list):
        for item in messages:
            if isinstance(item, (dict, list)):
                yield from key_paths(item, path)
            else:
                yield path or "(top level)", str(item)
    else:
        yield path or "(top level)", str(messages)


def read_config(path: Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def check_file(path: Path, cluster_name: str) -> list[tuple[str, str]]:
    """The problems ParallelCluster's schema finds in ``path`` (empty when it loads)."""
    try:
        config = read_config(path)
    except (OSError, yaml.YAMLError) as exc:
        return [("(file)", "cannot be read: " + " ".join(str(exc).split()))]
    if not isinstance(config, dict):
        return [("(top level)", "expected a mapping of settings")]
    region = config.get("Region")
    os.environ["AWS_DEFAULT_REGION"] = region if isinstance(region, str) and region else DEFAULT_REGION

    from marshmallow import ValidationError
    from pcluster.schemas.cluster_schema import ClusterSchema

    try:
        ClusterSchema(cluster_name=cluster_name).load(config)
    except ValidationError as exc:
        return list(key_paths(exc.messages))
    except Exception as exc:  # the model's constructors raise plain exceptions too
        return [("(load)", f"{type(exc).__name__}: {exc}")]
    return []


def main(argv: list[str] | None = None) -> int:
    """Check every file named on the command line; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("files", nargs="+", type=Path, help="cluster configuration files (YAML or JSON)")
    parser.add_argument("--cluster-name", default="mlcluster-check", help="cluster name given to the schema")
    parser.add_argument("--verbose", action="store_true", help="show ParallelCluster's own log messages")
    args = parser.parse_args(argv)

    os.environ.update(OFFLINE_ENV)
    os.environ.pop("AWS_PROFILE", None)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL, stream=sys.stderr)
    if not args.verbose:
        logging.disable(logging.CRITICAL)

    failed = 0
    for path in args.files:
        problems = check_file(path, args.cluster_name)
        if problems:
            failed += 1
            for where, message in problems:
                print(f"{path}: {where}: {message}")
        else:
            print(f"OK {path}")
    if failed:
        print(f"{failed} of {len(args.files)} file(s) failed the ParallelCluster schema", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
