"""``mlcluster patch``: HyperPod platform software update with the controller's state kept.

UpdateClusterSoftware replaces the nodes' root volumes. Before it, the
controller's Slurm state (spool folders, the accounting database dump) is
backed up by ``mlcluster-backup``, which the lifecycle scripts install; after
it, the same tool restores it.

The backups and the progress marker live in the cluster stack's patch backup
bucket (output ``PatchBackupBucketName``), which only the controller's role
and the operator may use: not the data bucket, which jobs and the Lustre DRA
write. Progress is kept in ``s3://<backup bucket>/mlcluster/patch/<cluster>/state.json``,
not in a local file: the state lives with the backup it describes, survives
the operator's machine, and a run from another machine resumes the same patch.

Everything read back from the marker is checked before use (:func:`checked_state`):
the backup location is recomputed from the run id, never taken from the file,
and the SHA-256 digests the backup printed are kept in the marker and handed
to the restore, which refuses files that do not match them. Every value that
enters the root shell command is validated and quoted (:func:`tool_script`).

The marker is only as trustworthy as its writers (the operator; the bucket
policy denies the controller's role writing it and any upload without the
bucket's KMS key), so a stored backup is used as little as possible:

- a stored run whose ``update`` step is not done is never resumed: a new run
  takes a fresh backup (the controller's state is still there to copy);
- a restore with digests this process did not itself receive from the backup
  shows the stored digests and times and asks the operator to type the run
  id, even with ``--yes`` (:func:`confirm_stored_restore`);
- a resumed run asks again before its next root action unless ``--yes``.
"""

from __future__ import annotations

import json
import re
import shlex
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
#: The files mlcluster-backup writes (and the only ones it restores).
BACKUP_FILES = ("slurmctld-state.tar.gz", "accounting.sql.gz")
#: The line mlcluster-backup prints per file it uploaded: ``MLCLUSTER_SHA256 <hex> <file>``.
DIGEST_LINE = re.compile(r"MLCLUSTER_SHA256 ([0-9a-f]{64}) (\S+)")
RUN_ID = re.compile(r"\d{8}T\d{6}Z")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
SHA256 = re.compile(r"[0-9a-f]{64}")
KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}")
#: What each step's record may hold besides ``at``, and the check of each value.
STEP_DETAILS: dict[str, dict[str, str]] = {
    "backup": {"uri": "the run's backup location", "digests": "file name to SHA-256"},
    "update": {"note": "text"},
    "wait": {"status": "InService"},
    "restore": {},
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PatchState:
    """The marker object: which steps of which run are done."""

    def __init__(self, target: Target, cluster: str) -> None:
        self.target = target
        self.bucket = target.output("Cluster", "PatchBackupBucketName")
        self.prefix = f"{PATCH_BACKUP_PREFIX}{cluster}"
        self.key = f"{self.prefix}/state.json"
        self.data: dict[str, Any] = {}
        #: True once this process received the digests from the backup itself (not from the marker).
        self.digests_from_this_run = False

    @property
    def key_arn(self) -> str:
        """The bucket's KMS key, which every upload must name (the bucket policy denies any other)."""
        arn = self.target.output("Cluster", "PatchBackupKeyArn")
        if KMS_KEY_ARN.fullmatch(arn) is None:
            raise CliError(
                f"output PatchBackupKeyArn: {arn!r} is not a KMS key ARN\n"
                "  what to do: deploy the cluster stack again (`npx cdk deploy`)",
                EXIT_FAILED,
            )
        return arn

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
                ServerSideEncryption="aws:kms",
                SSEKMSKeyId=self.key_arn,
            )

    def run_uri(self, run: str) -> str:
        """Where the backup of ``run`` lives: always computed here, never read from the marker."""
        return f"s3://{self.bucket}/{self.prefix}/{run}/"

    def done(self, step: str) -> bool:
        return step in self.data["steps"]

    def mark(self, step: str, **details: Any) -> None:
        self.data["steps"][step] = {"at": _now(), **details}
        self.save()


def checked_state(stored: Any, state: PatchState, cluster: str) -> dict[str, Any]:
    """``stored`` (the marker read back) when every field is what this command writes; else a CliError.

    The marker decides which root action runs next and with which arguments, so nothing in it is
    trusted: the run id, timestamps, step names and order, the backup location (which must be the one
    :meth:`PatchState.run_uri` computes) and the digests are each checked, and every problem is named.
    """
    problems: list[str] = []

    def bad(key: str, value: Any, allowed: str) -> None:
        problems.append(f"{key}: {json.dumps(value)[:120]} is not allowed; allowed: {allowed}")

    if not isinstance(stored, dict):
        raise CliError(
            f"{state.uri} is not a patch state object (a JSON object)\n"
            "  what to do: inspect it; delete it to start a new patch run",
            EXIT_FAILED,
        )
    known = {"run", "cluster", "backup_uri", "steps", "complete"}
    for key in sorted(set(stored) - known):
        bad(key, stored[key], "no such key; keys: " + ", ".join(sorted(known)))
    run = stored.get("run")
    expected_uri = state.run_uri(run) if isinstance(run, str) and RUN_ID.fullmatch(run) else None
    if expected_uri is None:
        bad("run", run, "a run id such as 20260101T120000Z")
    if stored.get("cluster") != cluster:
        bad("cluster", stored.get("cluster"), repr(cluster))
    if expected_uri is None or stored.get("backup_uri") != expected_uri:
        bad("backup_uri", stored.get("backup_uri"), expected_uri or f"s3://{state.bucket}/{state.prefix}/<run>/")
    complete = stored.get("complete")
    if complete is not None and not (isinstance(complete, str) and TIMESTAMP.fullmatch(complete)):
        bad("complete", complete, "null or a UTC time such as 2026-01-01T12:00:00Z")
    steps = stored.get("steps")
    if not isinstance(steps, dict):
        bad("steps", steps, "an object of step records")
    else:
        names = list(steps)
        if names != list(STEPS[: len(names)]):
            bad("steps", names, "the steps in order, each after the one before: " + ", ".join(STEPS))
        for name, record in steps.items():
            if name not in STEP_DETAILS:
                continue
            _check_step(name, record, expected_uri, bad)
    if problems:
        raise CliError(
            f"{state.uri} is not a state this command wrote; nothing was run:\n  "
            + "\n  ".join(problems)
            + "\n  what to do: find out who changed it (the bucket is versioned; look at its versions and "
            "CloudTrail); delete it to start a new patch run",
            EXIT_FAILED,
        )
    return dict(stored)


def _check_step(name: str, record: Any, expected_uri: str | None, bad: Any) -> None:
    """Report through ``bad`` what is wrong with the record of step ``name``."""
    key = f"steps.{name}"
    if not isinstance(record, dict):
        bad(key, record, "an object with 'at'")
        return
    at = record.get("at")
    if not (isinstance(at, str) and TIMESTAMP.fullmatch(at)):
        bad(f"{key}.at", at, "a UTC time such as 2026-01-01T12:00:00Z")
    allowed = STEP_DETAILS[name]
    for detail in sorted(set(record) - {"at", *allowed}):
        bad(f"{key}.{detail}", record[detail], "no such key; keys: at" + "".join(f", {k}" for k in allowed))
    if name == "backup":
        if record.get("uri") != expected_uri:
            bad(f"{key}.uri", record.get("uri"), expected_uri or "the run's backup location")
        digests = record.get("digests")
        if not _digests_ok(digests):
            bad(
                f"{key}.digests",
                digests,
                f"{BACKUP_FILES[0]} (and optionally {BACKUP_FILES[1]}) mapped to a SHA-256 in lower-case hex",
            )
    elif name == "update" and "note" in record and not isinstance(record["note"], str):
        bad(f"{key}.note", record["note"], "text")
    elif name == "wait" and record.get("status") != "InService":
        bad(f"{key}.status", record.get("status"), "InService")


def _digests_ok(digests: Any) -> bool:
    return (
        isinstance(digests, dict)
        and BACKUP_FILES[0] in digests
        and set(digests) <= set(BACKUP_FILES)
        and all(isinstance(v, str) and SHA256.fullmatch(v) for v in digests.values())
    )


def tool_script(
    verb: str, uri: str, timeout: int, digests: dict[str, str] | None = None, key_arn: str | None = None
) -> str:
    """The root shell script that runs mlcluster-backup: every argument checked, then quoted.

    ``uri`` must be an ``s3://`` location of plain key characters; ``digests`` (restore only) are the
    file name to SHA-256 pairs the backup printed, handed over as ``FILE=SHA256`` arguments;
    ``key_arn`` (backup only) is the bucket's KMS key, which the uploads name. The script ends in a
    newline, because the session appends its exit-code line after it.
    """
    if verb not in {"backup", "restore"}:
        raise ValueError(f"verb: {verb!r} is not allowed; allowed: backup, restore")
    if re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9._/-]+/", uri) is None or ".." in uri:
        raise ValueError(f"uri: {uri!r} is not allowed; allowed: s3://BUCKET/PREFIX/ of letters, digits, . _ - /")
    if (verb == "restore") != (digests is not None) or (digests is not None and not _digests_ok(digests)):
        raise ValueError(f"digests: {digests!r} is not allowed; restore takes the backup's digests, backup none")
    if (verb == "backup") != (key_arn is not None) or (key_arn is not None and not KMS_KEY_ARN.fullmatch(key_arn)):
        raise ValueError(f"key_arn: {key_arn!r} is not allowed; backup takes the bucket's KMS key ARN, restore none")
    arguments = [BACKUP_TOOL, verb, uri, *(f"{name}={digest}" for name, digest in sorted((digests or {}).items()))]
    if key_arn is not None:
        arguments.append(key_arn)
    return f"set -o pipefail\ntimeout {int(timeout)} {shlex.join(arguments)} 2>&1 | tail -c 2000\n"


def backup_digests(output: str) -> dict[str, str]:
    """The ``MLCLUSTER_SHA256`` lines of a backup's output, as file name to digest (checked)."""
    found = {name: digest for digest, name in DIGEST_LINE.findall(output)}
    if not _digests_ok(found):
        raise CliError(
            f"the backup printed no valid digests (expected 'MLCLUSTER_SHA256 <sha256> <file>' for {BACKUP_FILES[0]} "
            f"and optionally {BACKUP_FILES[1]}), got: {output.strip()[-300:]}\n"
            "  what to do: update the lifecycle scripts (`npx cdk deploy`) so the controller has the current "
            "mlcluster-backup; nothing was updated",
            EXIT_FAILED,
        )
    return found


def confirm_stored_restore(state: PatchState, backup_uri: str) -> None:
    """Show the stored digests and times, and have the operator type the run id; ``--yes`` does not skip this.

    Called before a restore whose digests come from the marker, not from a backup this process ran:
    the marker may have been written by someone else (whoever can write the bucket), and the digests
    decide which files root loads. A wrong or missing answer (no terminal) aborts.
    """
    steps = state.data["steps"]
    click.echo(
        f"patch run {state.data['run']} resumes at the restore with a state this process did not write "
        f"({state.uri}):\n"
        + "".join(f"  {step:<8} {record['at']}\n" for step, record in steps.items())
        + "".join(f"  {name}  sha256 {digest}\n" for name, digest in sorted(steps["backup"]["digests"].items()))
        + f"root on the controller will load these files from {backup_uri}; compare the digests with the ones "
        "the backup printed.",
        err=True,
    )
    answer = click.prompt("type the run id to restore it (anything else stops)", default="", err=True)
    if answer.strip() != state.data["run"]:
        raise CliError(
            f"the restore of run {state.data['run']} was not confirmed; nothing was run\n"
            f"  what to do: check {state.uri} (versions, CloudTrail) and run `mlcluster patch {state.target.name}` "
            "again in a terminal",
            EXIT_FAILED,
        )


def _run_tool(target: Target, verb: str, script: str, timeout: int, console: Console) -> runcommand.Result:
    node = controller(target)
    return runcommand.run(
        target,
        node,
        script,
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
                    f"{state.run_uri(state.data['run'])} and `mlcluster patch {target.name}` resumes once it is "
                    "InService",
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
@click.option(
    "--yes",
    is_flag=True,
    help="Do not ask before updating or before a resumed run's root actions "
    "(a restore from a state this process did not write still asks for the run id).",
)
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
    environments: Path | None,
    region: str | None,
    profile: str | None,
    yes: bool,
    timeout: int,
    step_timeout: int,
    as_json: bool,
) -> None:
    """Patch a HyperPod cluster: back up, UpdateClusterSoftware, wait, restore, report.

    The controller's Slurm state is backed up to the cluster's patch backup
    bucket with mlcluster-backup (run as root in a non-interactive Session
    Manager session; needs the AWS CLI and its Session Manager plugin) before
    the update and restored after it, checked against the digests the backup
    printed. Progress is kept in s3://<backup bucket>/mlcluster/patch/<cluster>/state.json,
    so running the command again after an interruption resumes where it
    stopped (asking again before its next root action unless --yes). A run
    interrupted before the update starts over with a fresh backup. A restore
    from a state this process did not write shows the stored digests and
    asks for the run id to be typed, with or without --yes.
    """
    from rich.console import Console

    target = Target.load(env, environments, region, profile)
    target.require_backend("hyperpod")
    console = Console(stderr=True, soft_wrap=True)
    name = cluster_name(target)
    state = PatchState(target, name)
    stored = state.load()
    # A finished run's marker is checked too: a marker this command did not write stops it either way.
    checked = checked_state(stored, state, name) if stored is not None else None
    described = describe_hyperpod(target)
    status = str(described["ClusterStatus"])
    # A run before its update is never resumed while the controller's state is still there to copy:
    # a fresh backup replaces the stored one (whose digests anyone who can write the marker chose).
    stale = checked is not None and "update" not in checked["steps"] and status == "InService"
    if checked is not None and checked["complete"] is None and not stale:
        state.data = checked
        console.print(f"resuming patch run {state.data['run']} (done: {', '.join(state.data['steps']) or 'nothing'})")
    else:
        if stale and checked is not None and checked["complete"] is None:
            console.print(f"patch run {checked['run']} never reached the update: starting a new run with a new backup")
        run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        state.data = {
            "run": run_id,
            "cluster": name,
            "backup_uri": state.run_uri(run_id),
            "steps": {},
            "complete": None,
        }
    backup_uri = state.run_uri(state.data["run"])
    if not state.done("update") and status != "InService":
        if status == "SystemUpdating" and state.done("backup"):
            state.mark("update", note="found the cluster SystemUpdating: the request was made before")
        else:
            raise CliError(
                f"cluster {name} is {status}; patching starts from InService\n"
                f"  what to do: wait (`mlcluster status {env} --watch`) and run again",
                EXIT_FAILED,
            )
    if not yes:
        remaining = [step for step in STEPS if not state.done(step)]
        question = (
            f"UpdateClusterSoftware replaces the root volumes of every node of {name}; continue?"
            if not state.done("update")
            else f"patch run {state.data['run']} will now run as root on the controller of {name}: "
            f"{', '.join(remaining)} (restore from {backup_uri}); continue?"
        )
        click.confirm(question, abort=True, err=True)
    if not state.done("backup"):
        state.save()
        script = tool_script("backup", backup_uri, step_timeout, key_arn=state.key_arn)
        result = _run_tool(target, "backup", script, step_timeout, console)
        if not result.ok:
            raise CliError(
                f"backup to {backup_uri} failed ({result.status}, exit {result.exit_code}): "
                f"{result.stdout.strip()[-500:]} {result.stderr}\n  what to do: fix what the output says (by hand: "
                f"`mlcluster ssh {env}`, then `sudo {BACKUP_TOOL} backup {backup_uri}`); nothing was updated, "
                "run again once it is fixed",
                EXIT_FAILED,
            )
        digests = backup_digests(result.stdout)
        state.mark("backup", uri=backup_uri, digests=digests)
        state.digests_from_this_run = True
        console.print(
            f"backed up the controller's state to {backup_uri}: "
            + ", ".join(f"{file} sha256 {digest}" for file, digest in sorted(digests.items()))
        )
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
        if not state.digests_from_this_run:
            confirm_stored_restore(state, backup_uri)
        digests = dict(state.data["steps"]["backup"]["digests"])
        script = tool_script("restore", backup_uri, step_timeout, digests)
        result = _run_tool(target, "restore", script, step_timeout, console)
        if not result.ok:
            raise CliError(
                f"restore from {backup_uri} failed ({result.status}, exit {result.exit_code}): "
                f"{result.stdout.strip()[-500:]} {result.stderr}\n  what to do: fix what the output says (by hand: "
                f"`mlcluster ssh {env}`, then `sudo {BACKUP_TOOL} restore {backup_uri} FILE=SHA256...` with the "
                f"digests of {state.uri}); run `mlcluster patch {env}` again to retry the restore",
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
