"""``mlcluster update ENV``: a ParallelCluster change that needs the compute fleet stopped, carried out safely.

ParallelCluster refuses many cluster updates while the compute fleet runs
(removing a queue, changing an instance type, lowering ``MinCount``...), and a
refused update of its ``Custom::PclusterCluster`` fails the stack update. This
command does what an operator would do by hand, in order, and says where it
stands after each step:

1. **plan**: synthesize the environment (the same subprocess as ``mlcluster
   diff``), read the deployed ``ClusterConfiguration`` (``GetTemplate`` of
   ``<env>-Cluster``), classify every difference with the update rules
   (:mod:`mlcluster.pcluster.update_policy`), and show what changes, what
   stops (queues, compute resources and their running nodes), for about how
   long, and which Slurm jobs would be killed (``squeue`` on the head node,
   through the same Run Command transport as ``smoke`` and ``health``). A
   refused change prints its safe way and the command exits 1 having changed
   nothing;
2. **stop** the compute fleet as ``pcluster update-compute-fleet --status
   STOP_REQUESTED`` does: a conditional write of ``STOP_REQUESTED`` to the
   ``COMPUTE_FLEET`` item of the cluster's DynamoDB table
   (``parallelcluster-<cluster>``), then a bounded wait for ``STOPPED`` and,
   since compute nodes may write that item, for EC2 to show no compute
   instance left running while the item stays ``STOPPED``
   (:meth:`Run.wait_compute_instances_ended`);
3. **deploy** the synthesized cloud assembly with the project's pinned CDK CLI
   (``cdk deploy --app <assembly> '<env>/*'``), so what is deployed is what was
   planned;
4. **start** the fleet again (``START_REQUESTED``, wait for ``RUNNING``) when it
   was running before, and **verify** that the deployed configuration is the
   planned one and every stack is settled. ``RUNNING`` is clusterstatusmgtd's
   word that the partitions are UP, not that the static nodes have booted.

The fleet stops when a change needs it, or when its rollback would
(``Plan.stops_fleet``): a queue added applies with the fleet running, but
taking it back is a removal that needs it stopped.

On a failure the fleet is started again where ParallelCluster allows it (its
cluster stack in a working state) and ``<env>-Cluster`` is settled (never while
a deploy that failed or ran out of time may still be applying or rolling back;
:meth:`Run.start_blocker`), and the message lists every stack's state
(``DescribeStacks``) and the commands that resume (``mlcluster update ENV
--resume``) or give up (``--abandon``: restart the fleet and forget the run).

Progress is kept in a state file only the operator can write
(``$XDG_STATE_HOME/mlcluster/update/<region>/<env>.json``, else
``~/.local/state/...``; mode 0600 in a 0700 folder). A state file that is a
link, not owned by the operator, or writable by group or others is refused, and
every field read back is checked (:func:`checked_state`).

How ParallelCluster's provider Lambda (``Custom::PclusterCluster``; its
``cloudformation/custom_resource/cluster.yaml``, crhelper polling every two
minutes) meets a failed update, and what :func:`stack_advice` prints for it
(aws/aws-parallelcluster#5686):

=================================  ===========================  ===============================
step                               ParallelCluster's stack      ``<env>-Cluster``
=================================  ===========================  ===============================
forward Update; provider polls     ``UPDATE_IN_PROGRESS``       ``UPDATE_IN_PROGRESS``
its own update fails: poll sees    ``UPDATE_ROLLBACK_COMPLETE`` ``UPDATE_IN_PROGRESS``, then
``clusterStatus`` UPDATE_FAILED    (old configuration)          ``UPDATE_ROLLBACK_IN_PROGRESS``
rollback Update, old config:       unchanged                    ``UPDATE_ROLLBACK_IN_PROGRESS``
"No changes found", swallowed
rollback poll: still               unchanged                    ``UPDATE_ROLLBACK_FAILED``
UPDATE_FAILED, the rollback fails
``continue-update-rollback         unchanged                    ``UPDATE_ROLLBACK_COMPLETE``:
--resources-to-skip <the custom                                 then ``mlcluster update --resume``
resource>`` (safe: it already
runs the old configuration)
=================================  ===========================  ===============================

Only that pair of states (ParallelCluster's stack ``UPDATE_ROLLBACK_COMPLETE``,
``<env>-Cluster`` ``UPDATE_ROLLBACK_FAILED``) gets the skip; any other stuck
rollback gets a plain ``continue-update-rollback``.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import secrets
import shlex
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, current_project, environment_options, environments_folder
from mlcluster.cli.errors import (
    EXIT_AWS,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SETUP,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CliError,
    aws_errors,
)
from mlcluster.cli.nodes import Node, cluster_name, pcluster_nodes
from mlcluster.config.names import STACKS

if TYPE_CHECKING:
    from rich.console import Console

    from mlcluster.pcluster.update_policy import ClusterChange


#: The update rules: deployed and new configuration in, changes out (``update_policy.cluster_changes``).
Classifier = Callable[[dict[str, Any], dict[str, Any]], Sequence["ClusterChange"]]

#: What the update rules may say of a change (``update_policy.OUTCOMES``), and what ``update`` does with it.
OUTCOMES: dict[str, str] = {
    "in_place": "deploy",
    "fleet_stop": "stop the fleet, deploy, start it",
    "refused": "refuse, print the safe way",
    "replaces_data": "refuse, print the safe way",
}

#: ParallelCluster's compute fleet item (``pcluster.models.compute_fleet_status_manager.JsonComputeFleetStatusManager``,
#: 3.2 and later): table ``parallelcluster-<cluster>``, key ``Id``, status under ``Data.status``.
FLEET_TABLE_PREFIX = "parallelcluster-"
FLEET_KEY = "COMPUTE_FLEET"

#: Every ``ComputeFleetStatus`` of ParallelCluster (3.16) and what the command does when it finds it before
#: stopping: ``stop`` (request STOP_REQUESTED), ``stopped`` (nothing to stop, nothing to start after), or
#: ``refuse`` (another request is under way, or the status is unreadable).
BEFORE_STOP: dict[str, str] = {
    "RUNNING": "stop",
    "PROTECTED": "stop",
    "STOPPED": "stopped",
    "STOP_REQUESTED": "refuse",
    "STOPPING": "refuse",
    "START_REQUESTED": "refuse",
    "STARTING": "refuse",
    "UNKNOWN": "refuse",
}
#: Every ``ComputeFleetStatus`` while waiting for the fleet to stop: ``wait``, ``done``, or ``fail`` (someone
#: else changed the request, or ParallelCluster cannot tell).
STOP_WAIT: dict[str, str] = {
    "STOP_REQUESTED": "wait",
    "STOPPING": "wait",
    "STOPPED": "done",
    "RUNNING": "fail",
    "PROTECTED": "fail",
    "START_REQUESTED": "fail",
    "STARTING": "fail",
    "UNKNOWN": "fail",
}
#: Every ``ComputeFleetStatus`` while waiting for the fleet to start. PROTECTED means clustermgtd put
#: partitions with repeated bootstrap failures out of service: a failure to report, not a success.
START_WAIT: dict[str, str] = {
    "START_REQUESTED": "wait",
    "STARTING": "wait",
    "RUNNING": "done",
    "PROTECTED": "fail",
    "STOP_REQUESTED": "fail",
    "STOPPING": "fail",
    "STOPPED": "fail",
    "UNKNOWN": "fail",
}
#: Every EC2 ``InstanceStateName`` (botocore's ec2 model) a compute instance can be in, and what the checks of a
#: ``STOPPED`` status item make of it (:meth:`Run.wait_compute_instances_ended`): ``live`` (it may run a job, so
#: the fleet is not stopped) or ``ended`` (being terminated, terminated, or stopped: it runs nothing). A state
#: missing here counts as ``live``, but only if DescribeInstances returns it: :func:`pcluster_nodes` asks for
#: five states by name, so a state EC2 adds later must be added there too.
COMPUTE_INSTANCE_STATES: dict[str, str] = {
    "pending": "live",
    "running": "live",
    "stopping": "live",
    "shutting-down": "ended",
    "terminated": "ended",
    "stopped": "ended",
}
#: ParallelCluster starts or stops a fleet only while its cluster stack is in one of these
#: (``pcluster.aws.aws_resources.StackInfo.is_working_status``).
WORKING_STACK_STATES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"})
#: Stack states from which a deploy may start (nothing in progress, nothing stuck).
SETTLED_STACK_STATES = WORKING_STACK_STATES | {"IMPORT_COMPLETE", "IMPORT_ROLLBACK_COMPLETE"}

#: Seconds between fleet status polls (ParallelCluster's own wait polls every 15 s).
POLL_SECONDS = 15.0
#: The outage estimate's parts, in minutes: clustermgtd acts on a stop within its one-minute loop and
#: terminates the nodes; the custom resource polls the cluster update every two minutes; static nodes boot
#: and run their node scripts after a start. Typical values, not measurements of this cluster.
ESTIMATE_MINUTES = {"stop": 5, "deploy": 20, "start and node boot": 15}
#: squeue's output: job id, partition, user, state, node count, elapsed time, name (last: it may hold ``|``).
#: Each record starts with a mark drawn afresh for each read (:func:`squeue_script`): any cluster user names
#: their jobs, and a name may hold a newline, which must neither break the read nor start a record of its own.
SQUEUE_FORMAT = "%i|%P|%u|%T|%D|%M|%j"
#: Slurm job states whose job runs on nodes: a fleet stop kills these.
RUNNING_JOB_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})
STEPS = ("stop", "deploy", "start", "verify")
RUN_ID = re.compile(r"\d{8}T\d{6}Z")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
SHA256 = re.compile(r"[0-9a-f]{64}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_classifier() -> Classifier:
    """The update rules of :mod:`mlcluster.pcluster.update_policy` (imported when needed)."""
    from mlcluster.pcluster.update_policy import cluster_changes

    return cluster_changes


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of a configuration in canonical JSON: what the state file records as "the plan"."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cluster_configuration(template: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``ClusterConfiguration`` of the one ``Custom::PclusterCluster`` in ``template``."""
    found = [
        r.get("Properties", {}).get("ClusterConfiguration")
        for r in template.get("Resources", {}).values()
        if r.get("Type") == "Custom::PclusterCluster"
    ]
    if len(found) != 1 or not isinstance(found[0], dict):
        raise CliError(
            f"{where} has {len(found)} Custom::PclusterCluster resources with a ClusterConfiguration; expected one\n"
            "  what to do: check that this is a ParallelCluster environment deployed by mlcluster",
            EXIT_FAILED,
        )
    return dict(found[0])


# ----------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Job:
    """One Slurm job, as ``squeue`` prints it with :data:`SQUEUE_FORMAT`."""

    job_id: str
    partition: str
    user: str
    state: str
    nodes: int
    elapsed: str
    name: str

    @property
    def running(self) -> bool:
        return self.state in RUNNING_JOB_STATES


def printable(text: str) -> str:
    """``text`` with each character that is not printable written as its escape (``\\n``, ``\\x1b``, ``\\u202e``).

    Job names and the other squeue fields are written by cluster users and end up on the operator's
    terminal: a control or format character there must not move the cursor, recolour or hide text.
    """
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def record_mark() -> str:
    """A fresh mark that starts each squeue record: no job name written before the read can hold it."""
    return f"mlc{secrets.token_hex(12)}:"


def parse_squeue(text: str, mark: str) -> list[Job]:
    """The jobs of :func:`squeue_script` output, every field :func:`printable`; a record that does not parse
    (or text before the first record, such as an error) is an error, never skipped.

    Records are split at a newline followed by ``mark``, so a newline in a job name stays in that name.
    """

    def unreadable(record: str) -> CliError:
        return CliError(
            f"squeue printed a line mlcluster cannot read: {record[:200]!r}\n"
            "  what to do: `mlcluster ssh ENV` and run `squeue` to see why",
            EXIT_FAILED,
        )

    head, *records = ("\n" + text).split("\n" + mark)
    if head.strip():
        raise unreadable(head.strip())
    jobs: list[Job] = []
    for record in records:
        parts = record.removesuffix("\n").split("|", 6)
        if len(parts) != 7 or not parts[4].isdigit():
            raise unreadable(record)
        job_id, partition, user, state, nodes, elapsed, name = (printable(part) for part in parts)
        jobs.append(Job(job_id, partition, user, state, int(nodes), elapsed, name))
    return jobs


def squeue_script(mark: str) -> str:
    """Print every job of every partition (hidden ones too) in :data:`SQUEUE_FORMAT`, each record after ``mark``;
    fail when squeue fails."""
    return f"squeue --all --noheader --format {shlex.quote(mark + SQUEUE_FORMAT)}\n"


@dataclass(frozen=True)
class QueueInfo:
    """A queue of the deployed configuration: its compute resources and the nodes EC2 has for it."""

    name: str
    resources: tuple[str, ...]
    running_nodes: int


@dataclass
class Plan:
    """What ``update`` would do: the changes, whether the fleet stops, what that stops and kills, and refusals."""

    environment: str
    cluster: str
    region: str
    digest: str
    changes: list[ClusterChange]
    #: The changes a rollback of this deploy asks ParallelCluster for (new -> old), judged on the updated cluster.
    rollback: list[ClusterChange] = field(default_factory=list)
    queues: list[QueueInfo] = field(default_factory=list)
    removed_queues: list[str] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    #: The new configuration's ``QueueUpdateStrategy`` and the queues whose nodes it replaces in place.
    strategy: str = "COMPUTE_FLEET_STOP"
    replaced: list[str] = field(default_factory=list)

    @property
    def refused(self) -> list[ClusterChange]:
        return [c for c in self.changes if c.outcome in {"refused", "replaces_data"}]

    @property
    def stops_back(self) -> list[ClusterChange]:
        """Changes that apply with the fleet running but whose rollback ParallelCluster makes only with it stopped."""
        if any(c.outcome == "fleet_stop" for c in self.changes):
            return []
        return [c for c in self.rollback if c.outcome == "fleet_stop"]

    @property
    def stops_fleet(self) -> bool:
        """The fleet stops when either direction needs it: a rollback refused by a running fleet gets stuck in
        ``UPDATE_ROLLBACK_FAILED`` (:func:`mlcluster.pcluster.update_policy.rollback_changes`)."""
        return any(c.outcome == "fleet_stop" for c in self.changes) or bool(self.stops_back)


#: Update policies whose in-place change ParallelCluster carries out by replacing the queue's nodes as
#: ``QueueUpdateStrategy`` says (``pcluster.config.update_policy``; see update_policy's table).
STRATEGY_POLICIES = frozenset({"QUEUE_UPDATE_STRATEGY", "MANAGED_PLACEMENT_GROUP", "MANAGED_FSX"})
QUEUE_PATH = re.compile(r"Scheduling\.SlurmQueues\[([^\]]+)\]")


def replaced_queues(changes: Sequence[ClusterChange], strategy: str) -> list[str]:
    """The queues whose nodes ParallelCluster replaces for in-place changes (DRAIN or TERMINATE).

    A change under a queue with a strategy-dependent policy replaces its nodes; with TERMINATE, removing a
    compute resource (``RESIZE_UPDATE_STRATEGY_ON_REMOVE``) terminates its nodes too. Additions replace nothing.
    """
    names: set[str] = set()
    for change in changes:
        match = QUEUE_PATH.match(change.path)
        if change.outcome != "in_place" or match is None or change.old is None:
            continue
        removal = change.policy == "RESIZE_UPDATE_STRATEGY_ON_REMOVE" and change.new is None
        if change.policy in STRATEGY_POLICIES or (removal and strategy == "TERMINATE"):
            names.add(match[1])
    return sorted(names)


def queue_infos(config: dict[str, Any], nodes: list[Node]) -> list[QueueInfo]:
    """The queues of ``config`` with their compute resources and running node count (from EC2)."""
    infos: list[QueueInfo] = []
    for queue in config.get("Scheduling", {}).get("SlurmQueues", []) or []:
        resources = tuple(
            f"{cr.get('Name')} ({_instance_types(cr)}, {cr.get('MinCount', 0)}..{cr.get('MaxCount', 10)} nodes)"
            for cr in queue.get("ComputeResources", []) or []
        )
        running = sum(1 for n in nodes if n.group == queue.get("Name") and n.status in {"running", "pending"})
        infos.append(QueueInfo(str(queue.get("Name")), resources, running))
    return infos


def _instance_types(resource: dict[str, Any]) -> str:
    """A compute resource's ``InstanceType``, or its ``Instances`` list joined."""
    if resource.get("InstanceType"):
        return str(resource["InstanceType"])
    return ",".join(str(i.get("InstanceType", "")) for i in resource.get("Instances", []) or [])


def queue_names(config: dict[str, Any]) -> list[str]:
    return [str(q.get("Name")) for q in config.get("Scheduling", {}).get("SlurmQueues", []) or []]


def _short(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 70 else text[:67] + "..."


def render_plan(plan: Plan) -> list[str]:
    """The plan as lines of text (what the operator reads before answering)."""
    lines = [
        f"mlcluster update {plan.environment}: plan (nothing has been changed yet)",
        f"cluster {plan.cluster} (ParallelCluster), stack {plan.environment}-Cluster in {plan.region}",
        "",
    ]
    if not plan.changes:
        lines.append("cluster configuration: no change (the deploy applies the other stacks' changes, if any)")
    else:
        lines.append(f"changes to the cluster configuration ({len(plan.changes)}):")
        for change in plan.changes:
            lines.append(f"  {change.outcome:<13} {change.path}  (ParallelCluster policy {change.policy})")
            lines.append(f"                old: {_short(change.old)}")
            lines.append(f"                new: {_short(change.new)}")
    if plan.refused:
        lines += ["", "REFUSED: these changes cannot be made by an update; nothing will be changed:"]
        for change in plan.refused:
            lines.append(f"  {change.path}: {change.safe_way}")
        return lines
    if plan.stops_fleet:
        total = sum(q.running_nodes for q in plan.queues)
        lines += [
            "",
            f"what stops: the whole compute fleet ({total} running nodes), as ParallelCluster requires for the "
            "changes marked fleet_stop; the head node, login nodes and file systems keep running:",
        ]
        if plan.stops_back:
            lines[-1] = (
                f"what stops: the whole compute fleet ({total} running nodes). These changes apply with it running, "
                "but should the deploy fail after the cluster took them, CloudFormation's rollback takes them back "
                "and ParallelCluster makes that change only with the fleet stopped (else the stack stops in "
                "UPDATE_ROLLBACK_FAILED): "
                + "; ".join(f"{c.path} back to {_short(c.new)} (policy {c.policy})" for c in plan.stops_back)
                + ". To keep the fleet running and accept that risk, deploy with "
                f"`npx cdk deploy '{plan.environment}/*'` instead. The head node, login nodes and file systems keep "
                "running:"
            )
        for queue in plan.queues:
            gone = "  (removed by this update)" if queue.name in plan.removed_queues else ""
            lines.append(f"  queue {queue.name}: {queue.running_nodes} running; {', '.join(queue.resources)}{gone}")
        running = [j for j in plan.jobs if j.running]
        pending = [j for j in plan.jobs if not j.running]
        lines += ["", f"jobs that would be killed ({len(running)}, from squeue on the head node):"]
        lines += [
            f"  {j.job_id:<8} {j.partition:<16} {j.user:<12} {j.state:<10} {j.nodes:>3} nodes {j.elapsed:>11}  {j.name}"
            for j in running
        ] or ["  none"]
        lost = [j for j in pending if j.partition in plan.removed_queues]
        lines.append(
            f"jobs left pending: {len(pending) - len(lost)} (they wait for the fleet to start again)"
            + (
                f"; {len(lost)} pending in removed queues ({', '.join(j.job_id for j in lost)}) never run: "
                "cancel or move them (`scontrol update job=ID partition=...`)"
                if lost
                else ""
            )
        )
        minutes = sum(ESTIMATE_MINUTES.values())
        parts = ", ".join(f"{k} {v}" for k, v in ESTIMATE_MINUTES.items())
        lines += [
            "",
            f"compute outage: about {minutes} minutes ({parts}) - an estimate from typical times, not a measurement",
            "",
            "steps: 1 stop the compute fleet, 2 cdk deploy, 3 start the fleet, 4 verify",
        ]
    else:
        lines += _replaced_lines(plan)
        lines += ["", "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)"]
    return lines


def _replaced_lines(plan: Plan) -> list[str]:
    """What ParallelCluster's QueueUpdateStrategy does to the nodes and jobs of the queues an update replaces."""
    if not plan.replaced:
        return []
    running = [j for j in plan.jobs if j.running and j.partition in plan.replaced]
    fate = (
        "each runs to its end, then ParallelCluster replaces its nodes"
        if plan.strategy == "DRAIN"
        else "ParallelCluster terminates their nodes at once: they would be killed"
    )
    return [
        "",
        f"nodes replaced by ParallelCluster (QueueUpdateStrategy {plan.strategy}) in: {', '.join(plan.replaced)}",
        f"jobs running there ({len(running)}, from squeue on the head node): {fate}",
        *(f"  {j.job_id:<8} {j.partition:<16} {j.user:<12} {j.state:<10} {j.nodes:>3} nodes {j.elapsed:>11}  {j.name}"
          for j in running),
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------------- the fleet


class Fleet:
    """ParallelCluster's compute fleet status item, read and written as ``pcluster`` does.

    The JSON item is ParallelCluster's since 3.2; ``Custom::PclusterCluster`` exists since 3.6, so every
    cluster mlcluster deploys has it.
    """

    def __init__(self, target: Target, cluster: str) -> None:
        self.target = target
        self.cluster = cluster
        self.table = f"{FLEET_TABLE_PREFIX}{cluster}"

    def status(self) -> str:
        """The fleet's status (consistent read); a missing item is ``UNKNOWN``, as ParallelCluster reads it."""
        with aws_errors(f"GetItem {FLEET_KEY} from DynamoDB table {self.table}"):
            item = self.target.client("dynamodb").get_item(
                TableName=self.table, Key={"Id": {"S": FLEET_KEY}}, ConsistentRead=True
            )
        data = item.get("Item", {}).get("Data", {}).get("M", {})
        return str(data.get("status", {}).get("S", "UNKNOWN"))

    def request(self, current: str, wanted: str) -> None:
        """Write ``wanted`` only if the status is still ``current`` (ParallelCluster's conditional update)."""
        from botocore.exceptions import ClientError

        with aws_errors(f"UpdateItem {FLEET_KEY} in DynamoDB table {self.table} ({current} -> {wanted})"):
            try:
                self.target.client("dynamodb").update_item(
                    TableName=self.table,
                    Key={"Id": {"S": FLEET_KEY}},
                    UpdateExpression="SET #dt.#st = :s, #dt.#lut = :t",
                    ConditionExpression="#dt.#st = :current",
                    ExpressionAttributeNames={"#dt": "Data", "#st": "status", "#lut": "lastStatusUpdatedTime"},
                    ExpressionAttributeValues={
                        ":s": {"S": wanted},
                        ":t": {"S": str(datetime.now(UTC))},
                        ":current": {"S": current},
                    },
                )
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                raise CliError(
                    f"the compute fleet of {self.cluster} changed status while mlcluster asked for {wanted} "
                    f"(it was {current}): someone else is starting or stopping it\n"
                    f"  what to do: `mlcluster status {self.target.name}`; run the command again once the fleet "
                    "is settled",
                    EXIT_FAILED,
                ) from None

    def wait(self, table: dict[str, str], goal: str, timeout: int, console: Console) -> None:
        """Poll until the decision of ``table`` is ``done``; ``fail`` or an unknown status or the timeout raise."""
        deadline = time.monotonic() + timeout
        with console.status(f"waiting for the compute fleet of {self.cluster} to be {goal}") as spinner:
            while True:
                status = self.status()
                decision = table.get(status)
                if decision is None:
                    raise CliError(
                        f"the compute fleet of {self.cluster} is {status!r}, a status mlcluster does not know "
                        f"(known: {', '.join(sorted(table))})",
                        EXIT_FAILED,
                    )
                if decision == "done":
                    return
                if decision == "fail":
                    raise CliError(
                        f"the compute fleet of {self.cluster} went {status} while mlcluster waited for {goal}"
                        + (
                            ": clustermgtd put queues with repeated bootstrap failures out of service"
                            if status == "PROTECTED"
                            else ": another request changed it, or ParallelCluster cannot read its status"
                        ),
                        EXIT_FAILED,
                    )
                if time.monotonic() >= deadline:
                    raise CliError(
                        f"the compute fleet of {self.cluster} was still {status} after {timeout} s "
                        f"(waiting for {goal})",
                        EXIT_TIMEOUT,
                    )
                spinner.update(f"compute fleet of {self.cluster}: {status} (waiting for {goal})")
                time.sleep(POLL_SECONDS)


# ----------------------------------------------------------------------------------------------- the state file


def state_root() -> Path:
    """The operator's state folder: ``$XDG_STATE_HOME/mlcluster``, else ``~/.local/state/mlcluster``."""
    base = os.environ.get("XDG_STATE_HOME")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "mlcluster"


def _check_private(path: Path, *, folder: bool) -> None:
    """Refuse ``path`` unless it is the operator's own, not a link, and not writable by group or others."""
    info = path.lstat()
    kind = stat.S_ISDIR(info.st_mode) if folder else stat.S_ISREG(info.st_mode)
    problems = []
    if not kind:
        problems.append("a link or another kind of file" if stat.S_ISLNK(info.st_mode) else "not a plain file/folder")
    if info.st_uid != os.geteuid():
        problems.append(f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})")
    if info.st_mode & 0o022:
        problems.append(f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})")
    if problems:
        raise CliError(
            f"{path}: {'; '.join(problems)}: only you may write mlcluster's update state; nothing was run\n"
            f"  what to do: find out who made it so; remove it (and `chmod 700` its folder), then run again",
            EXIT_FAILED,
        )


class UpdateState:
    """The update run's progress in the operator's state folder (0600 file in 0700 folders)."""

    def __init__(self, environment: str, region: str) -> None:
        self.folder = state_root() / "update" / region
        self.path = self.folder / f"{environment}.json"
        self.data: dict[str, Any] = {}

    def load(self) -> Any | None:
        """The stored JSON, or ``None``; the file and every folder up to the state root are checked first."""
        if not self.path.exists() and not self.path.is_symlink():
            return None
        for folder in (state_root(), state_root() / "update", self.folder):
            _check_private(folder, folder=True)
        _check_private(self.path, folder=False)
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CliError(
                f"{self.path} cannot be read as JSON ({error})\n  what to do: inspect it; remove it to start over",
                EXIT_FAILED,
            ) from None

    def save(self) -> None:
        """Write atomically: a new 0600 file in the checked folder, then rename over the old one."""
        for folder in (state_root(), state_root() / "update", self.folder):
            folder.mkdir(mode=0o700, exist_ok=True, parents=True)
            _check_private(folder, folder=True)
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".update-", suffix=".json")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(self.data, out, indent=2)
            Path(temporary).chmod(0o600)
            Path(temporary).replace(self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def done(self, step: str) -> bool:
        return step in self.data["steps"]

    def mark(self, step: str) -> None:
        self.data["steps"][step] = {"at": _now()}
        self.save()

    def unmark(self, step: str) -> None:
        self.data["steps"].pop(step, None)
        self.save()


def checked_state(stored: Any, path: Path, environment: str, cluster: str, region: str) -> dict[str, Any]:
    """``stored`` when every field is one this command writes; else a CliError naming each bad field."""
    problems: list[str] = []

    def bad(key: str, value: Any, allowed: str) -> None:
        problems.append(f"{key}: {json.dumps(value, default=str)[:120]} is not allowed; allowed: {allowed}")

    if not isinstance(stored, dict):
        raise CliError(f"{path} is not an update state object; remove it to start over", EXIT_FAILED)
    known = {"format", "run", "environment", "cluster", "region", "plan_sha256", "stop", "fleet_before", "steps"}
    known |= {"complete", "stacks_sha256"}
    for key in sorted(set(stored) - known):
        bad(key, stored[key], "no such key")
    if stored.get("format") != 1:
        bad("format", stored.get("format"), "1")
    if not (isinstance(stored.get("run"), str) and RUN_ID.fullmatch(stored["run"])):
        bad("run", stored.get("run"), "a run id such as 20260101T120000Z")
    for key, expected in (("environment", environment), ("cluster", cluster), ("region", region)):
        if stored.get(key) != expected:
            bad(key, stored.get(key), repr(expected))
    for key in ("plan_sha256", "stacks_sha256"):
        if not (isinstance(stored.get(key), str) and SHA256.fullmatch(stored[key])):
            bad(key, stored.get(key), "a SHA-256 in lower-case hex")
    if not isinstance(stored.get("stop"), bool):
        bad("stop", stored.get("stop"), "true or false")
    if stored.get("fleet_before") not in {None, *BEFORE_STOP}:
        bad("fleet_before", stored.get("fleet_before"), "null or a ComputeFleetStatus")
    complete = stored.get("complete")
    if complete is not None and not (isinstance(complete, str) and TIMESTAMP.fullmatch(complete)):
        bad("complete", complete, "null or a UTC time")
    steps = stored.get("steps")
    if not isinstance(steps, dict) or any(s not in STEPS for s in steps):
        bad("steps", steps, "an object keyed by " + ", ".join(STEPS))
    else:
        for name, record in steps.items():
            at = record.get("at") if isinstance(record, dict) else None
            if not (
                isinstance(record, dict) and set(record) == {"at"} and isinstance(at, str) and TIMESTAMP.fullmatch(at)
            ):
                bad(f"steps.{name}", record, '{"at": "<UTC time>"}')
    if problems:
        raise CliError(
            f"{path} is not a state this command wrote; nothing was run:\n  "
            + "\n  ".join(problems)
            + "\n  what to do: remove it, check the cluster (`mlcluster status ENV`) and run `mlcluster update` again",
            EXIT_FAILED,
        )
    return dict(stored)


# ----------------------------------------------------------------------------------------------- stacks and deploy


def stack_states(target: Target, cluster: str) -> dict[str, str]:
    """Every stack of the environment and ParallelCluster's own cluster stack, with its status (or why not)."""
    states: dict[str, str] = {}
    from botocore.exceptions import BotoCoreError, ClientError

    for name in [f"{target.name}-{part}" for part in STACKS] + [cluster]:
        try:
            stacks = target.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
            states[name] = str(stacks[0]["StackStatus"]) if stacks else "not found"
        except ClientError as error:
            info = error.response.get("Error", {})
            states[name] = (
                "not found"
                if "does not exist" in str(info.get("Message", ""))
                else (f"unknown (DescribeStacks failed: {info.get('Code')})")
            )
        except BotoCoreError as error:
            states[name] = f"unknown (DescribeStacks failed: {type(error).__name__})"
    return states


#: Where the custom resource's logical id could not be read (GetTemplate failed): the operator finds it.
UNKNOWN_RESOURCE = "<logical id of the Custom::PclusterCluster>"


def stack_advice(
    target: Target, states: dict[str, str], *, cluster: str = "", resource: str = "", shown: set[str] | None = None
) -> list[str]:
    """One line per stack (of ``shown``, default all): its state and, where it is stuck, the command that moves it on.

    ``<env>-Cluster`` in ``UPDATE_ROLLBACK_FAILED`` while ParallelCluster's stack ``cluster`` is
    ``UPDATE_ROLLBACK_COMPLETE`` is the provider's stuck rollback (module table): the command skips the
    ``Custom::PclusterCluster`` (logical id ``resource``), which only CloudFormation's record still disagrees on.
    """
    lines = []
    provider_stuck = bool(cluster) and states.get(cluster) == "UPDATE_ROLLBACK_COMPLETE"
    for name, status in states.items():
        if shown is not None and name not in shown:
            continue
        hint = ""
        if status == "UPDATE_ROLLBACK_FAILED":
            hint = f"  -> `aws cloudformation continue-update-rollback --region {target.region} --stack-name {name}"
            if provider_stuck and name == f"{target.name}-Cluster":
                hint += (
                    f" --resources-to-skip {resource or UNKNOWN_RESOURCE}` (safe: ParallelCluster's stack {cluster} "
                    "rolled back, the cluster already runs its old configuration; its provider cannot finish the "
                    "rollback by itself)"
                )
            else:
                hint += "`"
        elif status.endswith("_IN_PROGRESS"):
            hint = "  -> CloudFormation is still working: wait for it to settle"
        lines.append(f"  {name}: {status}{hint}")
    return lines


#: The CDK CLI release mlcluster pins (package.json ``aws-cdk``). A CLI found on ``PATH`` instead of the project's
#: must be of this major version and no older: a newer major cannot read the assemblies aws-cdk-lib 2 writes, and
#: an older 2.x may not know their schema version.
PINNED_CDK_CLI = (2, 1148, 1)
CDK_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)\b")


def private_group(gid: int) -> bool:
    """Whether ``gid`` is the operator's own group: their primary group, with no other member and no other user's
    primary group (the user private groups under which RHEL and Amazon Linux set ``umask 002``)."""
    try:
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
    me = pwd.getpwuid(os.getuid()).pw_name
    return (
        gid == os.getgid()
        and set(members) <= {me}
        and all(user.pw_gid != gid or user.pw_name == me for user in pwd.getpwall())
    )


def only_mine(info: os.stat_result) -> bool:
    """Whether only the operator (or root) can change what ``info`` describes: theirs or root's, not writable by
    others, and writable by its group only when that group is the operator's own (:func:`private_group`)."""
    group_writes = bool(info.st_mode & stat.S_IWGRP) and not private_group(info.st_gid)
    return info.st_uid in {os.getuid(), 0} and not info.st_mode & stat.S_IWOTH and not group_writes


def operator_owned(folder: Path) -> bool:
    """Whether ``folder`` is a real folder only the operator (or root) can change (:func:`only_mine`)."""
    info = folder.lstat()
    return stat.S_ISDIR(info.st_mode) and only_mine(info)


def cdk_version(cli: str, folder: Path) -> str:
    """What ``cli --version`` prints, run in ``folder`` (version managers choose per folder); its error if it fails."""
    try:
        said = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=120, check=False, cwd=folder)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CliError(f"the CDK CLI {cli} did not answer `--version`: {err}", EXIT_SETUP) from err
    return said.stdout.strip() if said.returncode == 0 else (said.stderr.strip() or f"exit {said.returncode}")


def deploy_folder() -> Path:
    """The folder the CDK CLI runs in (the project's, else the current one), refused unless only the operator (or
    root) can change it and its cdk.json.

    The CLI reads ``./cdk.json`` there and loads every module its ``plugin`` list names, with the operator's
    credentials; ``--version`` does not read it, so the check is made at lookup and again right before the deploy
    (the fleet stop between them takes minutes): a folder others can write could get a cdk.json planted meanwhile.
    """
    project = current_project()
    where = "its cdk.json found from the current folder" if project.cdk_json is not None else "the current folder"
    unsafe = not operator_owned(project.root)
    if project.cdk_json is not None or (project.root / "cdk.json").exists():
        info = (project.root / "cdk.json").lstat()
        unsafe = unsafe or not stat.S_ISREG(info.st_mode) or not only_mine(info)
    if unsafe:
        raise CliError(
            f"the project folder {project.root} ({where}) or its cdk.json is not the operator's or root's, or others "
            "can write it: the CDK CLI would load what a cdk.json there names with your credentials\n"
            f"  what to do: run from your own checkout or folder (`chmod g-w,o-w {project.root}` if it is yours), or "
            "name it with --app-dir",
            EXIT_SETUP,
        )
    return project.root


def cdk_cli() -> Path:
    """The CDK CLI that deploys: the project's (``node_modules/.bin/cdk`` beside its cdk.json), else ``cdk`` on PATH.

    Either is used only if ``cdk --version``, run in the project folder the deploy runs in (version managers
    choose per folder), is 2.x and at least :data:`PINNED_CDK_CLI`. Without a cdk.json the current folder is
    nobody's project, so a ``node_modules`` there is never run (anyone who can write the folder could plant
    one); a ``cdk`` on PATH is taken from its absolute entries only.
    """
    project = current_project()
    pinned = ".".join(map(str, PINNED_CDK_CLI))
    project_cli = project.root / "node_modules" / ".bin" / "cdk"
    deploy_folder()
    if project.cdk_json is not None and project_cli.exists():
        found: str | None = str(project_cli)
    else:
        found = next(
            (
                str(Path(entry) / "cdk")
                for entry in os.environ.get("PATH", "").split(os.pathsep)
                if Path(entry).is_absolute() and os.access(Path(entry) / "cdk", os.X_OK)
            ),
            None,
        )
    if found is None:
        raise CliError(
            f"the CDK CLI is not installed: neither {project_cli} (beside a cdk.json) nor a `cdk` on PATH\n"
            f"  what to do: run `npm ci` in an mlcluster checkout (package.json pins it), or install aws-cdk@{pinned} "
            "(`npm install -g aws-cdk@" + pinned + "`) for your own app",
            EXIT_SETUP,
        )
    shown = cdk_version(found, project.root)
    match = CDK_VERSION.match(shown)
    version = tuple(int(part) for part in match.groups()) if match else None
    if version is None or version[0] != PINNED_CDK_CLI[0] or version < PINNED_CDK_CLI:
        raise CliError(
            f"the CDK CLI {found} says {shown!r}; mlcluster deploys with aws-cdk 2.x, {pinned} or newer\n"
            f"  what to do: `npm ci` in an mlcluster checkout, or `npm install -g aws-cdk@{pinned}`",
            EXIT_SETUP,
        )
    return Path(found)


def deploy_command(assembly: Path, environment: str, profile: str | None) -> list[str]:
    """``cdk deploy`` of every stack of ``environment`` from the already synthesized ``assembly``."""
    return [
        str(cdk_cli()), "deploy", "--app", str(assembly), f"{environment}/*",
        "--require-approval", "never", "--progress", "events",
        *(["--profile", profile] if profile else []),
    ]  # fmt: skip


def run_deploy(argv: list[str], timeout: int, *, region: str | None = None) -> int:
    """Run the CDK CLI with its output on the operator's terminal; its exit code (-1 on the timeout).

    ``region``: the environment's, given to the CLI as AWS_REGION and AWS_DEFAULT_REGION: its stacks name no
    region, so the CLI would take the profile's, which may differ from the one this command stopped the fleet in.
    """
    env = None if region is None else {**os.environ, "AWS_REGION": region, "AWS_DEFAULT_REGION": region}
    try:
        # stdout to stderr: the CLI's progress is a log, stdout stays for the command's result.
        done = subprocess.run(argv, stdout=2, cwd=current_project().root, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return -1
    return done.returncode


# ----------------------------------------------------------------------------------------------- the command


@dataclass
class Run:
    """One update run: the target, its cluster, fleet, state and console."""

    target: Target
    cluster: str
    fleet: Fleet
    state: UpdateState
    console: Console

    def deployed_config(self) -> dict[str, Any]:
        name = f"{self.target.name}-Cluster"
        with aws_errors(f"GetTemplate for {name}"):
            body = self.target.client("cloudformation").get_template(StackName=name, TemplateStage="Original")[
                "TemplateBody"
            ]
        template = body if isinstance(body, dict) else json.loads(body)
        return cluster_configuration(template, f"the deployed {name}")

    def read_jobs(self) -> list[Job]:
        from mlcluster.cli.nodes import controller

        node = controller(self.target)
        mark = record_mark()
        result = runcommand.run(
            self.target,
            node,
            squeue_script(mark),
            comment=f"mlcluster update {self.target.name}: squeue",
            timeout_seconds=120,
            user=self.target.default_user,
            console=self.console,
        )
        if not result.ok:
            raise CliError(
                f"squeue on the head node failed ({result.status}, exit {result.exit_code}): "
                f"{printable((result.stdout + result.stderr).strip()[-300:])}\n  what to do: "
                f"{runcommand.where_to_look(self.target, node, result)}; nothing was changed",
                EXIT_FAILED,
            )
        if result.truncated:
            raise CliError(
                f"squeue's listing on the head node was cut at Run Command's {runcommand.OUTPUT_LIMIT} characters: "
                "the plan cannot say which jobs a fleet stop would kill (squeue lists pending jobs before running "
                "ones); nothing was changed\n  what to do: cancel pending jobs (held ones are listed too) until the "
                "listing fits, or "
                "stop the fleet yourself (docs: day two, mlcluster update)",
                EXIT_FAILED,
            )
        return parse_squeue(result.stdout, mark)

    def advice(self, states: dict[str, str], shown: set[str] | None = None) -> list[str]:
        """:func:`stack_advice` for this run, with the custom resource's logical id read when it is needed."""
        resource = ""
        if states.get(f"{self.target.name}-Cluster") == "UPDATE_ROLLBACK_FAILED":
            resource = self.cluster_resource()
        return stack_advice(self.target, states, cluster=self.cluster, resource=resource, shown=shown)

    def cluster_resource(self) -> str:
        """The logical id of the ``Custom::PclusterCluster`` in ``<env>-Cluster`` (``""`` when unreadable)."""
        try:
            with aws_errors(f"GetTemplate for {self.target.name}-Cluster"):
                body = self.target.client("cloudformation").get_template(
                    StackName=f"{self.target.name}-Cluster", TemplateStage="Original"
                )["TemplateBody"]
        except CliError:
            return ""  # the advice names the resource in words instead
        template = body if isinstance(body, dict) else json.loads(body)
        found = [k for k, r in template.get("Resources", {}).items() if r.get("Type") == "Custom::PclusterCluster"]
        return found[0] if len(found) == 1 else ""

    def start_blocker(self, states: dict[str, str] | None = None) -> str | None:
        """Why the fleet must not start now, or ``None``: ParallelCluster starts a fleet only from a working
        state of its own stack, and never while CloudFormation may still be applying ``<env>-Cluster``."""
        states = states if states is not None else stack_states(self.target, self.cluster)
        own, stack = states.get(self.cluster, "unknown"), f"{self.target.name}-Cluster"
        if own not in WORKING_STACK_STATES:
            return f"ParallelCluster's stack {self.cluster} is {own}, and a fleet starts only from " + ", ".join(
                sorted(WORKING_STACK_STATES)
            )
        if states.get(stack) not in SETTLED_STACK_STATES:
            return f"{stack} is {states.get(stack)}, not settled"
        return None

    def resume_line(self) -> str:
        env = self.target.name
        return (
            f"  resume: `mlcluster update {env} --resume`; give up: `mlcluster update {env} --abandon` "
            f"(starts the fleet if this run stopped it, forgets the run; state in {self.state.path})"
        )

    def stop(self, timeout: int) -> None:
        """Stop the fleet if it runs; records what it was, so the end (or a failure) restores it."""
        status = self.fleet.status()
        decision = BEFORE_STOP.get(status)
        # A start under way is never overwritten, on a resume either (a failed run's restore may have asked it).
        if self.state.data["fleet_before"] is None or status in {"START_REQUESTED", "STARTING"}:
            if decision in {None, "refuse"}:
                raise CliError(
                    f"the compute fleet of {self.cluster} is {status}: "
                    + (
                        "a start or stop is under way"
                        if decision == "refuse" and status != "UNKNOWN"
                        else "mlcluster cannot tell its state"
                    )
                    + f"; nothing was changed\n  what to do: `mlcluster status {self.target.name}`; run again once "
                    "it is RUNNING or STOPPED",
                    EXIT_FAILED,
                )
            if self.state.data["fleet_before"] is None:
                self.state.data["fleet_before"] = status
                self.state.save()
        deadline = time.monotonic() + timeout
        if status == "STOPPED" and self.state.data["fleet_before"] == "STOPPED":
            self.check_no_compute_instances()
        else:
            # This run asked for the stop (now, or before an interruption): the STOPPED it waits for may be written
            # by anyone the compute role lets in, so EC2 has the last word (bounded by the same --stop-timeout).
            if status not in {"STOP_REQUESTED", "STOPPING", "STOPPED"}:
                self.fleet.request(status, "STOP_REQUESTED")
                self.console.print(f"requested STOP_REQUESTED for the compute fleet of {self.cluster} (was {status})")
            if status != "STOPPED":
                self.fleet.wait(STOP_WAIT, "STOPPED", timeout, self.console)
            self.wait_compute_instances_ended(deadline, timeout)
        self.state.mark("stop")
        self.console.print(f"the compute fleet of {self.cluster} is STOPPED")

    def live_compute_instances(self) -> list[Node]:
        """The cluster's compute instances that may run a job (:data:`COMPUTE_INSTANCE_STATES`), from EC2.

        DescribeInstances by ParallelCluster's ``parallelcluster:cluster-name`` tag (:func:`pcluster_nodes`),
        without the head node and login nodes, told by their ``parallelcluster:node-type`` tag, not by the group
        label (a queue named ``head-node`` would hide its nodes; an instance without the tag counts). A failed read
        is a :class:`CliError`, never an empty list.
        """
        return [
            node
            for node in pcluster_nodes(self.target)
            if node.kind not in {"HeadNode", "LoginNode"} and COMPUTE_INSTANCE_STATES.get(node.status) != "ended"
        ]

    def check_no_compute_instances(self) -> None:
        """Refuse a ``STOPPED`` status item found before this run asked for anything, when EC2 contradicts it.

        Compute nodes' role may write ParallelCluster's status table, so a job can forge ``STOPPED``;
        the instances' ParallelCluster tags (EC2 DescribeInstances) it cannot. A compute instance
        pending, running or stopping means the fleet is not stopped; one shutting down is being terminated
        (clustermgtd's last terminations can trail its STOPPED) and runs no job.
        """
        live = self.live_compute_instances()
        if live:
            raise CliError(
                f"the status item of {self.cluster} says STOPPED but EC2 shows {len(live)} compute instance(s) "
                f"not stopped ({', '.join(f'{n.instance_id} {n.status}' for n in live[:5])}): the status item "
                "disagrees with EC2; nothing was deployed\n  what to do: check who wrote the item "
                f"(DynamoDB table parallelcluster-{self.cluster}) and `mlcluster status {self.target.name}`",
                EXIT_FAILED,
            )

    def wait_compute_instances_ended(self, deadline: float, timeout: int) -> None:
        """After the status item of a stop this run asked for reads ``STOPPED``: wait, until ``deadline`` (the
        ``--stop-timeout`` of the whole stop, ``timeout`` seconds), for EC2 to show no compute instance live.

        A job on a compute node may write ``STOPPED`` over this run's ``STOP_REQUESTED`` while the instances
        still run. clustermgtd (aws-parallelcluster-node ``slurm_plugin/clustermgtd.py``) terminates every
        compute node on each loop while the status is a stop status, ``STOPPED`` included, so the instances
        normally end within a loop or two; if it cannot (it is down, its termination fails), they run on, and
        a deploy then would apply the change with the fleet running. What the wait meets, polled every
        :data:`POLL_SECONDS` (each poll one DescribeInstances):

        ========================================================  ===================================================
        EC2 shows                                                 the wait
        ========================================================  ===================================================
        no compute instance, or each shutting-down, terminated    done: the stop is marked, the deploy may run
        or stopped (:data:`COMPUTE_INSTANCE_STATES` ``ended``)
        a compute instance pending, running or stopping, or in    poll again
        a state the table does not know, before the deadline
        the same at the deadline (a read at the deadline counts)  :data:`EXIT_TIMEOUT`, naming the instances; the
                                                                  failed stop is undone like any other (the fleet
                                                                  started again) and ``--resume`` stops it again
        DescribeInstances fails: denied, throttled past           :data:`EXIT_AWS` (:func:`aws_errors`), the same
        botocore's retries, read or connect timeout, no endpoint  way back; never read as "no instance"
        the status item, read again after each EC2 read (the      :data:`EXIT_FAILED`, nothing deployed: someone
        same :meth:`Fleet.status`), is anything but ``STOPPED``   asked for a start (or a stop again) meanwhile, or
        (``START_REQUESTED``, ``RUNNING``, missing: ``UNKNOWN``)  ParallelCluster cannot read it; the same way back
        reading the status item fails                             :data:`EXIT_AWS`, the same way back; never read
                                                                  as ``STOPPED``
        ========================================================  ===================================================

        The head node and login nodes are not compute instances. At least one read of each is made, even when
        the status item's wait used up the time; the item is read after EC2 on each poll, so the deploy never
        follows an EC2 read that a later change of the item contradicts.
        """
        with self.console.status(f"waiting for EC2 to show the compute instances of {self.cluster} ended") as spinner:
            while True:
                live = self.live_compute_instances()
                status = self.fleet.status()
                if status != "STOPPED":
                    raise CliError(
                        f"the compute fleet of {self.cluster} went {status!r} while mlcluster waited for EC2 to show "
                        "its compute instances ended: another request changed it, or ParallelCluster cannot read "
                        "its status; nothing was deployed\n  what to do: `mlcluster status "
                        f"{self.target.name}`; check who wrote the item (DynamoDB table {self.fleet.table})",
                        EXIT_FAILED,
                    )
                if not live:
                    return
                if time.monotonic() >= deadline:
                    raise CliError(
                        f"the status item of {self.cluster} says STOPPED but after --stop-timeout {timeout} s EC2 "
                        f"still shows {len(live)} compute instance(s) pending, running or stopping "
                        f"({', '.join(f'{n.instance_id} {n.status}' for n in live[:5])}"
                        f"{', ...' if len(live) > 5 else ''}): clustermgtd did not terminate them, or someone else "
                        "wrote STOPPED; nothing was deployed\n  what to do: check who wrote the item (DynamoDB "
                        f"table {self.fleet.table}), clustermgtd's log on the head node "
                        f"(/var/log/parallelcluster/clustermgtd) and `mlcluster status {self.target.name}`",
                        EXIT_TIMEOUT,
                    )
                spinner.update(
                    f"compute fleet of {self.cluster}: STOPPED, {len(live)} compute instance(s) not ended yet in EC2"
                )
                time.sleep(POLL_SECONDS)

    def start(self, timeout: int) -> None:
        """Start the fleet again if this run found it running; a fleet that was stopped stays stopped."""
        if self.state.data["fleet_before"] in {"RUNNING", "PROTECTED"}:
            status = self.fleet.status()
            if START_WAIT.get(status) != "done":
                if status not in {"START_REQUESTED", "STARTING"}:
                    self.fleet.request(status, "START_REQUESTED")
                    self.console.print(f"requested START_REQUESTED for the compute fleet of {self.cluster}")
                self.fleet.wait(START_WAIT, "RUNNING", timeout, self.console)
            self.console.print(f"the compute fleet of {self.cluster} is RUNNING")
        self.state.mark("start")

    def restore(self, timeout: int) -> str:
        """After a failure: start the fleet again if this run stopped it and ParallelCluster allows it.

        The fleet starts only when ParallelCluster's own stack is in a working state (its rule for a
        start) and the environment's cluster stack is settled: never while CloudFormation may still be
        applying the new configuration (a deploy that ran out of time).
        """
        if self.state.data["fleet_before"] not in {"RUNNING", "PROTECTED"}:
            return "the compute fleet was not stopped by this run"
        blocker = self.start_blocker()
        if blocker is not None:
            return f"the compute fleet stays STOPPED: {blocker}"
        try:
            if self.fleet.status() == "RUNNING":
                self.state.unmark("stop")
                return f"the compute fleet of {self.cluster} is RUNNING (it was not stopped)"
            self.start(timeout)
        except CliError as error:
            self.state.unmark("start")
            return f"starting the compute fleet again failed too: {error.message.splitlines()[0]}"
        self.state.unmark("start")
        self.state.unmark("stop")
        if _deployed_digest(self) == self.state.data["plan_sha256"]:
            return f"the compute fleet of {self.cluster} was started again (its stack has the new configuration)"
        return f"the compute fleet of {self.cluster} was started again: the cluster runs its previous configuration"

    def failed(self, error: CliError, what: str, restore_timeout: int, *, restore: bool = True) -> CliError:
        """``error`` with what happened to the fleet, every stack's state and the resume/abandon commands.

        A run that failed before it changed anything (the fleet's status not even recorded) is forgotten:
        running the command again starts afresh.
        """
        if self.state.data["fleet_before"] is None and not self.state.data["steps"]:
            self.state.remove()
            return CliError(f"{what} failed: {error.message}", error.exit_code)
        fleet_line = self.restore(restore_timeout) if restore else "the compute fleet was left as it is"
        states = stack_states(self.target, self.cluster)
        message = (
            f"{what} failed: {error.message}\n  {fleet_line}\n  stacks now:\n  "
            + "\n  ".join(line.strip() for line in self.advice(states))
            + "\n"
            + self.resume_line()
        )
        return CliError(message, error.exit_code)


def _plan(run: Run, new_config: dict[str, Any], classify: Classifier, with_jobs: bool) -> Plan:
    old_config = run.deployed_config()
    changes = list(classify(old_config, new_config))
    # The rollback's changes, as update_policy.rollback_changes judges them: the same rules, new -> old.
    rollback = list(classify(new_config, old_config))
    unknown = sorted({c.outcome for c in changes + rollback} - set(OUTCOMES))
    if unknown:
        raise CliError(f"the update rules returned outcomes mlcluster does not know: {', '.join(unknown)}", EXIT_FAILED)
    plan = Plan(run.target.name, run.cluster, run.target.region, config_digest(new_config), changes, rollback)
    plan.strategy = str(new_config.get("Scheduling", {}).get("SlurmSettings", {}).get("QueueUpdateStrategy", ""))
    plan.strategy = plan.strategy or "COMPUTE_FLEET_STOP"  # ParallelCluster's default
    plan.replaced = replaced_queues(changes, plan.strategy)
    if plan.refused:
        return plan
    if plan.stops_fleet:
        # Also the first DescribeInstances: the stop's EC2 wait needs it, so a role without it (or no endpoint)
        # is found here, before STOP_REQUESTED ends every static node.
        plan.queues = queue_infos(old_config, pcluster_nodes(run.target))
        plan.removed_queues = sorted(set(queue_names(old_config)) - set(queue_names(new_config)))
    if with_jobs and (plan.stops_fleet or plan.replaced):
        plan.jobs = run.read_jobs()
    return plan


def synthesize_assembly(folder: Path, environment: str, outdir: Path) -> tuple[Path, dict[str, Any], str]:
    """Synthesize ``environment`` (as ``mlcluster diff`` does) and return the assembly, its cluster template, and
    the digest of every stack's template (:func:`assembly_digest`)."""
    from mlcluster.cli.diff import stack_artifacts, synthesize

    assembly = synthesize(folder, environment, outdir)
    for stack in stack_artifacts(assembly, environment):
        if stack.name == f"{environment}-Cluster":
            template = json.loads(stack.template_file.read_text(encoding="utf-8"))
            return assembly, template, assembly_digest(assembly, environment)
    raise CliError(f"the synthesized {environment} has no stack {environment}-Cluster", EXIT_FAILED)


def assembly_digest(assembly: Path, environment: str) -> str:
    """SHA-256 over every stack name and template of ``environment`` in ``assembly``: what ``--resume`` deploys.

    An edit between a run and its resume to any stack, not only the cluster's, changes it.
    """
    from mlcluster.cli.diff import stack_artifacts

    digest = hashlib.sha256()
    for stack in sorted(stack_artifacts(assembly, environment), key=lambda artifact: artifact.name):
        digest.update(f"{stack.name}\0{hashlib.sha256(stack.template_file.read_bytes()).hexdigest()}\0".encode())
    return digest.hexdigest()


def guard_assembly(folder: Path, environment: str, assembly: Path) -> list[str]:
    """The lock-file guard of ``cdk synth`` on the assembly this update deploys; returns its notices.

    ``mlcluster.lockfile.guard_assembly`` is the same check ``cdk synth`` runs (replacements, weakenings,
    termination protection, allowances in flight or stale, deploy outcomes): its refusal is a
    :class:`CliError` before anything is changed.
    """
    from mlcluster.cli.diff import load_one
    from mlcluster.config import ConfigError
    from mlcluster.lockfile import guard_assembly as guard

    try:
        return guard(assembly, [load_one(folder, environment)])
    except ConfigError as error:
        raise CliError(
            f"the lock files refuse the synthesized {environment} (the check `cdk synth` runs); nothing was "
            f"changed\n{error}",
            EXIT_FAILED,
        ) from None


@click.command()
@environment_options
@click.option("--yes", is_flag=True, help="Do not ask before stopping the fleet and deploying.")
@click.option("--plan-only", is_flag=True, help="Show the plan and exit (nothing is changed; the squeue read runs).")
@click.option("--resume", is_flag=True, help="Continue the run a failure or interruption stopped.")
@click.option("--abandon", is_flag=True, help="Start the fleet if the stored run stopped it, and forget the run.")
@click.option(
    "--stop-timeout", type=click.IntRange(60, 7200), default=1200, show_default=True,
    help="Seconds to wait for the compute fleet to stop, and to start again.",
)  # fmt: skip
@click.option(
    "--deploy-timeout", type=click.IntRange(300, 6 * 3600), default=3 * 3600, show_default=True,
    help="Seconds the cdk deploy may take.",
)  # fmt: skip
def update(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    yes: bool,
    plan_only: bool,
    resume: bool,
    abandon: bool,
    stop_timeout: int,
    deploy_timeout: int,
) -> None:
    """Apply ENV's cluster change safely: plan, stop the compute fleet if needed, deploy, start, verify.

    For ParallelCluster environments. The plan lists the configuration changes
    and, when ParallelCluster needs the compute fleet stopped for them, the
    queues and running nodes that stop, the Slurm jobs that would be killed
    (squeue on the head node) and an outage estimate. A change no update can
    make is refused with its safe way (exit 1, nothing changed). After the
    answer (or --yes) the fleet is stopped, the synthesized assembly deployed
    with the project's CDK CLI, the fleet started again and the result
    verified. A failure restarts the fleet where possible and prints every
    stack's state; --resume continues, --abandon gives up. HyperPod
    environments are refused: deploy them with `npx cdk deploy` (no fleet to
    stop; `mlcluster diff` shows replacements first).
    """
    from rich.console import Console

    if sum((plan_only, resume, abandon)) > 1:
        raise CliError("--plan-only, --resume and --abandon exclude each other", EXIT_USAGE)
    target = Target.load(env, environments, region, profile)
    if target.backend == "hyperpod":
        raise CliError(
            f"environment {env} is a HyperPod environment: `mlcluster update` does not apply to it. HyperPod's "
            "AWS::SageMaker::Cluster updates in place (UpdateCluster) with no compute fleet to stop\n"
            f"  what to do: `mlcluster diff {env}` (replacements are refused at synth), then "
            f"`npx cdk deploy '{env}/*'`; platform software: `mlcluster patch {env}`",
            EXIT_FAILED,
        )
    target.require_backend("pcluster")
    console = Console(stderr=True, soft_wrap=True)
    name = cluster_name(target)
    run = Run(target, name, Fleet(target, name), UpdateState(env, target.region), console)
    stored = run.state.load()
    checked = checked_state(stored, run.state.path, env, name, target.region) if stored is not None else None
    unfinished = checked is not None and checked["complete"] is None
    if abandon:
        _abandon(run, checked if unfinished else None, stop_timeout)
        return
    if unfinished and not resume and not plan_only:
        assert checked is not None
        raise CliError(
            f"an update of {env} (run {checked['run']}) did not finish: done "
            f"{', '.join(checked['steps']) or 'nothing'}; nothing was run\n" + run.resume_line(),
            EXIT_FAILED,
        )
    if resume and not unfinished:
        raise CliError(f"no unfinished update of {env} to resume ({run.state.path}); run without --resume", EXIT_FAILED)
    with tempfile.TemporaryDirectory(prefix="mlcluster-update-") as tmp:
        folder = environments_folder(environments)
        assembly, template, stacks_digest = synthesize_assembly(folder, env, Path(tmp))
        for note in guard_assembly(folder, env, assembly):
            click.echo(f"mlcluster: warning: {note}", err=True)
        new_config = cluster_configuration(template, f"the synthesized {env}-Cluster")
        plan = _plan(run, new_config, default_classifier(), with_jobs=not resume)
        # The CLI is looked for before anything is changed: a missing one stops the command here.
        argv = deploy_command(assembly, env, profile) if not plan_only else []
        if resume:
            assert checked is not None
            if checked["plan_sha256"] != plan.digest or checked["stacks_sha256"] != stacks_digest:
                raise CliError(
                    f"the environment changed since run {checked['run']} planned it (the synthesized templates "
                    f"differ); nothing was run\n  what to do: undo the edit and --resume, or "
                    f"`mlcluster update {env} --abandon` and plan again",
                    EXIT_FAILED,
                )
            run.state.data = checked
            _check_stacks_settled(run)
            console.print(f"resuming update run {checked['run']} (done: {', '.join(checked['steps']) or 'nothing'})")
        else:
            for line in render_plan(plan):
                click.echo(line)
            if plan.refused:
                raise CliError(
                    f"{len(plan.refused)} change(s) cannot be made by an update of {name}; nothing was changed "
                    "(each line above names the safe way)",
                    EXIT_FAILED,
                )
            if plan_only:
                return
            if not yes:
                click.confirm(
                    f"stop the compute fleet of {name}, deploy and start it again?"
                    if plan.stops_fleet
                    else f"deploy {env}?",
                    abort=True,
                    err=True,
                )
            run.state.data = {
                "format": 1,
                "run": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
                "environment": env,
                "cluster": name,
                "region": target.region,
                "plan_sha256": plan.digest,
                "stacks_sha256": stacks_digest,
                "stop": plan.stops_fleet,
                "fleet_before": None,
                "steps": {},
                "complete": None,
            }
            _check_stacks_settled(run)
            run.state.save()
        try:
            _carry_out(run, argv, stop_timeout, deploy_timeout)
        except KeyboardInterrupt:
            done = ", ".join(run.state.data["steps"]) or "nothing"
            raise CliError(
                f"interrupted; done: {done} (the fleet and stacks are as the last step left them: "
                f"`mlcluster status {env}`)\n" + run.resume_line(),
                EXIT_INTERRUPTED,
            ) from None
    click.echo(f"updated {env} (run {run.state.data['run']}): " + ", ".join(run.state.data["steps"]))
    click.echo(
        f"next: `mlcluster lock {env}` and commit {env}.lock.json (the next synth compares with the deployed state)"
    )


def _check_stacks_settled(run: Run) -> None:
    """Refuse to start while any deployed stack is in progress or stuck (its state is not a settled one)."""
    states = stack_states(run.target, run.cluster)
    unsettled = {n: s for n, s in states.items() if s != "not found" and s not in SETTLED_STACK_STATES}
    if unsettled:
        raise CliError(
            "these stacks are not settled; nothing was changed:\n"
            + "\n".join(run.advice(states, shown=set(unsettled)))
            + f"\n  what to do: let them settle (or fix them as shown), then run `mlcluster update {run.target.name}`",
            EXIT_AWS if any(s.startswith("unknown") for s in unsettled.values()) else EXIT_FAILED,
        )


def _carry_out(run: Run, argv: list[str], stop_timeout: int, deploy_timeout: int) -> None:
    """The steps not yet done, in order; each failure restarts the fleet where possible and says where it stands."""
    state = run.state
    planned = state.data["plan_sha256"]
    if state.data["stop"] and not state.done("deploy"):
        try:
            run.stop(stop_timeout)
        except CliError as error:
            # A stop that was requested but did not finish is undone: the fleet may be half stopped.
            raise run.failed(error, "stopping the compute fleet", stop_timeout) from None
    if not state.done("deploy"):
        try:
            deploy_folder()  # checked again: the stop took minutes, in which a cdk.json could have been planted
        except CliError as error:
            raise run.failed(error, "the deploy", stop_timeout) from None
        run.console.print(f"deploying: {shlex.join(argv)}")
        code = run_deploy(argv, deploy_timeout, region=run.target.region)
        if code != 0:
            # A timed-out deploy is not settled whatever the template shows: CloudFormation may still be applying
            # it (or rolling it back), so it goes the failure's way, whose restore() starts nothing under it.
            applied = code != -1 and _deployed_digest(run) == planned
            reason = f"cdk deploy exited {code}" if code != -1 else f"cdk deploy did not finish in {deploy_timeout} s"
            if not applied:
                raise run.failed(CliError(reason, EXIT_FAILED), "the deploy", stop_timeout) from None
            blocker = run.start_blocker() if state.data["stop"] else None
            if blocker is not None:
                # The new template is in place but a stack is still moving (a rollback under way, say): a start
                # now would run the fleet under it. The deploy step stays undone: --resume checks and redeploys.
                raise run.failed(
                    CliError(f"{reason}; the compute fleet stays STOPPED: {blocker}", EXIT_FAILED),
                    "the deploy",
                    stop_timeout,
                    restore=False,
                )
            # The cluster stack took the new configuration; another stack failed. Start the fleet, then report.
            state.mark("deploy")
            try:
                if state.data["stop"]:
                    run.start(stop_timeout)
            except CliError as error:
                raise run.failed(error, "starting the compute fleet", stop_timeout, restore=False) from None
            raise run.failed(
                CliError(
                    f"{reason} after the cluster took the new configuration: another stack failed "
                    f"(redeploy it with `npx cdk deploy '{run.target.name}/*'`)",
                    EXIT_FAILED,
                ),
                "the deploy",
                stop_timeout,
                restore=False,
            )
        state.mark("deploy")
    if not state.done("start"):
        try:
            if state.data["stop"]:
                run.start(stop_timeout)
            else:
                state.mark("start")
        except CliError as error:
            raise run.failed(error, "starting the compute fleet", stop_timeout, restore=False) from None
    if not state.done("verify"):
        try:
            _verify(run, planned)
        except CliError as error:
            raise run.failed(error, "verifying the update", stop_timeout, restore=False) from None
        state.mark("verify")
    state.data["complete"] = _now()
    state.save()


def _deployed_digest(run: Run) -> str | None:
    """The digest of the deployed configuration, or ``None`` when it cannot be read."""
    try:
        return config_digest(run.deployed_config())
    except CliError:
        return None


def _verify(run: Run, planned: str) -> None:
    """The deployed configuration is the planned one, every stack settled, the fleet as it was before."""
    problems: list[str] = []
    if config_digest(run.deployed_config()) != planned:
        problems.append(f"the deployed configuration of {run.target.name}-Cluster is not the planned one")
    states = stack_states(run.target, run.cluster)
    problems += [f"{n} is {s}" for n, s in states.items() if s != "not found" and s not in SETTLED_STACK_STATES]
    before = run.state.data["fleet_before"]
    if before is not None:
        now = run.fleet.status()
        wanted = "STOPPED" if before == "STOPPED" else "RUNNING"
        if now != wanted:
            problems.append(f"the compute fleet is {now}, expected {wanted}")
    if problems:
        raise CliError("; ".join(problems), EXIT_FAILED)


def _abandon(run: Run, checked: dict[str, Any] | None, timeout: int) -> None:
    """Start the fleet if the stored run stopped it, then remove the state file."""
    if checked is None:
        raise CliError(f"no unfinished update of {run.target.name} to abandon ({run.state.path})", EXIT_FAILED)
    run.state.data = checked
    if checked["fleet_before"] in {"RUNNING", "PROTECTED"} and run.fleet.status() != "RUNNING":
        states = stack_states(run.target, run.cluster)
        blocker = run.start_blocker(states)
        if blocker is not None:
            raise CliError(
                f"{blocker}: the fleet is not started from there; the run is kept\n" + "\n".join(run.advice(states)),
                EXIT_FAILED,
            )
        run.state.data["steps"].setdefault("stop", {"at": _now()})
        run.start(timeout)
    run.state.remove()
    click.echo(f"abandoned update run {checked['run']} of {run.target.name}; the fleet is as it was before it")
