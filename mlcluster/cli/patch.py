"""``mlcluster patch``: HyperPod platform software update with the controller's state kept.

UpdateClusterSoftware replaces the nodes' root volumes. Before it, the
controller's Slurm state (spool folders, the accounting database dump) is
backed up to the data bucket by ``mlcluster-backup``, which the lifecycle
scripts install; after it, the same tool restores it.

Progress is kept in a marker object next to the backup,
``s3://<data bucket>/mlcluster/patch/<cluster>/state.json``, not in a local
file: the state then lives with the backup it describes, survives the
operator's machine (a laptop closed mid-wait, a CI runner that is gone), and
a run from another machine resumes the same patch instead of starting a
second one. A re-run reads it and skips what is done; a run that finished
leaves ``complete`` set, and the next ``patch`` starts a new run.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli import runcommand
from mlcluster.cli.context import Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, EXIT_TIMEOUT, CliError, aws_errors
from mlcluster.cli.nodes import cluster_name, controller, describe_hyperpod, hyperpod_nodes
from mlcluster.lifecycle.hyperpod import PATCH_BACKUP_PREFIX

if TYPE_CHECKING:
    from rich.console import Console

BACKUP_TOOL = "/usr/local/sbin/mlcluster-backup"
#: Seconds between DescribeCluster polls while the update runs.
POLL_SECONDS = 30.0
#: Seconds after UpdateClusterSoftware during which InService still means "not started yet".
START_GRACE_SECONDS = 300.0
STEPS = ("backup", "update", "wait", "restore")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PatchState:
    """The marker object: which steps of which run are done."""

    def __init__(self, target: Target, cluster: str) -> None:
        self.target = target
        self.bucket = target.output("Storage", "DataBucketName")
        self.prefix = f"{PATCH_BACKUP_PREFIX}{cluster}"
        self.key = f"{self.prefix}/state.json"
        self.data: dict[str, Any] = {}

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def load(self) -> dict[str, Any] | None:
        """The stored state, or ``None`` when no run was started."""
        s3 = self.target.client("s3")
        from botocore.exceptions import ClientError

        with aws_errors(f"GetObject {self.uri}"):
            try:
                body = s3.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                    return None
                raise
        try:
            loaded = json.loads(body)
        except ValueError:
            raise CliError(
                f"{self.uri} is not valid JSON\n  what to do: inspect it; delete it to start a new patch run",
                EXIT_FAILED,
            ) from None
        return dict(loaded)

    def save(self) -> None:
        with aws_errors(f"PutObject {self.uri}"):
            self.target.client("s3").put_object(
                Bucket=self.bucket,
                Key=self.key,
                Body=json.dumps(self.data, indent=2).encode(),
                ContentType="application/json",
            )

    def done(self, step: str) -> bool:
        return step in self.data["steps"]

    def mark(self, step: str, **details: Any) -> None:
        self.data["steps"][step] = {"at": _now(), **details}
        self.save()


def _run_tool(target: Target, verb: str, uri: str, timeout: int, console: Console) -> runcommand.Result:
    node = controller(target)
    return runcommand.run(
        target,
        node,
        f"set -o pipefail\ntimeout {timeout} {BACKUP_TOOL} {verb} {uri} 2>&1 | tail -c 2000",
        comment=f"mlcluster patch {target.name}: {verb}",
        timeout_seconds=timeout,
        user=None,
        console=console,
    )


#: Every ``ClusterStatus`` of botocore's SageMaker model, and what the wait for UpdateClusterSoftware does.
PATCH_CLUSTER_DECISIONS: dict[str, str] = {
    "InService": "done when no node is busy",
    "SystemUpdating": "wait",
    "Updating": "wait",
    "Creating": "wait",
    "Failed": "fail",
    "RollingBack": "fail",
    "Deleting": "fail",
}
#: Every ``ClusterInstanceStatus`` of botocore's SageMaker model: ``busy`` nodes keep the wait going (the update
#: or the replacement of a node it broke is still running); the others are reported by ``mlcluster status``.
PATCH_NODE_DECISIONS: dict[str, str] = {
    "SystemUpdating": "busy",
    "Pending": "busy",
    "AttachInProgress": "busy",
    "DeepHealthCheckInProgress": "busy",
    "ShuttingDown": "busy",
    "DetachInProgress": "busy",
    "Running": "settled",
    "Failure": "settled",
    "NotFound": "settled",
}


def _wait(target: Target, state: PatchState, timeout: int, console: Console) -> str:
    """Poll until the cluster is InService with no node updating; returns the final status.

    Right after the request the cluster may still say InService: that counts as done only once it
    was seen updating, or :data:`START_GRACE_SECONDS` after the request (recorded in the state).
    """
    deadline = time.monotonic() + timeout
    requested = datetime.strptime(state.data["steps"]["update"]["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    started = False
    with console.status("waiting for UpdateClusterSoftware") as spinner:
        while True:
            described = describe_hyperpod(target)
            status = str(described["ClusterStatus"])
            nodes = hyperpod_nodes(target, str(described["ClusterArn"]))
            states = Counter(n.status for n in nodes)
            unknown = sorted({status} - set(PATCH_CLUSTER_DECISIONS) | set(states) - set(PATCH_NODE_DECISIONS))
            if unknown:
                raise CliError(
                    f"cluster {described['ClusterName']} shows {', '.join(unknown)}, a status mlcluster does not know\n"
                    f"  what to do: `mlcluster status {target.name}`; `mlcluster patch {target.name}` resumes once "
                    "the cluster is InService",
                    EXIT_FAILED,
                )
            if PATCH_CLUSTER_DECISIONS[status] == "fail":
                raise CliError(
                    f"cluster {described['ClusterName']} is {status}: {described.get('FailureMessage', '')}\n"
                    f"  what to do: `mlcluster status {target.name}`; the backup stays at "
                    f"{state.data['backup_uri']} and `mlcluster patch {target.name}` resumes once it is InService",
                    EXIT_FAILED,
                )
            busy = sum(count for state, count in states.items() if PATCH_NODE_DECISIONS[state] == "busy")
            started = started or status == "SystemUpdating" or busy > 0
            grace_over = (datetime.now(UTC) - requested).total_seconds() >= START_GRACE_SECONDS
            if status == "InService" and busy == 0 and (started or grace_over):
                return status
            if time.monotonic() >= deadline:
                raise CliError(
                    f"the update did not finish within {timeout} s (cluster {status}, nodes "
                    + ", ".join(f"{c} {s}" for s, c in sorted(states.items()))
                    + f")\n  what to do: run `mlcluster patch {target.name}` again to keep waiting and then restore",
                    EXIT_TIMEOUT,
                )
            spinner.update(f"cluster {status}; nodes: " + ", ".join(f"{c} {s}" for s, c in sorted(states.items())))
            time.sleep(POLL_SECONDS)


@click.command()
@environment_options
@click.option("--yes", is_flag=True, help="Do not ask before updating (the update replaces root volumes).")
@click.option(
    "--timeout",
    type=click.IntRange(60, 12 * 3600),
    default=4 * 3600,
    show_default=True,
    help="Seconds to wait for the update.",
)
@click.option(
    "--step-timeout",
    type=click.IntRange(60, 7200),
    default=1800,
    show_default=True,
    help="Seconds the backup and the restore may each take.",
)
@json_option
def patch(
    env: str,
    environments: Path,
    region: str | None,
    profile: str | None,
    yes: bool,
    timeout: int,
    step_timeout: int,
    as_json: bool,
) -> None:
    """Patch a HyperPod cluster: back up, UpdateClusterSoftware, wait, restore, report.

    The controller's Slurm state is backed up to the data bucket with
    mlcluster-backup (run as root in a non-interactive Session Manager session;
    needs the AWS CLI and its Session Manager plugin) before the update and
    restored after it. Progress is kept
    in s3://<data bucket>/mlcluster/patch/<cluster>/state.json, so running the
    command again after an interruption resumes where it stopped.
    """
    from rich.console import Console

    target = Target.load(env, environments, region, profile)
    target.require_backend("hyperpod")
    console = Console(stderr=True, soft_wrap=True)
    name = cluster_name(target)
    state = PatchState(target, name)
    stored = state.load()
    resumed = stored is not None and not stored.get("complete")
    if resumed and stored is not None:
        state.data = stored
        console.print(f"resuming patch run {stored['run']} (done: {', '.join(stored['steps']) or 'nothing'})")
    else:
        run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        state.data = {
            "run": run_id,
            "cluster": name,
            "backup_uri": f"s3://{state.bucket}/{state.prefix}/{run_id}/",
            "steps": {},
            "complete": None,
        }
    described = describe_hyperpod(target)
    status = str(described["ClusterStatus"])
    if not state.done("update") and status != "InService":
        if status == "SystemUpdating" and state.done("backup"):
            state.mark("update", note="found the cluster SystemUpdating: the request was made before")
        else:
            raise CliError(
                f"cluster {name} is {status}; patching starts from InService\n"
                f"  what to do: wait (`mlcluster status {env} --watch`) and run again",
                EXIT_FAILED,
            )
    if not state.done("update") and not yes and not as_json:
        click.confirm(f"UpdateClusterSoftware replaces the root volumes of every node of {name}; continue?", abort=True)
    backup_uri = state.data["backup_uri"]
    if not state.done("backup"):
        state.save()
        result = _run_tool(target, "backup", backup_uri, step_timeout, console)
        if not result.ok:
            raise CliError(
                f"backup to {backup_uri} failed ({result.status}, exit {result.exit_code}): "
                f"{result.stdout.strip()[-500:]} {result.stderr}\n  what to do: fix what the output says (by hand: "
                f"`mlcluster ssh {env}`, then `sudo {BACKUP_TOOL} backup {backup_uri}`); nothing was updated, "
                "run again once it is fixed",
                EXIT_FAILED,
            )
        state.mark("backup", uri=backup_uri)
        console.print(f"backed up the controller's state to {backup_uri}")
    if not state.done("update"):
        with aws_errors(f"UpdateClusterSoftware for {name}"):
            target.client("sagemaker").update_cluster_software(ClusterName=name)
        state.mark("update")
        console.print(f"UpdateClusterSoftware requested for {name}")
    if not state.done("wait"):
        final = _wait(target, state, timeout, console)
        state.mark("wait", status=final)
        console.print(f"{name} is {final} again")
    if not state.done("restore"):
        result = _run_tool(target, "restore", backup_uri, step_timeout, console)
        if not result.ok:
            raise CliError(
                f"restore from {backup_uri} failed ({result.status}, exit {result.exit_code}): "
                f"{result.stdout.strip()[-500:]} {result.stderr}\n  what to do: fix what the output says (by hand: "
                f"`mlcluster ssh {env}`, then `sudo {BACKUP_TOOL} restore {backup_uri}`); run `mlcluster patch {env}` "
                "again to retry the restore",
                EXIT_FAILED,
            )
        state.mark("restore")
        console.print(f"restored the controller's state from {backup_uri}")
    state.data["complete"] = _now()
    state.save()
    if as_json:
        echo_json({"environment": env, "state_object": state.uri, **state.data})
        return
    click.echo(f"patched {name} (run {state.data['run']}); backup kept at {backup_uri}")
    for step in STEPS:
        click.echo(f"  {step:<8} {state.data['steps'][step]['at']}")
