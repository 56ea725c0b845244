#!/usr/bin/env python3
"""Rewrite the metrics collector's file_sd target files from Slurm's node list.

Run by ``mlcluster-collector-targets.timer`` as the collector's user on the
head node/controller (standard library only)::

    collector_targets.py --config /etc/mlcluster/collector/collector_targets.json

It reads ``scontrol show nodes --oneliner`` (read-only) and writes one
``<job>.json`` per scrape job into the configured folder: every node with an
address for jobs on ``all`` nodes; GPU or Neuron nodes for the ``gpu`` and
``neuron`` jobs, told apart by the instance type among the node's Slurm
features (ParallelCluster lists it there) or else by its partitions. Nodes
that have no instance behind them (powered down or powering down cloud nodes,
powering up, future nodes, a cloud node whose address is still its name) are left out, so
a node that scales away stops being scraped and a new one is picked up on the
next run. Each file is replaced atomically (a temporary file in the same
folder, then a rename) and only when its content changes. When ``scontrol``
fails the files are kept as they are and the run fails.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Slurm node state flags of nodes with no instance behind them, going away, or not booted yet.
GONE_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP", "FUTURE"})
FIELD = re.compile(r"(?:^|\s)(NodeName|NodeAddr|State|Partitions|AvailableFeatures)=(\S*)")
HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


class TargetsError(Exception):
    """The configuration or Slurm's answer cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Node:
    """One Slurm node with an instance behind it."""

    name: str
    address: str
    partitions: tuple[str, ...]
    features: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """A scrape job fed from Slurm's node list."""

    job: str
    port: int
    nodes: str


@dataclass(frozen=True)
class Config:
    """The refresher's input, rendered by mlcluster at synth time."""

    output_dir: Path
    jobs: tuple[Job, ...]
    partitions: Mapping[str, frozenset[str]]
    instance_types: Mapping[str, frozenset[str]]


def _kinds(source: str, key: str, value: object) -> dict[str, frozenset[str]]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(i in ("gpu", "neuron") for i in v) for k, v in value.items()
    ):
        raise TargetsError(f"{source}: {key} must map names to lists of 'gpu'/'neuron'")
    return {k: frozenset(v) for k, v in value.items()}


def load_config(path: Path) -> Config:
    """Read and check the configuration file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise TargetsError(f"cannot read {path}: {err.strerror}") from err
    except json.JSONDecodeError as err:
        raise TargetsError(f"{path} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise TargetsError(f"{path}: the top level must be a JSON object")
    output = data.get("output_dir")
    if not isinstance(output, str) or not output.startswith("/"):
        raise TargetsError(f"{path}: output_dir = {output!r} is not valid; allowed: an absolute path")
    jobs = []
    for index, entry in enumerate(data.get("jobs", [])):
        named = isinstance(entry, dict) and isinstance(entry.get("job"), str) and re.fullmatch(r"\w+", entry["job"])
        port = entry.get("port") if isinstance(entry, dict) else None
        if (
            not named
            or not isinstance(port, int)
            or not 0 < port < 65536
            or entry.get("nodes") not in ("all", "gpu", "neuron")
        ):
            raise TargetsError(
                f"{path}: jobs[{index}] = {entry!r} is not valid; allowed: {{job, port 1-65535, nodes all|gpu|neuron}}"
            )
        jobs.append(Job(entry["job"], port, entry["nodes"]))
    root = os.environ.get("MLCLUSTER_ROOT", "")
    return Config(
        output_dir=Path(root + output),
        jobs=tuple(jobs),
        partitions=_kinds(str(path), "partitions", data.get("partitions", {})),
        instance_types=_kinds(str(path), "instance_types", data.get("instance_types", {})),
    )


def _address(text: str, name: str, cloud: bool) -> str | None:
    """The node's address: an IP, or a host name (HyperPod's nodes are named and addressed ``ip-10-1-2-3``).

    A cloud node (ParallelCluster) whose address is still its own name has no instance yet.
    """
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not text or not HOSTNAME.fullmatch(text) or (cloud and text == name):
        return None
    return text


def parse_nodes(text: str) -> list[Node]:
    """The nodes of ``scontrol show nodes --oneliner`` that have an instance behind them."""
    nodes = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for key, value in FIELD.findall(line):
            fields.setdefault(key, value)
        name = fields.get("NodeName")
        if not name:
            continue
        flags = set(fields.get("State", "").upper().replace("*", "").split("+"))
        if flags & GONE_FLAGS:
            continue
        address = _address(fields.get("NodeAddr", ""), name, "CLOUD" in flags)
        if address is None:
            continue
        nodes.append(
            Node(
                name=name,
                address=address,
                partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p),
                features=tuple(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
            )
        )
    return nodes


def kinds_of(node: Node, config: Config) -> frozenset[str]:
    """GPU/Neuron kinds of ``node``: by its instance type feature when known, else by its partitions."""
    for feature in node.features:
        if feature in config.instance_types:
            return config.instance_types[feature]
    found: set[str] = set()
    for partition in node.partitions:
        found |= config.partitions.get(partition, frozenset())
    return frozenset(found)


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def target_groups(nodes: Sequence[Node], config: Config) -> dict[str, list[dict[str, Any]]]:
    """Job name -> its file_sd content: one group per node, labelled with the node's name and partition."""
    out: dict[str, list[dict[str, Any]]] = {job.job: [] for job in config.jobs}
    for node in sorted(nodes, key=lambda n: n.name):
        kinds = kinds_of(node, config)
        labels = {"node": node.name, "partition": node.partitions[0] if node.partitions else "", "role": "compute"}
        for job in config.jobs:
            if job.nodes == "all" or job.nodes in kinds:
                out[job.job].append({"targets": [_host_port(node.address, job.port)], "labels": labels})
    return out


def write_atomically(path: Path, content: str) -> bool:
    """Replace ``path`` with ``content`` through a temporary file in its folder; False when it was already so."""
    try:
        if path.read_text(encoding="utf-8") == content:
            return False
    except FileNotFoundError:
        pass
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        Path(temporary).chmod(0o644)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True


def slurm_nodes(scontrol: str) -> str:
    """``scontrol show nodes --oneliner``; an error names the command and what it said."""
    command = [scontrol, "show", "nodes", "--oneliner"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TargetsError(f"{' '.join(command)} did not run: {err}") from err
    if done.returncode != 0:
        raise TargetsError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def refresh(config: Config, scontrol: str) -> dict[str, int]:
    """Rewrite every job's file from Slurm's node list; job -> number of targets."""
    groups = target_groups(parse_nodes(slurm_nodes(scontrol)), config)
    counts = {}
    for job, content in groups.items():
        text = json.dumps(content, indent=2, sort_keys=True) + "\n"
        changed = write_atomically(config.output_dir / f"{job}.json", text)
        counts[job] = len(content)
        print(f"{job}: {len(content)} target(s){' (updated)' if changed else ''}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Run once; bad input or a failing scontrol prints ``error: ...`` and exits 1 (the files stay)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--scontrol", default="scontrol")
    args = parser.parse_args(argv)
    try:
        refresh(load_config(args.config), args.scontrol)
    except (TargetsError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
