"""``mlcluster status``: stacks, cluster, nodes, FSx for Lustre and its DRAs on one screen.

It also lists what of the environment is left in the account outside the app
(``mlcluster.cli.orphans``): stacks dropped from it and retained resources,
each with what it bills and how to remove or adopt it; any is a problem (exit 1).

:func:`collect` gathers everything into plain data (what ``--json`` prints);
:func:`render` draws it as rich tables. ``--watch`` redraws on an interval.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mlcluster.cli.context import STACK_SUFFIXES, Target, echo_json, environment_options, json_option
from mlcluster.cli.errors import EXIT_FAILED, CliError, aws_errors
from mlcluster.cli.nodes import Node, describe_hyperpod, hyperpod_nodes, pcluster_nodes
from mlcluster.cli.orphans import orphan_resources, orphan_stacks
from mlcluster.cli.progress import progress
from mlcluster.config.observability import observability_enabled
from mlcluster.lifecycle.hyperpod import PATCH_BACKUP_PREFIX, SCHEDULED_BACKUP_FOLDER
from mlcluster.pcluster.states import State, cluster_stack_state, node_state

if TYPE_CHECKING:  # rich is imported when a table is drawn, not when the command starts
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

#: Outputs worth showing, per stack, in this order (the SSM command outputs are `mlcluster ssh`'s job).
USEFUL_OUTPUTS = {
    "Cluster": ("ClusterName", "HeadNodePrivateIp", "ValidationMessages"),
    "Storage": (
        "DataBucketName",
        "LustreFileSystemId",
        "LustreDnsName",
        "LustreMountName",
        "OpenZfsDnsName",
        "AccountingDatabaseEndpoint",
    ),
    "Network": ("VpcId", "SecurityGroupId"),
    "Observability": ("DashboardUrl", "ClusterDashboardUrl", "GrafanaUrl", "AlarmTopicArn"),
}
TASK_KINDS = {
    "IMPORT_METADATA_FROM_REPOSITORY": "import",
    "EXPORT_TO_REPOSITORY": "export",
    "RELEASE_DATA_FROM_FILESYSTEM": "release",
    "AUTO_RELEASE_DATA": "auto-release",
}
HEALTHY_STACK = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"}
#: A HyperPod controller's daily copy older than this needs attention (as the Observability alarm: two days).
DAILY_COPY_LATE = timedelta(hours=48)
DAILY_COPY_LATE_TEXT = "over 48 h"
HEALTHY_NODE = {"Running", "running"}


def _stacks(target: Target) -> list[dict[str, Any]]:
    wanted = STACK_SUFFIXES if target.backend != "none" else STACK_SUFFIXES[:2]
    if observability_enabled(target.environment.config):  # its outputs are the dashboard links
        wanted = (*wanted, "Observability")
    stacks: list[dict[str, Any]] = []
    for suffix in wanted:
        stack = target.describe_stack(suffix)
        if stack is None:
            stacks.append(
                {
                    "stack": target.stack_name(suffix),
                    "status": "NOT_DEPLOYED",
                    "last_change": None,
                    "reason": "",
                    "outputs": {},
                }
            )
            continue
        outputs = target.remember_outputs(suffix, stack)
        stacks.append(
            {
                "stack": stack["StackName"],
                "status": stack["StackStatus"],
                "last_change": stack.get("LastUpdatedTime") or stack.get("CreationTime"),
                "reason": stack.get("StackStatusReason", ""),
                "outputs": {k: outputs[k] for k in USEFUL_OUTPUTS[suffix] if outputs.get(k)},
            }
        )
    return stacks


def _hyperpod(target: Target) -> dict[str, Any]:
    described = describe_hyperpod(target)
    arn = str(described["ClusterArn"])
    nodes = hyperpod_nodes(target, arn)
    groups = []
    for group in described.get("InstanceGroups", []):
        name = group["InstanceGroupName"]
        states = Counter(n.status for n in nodes if n.group == name)
        groups.append(
            {
                "group": name,
                "instance_type": group.get("InstanceType", ""),
                "current": group.get("CurrentCount", 0),
                "target": group.get("TargetCount", 0),
                "status": group.get("Status", ""),
                "nodes": dict(states),
            }
        )
    name = str(described["ClusterName"])
    return {
        "backend": "hyperpod",
        "name": name,
        "status": described["ClusterStatus"],
        "failure": described.get("FailureMessage", ""),
        "groups": groups,
        "failing_nodes": [n.as_dict() for n in nodes if n.status not in HEALTHY_NODE],
        "log_group": f"/aws/sagemaker/Clusters/{name}/{arn.rsplit('/', 1)[-1]}",
        "daily_copy": _daily_copy(target, described.get("CreationTime")),
    }


def _daily_copy(target: Target, created: Any) -> dict[str, Any] | None:
    """The newest daily copy of the controller's Slurm state in the patch backup bucket, and whether it is late.

    A copy is complete when its ``SHA256SUMS`` is there (``mlcluster-backup scheduled`` uploads it last).
    It is late when the newest is older than ``DAILY_COPY_LATE``, or there is none and the cluster is older
    than that. None when the environment has no daily copy (``lifecycle.scheduled_backup: false``).
    """
    hyperpod = target.environment.config.cluster.hyperpod
    if hyperpod is None or not hyperpod.lifecycle.scheduled_backup:
        return None
    bucket = target.output("Cluster", "PatchBackupBucketName")
    prefix = f"{PATCH_BACKUP_PREFIX}{target.environment.cluster_name}/{SCHEDULED_BACKUP_FOLDER}"
    newest: datetime | None = None
    key = ""
    with aws_errors(f"ListObjectsV2 s3://{bucket}/{prefix}"):
        for page in target.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                # The newest by time, then by key: the answer never depends on the order S3 lists a tie in.
                if str(item["Key"]).endswith("/SHA256SUMS") and (
                    newest is None or (item["LastModified"], str(item["Key"])) > (newest, key)
                ):
                    newest, key = item["LastModified"], str(item["Key"])
    now = datetime.now(UTC)
    since = newest if newest is not None else created if isinstance(created, datetime) else None
    return {
        "where": f"s3://{bucket}/{prefix}",
        "last": newest,
        "last_copy": f"s3://{bucket}/{key}" if key else "",
        "age_hours": None if newest is None else round((now - newest).total_seconds() / 3600, 1),
        "late": since is not None and now - since > DAILY_COPY_LATE,
    }


def _node(node: Node) -> State:
    """The decision for one ParallelCluster node by its instance state (the head node is held to ``running``)."""
    return node_state(node.status, head_node=node.group == "head-node")


def _pcluster(target: Target) -> dict[str, Any]:
    name = target.output("Cluster", "ClusterName")
    # ParallelCluster builds the cluster as a CloudFormation stack named after the cluster.
    from botocore.exceptions import ClientError

    with aws_errors(f"DescribeStacks for ParallelCluster stack {name}"):
        try:
            status = target.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
        except ClientError as error:
            if "does not exist" not in str(error.response.get("Error", {}).get("Message", "")):
                raise
            status = "NOT_FOUND"
    missing = State("fail", f"ParallelCluster's stack {name} does not exist")
    state = missing if status == "NOT_FOUND" else cluster_stack_state(status)
    nodes = pcluster_nodes(target)
    groups = []
    for group in sorted({n.group for n in nodes}):
        mine = [n for n in nodes if n.group == group]
        groups.append(
            {
                "group": group,
                "instance_type": mine[0].instance_type,
                "current": sum(n.status in HEALTHY_NODE for n in mine),
                "target": len(mine),
                "status": "",
                "nodes": dict(Counter(n.status for n in mine)),
            }
        )
    return {
        "backend": "pcluster",
        "name": name,
        "status": status,
        "decision": state.decision,
        "failure": "" if state.decision == "ready" else state.reason,
        "groups": groups,
        "failing_nodes": [
            {**n.as_dict(), "message": n.message or _node(n).reason} for n in nodes if _node(n).decision == "fail"
        ],
        # Starting and terminating compute nodes: a dynamic fleet scaling, shown for information, no problem.
        "scaling_nodes": [
            {**n.as_dict(), "message": n.message or _node(n).reason} for n in nodes if _node(n).decision == "wait"
        ],
        "log_group": f"/aws/parallelcluster/{name}-<timestamp> (head node: slurmctld, clustermgtd; nodes: slurmd)",
    }


def _folders(path: str) -> list[str]:
    """The ``/``-separated names of a path or an S3 URI (``s3://b/p/`` is ``["s3:", "b", "p"]``; ``/`` none)."""
    return [name for name in path.split("/") if name]


def _task_matches(task: dict[str, Any], dra: dict[str, Any]) -> bool:
    """Whether a data repository task reaches into the DRA: it has no paths (the whole file system or bucket),
    or one of them is the DRA's folder, inside it or above it, compared name by name (``data2`` is not in
    ``data``). Export and release tasks name file system paths (relative to the mount point), import tasks
    S3 URIs (FSx's CreateDataRepositoryTask Paths): those are compared with the DRA's repository."""
    paths = task.get("Paths") or []
    if not paths:
        return True
    on_fs, in_s3 = _folders(dra.get("FileSystemPath", "")), _folders(dra.get("DataRepositoryPath", ""))
    for path in paths:
        mine, theirs = (in_s3 if path.startswith("s3://") else on_fs), _folders(path)
        common = min(len(mine), len(theirs))
        if mine[:common] == theirs[:common]:
            return True
    return False


def _pages(call: Callable[..., Mapping[str, Any]], key: str, **request: Any) -> list[dict[str, Any]]:
    """Every item of a paged FSx describe call: botocore has no paginator for DescribeDataRepositoryTasks or
    DescribeDataRepositoryAssociations, whose answers carry ``NextToken`` while more remain (the newest task may
    be on a later page)."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        answer = call(**request, **({"NextToken": token} if token else {}))
        items += answer.get(key, [])
        token = answer.get("NextToken")
        if not token:
            return items


def _lustre(target: Target) -> dict[str, Any] | None:
    fs_id = target.outputs("Storage").get("LustreFileSystemId")
    if not fs_id:
        return None
    fsx = target.client("fsx")
    with aws_errors(f"DescribeFileSystems for {fs_id}"):
        fs = fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]
    lustre = fs.get("LustreConfiguration", {})
    per_tib = lustre.get("PerUnitStorageThroughput")
    capacity = int(fs.get("StorageCapacity", 0))
    by_fs = [{"Name": "file-system-id", "Values": [fs_id]}]
    with aws_errors(f"DescribeDataRepositoryAssociations for {fs_id}"):
        associations = _pages(fsx.describe_data_repository_associations, "Associations", Filters=by_fs)
    with aws_errors(f"DescribeDataRepositoryTasks for {fs_id}"):
        tasks = _pages(fsx.describe_data_repository_tasks, "DataRepositoryTasks", Filters=by_fs)
    tasks.sort(key=lambda t: t.get("CreationTime") or datetime.min, reverse=True)
    dras = []
    for dra in associations:
        task = next((t for t in tasks if _task_matches(t, dra)), None)
        status = (task or {}).get("Status", {})
        dras.append(
            {
                "association": dra["AssociationId"],
                "file_system_path": dra.get("FileSystemPath", ""),
                "repository": dra.get("DataRepositoryPath", ""),
                "lifecycle": dra.get("Lifecycle", ""),
                "failure": dra.get("FailureDetails", {}).get("Message", ""),
                "latest_task": None
                if task is None
                else {
                    "task": task["TaskId"],
                    "type": task["Type"],
                    "lifecycle": task["Lifecycle"],
                    "total": status.get("TotalCount"),
                    "succeeded": status.get("SucceededCount"),
                    "failed": status.get("FailedCount"),
                    "updated": status.get("LastUpdatedTime") or task.get("CreationTime"),
                    "failure": task.get("FailureDetails", {}).get("Message", ""),
                },
            }
        )
    return {
        "file_system": fs_id,
        "lifecycle": fs.get("Lifecycle", ""),
        "failure": fs.get("FailureDetails", {}).get("Message", ""),
        "deployment_type": lustre.get("DeploymentType", ""),
        "capacity_gib": capacity,
        "throughput_mbps_per_tib": per_tib,
        "throughput_mbps": int(capacity / 1000 * per_tib) if per_tib else None,  # FSx counts 1200 GiB as 1.2 TiB
        "dns_name": fs.get("DNSName", ""),
        "mount_name": lustre.get("MountName") or target.outputs("Storage").get("LustreMountName", ""),
        "dras": dras,
    }


def collect(target: Target) -> dict[str, Any]:
    """Everything ``status`` shows, as data; ``healthy`` is false when anything needs attention."""
    stacks = _stacks(target)
    deployed = {s["stack"] for s in stacks if s["status"] != "NOT_DEPLOYED"}
    cluster = None
    if target.backend != "none" and target.stack_name("Cluster") in deployed:
        cluster = _hyperpod(target) if target.backend == "hyperpod" else _pcluster(target)
    lustre = _lustre(target) if target.stack_name("Storage") in deployed else None
    problems = [f"{s['stack']} is {s['status']}" for s in stacks if s["status"] not in HEALTHY_STACK]
    cfn = target.client("cloudformation")
    orphans = orphan_stacks(cfn, target.environment) + orphan_resources(
        cfn, target.client("resourcegroupstaggingapi"), target.client("fsx"), target.environment
    )
    problems += [
        f"{o.get('stack') or o.get('resource')} is left from {target.name} outside the app (bills {o['bills']})"
        for o in orphans
    ]
    if cluster is not None:
        if cluster["backend"] == "pcluster" and cluster["decision"] != "ready":
            problems.append(f"cluster {cluster['name']} is {cluster['status']}: {cluster['failure']}")
        elif cluster["backend"] != "pcluster" and cluster["status"] != "InService":
            problems.append(f"cluster {cluster['name']} is {cluster['status']}")
        problems += [
            f"node {n['instance_id']} ({n['group']}) is {n['status']}" + (f": {n['message']}" if n["message"] else "")
            for n in cluster["failing_nodes"]
        ]
        copy = cluster.get("daily_copy")
        if copy is not None and copy["late"]:
            last = f"the last is {copy['age_hours']} h old" if copy["last"] is not None else "there is none"
            problems.append(
                f"no daily copy of the controller's Slurm state in {copy['where']} for {DAILY_COPY_LATE_TEXT} "
                f"({last}); on the controller: journalctl -u mlcluster-backup-scheduled"
            )
    if lustre is not None:
        if lustre["lifecycle"] != "AVAILABLE":
            problems.append(f"{lustre['file_system']} is {lustre['lifecycle']}")
        problems += [
            f"DRA {d['file_system_path']} is {d['lifecycle']}" for d in lustre["dras"] if d["lifecycle"] != "AVAILABLE"
        ]
    return {
        "environment": target.name,
        "region": target.region,
        "region_source": target.region_source,
        "backend": target.backend,
        "stacks": stacks,
        "cluster": cluster,
        "lustre": lustre,
        "orphans": orphans,
        "next": [f"mlcluster ssh {target.name}", f"mlcluster smoke {target.name}"] if cluster else [],
        "problems": problems,
        "healthy": not problems,
    }


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if isinstance(value, datetime) else str(value or "-")


def _state(text: str, good: set[str]) -> Text:
    from rich.text import Text

    return Text(text, style="green" if text in good else "bold red" if "FAIL" in text.upper() else "yellow")


def _table(title: str, *columns: str, header: bool = True) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=header)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def render(data: dict[str, Any]) -> Group:
    """The status as rich tables."""
    from rich.console import Group
    from rich.text import Text

    parts: list[Any] = [Text(f"{data['environment']} ({data['region']}, backend {data['backend']})", style="bold")]
    stacks = _table("Stacks", "stack", "status", "last change", "reason")
    for s in data["stacks"]:
        stacks.add_row(s["stack"], _state(s["status"], HEALTHY_STACK), _when(s["last_change"]), s["reason"] or "")
    parts.append(stacks)
    cluster = data["cluster"]
    if cluster is not None:
        groups = _table(f"Cluster {cluster['name']}: {cluster['status']}", "group", "instance type", "nodes", "state")
        for g in cluster["groups"]:
            states = ", ".join(f"{count} {state}" for state, count in sorted(g["nodes"].items())) or "-"
            groups.add_row(g["group"], g["instance_type"], f"{g['current']}/{g['target']}", states)
        parts.append(groups)
        if cluster["failure"]:
            parts.append(Text(f"failure: {cluster['failure']}", style="red"))
        if cluster["failing_nodes"]:
            failing = _table("Nodes needing attention", "group", "instance", "state", "message")
            for n in cluster["failing_nodes"]:
                failing.add_row(n["group"], n["instance_id"], _state(n["status"], HEALTHY_NODE), n["message"])
            parts.append(failing)
        if cluster.get("scaling_nodes"):
            scaling = _table("Scaling nodes (no problem)", "group", "instance", "state")
            for n in cluster["scaling_nodes"]:
                scaling.add_row(n["group"], n["instance_id"], n["status"])
            parts.append(scaling)
        parts.append(Text(f"logs: {cluster['log_group']}"))
        copy = cluster.get("daily_copy")
        if copy is not None:
            last = (
                f"last {copy['age_hours']} h ago ({_when(copy['last'])}, {copy['last_copy']})"
                if copy["last"] is not None
                else f"none yet in {copy['where']}"
            )
            parts.append(
                Text(f"daily copy of the controller's Slurm state: {last}", style="red" if copy["late"] else "")
            )
    lustre = data["lustre"]
    if lustre is not None:
        fs = _table(f"FSx for Lustre {lustre['file_system']}", "lifecycle", "type", "capacity", "throughput", "mount")
        throughput = (
            f"{lustre['throughput_mbps']} MB/s ({lustre['throughput_mbps_per_tib']} MB/s/TiB)"
            if lustre["throughput_mbps"] is not None
            else "-"
        )
        fs.add_row(
            _state(lustre["lifecycle"], {"AVAILABLE"}),
            lustre["deployment_type"],
            f"{lustre['capacity_gib']} GiB",
            throughput,
            f"{lustre['dns_name']}@tcp:/{lustre['mount_name']}",
        )
        parts.append(fs)
        if lustre["dras"]:
            dras = _table("Data repository associations", "path", "repository", "lifecycle", "latest task", "progress")
            for d in lustre["dras"]:
                task = d["latest_task"]
                if task is None:
                    latest, progress = "-", "-"
                else:
                    kind = TASK_KINDS.get(task["type"], task["type"])
                    latest = f"{kind} {task['lifecycle']} ({_when(task['updated'])})"
                    progress = f"{task['succeeded'] or 0}/{task['total'] or '?'}, {task['failed'] or 0} failed"
                dras.add_row(
                    d["file_system_path"], d["repository"], _state(d["lifecycle"], {"AVAILABLE"}), latest, progress
                )
            parts.append(dras)
    if data["orphans"]:
        left = _table(
            f"Left outside the app (tagged mlcluster:environment={data['environment']})",
            "stack or resource",
            "bills",
            "remove",
            "adopt",
        )
        for o in data["orphans"]:
            left.add_row(o.get("stack") or o.get("resource", ""), o["bills"], o["remove"], o["adopt"])
        parts.append(left)
    outputs = _table("Outputs", "key", "value", header=False)
    for s in data["stacks"]:
        for key, value in s["outputs"].items():
            outputs.add_row(key, value)
    for command in data["next"]:
        outputs.add_row("next", command)
    parts.append(outputs)
    if data["problems"]:
        parts.append(Text("needs attention: " + "; ".join(data["problems"]), style="bold red"))
    return Group(*parts)


@click.command()
@environment_options
@click.option("--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C.")
@click.option(
    "--interval", type=click.IntRange(5, 3600), default=30, show_default=True, help="Seconds between redraws."
)
@json_option
def status(
    env: str,
    environments: Path | None,
    region: str | None,
    profile: str | None,
    watch: bool,
    interval: int,
    as_json: bool,
) -> None:
    """Show the stacks, the cluster and its nodes, FSx for Lustre and its DRAs, and the outputs.

    Exit code 0 when everything is healthy, 1 when something needs attention
    (a stack not complete, the cluster not in service, a failing node, a file
    system or DRA not AVAILABLE). With --watch --json, one JSON document per line.
    """
    from rich.console import Console
    from rich.live import Live

    target = Target.load(env, environments, region, profile)
    console = Console(highlight=False)
    if not watch:
        with progress(f"reading the status of {target.name} in {target.region}"):
            data = collect(target)
        if as_json:
            echo_json(data)
        else:
            console.print(render(data))
        if not data["healthy"]:
            raise CliError("needs attention: " + "; ".join(data["problems"]), EXIT_FAILED)
        return
    try:
        if as_json:
            while True:
                echo_json(collect(target), compact=True)
                time.sleep(interval)
        with Live(render(collect(target)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(collect(target)), refresh=True)
    except KeyboardInterrupt:
        return
