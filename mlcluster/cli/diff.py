"""``mlcluster diff``, ``lock`` and ``protect``: day-two changes known before, and guarded during, a deploy.

``diff ENV`` synthesizes the environment in a subprocess (aws-cdk-lib is
never imported by the command itself), creates one CloudFormation change
set per deployed stack without executing it, reads AWS's own
``Replacement`` verdict for every resource, prints data-bearing
replacements and deletions first, deletes the change sets, and exits 6
(:data:`~mlcluster.cli.errors.EXIT_REPLACEMENT`) when there is such a
replacement.

``lock ENV`` writes ``environments/<ENV>.lock.json`` from the deployed
stacks (CloudFormation ``GetTemplate`` and ``DescribeStacks``; run it after
each deploy and commit it): the synth-time guard compares the next synth
with it. It refuses without credentials, on a stack in an unsettled state,
and on a data-bearing change since the last lock that the environment file
did not allow, unless ``--accept`` names it. ``--new`` declares a
never-deployed environment (a lock with no stacks); ``--from-templates``
records the synthesized working tree instead (the examples and tests).

``protect ENV`` sets a stack policy on every deployed stack of the
environment that denies ``Update:Replace`` and ``Update:Delete`` on its
data-bearing resources (``cdk deploy`` cannot set stack policies).

All three synthesize with the project's CDK feature flags (its ``cdk.json``,
else the flags the package ships: :mod:`mlcluster.appdir`), so the command
installed from the wheel builds the templates ``cdk deploy`` builds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from mlcluster.cli.context import (
    ENVIRONMENTS_HELP,
    echo_json,
    environments_folder,
    json_option,
    open_session,
    project_context,
    region_options,
)
from mlcluster.cli.errors import EXIT_FAILED, EXIT_REPLACEMENT, EXIT_USAGE, CliError, aws_errors
from mlcluster.cli.progress import progress
from mlcluster.config import ConfigError, Environment, load_environments
from mlcluster.config.names import STACKS
from mlcluster.lockfile import (
    ForeignLockError,
    Lock,
    LockSource,
    UnreadableLockError,
    allowed,
    git_path,
    in_flight_path,
    load_lock,
    lock_path,
    read_lock_file,
    resource_name,
    unprotected,
    write_lock,
)
from mlcluster.replacement import (
    Snapshot,
    compare,
    is_data_bearing,
    snapshot_from_assembly,
    stack_state,
    template_paths,
)

#: Templates above this size must go through S3 (CloudFormation's TemplateBody limit).
TEMPLATE_BODY_LIMIT = 51_200
#: Every ``ChangeSetStatus`` of botocore's CloudFormation model and what ``mlcluster diff`` does on meeting it:
#: wait, read the changes, or fail with the reason (FAILED reads "no changes" from its reason, else fails).
CHANGE_SET_DECISIONS: dict[str, str] = {
    "CREATE_PENDING": "wait",
    "CREATE_IN_PROGRESS": "wait",
    "CREATE_COMPLETE": "read",
    "FAILED": "fail",
    "DELETE_PENDING": "fail",
    "DELETE_IN_PROGRESS": "fail",
    "DELETE_COMPLETE": "fail",
    "DELETE_FAILED": "fail",
}
#: CloudFormation's StatusReason for a change set with nothing to do.
NO_CHANGES = ("didn't contain changes", "No updates are to be performed")
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]

#: Run in a fresh interpreter; the feature flags arrive as JSON on standard input.
_SYNTH = (
    "import json, sys; from pathlib import Path; from mlcluster.app import build_app; "
    "app, _ = build_app(Path(sys.argv[1]), selected=[sys.argv[2]], outdir=sys.argv[3], "
    "context=json.load(sys.stdin)); app.synth()"
)


def load_one(environments: Path, name: str) -> Environment:
    """The environment ``name`` from ``environments``; a config error becomes a :class:`CliError`."""
    try:
        (environment,) = load_environments(environments, [name])
    except ConfigError as error:
        raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
    return environment


def synthesize(environments: Path, name: str, outdir: Path) -> Path:
    """Synthesize one environment in a fresh Python process into ``outdir``; returns ``outdir``.

    The process gets the project's feature flags (:func:`~mlcluster.cli.context.project_context`),
    and a spinner shows on a terminal while it runs (15-25 s for a full environment).
    """
    context = project_context()
    # Our own interpreter and fixed code; the arguments are paths and a name.
    with progress(f"synthesizing {name} (aws-cdk-lib, cdk-nag)"):
        done = subprocess.run(
            [sys.executable, "-c", _SYNTH, str(environments), name, str(outdir)],
            input=json.dumps(context),
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise CliError(f"synthesizing {name} failed:\n{tail}", EXIT_FAILED)
    return outdir


@dataclass(frozen=True)
class StackArtifact:
    """One synthesized stack: its name, template file and the template's S3 location for large templates."""

    name: str
    template_file: Path
    template_s3_url: str | None
    paths: dict[str, str]


def stack_artifacts(assembly: Path, stage: str) -> list[StackArtifact]:
    """The stage's stacks in dependency order (the manifest lists producers first)."""
    nested = assembly / f"assembly-{stage}"
    manifest = json.loads((nested / "manifest.json").read_text(encoding="utf-8"))
    snapshot = snapshot_from_assembly(assembly, stage)
    stacks: list[StackArtifact] = []
    for artifact_id, artifact in manifest["artifacts"].items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        name = str(props.get("stackName", artifact_id))
        stacks.append(
            StackArtifact(
                name=name,
                template_file=nested / props["templateFile"],
                template_s3_url=props.get("stackTemplateAssetObjectUrl"),
                paths={lid: r.path for lid, r in snapshot[name].resources.items()},
            )
        )
    return stacks


@dataclass(frozen=True)
class Verdict:
    """AWS's verdict on one resource of one stack's change set."""

    stack: str
    logical_id: str
    type: str
    path: str
    action: str
    replacement: str

    @property
    def dangerous(self) -> bool:
        """A data-bearing resource that AWS will (or may) replace, or remove."""
        if not is_data_bearing(self.type, self.path):
            return False
        return self.replacement in ("True", "Conditional") or self.action == "Remove"

    def line(self) -> str:
        return (
            f"{self.stack}: {self.action:<7} {self.logical_id} ({self.type}) replacement={self.replacement or '-'} "
            f"{self.path}"
        )


def _template_argument(cfn_s3: Any, stack: StackArtifact, account: Callable[[], str], region: str) -> dict[str, str]:
    """``TemplateBody``, or for a large template ``TemplateURL`` after uploading it where ``cdk deploy`` would."""
    body = stack.template_file.read_text(encoding="utf-8")
    if len(body.encode()) <= TEMPLATE_BODY_LIMIT:
        return {"TemplateBody": body}
    if not stack.template_s3_url:
        raise CliError(f"{stack.name}: the template is over {TEMPLATE_BODY_LIMIT} bytes and has no S3 location")
    url = stack.template_s3_url.replace("${AWS::AccountId}", account()).replace("${AWS::Region}", region)
    bucket, key = url.removeprefix("s3://").split("/", 1)
    with aws_errors(f"PutObject s3://{bucket}/{key}"):
        cfn_s3.put_object(Bucket=bucket, Key=key, Body=body.encode())
    return {"TemplateURL": f"https://{bucket}.s3.{region}.amazonaws.com/{key}"}


def change_set_verdicts(
    cfn: Any,
    s3: Any,
    stack: StackArtifact,
    *,
    region: str,
    account: Callable[[], str],
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = 5.0,
    max_polls: int = 120,
) -> list[Verdict] | None:
    """Create, read and delete a change set for ``stack``; None when the stack is not deployed."""
    from botocore.exceptions import ClientError

    try:
        cfn.describe_stacks(StackName=stack.name)
    except ClientError as error:
        if "does not exist" in str(error.response.get("Error", {}).get("Message", "")):
            return None
        with aws_errors(f"DescribeStacks for {stack.name}"):
            raise
    name = f"mlcluster-diff-{int(time.time())}"
    with aws_errors(f"CreateChangeSet for {stack.name}"):
        cfn.create_change_set(
            StackName=stack.name,
            ChangeSetName=name,
            ChangeSetType="UPDATE",
            Capabilities=CAPABILITIES,
            Description="mlcluster diff: never executed, deleted after reading",
            **_template_argument(s3, stack, account, region),
        )
    try:
        return _read_change_set(cfn, stack, name, sleep=sleep, poll_seconds=poll_seconds, max_polls=max_polls)
    finally:
        with aws_errors(f"DeleteChangeSet {name} of {stack.name}"):
            cfn.delete_change_set(StackName=stack.name, ChangeSetName=name)


def _read_change_set(
    cfn: Any, stack: StackArtifact, name: str, *, sleep: Callable[[float], None], poll_seconds: float, max_polls: int
) -> list[Verdict]:
    verdicts: list[Verdict] = []
    token: str | None = None
    for _ in range(max_polls):
        with aws_errors(f"DescribeChangeSet {name} of {stack.name}"):
            page = cfn.describe_change_set(
                StackName=stack.name, ChangeSetName=name, **({"NextToken": token} if token else {})
            )
        status = str(page.get("Status"))
        decision = CHANGE_SET_DECISIONS.get(status)
        if decision == "wait":
            sleep(poll_seconds)
            continue
        if decision != "read" and status != "FAILED":
            raise CliError(
                f"change set {name} of {stack.name} is {status}: "
                + ("it was deleted while it was read" if decision == "fail" else "a status mlcluster does not know")
                + f" ({page.get('StatusReason', '')})\n  what to do: run `mlcluster diff` again",
                EXIT_FAILED,
            )
        if status == "FAILED":
            reason = str(page.get("StatusReason", ""))
            if any(text in reason for text in NO_CHANGES):
                return []
            raise CliError(f"change set for {stack.name} failed: {reason}", EXIT_FAILED)
        for change in page.get("Changes", []):
            rc = change.get("ResourceChange", {})
            lid = str(rc.get("LogicalResourceId", ""))
            verdicts.append(
                Verdict(
                    stack=stack.name,
                    logical_id=lid,
                    type=str(rc.get("ResourceType", "")),
                    path=stack.paths.get(lid, lid),
                    action=str(rc.get("Action", "")),
                    replacement=str(rc.get("Replacement", "")),
                )
            )
        token = page.get("NextToken")
        if not token:
            return verdicts
    raise CliError(f"change set {name} of {stack.name} was not ready after {max_polls} polls", EXIT_FAILED)


def _clients(
    environment: Environment, region: str | None, profile: str | None
) -> tuple[Any, Any, Callable[[], str], str]:
    """CloudFormation and S3 clients, the account (asked only when needed) and the region, from one session."""
    opened = open_session(region, profile, environment.config, where=environment.source)
    with aws_errors("creating the AWS clients"):
        session: Any = opened.session
        cfn = session.client("cloudformation")
        s3 = session.client("s3")
        sts = session.client("sts")

    def account() -> str:
        with aws_errors("GetCallerIdentity"):
            return str(sts.get_caller_identity()["Account"])

    return cfn, s3, account, opened.region


def _environments_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--environments", type=click.Path(file_okay=False, path_type=Path), default=None, help=ENVIRONMENTS_HELP
    )(command)


@click.command("diff")
@click.argument("env")
@_environments_option
@region_options
@json_option
def diff(env: str, environments: Path | None, region: str | None, profile: str | None, as_json: bool) -> None:
    """Show what AWS would replace on the next deploy of ENV; exit 6 if data-bearing resources are."""
    folder = environments_folder(environments)
    loaded = load_one(folder, env)
    cfn, s3, account, chosen = _clients(loaded, region, profile)
    stacks: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mlcluster-diff-") as tmp:
        assembly = synthesize(folder, loaded.name, Path(tmp))
        verdicts: list[Verdict] = []
        for stack in stack_artifacts(assembly, loaded.name):
            with progress(f"reading a change set for {stack.name}"):
                found = change_set_verdicts(cfn, s3, stack, region=chosen, account=account)
            if found is None:
                stacks[stack.name] = "not deployed"
                if not as_json:
                    click.echo(f"{stack.name}: not deployed (every resource would be created)")
                continue
            stacks[stack.name] = "changes" if found else "no changes"
            if not found and not as_json:
                click.echo(f"{stack.name}: no changes")
            verdicts += found
    report(verdicts, stacks=stacks, region=chosen, as_json=as_json)


def report(
    verdicts: list[Verdict], *, stacks: dict[str, str] | None = None, region: str = "", as_json: bool = False
) -> None:
    """Print data-bearing replacements first (or everything as JSON); exit 6 when there is one."""
    dangerous = [v for v in verdicts if v.dangerous]
    others = sorted(
        (v for v in verdicts if not v.dangerous), key=lambda v: (v.replacement != "True", v.stack, v.logical_id)
    )
    if as_json:
        echo_json(
            {
                "region": region,
                "stacks": stacks or {},
                "data_bearing": [v.__dict__ for v in dangerous],
                "other": [v.__dict__ for v in others],
                "safe": not dangerous,
            }
        )
    else:
        if dangerous:
            click.echo("DATA-BEARING resources AWS would replace or delete:")
            for verdict in dangerous:
                click.echo(f"  {verdict.line()}")
        if others:
            click.echo("Other changes:")
            for verdict in others:
                click.echo(f"  {verdict.line()}")
    if dangerous:
        raise CliError(
            f"{len(dangerous)} data-bearing resource(s) would be replaced or deleted; see the docs "
            "(docs/reference/edits.md) for the safe way, and retention.allow_replacement to allow it deliberately",
            EXIT_REPLACEMENT,
        )


#: Stack states whose template is the one deployed and settled (CloudFormation ``StackStatus``).
SETTLED = frozenset(
    {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_COMPLETE"}
)


def _missing(error: Any) -> bool:
    return "does not exist" in str(error.response.get("Error", {}).get("Message", ""))


def deployed_snapshot(cfn: Any, env: Environment) -> Snapshot:
    """Every deployed stack of ``env`` as CloudFormation has it: template, paths from its metadata, protection.

    A stack in any state but a settled one (``SETTLED``) is refused: an update in progress, a failed
    create (``ROLLBACK_COMPLETE``) or a stuck rollback has no template that is simply "deployed".
    """
    from botocore.exceptions import ClientError

    snapshot: Snapshot = {}
    for part in STACKS:
        name = f"{env.name}-{part}"
        with aws_errors(f"DescribeStacks for {name}"):
            try:
                stacks = cfn.describe_stacks(StackName=name)["Stacks"]
            except ClientError as error:
                if _missing(error):
                    continue
                raise
        (stack,) = stacks
        status = str(stack.get("StackStatus", ""))
        if status == "REVIEW_IN_PROGRESS":
            continue  # a change set never executed: nothing deployed
        if status not in SETTLED:
            raise CliError(
                f"{name} is {status}: its deployed template is not settled. Let the operation finish, or continue "
                "the rollback (or delete a stack whose first create failed; 'mlcluster status' lists what it "
                "retained), then run 'mlcluster lock' again",
                EXIT_FAILED,
            )
        with aws_errors(f"GetTemplate for {name}"):
            body = cfn.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        template = body if isinstance(body, dict) else json.loads(body)
        # Without path metadata (deployed with --no-path-metadata) a resource is named by its stack and logical id.
        paths = {lid: f"{part}/{lid}" for lid in template.get("Resources", {})} | template_paths(template, env.name)
        snapshot[name] = stack_state(
            template,
            paths,
            termination_protection=bool(stack.get("EnableTerminationProtection", False)),
        )
    return snapshot


#: How ``--accept`` names a stack whose termination protection went off outside the app.
PROTECTION = "termination-protection:"


def settle(env: Environment, old: Lock | None, new: Snapshot, accept: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The allowances ``new`` used since ``old``, and the accepted changes; refuse any other data-bearing change.

    A data-bearing resource replaced, deleted or weakened since the last lock was either allowed by
    the environment file (the allowance is then used up: the lock records it) or happened outside it
    (a deploy from another branch, a console edit): the lock records that only when ``--accept``
    names the resource, so no refusal is cleared by re-locking. A stack holding data that is not
    retained and lost termination protection is the same: allowed when the file names each such
    resource (the guard's rule), else recorded only with ``--accept termination-protection:<stack>``.
    """
    if old is None:
        return [], []
    # An allowance the last lock records as used allowed its deploy; left in the file it allows nothing more.
    allowances = [entry for entry in env.config.retention.allow_replacement if entry not in old.allowances_used]
    used: list[str] = []
    accepted: list[str] = []
    unexplained: list[str] = []
    for change in compare(old.snapshot, new):
        # A stack gone since the last lock is refused or accepted as a whole by name (_gone).
        if not change.dangerous or change.stack not in new:
            continue
        name = resource_name(change.path)
        if allowed(change, allowances):
            used += [entry for entry in allowances if entry in (change.path, name)]
        elif name in accept or change.path in accept:
            accepted.append(f"{change.stack}/{change.describe()}")
        else:
            unexplained.append(f"  {change.stack}: {change.describe()}  (--accept {name})")
    for stack, exposed in unprotected(old.snapshot, new).items():
        # The guard's rule: protection may go off when the file allows each resource it exposes by name.
        covering = [entry for entry in allowances if any(entry in (path, resource_name(path)) for path in exposed)]
        if all(any(entry in (path, resource_name(path)) for entry in allowances) for path in exposed):
            used += covering
        elif f"{PROTECTION}{stack}" in accept:
            accepted.append(f"{stack} termination protection off (exposes {', '.join(exposed)})")
        else:
            unexplained.append(
                f"  {stack}: termination protection off, so a stack deletion deletes {', '.join(exposed)}  "
                f"(--accept {PROTECTION}{stack})"
            )
    if unexplained:
        raise CliError(
            "these data-bearing changes since the last lock were not allowed by the environment file:\n"
            + "\n".join(unexplained)
            + "\nCheck what happened to them (a deploy from elsewhere, a console edit). To record them in the lock "
            "knowingly, repeat the command with --accept for each",
            EXIT_FAILED,
        )
    return sorted(set(used)), accepted


def _previous_lock(env: Environment, *, announce: bool = True, replacing: bool = False) -> Lock | None:
    """The lock being replaced; a format-1 lock (before policies were recorded) is replaced without a check.

    A lock recording another environment (:class:`~mlcluster.lockfile.ForeignLockError`) is refused, unless
    the caller is ``replacing`` it with ``env``'s deployed stacks (``mlcluster lock ENV``, the way its refusal
    names) and it is a copy (:func:`_only_record`): then nothing is compared with it, as with no lock at all.
    ``announce`` says so on the terminal (not when the caller refuses a format-1 lock anyway).
    """
    try:
        return load_lock(env)
    except ForeignLockError as error:
        if not replacing:
            raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
        _only_record(env, error)
        if announce:
            click.echo(
                f"{lock_path(env)}: records environment {error.recorded!r}, not {env.name!r}: replaced by "
                f"{env.name}'s deployed stacks; nothing is compared with it"
            )
        return None
    except UnreadableLockError as error:
        path = lock_path(env)
        if not error.earlier_format:
            if replacing:
                raise CliError(_unreadable_refusal(env, error), EXIT_FAILED) from None
            raise CliError(f"configuration error\n{error}", EXIT_FAILED) from None
        if announce:
            click.echo(f"{path}: format 1 (no policies recorded) is replaced; changes since it are not checked")
        return None


def _unreadable_refusal(env: Environment, error: UnreadableLockError) -> str:
    """Why ``mlcluster lock ENV`` does not overwrite an unreadable lock, and the way on.

    Not read as absent: the file may be the only record of what is deployed, of the allowances used and of the
    changes accepted, so the operator restores it or sets it aside knowingly (and keeps the copy).
    """
    return (
        f"{error.path} cannot be read as a lock ({error.why}), and 'mlcluster lock {env.name}' does not overwrite "
        "it: it may be the only record of the deployed stacks and of the allowances and acceptances used. Restore "
        f"it from git (git log -- {git_path(error.path)}); if there is no good copy, move the file aside (keep it) "
        f"and run 'mlcluster lock {env.name}' again"
    )


def _only_record(env: Environment, error: ForeignLockError) -> None:
    """Refuse to replace another environment's lock that is the only record of its stacks.

    Renaming ``dev.yaml`` and ``dev.lock.json`` to ``team`` leaves ``team.lock.json`` recording dev's stacks
    and no ``dev.lock.json``: replaced by team's deployed stacks, dev's stacks would keep running with no lock
    and no orphan report naming them. A copy (``<recorded>.lock.json`` still beside it) or a lock recording no
    stack loses nothing. Refused rather than asking ``--accept`` for each stack as gone: an accepted stack
    would still leave the file, and with it the only record of what keeps running.
    """
    stacks = sorted(error.lock.snapshot)
    recorded = error.recorded
    named = isinstance(recorded, str) and recorded != "" and Path(recorded).name == recorded
    if not stacks or (named and _still_recorded(lock_path(env).parent / f"{recorded}.lock.json", recorded, stacks)):
        return
    whose = f"environment {recorded!r}" if named else "no environment"
    sibling = lock_path(env).parent / f"{recorded}.lock.json"
    if not named:
        sibling_state = "no other lock of theirs is"
    elif sibling.is_file():
        sibling_state = f"the {recorded}.lock.json (which does not record them all) is"
    else:
        sibling_state = f"{recorded}.lock.json is not"
    old_names = f"{recorded}.yaml and {recorded}.lock.json" if named else "the names they had"
    raise CliError(
        f"{lock_path(env)} records {whose} and its stacks {', '.join(stacks)}, and "
        f"{sibling_state} beside it: this file is their only record "
        f"(an environment file and its lock renamed to {env.name}?). Replaced by {env.name}'s deployed stacks, it "
        "would no longer name them while they keep running, and the next deploy would build a second environment. "
        f"Give both files their old names back ({old_names}) and run 'mlcluster status' there; to rename an "
        "environment, see the refusal of a lock whose environment file is gone",
        EXIT_FAILED,
    )


def _still_recorded(path: Path, name: str, stacks: list[str]) -> bool:
    """Whether the lock at ``path`` (of environment ``name``) records every one of ``stacks``: only then is the
    foreign lock a copy. A stale or empty one put back (a first lock from git, say) is no record of them."""
    if not path.is_file():
        return False
    try:
        sibling = read_lock_file(path, name, of_environment=False)
    except ConfigError:
        return False
    return set(stacks) <= set(sibling.snapshot)


def _same_place(env: Environment, old: Lock | None, account: str, region: str) -> None:
    """Refuse a lock read in another account or region than the previous lock's.

    There every stack of the environment is missing, and the lock would record them gone.
    """
    if old is None:
        return
    for what, was, now in (("account", old.account, account), ("region", old.region, region)):
        if was is not None and was != now:
            raise CliError(
                f"{lock_path(env)} was read in {what} {was}, these credentials are for {what} {now}: the stacks "
                f"recorded there would all look destroyed. Use credentials (--profile) and --region for {what} "
                f"{was}",
                EXIT_FAILED,
            )


def _gone(env: Environment, source: LockSource, gone: list[str], accept: tuple[str, ...]) -> list[str]:
    """The stacks gone since the last lock, each named by ``--accept``; refuse any other.

    A stack is counted gone only when CloudFormation says so (a ``deployed`` read): the working
    tree (``--from-templates``) dropping a stack says nothing about what is deployed.
    """
    if not gone:
        return []
    if source == "templates":
        raise CliError(
            f"the templates drop {', '.join(gone)}, which {lock_path(env)} records; only a lock read from the deployed "
            f"stacks ('mlcluster lock {env.name}' with credentials) records a stack gone",
            EXIT_FAILED,
        )
    missing = [stack for stack in gone if stack not in accept]
    if missing:
        raise CliError(
            f"{', '.join(missing)} recorded in {lock_path(env)} is not deployed in this account and region (destroyed, "
            "or wrong credentials or region). Check that it was destroyed on purpose and where its retained data "
            f"is ('mlcluster status {env.name}'), then repeat the command with "
            + " ".join(f"--accept {stack}" for stack in missing),
            EXIT_FAILED,
        )
    return [f"{stack} gone (destroyed)" for stack in gone]


#: What each existing lock says, for the refusal of ``--from-templates`` over it.
_LOCK_KINDS = {
    "deployed": "was read from the deployed stacks",
    "new": "declares that nothing is deployed ('--new'), read from the account",
}


def _templates_may_replace(env: Environment, old: Lock | None) -> None:
    """Refuse ``--from-templates`` over any lock but one the templates wrote, or while allowances are in flight.

    Over a lock of the templates it refuses what ``settle`` and ``_gone`` refuse. Over a format-1 lock
    (every environment deployed before 0.2.0, loaded as None), a lock read from the deployed stacks or a
    ``--new`` lock, it would record the working tree as deployed although it never was, and the next
    synth's guard would compare with that: refused, with the way. While ``<env>.allowances.json`` exists a
    synth let a replacement through that may be deployed: only the deployed stacks tell, so refused too.
    Over no lock at all, the caller proves nothing is deployed first (:func:`_nothing_deployed`).
    """
    path = lock_path(env)
    record = in_flight_path(env)
    if record.exists():
        raise CliError(
            f"{record} records replacements a synth allowed since {path} was written; they may be deployed, and "
            "--from-templates would forget them without reading what is. Run "
            f"'mlcluster lock {env.name}' with credentials for its account (it reads the deployed stacks and "
            "removes the record)",
            EXIT_FAILED,
        )
    if old is None and not path.exists():
        return
    if old is not None and old.source == "templates":
        return
    what = _LOCK_KINDS[old.source] if old is not None else "is format 1 (written before 0.2.0 for a deployed one)"
    raise CliError(
        f"{path} {what}; --from-templates would record the working tree as deployed although it never was, and "
        "the guard would then let through every change the templates make. Run "
        f"'mlcluster lock {env.name}' with credentials for its account (it reads the deployed stacks), and "
        "name with --accept each data-bearing change it reports that you mean to record",
        EXIT_FAILED,
    )


def _nothing_deployed(env: Environment, region: str | None, profile: str | None, why: str) -> None:
    """Refuse unless CloudFormation has no stack of ``env`` (``DescribeStacks`` of each); ``why`` says who asks.

    A first lock from the templates (or ``--new``) declares the working tree's state the deployed one:
    over deployed stacks the guard would then let through every edit the templates already make.
    """
    cfn, _, ask_account, chosen = _clients(env, region, profile)
    snapshot = deployed_snapshot(cfn, env)
    if snapshot:
        raise CliError(
            f"{why} declares that nothing of {env.name} is deployed, but account {ask_account()} in {chosen} has "
            f"{', '.join(sorted(snapshot))}. Run 'mlcluster lock {env.name}' to record them",
            EXIT_FAILED,
        )


@click.command("lock")
@click.argument("env")
@_environments_option
@region_options
@click.option("--new", "new", is_flag=True, help="Declare that nothing of ENV is deployed (a first lock).")
@click.option(
    "--from-templates",
    is_flag=True,
    help="Record the synthesized working tree as deployed, without AWS (examples, tests; not a deployed environment).",
)
@click.option(
    "--accept",
    multiple=True,
    metavar="RESOURCE",
    help="Record a data-bearing change the environment file did not allow (a construct path, a destroyed stack, "
    "or termination-protection:STACK, as printed).",
)
@json_option
def lock(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    new: bool,
    from_templates: bool,
    accept: tuple[str, ...],
    as_json: bool,
) -> None:
    """Write ENV's lock file from its deployed stacks (after a deploy; commit it)."""
    folder = environments_folder(environments)
    loaded = load_one(folder, env)
    if new and from_templates:
        raise CliError("--new and --from-templates exclude each other", EXIT_USAGE)
    if new and lock_path(loaded).exists():
        raise CliError(
            f"{lock_path(loaded)} exists: --new declares a first lock and would forget what it records. Run "
            f"'mlcluster lock {loaded.name}' with credentials for its account to record what is deployed",
            EXIT_FAILED,
        )
    # --from-templates never replaces another environment's lock: only the deployed stacks say what ENV has.
    old = _previous_lock(loaded, announce=not from_templates, replacing=not from_templates)
    source: LockSource
    account: str | None = None
    chosen: str | None = None
    if from_templates:
        _templates_may_replace(loaded, old)
        if not lock_path(loaded).exists():
            _nothing_deployed(loaded, region, profile, "a first lock --from-templates")
        with tempfile.TemporaryDirectory(prefix="mlcluster-lock-") as tmp:
            snapshot = snapshot_from_assembly(synthesize(folder, loaded.name, Path(tmp)), loaded.name)
        source = "templates"
    else:
        cfn, _, ask_account, chosen = _clients(loaded, region, profile)
        account = ask_account()
        _same_place(loaded, old, account, chosen)
        snapshot = deployed_snapshot(cfn, loaded)
        source = "new" if new else "deployed"
        if new and snapshot:
            raise CliError(
                f"--new declares that nothing of {loaded.name} is deployed, but account {account} in {chosen} has "
                f"{', '.join(sorted(snapshot))}. Run 'mlcluster lock {loaded.name}' to record them",
                EXIT_FAILED,
            )
    gone = sorted(set(old.snapshot) - set(snapshot)) if old is not None else []
    gone_accepted = _gone(loaded, source, gone, accept)
    used, accepted = settle(loaded, old, snapshot, accept)
    # A used allowance still in the file stays used: forgotten, it would let the next change of its resource through.
    still = set(loaded.config.retention.allow_replacement) & set(old.allowances_used if old is not None else ())
    used = sorted({*used, *still})
    accepted += gone_accepted
    # Earlier acceptances stay in the record: a rewritten lock (--from-templates included) must not forget them.
    recorded = sorted({*(old.accepted if old is not None else ()), *accepted})
    path = write_lock(loaded, Lock(snapshot, source, tuple(used), tuple(recorded), account=account, region=chosen))
    # What the synths since the last lock allowed is now read from what is deployed (the used allowances).
    in_flight_path(loaded).unlink(missing_ok=True)
    count = sum(len(state.resources) for state in snapshot.values())
    if as_json:
        echo_json(
            {
                "lock_file": str(path),
                "source": source,
                "stacks": len(snapshot),
                "resources": count,
                "gone": gone,
                "accepted": list(accepted),
                "allowances_used": list(used),
            }
        )
        return
    click.echo(f"{path}: {len(snapshot)} stacks, {count} resources locked ({source})")
    if gone:
        click.echo(
            f"stacks gone since the last lock: {', '.join(gone)}; what they retained is still billed "
            f"('mlcluster status {loaded.name}' lists it)"
        )
    for line in accepted:
        click.echo(f"accepted: {line}")
    if used:
        click.echo(
            "allowances used by this deploy: "
            + ", ".join(used)
            + "; remove them from retention.allow_replacement (the next synth refuses them)"
        )


def stack_policy(template: dict[str, Any], stack_name: str, allow: tuple[str, ...]) -> dict[str, Any]:
    """Allow every update but ``Update:Replace`` and ``Update:Delete`` of the data-bearing resources.

    ``allow`` lists logical ids to leave out of the deny (a deliberate replacement).
    """
    stack_part = stack_name.rsplit("-", 1)[-1]

    def path(lid: str, resource: dict[str, Any]) -> str:
        """The resource's construct path below the stage (CDK's metadata), or the stack's part and its id."""
        cdk_path = str(resource.get("Metadata", {}).get("aws:cdk:path", ""))
        return cdk_path.split("/", 1)[1] if "/" in cdk_path else f"{stack_part}/{lid}"

    protected = sorted(
        lid
        for lid, resource in template.get("Resources", {}).items()
        if is_data_bearing(str(resource.get("Type")), path(lid, resource)) and lid not in allow
    )
    statements: list[dict[str, Any]] = [{"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"}]
    if protected:
        statements.append(
            {
                "Effect": "Deny",
                "Action": ["Update:Replace", "Update:Delete"],
                "Principal": "*",
                "Resource": [f"LogicalResourceId/{lid}" for lid in protected],
            }
        )
    return {"Statement": statements}


@click.command("protect")
@click.argument("env")
@_environments_option
@region_options
@click.option("--allow", multiple=True, help="Logical id to leave unprotected for one deliberate replacement.")
@json_option
def protect(
    env: str, environments: Path | None, region: str | None, profile: str | None, allow: tuple[str, ...], as_json: bool
) -> None:
    """Set a stack policy on ENV's deployed stacks denying replacement or deletion of data.

    Then refuse a lock written --from-templates while stacks of ENV are deployed (it never read them).
    """
    # protect runs with credentials before every deploy in the documented workflow: the refusal stops the
    # deploy, as the synth's guard would let through every change such a lock's templates already make.
    loaded = load_one(environments_folder(environments), env)
    locked = _previous_lock(loaded, announce=False)
    cfn, _, _, _ = _clients(loaded, region, profile)
    protected = apply_protection(cfn, loaded, allow, quiet=as_json)
    if as_json:
        echo_json({"protected": protected})
    if not protected:
        raise CliError(
            f"protect: nothing protected: no stack of {loaded.name} is deployed in {cfn.meta.region_name}\n"
            "  what to do: deploy first (`npx cdk deploy`), or check the account and region",
            EXIT_FAILED,
        )
    if locked is not None and locked.source == "templates":
        raise CliError(
            f"{lock_path(loaded)} was written from the templates (--from-templates), but "
            f"{', '.join(sorted(protected))} are deployed: the synth's guard compares with templates that were "
            "never read from them. Run "
            f"'mlcluster lock {loaded.name}' with credentials for its account (it reads the deployed stacks; name "
            "with --accept each data-bearing change it reports that you mean to record), commit the lock, then "
            "deploy",
            EXIT_FAILED,
        )


def apply_protection(
    cfn: Any, env: Environment, allow: tuple[str, ...], *, quiet: bool = False
) -> dict[str, list[str]]:
    """SetStackPolicy on each deployed stack of ``env`` from its deployed template.

    Returns the logical ids protected per stack; prints one line per stack unless ``quiet``.
    """
    from botocore.exceptions import ClientError

    protected: dict[str, list[str]] = {}
    for part in STACKS:
        name = f"{env.name}-{part}"
        try:
            body = cfn.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        except ClientError as error:
            if "does not exist" in str(error.response.get("Error", {}).get("Message", "")):
                continue
            with aws_errors(f"GetTemplate for {name}"):
                raise
        template = body if isinstance(body, dict) else json.loads(body)
        policy = stack_policy(template, name, allow)
        with aws_errors(f"SetStackPolicy on {name}"):
            cfn.set_stack_policy(StackName=name, StackPolicyBody=json.dumps(policy))
        denied = policy["Statement"][1]["Resource"] if len(policy["Statement"]) > 1 else []
        protected[name] = [str(r).removeprefix("LogicalResourceId/") for r in denied]
        if not quiet:
            click.echo(f"{name}: {len(denied)} data-bearing resource(s) protected from replacement and deletion")
    return protected
