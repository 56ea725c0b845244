"""``mlcluster health``: the nodes' health checks, run now on every idle node, and what Slurm already drained.

The checks are the node-side tool ``mlcluster-health`` (``mlcluster/lifecycle/hyperpod/health.sh``;
the HyperPod lifecycle and ParallelCluster's health_check step install it, and Slurm runs its quick
tier as HealthCheckProgram every 5 minutes, draining a node that fails a critical check). This
command lists the partition's nodes with their state and reason, sends this package's copy of the
tool through ``srun`` to the idle ones (named, exclusive, without queueing), with the counts the
instance type must show (so it needs nothing installed, on either backend), and prints each failed
check with its severity and action.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.nccl import efa_devices
from mlcluster.cli.nodes import cluster_name, controller
from mlcluster.cli.smoke import IMMEDIATE_SECONDS, Partition, choose_partition
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

HEALTH = "mlcluster-health"
#: Keeps the output under Run Command's 2500 characters: failed checks and each node's summary.
HEALTH_FILTER = "grep -E ' FAIL |: healthy$|: [0-9]+ critical, [0-9]+ warning$|: drained '"
#: The reason a node drained by mlcluster-health carries (health.sh's drain()).
DRAIN_REASON = "mlcluster-health:"
#: How long each tier may take per node: quick reads counters (seconds); deep runs DCGM level 2
#: (about two minutes, NVIDIA "dcgmi diag") and a single-node all-reduce.
TIER_SECONDS = {"quick": 120, "deep": 1800}

_NODE_ROW = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\|(?P<state>[a-z]+[*~#!%$@^+-]?)\|(?P<reason>.*)$")
_CHECK = re.compile(
    r"^(?:\d+:\s+)?(?P<host>\S+) FAIL (?P<check>[a-z_]+) (?P<severity>critical|warning): (?P<detail>.*?)"
    r"(?:\. Action: (?P<action>.*))?$"
)
_SUMMARY = re.compile(r"^(?:\d+:\s+)?(?P<host>\S+): (?:healthy|(?P<critical>\d+) critical, (?P<warning>\d+) warning)$")


@dataclass(frozen=True)
class Failure:
    """One failed check of one node."""

    host: str
    check: str
    severity: str
    detail: str
    action: str


@dataclass
class NodeHealth:
    """A node of the partition: its Slurm state and reason, and what the checks found now."""

    name: str
    state: str
    reason: str = ""
    checked: bool = False
    failures: list[Failure] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if any(f.severity == "critical" for f in self.failures) or self.reason.startswith(DRAIN_REASON):
            return "critical"
        if self.failures:
            return "warning"
        if self.checked:
            return "healthy"
        return "not checked"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.name,
            "state": self.state,
            "reason": self.reason,
            "checked": self.checked,
            "verdict": self.verdict,
            "failures": [f.__dict__ for f in self.failures],
        }


def health_command(partition: Partition, tier: str) -> str:
    """The tool, sent inline (``bash -c SCRIPT mlcluster-health ...``), with what the instance type must show."""
    name = partition.instance_type.removeprefix("ml.")
    kind = INSTANCE_TYPES.get(name)
    gpus = kind.accelerators if kind is not None and kind.accelerator == "nvidia" else 0
    neuron = kind.accelerators if kind is not None and kind.accelerator == "neuron" else 0
    efa = efa_devices(name) or 0
    script = (HYPERPOD_DIR / "health.sh").read_text(encoding="utf-8")
    return (
        f"bash -c {shlex.quote(script)} {HEALTH} --tier {tier} "
        f"--expect-gpus {gpus} --expect-efa {efa} --expect-neuron {neuron}"
    )


def parse_nodes(text: str) -> list[NodeHealth]:
    """``sinfo -h -N -p P -o '%N|%t|%E'``: node, compact state, reason (``none`` when there is none)."""
    nodes: list[NodeHealth] = []
    for line in text.splitlines():
        match = _NODE_ROW.match(line.strip())
        if match and match["name"] not in {n.name for n in nodes}:
            reason = match["reason"].strip()
            nodes.append(NodeHealth(match["name"], match["state"], "" if reason == "none" else reason))
    return nodes


def parse_health(text: str) -> tuple[list[Failure], set[str]]:
    """Failed checks, and the hosts that printed their summary line (they ran every check)."""
    failures = []
    done = set()
    for line in text.splitlines():
        line = line.strip()
        if match := _CHECK.match(line):
            failures.append(
                Failure(match["host"], match["check"], match["severity"], match["detail"], match["action"] or "")
            )
        elif match := _SUMMARY.match(line):
            done.add(match["host"])
    return failures, done


@click.command()
@environment_options
@click.option("--partition", metavar="P", help="Slurm partition (default: the first queue / worker group).")
@click.option(
    "--tier",
    type=click.Choice(["quick", "deep"]),
    default="quick",
    show_default=True,
    help="quick: counters and logs (seconds); deep: DCGM diagnostics and a single-node all-reduce (minutes).",
)
@json_option
def health(
    env: str,
    environments: Path,
    region: str | None,
    profile: str | None,
    partition: str | None,
    tier: str,
    as_json: bool,
) -> None:
    """Check every node's GPUs, EFA and Neuron devices, and list the nodes Slurm drained.

    Runs mlcluster-health (sent with the command, with the counts the
    instance type must show) on each idle node of the partition from the head
    node / controller as the cluster's default user; busy nodes are listed
    with their state (on HyperPod Slurm runs the quick tier on every node
    itself). Prints each failed check with its severity (critical: the node
    must not run jobs; warning: plan the action).
    Exit code 0 when no node has a critical finding, 1 otherwise.
    """
    from rich.console import Console

    target = Target.load(env, environments, region, profile)
    target.require_backend("pcluster", "hyperpod")
    chosen = choose_partition(target, partition)
    node = controller(target)
    console = Console(stderr=True, soft_wrap=True)

    def run(name: str, script: str, timeout: int) -> runcommand.Result:
        result = runcommand.run(
            target,
            node,
            "set -o pipefail\n" + script,
            comment=f"mlcluster health {target.name}: {name}",
            timeout_seconds=timeout,
            user=target.default_user,
            console=console,
        )
        if result.status != "Success" and result.exit_code in (-1, 0):
            raise CliError(
                f"{name} did not finish on {node.as_dict().get('ssm_target') or 'the controller'}: "
                f"{result.status} {result.stderr}".strip(),
                EXIT_FAILED,
            )
        return result

    listing = run("list nodes", f"sinfo -h -N -p {shlex.quote(chosen.name)} -o '%N|%t|%E'", 120)
    nodes = parse_nodes(listing.stdout)
    if not listing.ok or not nodes:
        raise CliError(f"sinfo found no nodes in partition {chosen.name}: {listing.stdout.strip()[:300]}", EXIT_FAILED)
    idle = [n for n in nodes if n.state == "idle"]
    if idle:
        seconds = TIER_SECONDS[tier]
        where = (
            f"-N {len(idle)} -p {shlex.quote(chosen.name)} --nodelist={','.join(n.name for n in idle)} "
            f"--exclusive --immediate={IMMEDIATE_SECONDS} --ntasks-per-node=1"
        )
        if tier == "deep":
            # the single-node all_reduce_perf is an MPI program (nccl-tests built with MPI=1), as in smoke
            where += " --mpi=pmix"
        command = health_command(chosen, tier)
        result = run(f"{tier} checks", f"timeout {seconds} srun {where} {command} 2>&1 | {HEALTH_FILTER}", seconds)
        failures, done = parse_health(result.stdout)
        for item in idle:
            item.checked = item.name in done
            item.failures = [f for f in failures if f.host == item.name]
            if not item.checked and not item.failures:
                item.failures.append(
                    Failure(
                        item.name,
                        "health_tool",
                        "critical",
                        f"no answer from {HEALTH} (srun exited {result.exit_code})",
                        f"look at `srun -w {item.name} -p {chosen.name} hostname` and the node's slurmd log",
                    )
                )
    critical = [n for n in nodes if n.verdict == "critical"]
    if as_json:
        echo_json(
            {
                "environment": env,
                "cluster": cluster_name(target),
                "partition": chosen.name,
                "tier": tier,
                "healthy": not critical,
                "nodes": [n.as_dict() for n in nodes],
            }
        )
    else:
        out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
        styles = {"critical": "bold red", "warning": "yellow", "healthy": "bold green", "not checked": "dim"}
        for item in nodes:
            why = f" ({item.reason})" if item.reason else ""
            busy = "" if item.checked or item.state == "idle" else f": {item.state}, not checked now{why}"
            out.print(f"[{styles[item.verdict]}]{item.verdict.upper()}[/] {item.name}{busy or why}", markup=True)
            for failure in item.failures:
                out.print(f"     {failure.check} ({failure.severity}): {failure.detail}", markup=False)
                if failure.action:
                    out.print(f"       action: {failure.action}", markup=False)
        checked = sum(n.checked for n in nodes)
        out.print(
            f"{len(nodes)} nodes in {chosen.name}: {checked} checked ({tier}), {len(critical)} critical", markup=False
        )
    if critical:
        raise CliError(
            f"{len(critical)} node(s) with critical findings: {', '.join(n.name for n in critical)}", EXIT_FAILED
        )
