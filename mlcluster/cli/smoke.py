"""``mlcluster smoke``: prove a new cluster works, step by step, from its head node or controller.

Every step is one script run through Systems Manager (:mod:`mlcluster.cli.runcommand`)
as the cluster's default user, with its own time bound, and ends in one PASS,
FAIL or SKIP line that says where to look when it fails.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError
from mlcluster.cli.expectations import SOURCE
from mlcluster.cli.nccl_marks import parse_versions, pass_mark
from mlcluster.cli.nodes import Node, cluster_name, controller
from mlcluster.cli.parsers import parse_all_reduce, parse_hostnames, parse_precheck, parse_sinfo
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

if TYPE_CHECKING:
    from rich.console import Console

NCCL_BINARY = "/opt/mlcluster/nccl-tests/bin/all_reduce_perf"
PRECHECK = "mlcluster-precheck"

#: Keeps all_reduce_perf's output under Run Command's 2500 characters: one provider, network, NCCL version and
#: aws-ofi-nccl version line, the result table and summary, no per-rank lines.
NCCL_FILTER = (
    "awk '/^#  *Rank /{next} /Selected [Pp]rovider/{if (!p++) print; next} /Using network/{if (!n++) print; next} "
    "/NCCL version/{if (!v++) print; next} /Initializing aws-ofi-nccl/{if (!o++) print; next} "
    "/^#|^ *[0-9]+ +[0-9]+ /{print; next} /[Ee]rror|NET\\/Socket/{if (e++ < 5) print}'"
)
PRECHECK_FILTER = "grep -E ' FAIL |: all checks passed$|check\\(s\\) failed$'"


@dataclass
class Step:
    """One smoke step's outcome."""

    name: str
    outcome: str  # PASS, FAIL or SKIP
    summary: str
    look_at: str = ""
    command_id: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "outcome": self.outcome,
            "summary": self.summary,
            "look_at": self.look_at,
            "command_id": self.command_id,
            **({"data": self.data} if self.data else {}),
        }


@dataclass(frozen=True)
class Partition:
    """The partition under test and the instance type of its nodes."""

    name: str
    instance_type: str


def partitions(target: Target) -> list[Partition]:
    """The cluster's Slurm partitions and their (first) instance type, from the environment file."""
    cluster = target.environment.config.cluster
    if cluster.pcluster is not None:
        return [Partition(q.name, q.compute_resources[0].instance_type) for q in cluster.pcluster.queues]
    assert cluster.hyperpod is not None  # require_backend ran first
    return [Partition(w.partition_name or w.instance_group_name, w.instance_type) for w in cluster.hyperpod.workers]


class Smoke:
    """Runs the steps against one cluster and collects their outcomes."""

    def __init__(self, target: Target, node: Node, console: Console, nodes: int, partition: Partition) -> None:
        self.target = target
        self.node = node
        self.console = console
        self.nodes = nodes
        self.partition = partition
        self.steps: list[Step] = []
        self.partition_nodes = 0

    def run(self, name: str, script: str, timeout: int) -> runcommand.Result:
        return runcommand.run(
            self.target,
            self.node,
            "set -o pipefail\n" + script,
            comment=f"mlcluster smoke {self.target.name}: {name}",
            timeout_seconds=timeout,
            user=self.target.default_user,
            console=self.console,
        )

    def look(self, result: runcommand.Result, then: str) -> str:
        return f"{runcommand.where_to_look(self.target, self.node, result)}; {then}"

    def failed_run(self, name: str, result: runcommand.Result, then: str) -> Step | None:
        if result.status == "TimedOut":
            return Step(
                name,
                "FAIL",
                f"timed out ({result.stderr or 'the step ran past its bound'})",
                self.look(result, then),
                result.command_id,
            )
        if result.status != "Success" and result.exit_code in (-1, 0):
            return Step(
                name,
                "FAIL",
                f"Run Command {result.status}: {result.stderr}".strip(),
                self.look(result, then),
                result.command_id,
            )
        return None

    def sinfo(self, timeout: int) -> Step:
        result = self.run("sinfo", "sinfo", timeout)
        then = f"`mlcluster ssh {self.target.name}`, then `sinfo -R` and `sudo systemctl status slurmctld`"
        if failed := self.failed_run("sinfo", result, then):
            return failed
        rows = parse_sinfo(result.stdout)
        mine = [r for r in rows if r.partition == self.partition.name]
        usable = sum(r.nodes for r in mine if r.usable)
        self.partition_nodes = sum(r.nodes for r in mine)
        data = {"rows": [r.__dict__ for r in rows]}
        if not result.ok or not rows:
            return Step(
                "sinfo",
                "FAIL",
                f"sinfo exited {result.exit_code}: {result.stdout.strip()[:300]}",
                self.look(result, then),
                result.command_id,
                data,
            )
        if not mine:
            known = ", ".join(sorted({r.partition for r in rows}))
            return Step(
                "sinfo",
                "FAIL",
                f"no partition {self.partition.name} (partitions: {known})",
                "pass --partition with one of them",
                result.command_id,
                data,
            )
        bad = ", ".join(f"{r.nodes} {r.state} ({r.nodelist})" for r in mine if not r.usable)
        summary = f"partition {self.partition.name}: {usable} of {self.partition_nodes} nodes usable"
        if usable < self.nodes:
            return Step(
                "sinfo",
                "FAIL",
                f"{summary}, {self.nodes} needed; not usable: {bad or 'none'}",
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step(
            "sinfo", "PASS", summary + (f" (not usable: {bad})" if bad else ""), command_id=result.command_id, data=data
        )

    def hostname(self, timeout: int) -> Step:
        partition = shlex.quote(self.partition.name)
        script = f"timeout {timeout} srun -N {self.nodes} -p {partition} --ntasks-per-node=1 hostname 2>&1"
        result = self.run("srun hostname", script, timeout)
        then = "`squeue` and `sinfo -R` on the head node, and slurmd's log on the nodes"
        if failed := self.failed_run("srun", result, then):
            return failed
        hosts = parse_hostnames(result.stdout) if result.ok else []
        if len(hosts) != self.nodes:
            return Step(
                "srun",
                "FAIL",
                f"`srun -N {self.nodes} hostname` exited {result.exit_code}, "
                f"{len(hosts)} host(s): {result.stdout.strip()[:300]}",
                self.look(result, then),
                result.command_id,
                {"hosts": hosts},
            )
        return Step(
            "srun",
            "PASS",
            f"{self.nodes} nodes answered: {', '.join(hosts)}",
            command_id=result.command_id,
            data={"hosts": hosts},
        )

    def container(self, image: str, timeout: int) -> Step:
        script = (
            f"timeout {timeout} srun -N 1 -p {self.partition.name} --container-image={image} "
            "grep -h '^PRETTY_NAME=' /etc/os-release 2>&1"
        )
        result = self.run("container (Pyxis)", script, timeout)
        then = "`srun --container-image=... true` by hand; check /opt/slurm/etc/plugstack.conf and enroot's paths"
        if failed := self.failed_run("container", result, then):
            return failed
        line = next((x for x in result.stdout.splitlines() if x.startswith("PRETTY_NAME=")), "")
        if not result.ok or not line:
            return Step(
                "container",
                "FAIL",
                f"Pyxis job exited {result.exit_code}: {result.stdout.strip()[-300:]}",
                self.look(result, then),
                result.command_id,
            )
        return Step(
            "container",
            "PASS",
            f"{image} ran through Pyxis: {line.split('=', 1)[1].strip(chr(34))}",
            command_id=result.command_id,
        )

    def precheck(self, timeout: int) -> Step:
        if self.target.backend != "hyperpod":
            return Step("precheck", "SKIP", "the runtime pre-check is a HyperPod lifecycle tool")
        count = self.partition_nodes or self.nodes
        script = (
            f"timeout {timeout} srun -N {count} -p {shlex.quote(self.partition.name)} --ntasks-per-node=1 "
            f"{PRECHECK} 2>&1 "
            f"| {PRECHECK_FILTER}"
        )
        result = self.run("pre-check", script, timeout)
        then = f"run `srun -N {count} {PRECHECK}` on the controller and follow each FAIL line's mitigation"
        if failed := self.failed_run("precheck", result, then):
            return failed
        summary = parse_precheck(result.stdout)
        data = {"passed_hosts": summary.passed_hosts, "failures": summary.failures, "nodes": count}
        if summary.failures or len(summary.passed_hosts) != count:
            lines = "; ".join(f"{h}: {', '.join(f) or 'failed'}" for h, f in summary.failures.items())
            return Step(
                "precheck",
                "FAIL",
                f"{len(summary.passed_hosts)} of {count} nodes passed"
                + (f"; {lines}" if lines else "")
                + (" (output truncated)" if result.truncated else ""),
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step(
            "precheck", "PASS", f"all {count} nodes passed every check", command_id=result.command_id, data=data
        )

    def nccl(self, timeout: int, min_busbw: float | None) -> Step:
        kind = INSTANCE_TYPES.get(self.partition.instance_type.removeprefix("ml."))
        if self.nodes < 2:
            return Step("nccl", "SKIP", "all_reduce across nodes needs --nodes 2 or more")
        if kind is None or kind.accelerator != "nvidia":
            return Step("nccl", "SKIP", f"{self.partition.instance_type} has no NVIDIA GPUs")
        if not kind.efa:
            return Step("nccl", "SKIP", f"{self.partition.instance_type} has no EFA")
        script = (
            "export FI_PROVIDER=efa NCCL_DEBUG=INFO\n"
            "grep -h 'EFA installer version' /opt/amazon/efa_installed_packages 2>/dev/null | head -1\n"
            f"timeout {timeout} srun -N {self.nodes} -p {shlex.quote(self.partition.name)} "
            f"--ntasks-per-node={kind.accelerators} "
            f"--mpi=pmix {NCCL_BINARY} -b 1G -e 8G -f 2 -g 1 2>&1 | {NCCL_FILTER}"
        )
        result = self.run("NCCL all_reduce_perf", script, timeout)
        then = (
            f"rerun `NCCL_DEBUG=INFO srun -N {self.nodes} --mpi=pmix {NCCL_BINARY} -b 1G -e 8G -f 2 -g 1` "
            "and look for `NET/OFI Selected provider is efa`; `fi_info -p efa` on a node lists its EFA devices"
        )
        if failed := self.failed_run("nccl", result, then):
            return failed
        parsed = parse_all_reduce(result.stdout)
        peak = parsed.peak
        mark = pass_mark(self.partition.instance_type, self.nodes, [r.size_bytes for r in parsed.rows], min_busbw)
        judged = next((r for r in parsed.rows if mark is not None and r.size_bytes == mark.size_bytes), peak)
        data: dict[str, Any] = {
            "instance_type": self.partition.instance_type,
            "nodes": self.nodes,
            "provider": parsed.provider,
            "avg_busbw_gbytes": parsed.avg_busbw_gbps,
            "peak_busbw_gbytes": peak.busbw_gbps if peak else None,
            "peak_size_bytes": peak.size_bytes if peak else None,
            "judged_size_bytes": judged.size_bytes if judged else None,
            "judged_busbw_gbytes": judged.busbw_gbps if judged else None,
            "pass_busbw_gbytes": mark.pass_gbytes if mark else None,
            "pass_basis": mark.basis if mark else None,
            "published_busbw_gbytes": mark.published_gbytes if mark else None,
            "source": (mark.source if mark and mark.source else SOURCE),
            "versions": parse_versions(result.stdout),
        }
        problems = []
        if not result.ok:
            problems.append(f"exited {result.exit_code}")
        if peak is None:
            problems.append("no result rows")
        if parsed.wrong_values or (peak is not None and not parsed.out_of_bounds_ok):
            problems.append("wrong values reported")
        if parsed.provider != "efa":
            problems.append(f"NCCL used {parsed.provider or 'an unknown network'}, not EFA")
        measured = (
            f"peak busbw {peak.busbw_gbps:.1f} GB/s at {peak.size_bytes / 2**30:g} GiB" if peak else "no bandwidth"
        )
        if mark is None:
            bound = "no expectation for this type (pass --min-busbw)"
        else:
            bound = f"pass >= {mark.pass_gbytes:g} GB/s: {mark.basis}"
            if judged is not None and judged.busbw_gbps < mark.pass_gbytes:
                problems.append(
                    f"{judged.busbw_gbps:.1f} GB/s at {judged.size_bytes / 2**30:g} GiB "
                    f"is below {mark.pass_gbytes:g} GB/s"
                )
        versions = ", ".join(f"{k} {v or 'unknown'}" for k, v in data["versions"].items())
        summary = (
            f"{measured} across {self.nodes} x {self.partition.instance_type} over {parsed.provider} ({bound}; "
            f"{versions})"
        )
        if problems:
            tail = result.stdout.strip()[-300:] if peak is None else ""
            return Step(
                "nccl",
                "FAIL",
                f"{summary}: {'; '.join(problems)}" + (f": {tail}" if tail else ""),
                self.look(result, then),
                result.command_id,
                data,
            )
        return Step("nccl", "PASS", summary, command_id=result.command_id, data=data)


STYLES = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow"}


@click.command()
@environment_options
@click.option(
    "--nodes", "nodes", type=click.IntRange(1, 2048), default=2, show_default=True, help="Nodes for srun and NCCL."
)
@click.option("--partition", metavar="P", help="Slurm partition (default: the first queue / worker group).")
@click.option("--image", default="ubuntu:22.04", show_default=True, help="Container image for the Pyxis step.")
@click.option(
    "--step-timeout", type=click.IntRange(30, 7200), default=900, show_default=True, help="Seconds each step may take."
)
@click.option(
    "--min-busbw",
    type=click.FloatRange(min=0),
    metavar="GB/s",
    help="Pass mark for NCCL bus bandwidth at the peak (default: 80% of a published measurement for the "
    "instance type at the same message size, else half its line rate).",
)
@json_option
def smoke(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    nodes: int,
    partition: str | None,
    image: str,
    step_timeout: int,
    min_busbw: float | None,
    as_json: bool,
) -> None:
    """Prove a cluster works: sinfo, srun, a Pyxis container, the pre-check, NCCL over EFA.

    Each step runs on the head node / controller as the cluster's default user
    (ParallelCluster: SSM Run Command AWS-RunShellScript; HyperPod, whose nodes
    Run Command cannot target: a non-interactive Session Manager session, which
    needs the AWS CLI and its Session Manager plugin), bounded by
    --step-timeout, and prints one PASS/FAIL/SKIP line saying where to look.
    On HyperPod the runtime pre-check runs on every node of the partition.
    NCCL all_reduce_perf runs across --nodes nodes; its bus bandwidth is judged
    against a published measurement for the instance type (else its line rate).
    Exit code 0 when no step failed, 1 otherwise.
    """
    from rich.console import Console
    from rich.markup import escape

    target = Target.load(env, environments, region, profile)
    target.require_backend("pcluster", "hyperpod")
    known = partitions(target)
    chosen = next((p for p in known if p.name == partition), None) if partition else known[0]
    if chosen is None:
        raise CliError(
            f"--partition {partition}: not a partition of {env} (allowed: {', '.join(p.name for p in known)})",
            EXIT_FAILED,
        )
    node = controller(target)
    console = Console(stderr=True, soft_wrap=True)
    smoke_run = Smoke(target, node, console, nodes, chosen)
    short = min(step_timeout, 120)
    plan: list[Callable[[], Step]] = [
        lambda: smoke_run.sinfo(short),
        lambda: smoke_run.hostname(step_timeout),
        lambda: smoke_run.container(image, step_timeout),
        lambda: smoke_run.precheck(step_timeout),
        lambda: smoke_run.nccl(step_timeout, min_busbw),
    ]
    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    for step in plan:
        result = step()
        smoke_run.steps.append(result)
        if not as_json:
            out.print(f"[{STYLES[result.outcome]}]{result.outcome}[/] {result.name}: {escape(result.summary)}")
            if result.outcome == "FAIL" and result.look_at:
                out.print(f"     look at: {result.look_at}", markup=False)
    passed = all(s.outcome != "FAIL" for s in smoke_run.steps)
    if as_json:
        echo_json(
            {
                "environment": env,
                "cluster": cluster_name(target),
                "node": node.as_dict(),
                "partition": chosen.name,
                "nodes": nodes,
                "passed": passed,
                "steps": [s.as_dict() for s in smoke_run.steps],
            }
        )
    if not passed:
        failed = ", ".join(s.name for s in smoke_run.steps if s.outcome == "FAIL")
        raise CliError(f"smoke test failed: {failed}", EXIT_FAILED)
