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
lifecycle for its instance type, decides (``--require-env``: a node without it fails); so it does for a
type this package's tables do not know (:func:`counts_known`).

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
from mlcluster.cli.errors import CliError
from mlcluster.cli.nccl import efa_devices
from mlcluster.cli.nodes import cluster_name, controller
from mlcluster.cli.smoke import IMMEDIATE_SECONDS, NodeKind, choose_partition
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

HEALTH = "mlcluster-health"
#: The line the check script adds for a job step that did not end with 0: a critical finding (1, with the
#: node's summary), or srun could not start it, ``timeout`` ended it (124), the tool was killed.
STEP_EXIT = "MLC-STEP"
#: A node's summary line (health.sh's last line): it ran every check.
SUMMARY_PATTERN = ": healthy$|: [0-9]+ critical, [0-9]+ warning$"
#: Keeps the output under Run Command's limit: failed checks, each node's summary, failed job steps and
#: srun's own errors (``srun: error: Unable to allocate resources: ...``: why a step never reached its nodes).
HEALTH_FILTER = f"grep -E ' FAIL |{SUMMARY_PATTERN}|: drained |^{STEP_EXIT} |^srun: error'"
#: The line the check script writes to stderr as each job step ends, so a long deep run keeps output flowing
#: (a Session Manager session ends after its idle timeout, 20 minutes by default); the parser ignores it.
PROGRESS = "MLC-PROGRESS"
#: srun's words when it could not get the nodes it named (another job took one after the listing, or
#: ``--immediate`` ran out): the nodes were never reached, so they are "not checked", not critical.
NOT_ALLOCATED = "Unable to allocate resources"
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
_STEP_EXIT = re.compile(rf"^{STEP_EXIT} (?P<nodes>\S+) exit=(?P<code>\d+)(?: (?P<said>.*))?$")
_SRUN_ERROR = re.compile(r"^srun: error: .*$")


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
    #: Why a node that was idle was not checked after all (srun could not allocate it, the output was cut).
    note: str = ""

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
            "note": self.note,
            "failures": [f.__dict__ for f in self.failures],
        }


def counts_known(kind: NodeKind) -> bool:
    """True when this package's tables say what a node of ``kind`` must show: its instance type is in
    INSTANCE_TYPES and, where EFA is on for an EFA type, nccl.EFA_DEVICES has its device count. Otherwise the
    counts would be zeros, checked against nothing (a p6e-gb200 or g6e.48xlarge node would pass)."""
    info = INSTANCE_TYPES.get(kind.instance_type.removeprefix("ml."))
    if info is None:
        return False
    return not (kind.efa and info.efa and efa_devices(kind.instance_type) is None)


def expect_args(kind: NodeKind | None) -> str:
    """mlcluster-health's options for a node of ``kind``: the counts it must show; for a node whose kind or
    whose counts are not known, its own health.env, required (``--require-env``: a node without it fails)."""
    if kind is None or not counts_known(kind):
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
    (nccl-tests built with MPI=1, as in smoke): ``--mpi=pmix``, one rank on one node, ``--cpu-bind=none`` (as
    the smoke test and AWS's nccl-tests scripts: the one rank drives every GPU with its own threads).

    A step that fails names its nodes and srun's first error (STEP_EXIT line) and each step says on stderr
    that it ended (PROGRESS). A batch of several nodes (the quick tier) that failed with no node's summary
    (one node taken by another job fails the whole ``srun -N``) runs again one step per node, so each node
    answers for itself. The throttle waits with ``wait -n`` where bash has it (4.3 on) and sleeps a second
    where it does not (bash 4.2 of Amazon Linux 2), instead of spinning."""
    script = (HYPERPOD_DIR / "health.sh").read_text(encoding="utf-8")
    extra = " --mpi=pmix --cpu-bind=none" if tier == "deep" else ""
    throttle = f'while [ "$(jobs -rp | wc -l)" -ge {CONCURRENT_STEPS} ]; do wait -n 2>/dev/null || sleep 1; done'
    lines = [
        f"h={shlex.quote(script)}",
        "o=$(mktemp -d) || exit 1",
        "trap 'rm -rf \"$o\"' EXIT",
        "step() {",
        "  local label=$1 count=$2 nodes=$3 status=0 said",
        "  shift 3",
        f'  timeout {seconds} srun -N "$count" -p {shlex.quote(partition)} --nodelist="$nodes" --exclusive '
        f'--immediate={IMMEDIATE_SECONDS} --ntasks-per-node=1{extra} bash -c "$h" {HEALTH} --tier {tier} "$@" '
        '>"$o/$label" 2>&1 </dev/null || status=$?',
        '  if [ "$status" -ne 0 ]; then',
        "    said=$(grep -m 1 '^srun: error' \"$o/$label\" | tr -s '[:space:]' ' ')",
        f'    echo "{STEP_EXIT} $nodes exit=$status${{said:+ $said}}" >>"$o/$label"',
        "  fi",
        f'  echo "{PROGRESS} $nodes exit=$status" >&2',
        "}",
        "again() {",
        "  local label=$1 nodes=$2 node",
        "  shift 2",
        f'  grep -q "^{STEP_EXIT} " "$o/$label" || return 0',
        f"  ! grep -qE '{SUMMARY_PATTERN}' \"$o/$label\" || return 0",
        f'  sed -i "s/^{STEP_EXIT} /{STEP_EXIT}-BATCH /" "$o/$label"',
        "  for node in ${nodes//,/ }; do",
        '    step "$label-$node" 1 "$node" "$@" &',
        f"    {throttle}",
        "  done",
        "}",
    ]
    for index, (names, args) in enumerate(batches):
        lines.append(f"step {index:05d} {len(names)} {shlex.quote(','.join(names))} {args} &")
        lines.append(throttle)
    lines.append("wait")
    for index, (names, args) in enumerate(batches):
        if len(names) > 1:
            lines.append(f"again {index:05d} {shlex.quote(','.join(names))} {args}")
    lines += ["wait", f'cat "$o"/* | {HEALTH_FILTER}']
    return "\n".join(lines) + "\n"


def script_seconds(batches: Sequence[tuple[Sequence[str], str]], seconds: int) -> int:
    """How long the check script may take: its waves of CONCURRENT_STEPS job steps, each bounded by ``seconds``,
    then, at worst, every node of a batch of several again in a step of its own."""
    again = sum(len(names) for names, _ in batches if len(names) > 1)
    waves = math.ceil(len(batches) / CONCURRENT_STEPS) + math.ceil(again / CONCURRENT_STEPS)
    return waves * seconds + 120


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


def parse_steps(text: str) -> tuple[dict[str, str], list[str]]:
    """What srun said about each node whose job step failed (the STEP_EXIT line's tail, empty when it said
    nothing), and srun's error lines, each once, in order."""
    said: dict[str, str] = {}
    errors: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if match := _STEP_EXIT.match(line):
            said.update(dict.fromkeys(match["nodes"].split(","), (match["said"] or "").strip()))
        elif _SRUN_ERROR.match(line) and line not in errors:
            errors.append(line)
    return said, errors


def unanswered(
    item: NodeHealth, *, partition: str, code: int | None, said: str, exit_code: int, truncated: bool, seconds: int
) -> None:
    """Record why idle node ``item`` printed no summary: not checked when srun could not allocate it or the
    output was cut before its lines; otherwise a critical ``health_tool`` failure beside any lines it printed
    (a node that warned and then hung is not "warning")."""
    if code is not None and NOT_ALLOCATED in said:
        item.note = f"srun could not allocate it ({said}); run the checks again"
        return
    if code is None and truncated:
        item.note = (
            f"output truncated at {runcommand.OUTPUT_LIMIT} characters before its answer; "
            "fix the nodes listed and run again, or check a smaller partition with --partition"
        )
        return
    why = (
        f"its job step timed out after {seconds} s"
        if code == 124
        else f"its job step exited {code}"
        if code is not None
        else f"the checks exited {exit_code}"
    )
    item.failures.append(
        Failure(
            item.name,
            "health_tool",
            "critical",
            f"no answer from {HEALTH} ({why}{': ' + said if said else ''})",
            f"look at `srun -w {item.name} -p {partition} hostname` and the node's slurmd log",
        )
    )


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
    from rich.markup import escape

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
            )
        return result

    listing = run("list nodes", f"sinfo -h -N -p {shlex.quote(chosen.name)} -o '%N|%t|%E'", 120)
    nodes = parse_nodes(listing.stdout)
    if not listing.ok or not nodes:
        raise CliError(f"sinfo found no nodes in partition {chosen.name}: {listing.stdout.strip()[:300]}")
    idle = [n for n in nodes if n.state == "idle"]
    if idle:
        seconds = TIER_SECONDS[tier]
        kinds = {n.name: chosen.kind_of(n.name) for n in idle}
        batches = step_batches([n.name for n in idle], kinds, tier)
        timeout = script_seconds(batches, seconds)
        result = run(f"{tier} checks", check_script(chosen.name, batches, tier, seconds), timeout)
        failures, done, exits = parse_health(result.stdout)
        said, srun_errors = parse_steps(result.stdout)
        for item in idle:
            kind = kinds[item.name]
            item.expects = expect_args(kind) + (f" ({kind.resource}: {kind.instance_type})" if kind else "")
            item.checked = item.name in done
            item.failures = [f for f in failures if f.host == item.name]
            if not item.checked:
                unanswered(
                    item,
                    partition=chosen.name,
                    code=exits.get(item.name),
                    said=said.get(item.name, ""),
                    exit_code=result.exit_code,
                    truncated=result.truncated,
                    seconds=seconds,
                )
    else:
        srun_errors = []
    critical = [n for n in nodes if n.verdict == "critical"]
    if as_json:
        echo_json(
            {
                "environment": env,
                "cluster": cluster_name(target),
                "partition": chosen.name,
                "tier": tier,
                "healthy": not critical,
                "srun_errors": srun_errors,
                "nodes": [n.as_dict() for n in nodes],
            }
        )
    else:
        # The names, states, reasons and notes come from Slurm and srun (a drain reason is anyone's free text):
        # escaped, so a "[" in them prints as written instead of being read as Rich markup.
        out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
        styles = {"critical": "bold red", "warning": "yellow", "healthy": "bold green", "not checked": "dim"}
        for item in nodes:
            why = f" ({item.reason})" if item.reason else ""
            busy = "" if item.checked or item.state == "idle" else f": {item.state}, not checked now{why}"
            note = f": {item.note}" if item.note else ""
            plain = escape(f"{item.name}{busy or why}{note}")
            out.print(f"[{styles[item.verdict]}]{item.verdict.upper()}[/] {plain}", markup=True)
            for failure in item.failures:
                out.print(f"     {failure.check} ({failure.severity}): {failure.detail}", markup=False)
                if failure.action:
                    out.print(f"       action: {failure.action}", markup=False)
        for line in srun_errors:
            out.print(line, markup=False)
        checked = sum(n.checked for n in nodes)
        out.print(
            f"{len(nodes)} nodes in {chosen.name}: {checked} checked ({tier}), {len(critical)} critical", markup=False
        )
    if critical:
        raise CliError(f"{len(critical)} node(s) with critical findings: {', '.join(n.name for n in critical)}")
