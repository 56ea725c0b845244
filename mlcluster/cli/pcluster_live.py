"""``preflight`` check ``pcluster-validators``: ParallelCluster's own validators, live, on the deployed values.

The cluster configuration is rendered the way the Cluster stack renders it
(:func:`mlcluster.pcluster.render.render_cluster_config`), with the values the
Network and Storage stacks created read from their outputs (CloudFormation
DescribeStacks on ``<env>-Network`` and ``<env>-Storage``: ``PrivateSubnet<n>Id``,
``PublicSubnetId``, ``SecurityGroupId``, ``VpcId``, ``LustreFileSystemId``,
``OpenZfsRootVolumeId``; the VPC's CIDR from DescribeVpcs). Before those stacks
are deployed the check is skipped and says so (a WARNING row, not an error).

What the Cluster stack itself creates (the node-script bucket and its
scripts, the node policies, the permissions boundary, capacity reservation
groups) does not exist before that stack deploys: those entries are left out
of the configuration the validators see, and the row names them.

The validators run in a Python that has ``aws-parallelcluster`` (it pins CDK v1,
so it cannot share mlcluster's environment), found in this order:
``$MLCLUSTER_PCLUSTER_PYTHON``; the Python of a ``pcluster`` command on the
absolute entries of ``PATH`` (``pipx install aws-parallelcluster``);
``.venv-pcluster/bin/python`` beside mlcluster's own source tree (a checkout
after ``make test``; never the current folder). Each must be an executable
owned by the operator or root that no one else can write (:func:`find_python`):
it runs with the operator's credentials. That Python runs
``mlcluster/pcluster/live_validate.py`` with the operator's credentials and
region in its environment; each validator failure becomes a row at its own
level (ERROR, WARNING; INFO as a passing row) with the validator's message.

Nothing here imports the CDK constructs: the CLI starts fast.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli.errors import EXIT_AWS, CliError

if TYPE_CHECKING:
    from mlcluster.cli.preflight import Context, Result

CHECK = "pcluster-validators"
KEY = "cluster.pcluster"
#: The variable naming a Python that has aws-parallelcluster.
PYTHON_VARIABLE = "MLCLUSTER_PCLUSTER_PYTHON"
#: The checkout's own ParallelCluster Python (``make test`` makes it); absent for a wheel install.
CHECKOUT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-pcluster" / "bin" / "python"
#: The script that runs the validators (it imports nothing from mlcluster).
RUNNER = Path(__file__).resolve().parents[1] / "pcluster" / "live_validate.py"
#: A stand-in for the Cluster stack's own resources; entries holding it are left out before validating.
CLUSTER_OWNED = "mlcluster-cluster-stack-resource"
#: Stack states whose outputs are those of a finished deployment.
DEPLOYED = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE")
#: The validators make many calls; a run that takes longer than this is an error row.
TIMEOUT_SECONDS = 900
#: The runner's exit status for "this Python has no aws-parallelcluster" (live_validate.EXIT_NO_PCLUSTER).
EXIT_NO_PCLUSTER = 3
SKIPPED_STACKS = "skipped: needs the Network and Storage stacks deployed; run after deploying them"


def install_hint(version: str) -> str:
    """How to get a Python with ParallelCluster ``version``'s validators."""
    return (
        f"install ParallelCluster in its own environment (it cannot share mlcluster's): "
        f"`pipx install aws-parallelcluster=={version}`, or "
        f"`python3 -m venv ~/.venv-pcluster && ~/.venv-pcluster/bin/pip install aws-parallelcluster=={version}` "
        f"and set {PYTHON_VARIABLE}=~/.venv-pcluster/bin/python"
    )


def _head(path: Path) -> bytes:
    """The first bytes of ``path``: enough for a launcher's first two lines."""
    with path.open("rb") as file:
        return file.read(4096)


def _unsafe(path: Path) -> str | None:
    """Why ``path`` may not run with the operator's credentials, or None when it may.

    It must be absolute, an executable file owned by this user or root and
    writable by no one else, in a folder of the same kind; when it is a link
    (a venv's ``python``), the file it resolves to and that file's folder too.
    Otherwise anyone who can write the file or its folder chooses what runs.
    """
    if not path.is_absolute():
        return "is not an absolute path"
    if not path.is_file() or not os.access(path, os.X_OK):
        return "is not an executable file"
    target = path.resolve()
    for item in dict.fromkeys((path.parent, target, target.parent)):
        try:
            info = item.stat()
        except OSError as error:
            return f"cannot be checked ({error})"
        if info.st_uid not in (os.getuid(), 0):
            return f"is unsafe: {item} is owned by uid {info.st_uid}, not by you or root"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"is unsafe: {item} is writable by group or others (mode {stat.filemode(info.st_mode)})"
    return None


def _named_python(text: str) -> Path | None:
    """``text`` as an interpreter path when it is absolute and names a python* program."""
    path = Path(text)
    return path if path.is_absolute() and path.name.startswith("python") else None


def command_python(command: Path) -> Path | None:
    """The Python a ``pcluster`` command runs, or None when it cannot be told safely.

    In order: a real (non-script) ``python`` beside the command's resolved file
    (a venv or pipx's ``venvs/<name>/bin``; a pyenv or asdf shim folder's
    ``python`` is itself a script, so it does not count); the first line's
    interpreter when it is absolute and named ``python*`` (``#!/usr/bin/env
    python`` is not); pip's launcher for a path with spaces or too long,
    ``#!/bin/sh`` then ``'''exec' "<python>" "$0" "$@"``.
    """
    try:
        beside = command.resolve().parent / "python"
        if beside.is_file() and _head(beside)[:2] != b"#!":
            return beside
        lines = _head(command).split(b"\n")
    except OSError:
        return None
    first = lines[0].decode(errors="replace")
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    found = _named_python(words[0]) if words else None
    if found is not None:
        return found
    second = lines[1].decode(errors="replace") if len(lines) > 1 else ""
    if words == ["/bin/sh"] and second.startswith("'''exec' "):
        try:
            tokens = shlex.split(second)
        except ValueError:
            return None
        if len(tokens) > 1 and tokens[0] == "exec":
            return _named_python(tokens[1])
    return None


def find_python(environ: Mapping[str, str] | None = None) -> Path | str | None:
    """The Python to run the validators: the variable, a ``pcluster`` command's, or the checkout's ``.venv-pcluster``.

    Only absolute ``PATH`` entries are searched (an empty or relative entry
    would find a ``pcluster`` in whatever folder the operator stands in), and
    the current folder is never looked in: a file planted there would run with
    the operator's credentials. The first source present decides: a Path to run,
    a message (a WARNING row) when its Python cannot be told or is unsafe
    (:func:`_unsafe`), or None when there is none at all.

    :raises CliError: when :data:`PYTHON_VARIABLE` names a program that is missing or unsafe.
    """
    env = os.environ if environ is None else environ
    given = env.get(PYTHON_VARIABLE)
    if given:
        path = Path(given).expanduser()
        problem = _unsafe(path)
        if problem:
            raise CliError(f"{PYTHON_VARIABLE}={given} {problem}: point it at a Python of your own", EXIT_AWS)
        return path
    search = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if Path(p).is_absolute())
    # An empty search path finds nothing (shutil.which returns None for path="", never the current folder).
    command = shutil.which("pcluster", path=search)
    if command is not None:
        python = command_python(Path(command))
        if python is None:
            return (
                f"skipped: cannot tell which Python the pcluster command {command} runs "
                f"(a shim, or an interpreter not named by an absolute python* path): set {PYTHON_VARIABLE}"
            )
        problem = _unsafe(python)
        if problem:
            return f"skipped: {python}, the Python of the pcluster command {command}, {problem}"
        return python
    local = CHECKOUT_PYTHON
    if not local.exists():
        return None
    problem = _unsafe(local)
    return f"skipped: {local} {problem}" if problem else local


def _stack_outputs(ctx: Context, suffix: str) -> dict[str, str] | None:
    """The outputs of ``<env>-<suffix>``, or None when it is not deployed (absent, or not in a finished state)."""
    from botocore.exceptions import ClientError

    try:
        stacks = ctx.client("cloudformation").describe_stacks(StackName=f"{ctx.env.name}-{suffix}")["Stacks"]
    except ClientError as error:
        if "does not exist" not in str(error.response.get("Error", {}).get("Message", "")):
            raise
        return None
    if not stacks or stacks[0].get("StackStatus") not in DEPLOYED:
        return None
    return {o["OutputKey"]: str(o.get("OutputValue", "")) for o in stacks[0].get("Outputs", [])}


def deployed_config(ctx: Context) -> tuple[dict[str, Any], list[str]] | str:
    """The cluster configuration with the deployed values, and the key paths left out; or why it cannot be made."""
    from mlcluster.config.observability import prometheus_enabled
    from mlcluster.pcluster.checks import network_zone_labels
    from mlcluster.pcluster.render import DeployInputs, ZoneSubnet, render_cluster_config

    env = ctx.env
    cfg = env.config.cluster.pcluster
    assert cfg is not None
    network, storage = _stack_outputs(ctx, "Network"), _stack_outputs(ctx, "Storage")
    if network is None or storage is None:
        return SKIPPED_STACKS
    labels = network_zone_labels(env.config.network)
    subnets = []
    for index, label in enumerate(labels):
        subnet = network.get(f"PrivateSubnet{index + 1}Id")
        if not subnet:
            return f"{env.name}-Network has no output PrivateSubnet{index + 1}Id: deploy it again (`cdk deploy`)"
        subnets.append(ZoneSubnet(zone=label, subnet_id=subnet))
    wanted = {"SecurityGroupId": network, "VpcId": network, "LustreFileSystemId": storage}
    if cfg.shared_storage.home_on_openzfs:
        wanted["OpenZfsRootVolumeId"] = storage
    missing = [key for key, outputs in wanted.items() if not outputs.get(key)]
    if missing:
        return f"outputs {', '.join(missing)} missing from the Network/Storage stacks: deploy them again (`cdk deploy`)"
    vpcs = ctx.client("ec2").describe_vpcs(VpcIds=[network["VpcId"]])["Vpcs"]
    if not vpcs:
        return f"the VPC {network['VpcId']} of {env.name}-Network is gone: deploy the Network stack again"
    owned = CLUSTER_OWNED
    inputs = DeployInputs(
        region=ctx.region,
        private_subnets=tuple(subnets),
        public_subnet_id=network.get("PublicSubnetId") or None,
        security_group_ids=(network["SecurityGroupId"],),
        vpc_cidr=str(vpcs[0]["CidrBlock"]),
        lustre_file_system_id=storage["LustreFileSystemId"],
        openzfs_volume_id=storage.get("OpenZfsRootVolumeId") if cfg.shared_storage.home_on_openzfs else None,
        node_script_bucket=owned,
        node_script_policy_arn=f"arn:aws:iam::{owned}" if cfg.login_nodes is not None else None,
        session_manager_policy_arn=f"arn:aws:iam::{owned}"
        if cfg.head_node.ssm or any(q.ssm for q in cfg.queues)
        else None,
        collector_policy_arn=f"arn:aws:iam::{owned}" if prometheus_enabled(env.config) else None,
        permissions_boundary_arn=f"arn:aws:iam::{owned}",
        reservation_group_arns={g.name: f"arn:aws:resource-groups:{owned}" for g in cfg.capacity_reservation_groups},
        log_retention_days=env.config.retention.log_retention_days,
        retain_logs=env.config.retention.keeps_data,
        retain_home=env.config.retention.keeps_data,
        tags={"mlcluster:environment": env.name, **env.config.tags},
        exporters=prometheus_enabled(env.config),
    )
    left_out: list[str] = []
    config = without_cluster_owned(render_cluster_config(cfg, inputs), "", left_out)
    return config, left_out


def _owned(value: Any) -> bool:
    return isinstance(value, str) and CLUSTER_OWNED in value


def without_cluster_owned(value: Any, path: str, left_out: list[str]) -> Any:
    """``value`` without the entries that name a Cluster-stack resource (:data:`CLUSTER_OWNED`).

    A list item that holds the stand-in directly (an ``S3Access`` entry, an
    ``OnNodeConfigured`` step, an ``AdditionalIamPolicies`` entry) is dropped
    whole; any other key whose value is the stand-in (``PermissionsBoundary``)
    is dropped alone; a container left empty by that is dropped too. The key
    path of each dropped entry, list indexes removed, is added once to ``left_out``.
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            where = f"{path}.{key}".lstrip(".")
            kept = None if _owned(item) else without_cluster_owned(item, where, left_out)
            if kept is None or (isinstance(kept, (dict, list)) and not kept and item):
                if _owned(item) and where not in left_out:
                    left_out.append(where)
                continue
            out[key] = kept
        return out
    if isinstance(value, list):
        items = []
        for item in value:
            if _owned(item) or (isinstance(item, dict) and any(_owned(v) for v in item.values())):
                if path not in left_out:
                    left_out.append(path)
                continue
            items.append(without_cluster_owned(item, path, left_out))
        return items
    return value


def run_validators(python: Path, cluster_name: str, config: dict[str, Any], environ: dict[str, str]) -> dict[str, Any]:
    """Run :data:`RUNNER` under ``python``; its JSON answer, or :class:`CliError` when it failed."""
    try:
        proc = subprocess.run(
            [str(python), str(RUNNER)],
            input=json.dumps({"cluster_name": cluster_name, "config": config}),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            env=environ,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CliError(
            f"ParallelCluster's validators ran longer than {TIMEOUT_SECONDS} s; try again", EXIT_AWS
        ) from None
    except OSError as error:
        raise CliError(f"cannot run {python}: {error}", EXIT_AWS) from None
    tail = " ".join(proc.stderr.strip().splitlines()[-3:])
    if proc.returncode == EXIT_NO_PCLUSTER:
        raise CliError(f"{python} has no aws-parallelcluster package", EXIT_AWS)
    if proc.returncode != 0:
        raise CliError(f"ParallelCluster's validators failed under {python} (exit {proc.returncode}): {tail}", EXIT_AWS)
    try:
        answer: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise CliError(f"ParallelCluster's validators printed no JSON under {python}: {tail}", EXIT_AWS) from None
    return answer


def check_pcluster_validators(ctx: Context, child_environ: Callable[[], dict[str, str]]) -> list[Result]:
    """ParallelCluster: its own schema and validators, live, on the configuration with the deployed values."""
    from mlcluster.cli.preflight import Result

    pc = ctx.env.config.cluster.pcluster
    if ctx.env.config.cluster.backend != "pcluster" or pc is None:
        return []
    made = deployed_config(ctx)
    if isinstance(made, str):
        return [Result(CHECK, "skipped", "WARNING", KEY, made)]
    config, left_out = made
    python = find_python()
    if python is None:
        return [
            Result(
                CHECK, "skipped", "WARNING", KEY, f"skipped: no aws-parallelcluster found; {install_hint(pc.version)}"
            )
        ]
    if isinstance(python, str):
        return [Result(CHECK, "skipped", "WARNING", KEY, f"{python}; {install_hint(pc.version)}")]
    click.echo(f"running ParallelCluster's validators under {python}...", err=True)
    try:
        answer = run_validators(python, ctx.env.cluster_name, config, child_environ())
    except CliError as error:
        if "has no aws-parallelcluster package" in error.message:
            return [Result(CHECK, "skipped", "WARNING", KEY, f"skipped: {error.message}; {install_hint(pc.version)}")]
        raise
    return results_of(answer, pc.version, left_out, python)


def results_of(answer: Mapping[str, Any], version: str, left_out: list[str], python: Path) -> list[Result]:
    """Rows for the runner's answer: each schema error and validator failure at its level, or one pass row.

    Every row ends with the interpreter that ran the validators, so the operator
    sees whose answer it is.
    """
    return [replace(row, message=f"{row.message} (run under {python})") for row in _rows(answer, version, left_out)]


def _rows(answer: Mapping[str, Any], version: str, left_out: list[str]) -> list[Result]:
    from mlcluster.cli.preflight import Result

    installed = str(answer.get("version", "?"))
    rows: list[Result] = []
    if installed != version:
        rows.append(
            Result(
                CHECK,
                "fail",
                "WARNING",
                "cluster.pcluster.version",
                f"these are ParallelCluster {installed}'s validators, the cluster uses {version}: "
                + install_hint(version),
            )
        )
    for path, message in answer.get("schema", []):
        rows.append(Result(CHECK, "fail", "ERROR", KEY, f"ParallelCluster schema: {path}: {message}"))
    for failure in answer.get("failures", []):
        text = f"{failure.get('validator')}: {failure.get('message')}"
        level = str(failure.get("level"))
        if level == "ERROR":
            rows.append(Result(CHECK, "fail", "ERROR", KEY, text))
        elif level == "WARNING":
            rows.append(Result(CHECK, "fail", "WARNING", KEY, text))
        else:
            rows.append(Result(CHECK, "pass", "WARNING", KEY, f"{level}: {text}"))
    if not any(r.status == "fail" and r.level == "ERROR" for r in rows):
        unchecked = f"; not checked (the Cluster stack creates them): {', '.join(left_out)}" if left_out else ""
        rows.append(
            Result(CHECK, "pass", "ERROR", KEY, f"ParallelCluster {installed} validators: no errors{unchecked}")
        )
    return rows
