"""``mlcluster health``: the nodes' health checks, run now on every idle node, and what Slurm already drained.

The checks are the node-side tool ``mlcluster-health`` (``mlcluster/lifecycle/hyperpod/health.sh``;
the HyperPod lifecycle and ParallelCluster's health_check step install it, and Slurm runs its quick
tier as HealthCheckProgram every 5 minutes, draining a node that fails a critical check). This
command lists the partition's nodes with their state and reason, sends this package's copy of the
tool through ``srun`` to the idle ones (named, exclusive, without queueing), with the counts each node
must show (so it needs nothing installed, on either backend), and prints each failed check with its
severity and action.

What a node must show comes from its own kind: on ParallelCluster the compute resource its Slurm name
names (``<queue>-<st|dy>-<resource>-<n>``), with that resource's instance type and ``efa`` setting; on
HyperPod the partition's instance group. Where HyperPod groups of different types share a partition
(Slurm's node names are host names there) the node's own ``/etc/mlcluster/health.env``, written by the
lifecycle for its instance type, decides (``--require-env``: a node without it fails).

The quick tier runs one job step per kind of node; the deep tier one per node (``-N 1``), each its own
single-node all-reduce, so one bad node fails alone (one ``srun -N <n> --mpi=pmix`` would join every
node's ranks into one MPI world, and one bad node would fail them all). At most
:data:`CONCURRENT_STEPS` job steps run at once, each under ``timeout``.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.nodes import cluster_name, controller
from mlcluster.cli.smoke import IMMEDIATE_SECONDS, NodeKind, choose_partition
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR

HEALTH = "mlcluster-health"
#: The line the check script adds for a job step that did not end with 0: a critical finding (1, with the
#: node's summary), or srun could not start it, ``timeout`` ended it (124), the tool was killed.
STEP_EXIT = "MLC-STEP"
#: Keeps the output under Run Command's 2500 characters: failed checks, each node's summary, failed job steps.
HEALTH_FILTER = f"grep -E ' FAIL |: healthy$|: [0-9]+ critical, [0-9]+ warning$|: drained |^{STEP_EXIT} '"
#: Job steps (srun) running at once: the controller starts one srun process per step, and the deep tier
#: runs one step per node.
CONCURRENT_STEPS = 16
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
_STEP_EXIT = re.compile(rf"^{STEP_EXIT} (?P<nodes>\S+) exit=(?P<code>\d+)$")


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
    #: What the node was checked against (mlcluster-health's options, and the kind of node they come from).
    expects: str = ""
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
            "expects": self.expects,
            "verdict": self.verdict,
            "failures": [f.__dict__ for f in self.failures],
        }


def expect_args(kind: NodeKind | None) -> str:
    """mlcluster-health's options for a node of ``kind``: the counts it must show; for a node whose kind is
    not known, its own health.env, required (``--require-env``)."""
    if kind is None:
        return "--require-env"
    gpus, efa, neuron = kind.expectations()
    return f"--expect-gpus {gpus} --expect-efa {efa} --expect-neuron {neuron}"


def health_command(kind: NodeKind | None, tier: str) -> str:
    """The tool, sent inline (``bash -c SCRIPT mlcluster-health ...``), with what a node of ``kind`` must show."""
    script = (HYPERPOD_DIR / "health.sh").read_text(encoding="utf-8")
    return f"bash -c {shlex.quote(script)} {HEALTH} --tier {tier} {expect_args(kind)}"


def step_batches(nodes: Sequence[str], kinds: dict[str, NodeKind | None], tier: str) -> list[tuple[list[str], str]]:
    """The job steps to run: (nodes, mlcluster-health options) each. Deep: one per node; quick: one per kind."""
    batches: dict[str, list[str]] = {}
    if tier == "deep":
        return [([name], expect_args(kinds[name])) for name in nodes]
    for name in nodes:
        batches.setdefault(expect_args(kinds[name]), []).append(name)
    return [(names, args) for args, names in batches.items()]


def check_script(partition: str, batches: Sequence[tuple[Sequence[str], str]], tier: str, seconds: int) -> str:
    """The shell run on the controller: the tool once in a variable, one ``srun`` per batch (named nodes,
    exclusive, without queueing, under ``timeout``), at most CONCURRENT_STEPS at once, each step's output in
    its own file, then all of them through HEALTH_FILTER. The deep tier's all_reduce_perf is an MPI program
    (nccl-tests built with MPI=1, as in smoke): ``--mpi=pmix``, one rank on one node."""
    script = (HYPERPOD_DIR / "health.sh").read_text(encoding="utf-8")
    mpi = " --mpi=pmix" if tier == "deep" else ""
    lines = [
        f"h={shlex.quote(script)}",
        "o=$(mktemp -d) || exit 1",
        "trap 'rm -rf \"$o\"' EXIT",
        "step() {",
        "  local label=$1 count=$2 nodes=$3 status=0",
        "  shift 3",
        f'  timeout {seconds} srun -N "$count" -p {shlex.quote(partition)} --nodelist="$nodes" --exclusive '
        f'--immediate={IMMEDIATE_SECONDS} --ntasks-per-node=1{mpi} bash -c "$h" {HEALTH} --tier {tier} "$@" '
        '>"$o/$label" 2>&1 </dev/null || status=$?',
        f'  if [ "$status" -ne 0 ]; then echo "{STEP_EXIT} $nodes exit=$status" >>"$o/$label"; fi',
        "}",
    ]
    for index, (names, args) in enumerate(batches):
        lines.append(f"step {index:05d} {len(names)} {shlex.quote(','.join(names))} {args} &")
        lines.append(f'while [ "$(jobs -rp | wc -l)" -ge {CONCURRENT_STEPS} ]; do wait -n; done')
    lines += ["wait", f'cat "$o"/* | {HEALTH_FILTER}']
    return "\n".join(lines) + "\n"


def script_seconds(batches: int, seconds: int) -> int:
    """How long the check script may take: its waves of CONCURRENT_STEPS job steps, each bounded by ``seconds``."""
    return math.ceil(batches / CONCURRENT_STEPS) * seconds + 120


def parse_nodes(text: str) -> list[NodeHealth]:
    """``sinfo -h -N -p P -o '%N|%t|%E'``: node, compact state, reason (``none`` when there is none)."""
    nodes: list[NodeHealth] = []
    for line in text.splitlines():
        match = _NODE_ROW.match(line.strip())
        if match and match["name"] not in {n.name for n in nodes}:
            reason = match["reason"].strip()
            nodes.append(NodeHealth(match["name"], match["state"], "" if reason == "none" else reason))
    return nodes


def parse_health(text: str) -> tuple[list[Failure], set[str], dict[str, int]]:
    """Failed checks, the hosts that printed their summary line (they ran every check), and the exit status
    of each node's job step that did not end with 0 (STEP_EXIT lines)."""
    failures = []
    done = set()
    exits: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if match := _CHECK.match(line):
            failures.append(
                Failure(match["host"], match["check"], match["severity"], match["detail"], match["action"] or "")
            )
        elif match := _SUMMARY.match(line):
            done.add(match["host"])
        elif match := _STEP_EXIT.match(line):
            exits.update(dict.fromkeys(match["nodes"].split(","), int(match["code"])))
    return failures, done, exits


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

    Runs mlcluster-health (sent with the command, with the counts each node
    must show: its compute resource's instance type and EFA setting, or its
    instance group's) on each idle node of the partition from the head node /
    controller as the cluster's default user; the deep tier one node per job
    step, so each node gets its own verdict; busy nodes are listed
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
        kinds = {n.name: chosen.kind_of(n.name) for n in idle}
        batches = step_batches([n.name for n in idle], kinds, tier)
        timeout = script_seconds(len(batches), seconds)
        result = run(f"{tier} checks", check_script(chosen.name, batches, tier, seconds), timeout)
        failures, done, exits = parse_health(result.stdout)
        for item in idle:
            kind = kinds[item.name]
            item.expects = expect_args(kind) + (f" ({kind.resource}: {kind.instance_type})" if kind else "")
            item.checked = item.name in done
            item.failures = [f for f in failures if f.host == item.name]
            if not item.checked and not item.failures:
                code = exits.get(item.name)
                why = (
                    f"its job step timed out after {seconds} s"
                    if code == 124
                    else f"its job step exited {code}"
                    if code is not None
                    else f"the checks exited {result.exit_code}"
                )
                item.failures.append(
                    Failure(
                        item.name,
                        "health_tool",
                        "critical",
                        f"no answer from {HEALTH} ({why})",
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
