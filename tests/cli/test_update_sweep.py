"""``mlcluster update``: the whole of what each part of the command prints, asks AWS and decides, on small
hand-built inputs (issue 27, cli sweep of ``mlcluster/cli/update.py``).

Each test pins a complete result: the plan's text as the operator reads it, the exact DynamoDB and
CloudFormation requests (botocore's Stubber, which also checks them against the service model), the state
file's checks and messages, each rule at its edge.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import ANY, Stubber

from mlcluster.cli import update
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_SETUP, EXIT_TIMEOUT, CliError
from mlcluster.cli.nodes import Node
from mlcluster.pcluster.update_policy import ClusterChange

# ----------------------------------------------------------------------------------------------- the plan's text


def change(path: str, outcome: str, old: Any = None, new: Any = None, policy: str = "P", safe: str = "") -> Any:
    return ClusterChange(path=path, policy=policy, outcome=outcome, old=old, new=new, safe_way=safe)  # type: ignore[arg-type]


def plan(**fields: Any) -> update.Plan:
    base: dict[str, Any] = {"environment": "dev", "cluster": "dev-c", "region": "eu-west-1", "digest": "d"}
    return update.Plan(**{"changes": [], **base, **fields})


HEAD = [
    "mlcluster update dev: plan (nothing has been changed yet)",
    "cluster dev-c (ParallelCluster), stack dev-Cluster in eu-west-1",
    "",
]


def job(job_id: str, partition: str, state: str, name: str = "n") -> update.Job:
    return update.Job(job_id, partition, "ann", state, 2, "1:00", name)


def test_a_plan_without_cluster_change_says_so_and_deploys_with_the_fleet_running() -> None:
    assert update.render_plan(plan()) == [
        *HEAD,
        "cluster configuration: no change (the deploy applies the other stacks' changes, if any)",
        "",
        "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)",
    ]


def test_a_refused_plan_lists_every_change_then_only_the_refused_ones_with_their_safe_way() -> None:
    changes = [
        change("A.B", "in_place", 1, 2, "SUPPORTED"),
        change("Scheduling.SlurmQueues[q].Name", "refused", "q", None, "UNSUPPORTED", "make a new queue"),
        change("SharedStorage[fsx]", "replaces_data", {"k": 1}, {"k": 2}, "UNSUPPORTED", "copy the data first"),
    ]
    assert update.render_plan(plan(changes=changes)) == [
        *HEAD,
        "changes to the cluster configuration (3):",
        "  in_place      A.B  (ParallelCluster policy SUPPORTED)",
        "                old: 1",
        "                new: 2",
        "  refused       Scheduling.SlurmQueues[q].Name  (ParallelCluster policy UNSUPPORTED)",
        "                old: q",
        "                new: -",
        "  replaces_data SharedStorage[fsx]  (ParallelCluster policy UNSUPPORTED)",
        '                old: {"k": 1}',
        '                new: {"k": 2}',
        "",
        "REFUSED: these changes cannot be made by an update; nothing will be changed:",
        "  Scheduling.SlurmQueues[q].Name: make a new queue",
        "  SharedStorage[fsx]: copy the data first",
    ]


def test_a_long_value_is_cut_at_seventy_characters_and_a_shorter_one_kept_whole() -> None:
    assert update._short("x" * 70) == "x" * 70
    assert update._short("x" * 71) == "x" * 67 + "..."
    assert update._short(None) == "-"
    assert update._short(0) == "0"
    assert update._short({"b": [1], "a": None}) == '{"a": null, "b": [1]}'


def test_a_change_whose_rollback_needs_the_stop_explains_why_the_fleet_stops() -> None:
    """In place forward, fleet stop back: the plan says the rollback is the reason and how to skip the stop."""
    forward = [change("Scheduling.SlurmQueues[new]", "in_place", None, {"Name": "new"}, "SUPPORTED")]
    back = [change("Scheduling.SlurmQueues[new]", "fleet_stop", {"Name": "new"}, None, "COMPUTE_FLEET_STOP")]
    queues = [
        update.QueueInfo("gpu", ("p5 (p5.48xlarge, 0..2 nodes)", "g6 (g6.xlarge, 1..3 nodes)"), 3),
        update.QueueInfo("cpu", (), 1),
    ]
    jobs = [job("7", "gpu", "PENDING"), job("8", "cpu", "CONFIGURING", "conf")]
    lines = update.render_plan(plan(changes=forward, rollback=back, queues=queues, jobs=jobs))
    assert lines == [
        *HEAD,
        "changes to the cluster configuration (1):",
        "  in_place      Scheduling.SlurmQueues[new]  (ParallelCluster policy SUPPORTED)",
        "                old: -",
        '                new: {"Name": "new"}',
        "",
        "what stops: the whole compute fleet (4 running nodes). These changes apply with it running, but should the "
        "deploy fail after the cluster took them, CloudFormation's rollback takes them back and ParallelCluster "
        "makes that change only with the fleet stopped (else the stack stops in UPDATE_ROLLBACK_FAILED): "
        "Scheduling.SlurmQueues[new] back to - (policy COMPUTE_FLEET_STOP). To keep the fleet running and accept "
        "that risk, deploy with `npx cdk deploy 'dev/*'` instead. The head node, login nodes and file systems keep "
        "running:",
        "  queue gpu: 3 running; p5 (p5.48xlarge, 0..2 nodes), g6 (g6.xlarge, 1..3 nodes)",
        "  queue cpu: 1 running; ",
        "",
        "jobs that would be killed (1, from squeue on the head node):",
        "  8        cpu              ann          CONFIGURING   2 nodes        1:00  conf",
        "jobs left pending: 1 (they wait for the fleet to start again)",
        "",
        "compute outage: about 40 minutes (stop 5, deploy 20, start and node boot 15) - an estimate from typical "
        "times, not a measurement",
        "",
        "steps: 1 stop the compute fleet, 2 cdk deploy, 3 start the fleet, 4 verify",
    ]


def test_a_fleet_stop_with_no_job_says_none_and_counts_pending_jobs_of_removed_queues() -> None:
    changes = [change("Scheduling.SlurmQueues[old]", "fleet_stop", {"Name": "old"}, None)]
    queues = [update.QueueInfo("old", ("c (c5.large, 0..10 nodes)",), 0)]
    jobs = [job("1", "old", "PENDING"), job("2", "old", "PENDING"), job("3", "kept", "PENDING")]
    lines = update.render_plan(plan(changes=changes, queues=queues, removed_queues=["old"], jobs=jobs))
    assert lines[8:14] == [
        "what stops: the whole compute fleet (0 running nodes), as ParallelCluster requires for the changes marked "
        "fleet_stop; the head node, login nodes and file systems keep running:",
        "  queue old: 0 running; c (c5.large, 0..10 nodes)  (removed by this update)",
        "",
        "jobs that would be killed (0, from squeue on the head node):",
        "  none",
        "jobs left pending: 1 (they wait for the fleet to start again); 2 pending in removed queues (1, 2) never run: "
        "cancel or move them (`scontrol update job=ID partition=...`)",
    ]


def test_a_drain_names_the_replaced_queues_and_only_their_running_jobs() -> None:
    changes = [change("Scheduling.SlurmQueues[gpu].Image", "in_place", "a", "b", "QUEUE_UPDATE_STRATEGY")]
    jobs = [job("1", "gpu", "RUNNING", "train"), job("2", "gpu", "PENDING"), job("3", "cpu", "RUNNING")]
    lines = update.render_plan(plan(changes=changes, jobs=jobs, strategy="DRAIN", replaced=["gpu", "gpu2"]))
    assert lines[3:] == [
        "changes to the cluster configuration (1):",
        "  in_place      Scheduling.SlurmQueues[gpu].Image  (ParallelCluster policy QUEUE_UPDATE_STRATEGY)",
        "                old: a",
        "                new: b",
        "",
        "nodes replaced by ParallelCluster (QueueUpdateStrategy DRAIN) in: gpu, gpu2",
        "jobs running there (1, from squeue on the head node): each runs to its end, then ParallelCluster replaces "
        "its nodes",
        "  1        gpu              ann          RUNNING      2 nodes        1:00  train",
        "",
        "steps: 1 cdk deploy, 2 verify (the compute fleet keeps running)",
    ]


def test_the_stop_follows_either_direction_and_a_forward_stop_needs_no_rollback_reason() -> None:
    stop, live = change("X", "fleet_stop"), change("Y", "in_place")
    assert plan(changes=[stop], rollback=[stop]).stops_back == []
    assert plan(changes=[stop], rollback=[stop]).stops_fleet is True
    assert plan(changes=[live], rollback=[stop, live]).stops_back == [stop]
    assert plan(changes=[live], rollback=[stop]).stops_fleet is True
    assert plan(changes=[live], rollback=[live]).stops_fleet is False
    refused, data = change("R", "refused"), change("D", "replaces_data")
    assert plan(changes=[live, refused, stop, data]).refused == [refused, data]


@pytest.mark.parametrize(
    ("changes", "strategy", "replaced"),
    [
        # A strategy policy under a queue replaces that queue's nodes, whatever the strategy.
        ([change("Scheduling.SlurmQueues[b].Image", "in_place", 1, 2, "QUEUE_UPDATE_STRATEGY")], "DRAIN", ["b"]),
        ([change("Scheduling.SlurmQueues[b].X", "in_place", 1, 2, "MANAGED_PLACEMENT_GROUP")], "DRAIN", ["b"]),
        ([change("Scheduling.SlurmQueues[b].X", "in_place", 1, 2, "MANAGED_FSX")], "TERMINATE", ["b"]),
        # Sorted, each queue once.
        (
            [
                change("Scheduling.SlurmQueues[z].X", "in_place", 1, 2, "MANAGED_FSX"),
                change("Scheduling.SlurmQueues[a].X", "in_place", 1, 2, "MANAGED_FSX"),
                change("Scheduling.SlurmQueues[z].Y", "in_place", 1, 2, "MANAGED_FSX"),
            ],
            "DRAIN",
            ["a", "z"],
        ),
        # An addition (nothing deployed before) replaces nothing; nor a change not in place; nor one outside a queue.
        ([change("Scheduling.SlurmQueues[b].X", "in_place", None, 2, "MANAGED_FSX")], "DRAIN", []),
        ([change("Scheduling.SlurmQueues[b].X", "fleet_stop", 1, 2, "MANAGED_FSX")], "DRAIN", []),
        ([change("SharedStorage[b].X", "in_place", 1, 2, "MANAGED_FSX")], "DRAIN", []),
        # A removal under the remove policy replaces nodes only with TERMINATE; a change of value never.
        (
            [change("Scheduling.SlurmQueues[b]", "in_place", 1, None, "RESIZE_UPDATE_STRATEGY_ON_REMOVE")],
            "TERMINATE",
            ["b"],
        ),
        ([change("Scheduling.SlurmQueues[b]", "in_place", 1, None, "RESIZE_UPDATE_STRATEGY_ON_REMOVE")], "DRAIN", []),
        (
            [change("Scheduling.SlurmQueues[b].M", "in_place", 1, 2, "RESIZE_UPDATE_STRATEGY_ON_REMOVE")],
            "TERMINATE",
            [],
        ),
        ([change("Scheduling.SlurmQueues[b]", "in_place", 1, None, "SUPPORTED")], "TERMINATE", []),
    ],
)
def test_the_queues_whose_nodes_parallelcluster_replaces(
    changes: list[Any], strategy: str, replaced: list[str]
) -> None:
    assert update.replaced_queues(changes, strategy) == replaced


def node(group: str, status: str, kind: str = "Compute") -> Node:
    return Node(group, f"i-{group}-{status}", "c5.large", status, "", f"i-{group}-{status}", kind)


def test_each_queue_counts_its_running_and_pending_nodes_and_the_defaults_of_its_resources() -> None:
    config = {
        "Scheduling": {
            "SlurmQueues": [
                {"Name": "a", "ComputeResources": [{"Name": "r", "InstanceType": "c5.large"}]},
                {"Name": "b", "ComputeResources": None},
            ]
        }
    }
    nodes = [node("a", "running"), node("a", "pending"), node("a", "stopping"), node("a", "terminated")]
    nodes += [node("b", "running"), node("c", "running")]
    assert update.queue_infos(config, nodes) == [
        update.QueueInfo("a", ("r (c5.large, 0..10 nodes)",), 2),
        update.QueueInfo("b", (), 1),
    ]
    assert update.queue_infos({}, nodes) == []
    assert update.queue_infos({"Scheduling": {"SlurmQueues": None}}, nodes) == []
    assert update.queue_names(config) == ["a", "b"]
    assert update.queue_names({"Scheduling": {}}) == []


# ----------------------------------------------------------------------------------------------- squeue


def test_the_squeue_script_lists_every_job_after_the_mark_and_each_mark_is_fresh() -> None:
    assert update.squeue_script("m1:") == "squeue --all --noheader --format 'm1:%i|%P|%u|%T|%D|%M|%j'\n"
    first, second = update.record_mark(), update.record_mark()
    assert first != second
    assert all(len(mark) == 28 and mark.startswith("mlc") and mark.endswith(":") for mark in (first, second))
    int(first[3:-1], 16)


def test_text_before_the_first_record_is_an_error_quoted_in_the_message() -> None:
    with pytest.raises(CliError) as raised:
        update.parse_squeue("slurm_load_jobs error: Unable to contact slurm controller\nM:1|q|u|R|1|0:01|j\n", "M:")
    assert raised.value.exit_code == EXIT_FAILED
    assert raised.value.message == (
        "squeue printed a line mlcluster cannot read: 'slurm_load_jobs error: Unable to contact slurm controller'\n"
        "  what to do: `mlcluster ssh ENV` and run `squeue` to see why"
    )
    assert update.parse_squeue("", "M:") == []
    assert update.parse_squeue("  \n", "M:") == []


@pytest.mark.parametrize("record", ["1|q|u|R|x|0:01|j", "1|q|u|R|1|0:01", "1|q|u|R||0:01|j"])
def test_a_record_without_seven_fields_or_a_node_count_is_refused(record: str) -> None:
    with pytest.raises(CliError) as raised:
        update.parse_squeue(f"M:{record}\n", "M:")
    assert raised.value.message.startswith(f"squeue printed a line mlcluster cannot read: {record + chr(10)!r}\n")


def test_a_long_unreadable_record_is_quoted_to_two_hundred_characters() -> None:
    with pytest.raises(CliError) as raised:
        update.parse_squeue("M:" + "y" * 300, "M:")
    assert raised.value.message.splitlines()[0] == f"squeue printed a line mlcluster cannot read: {'y' * 200!r}"


def test_a_job_is_running_while_it_holds_nodes() -> None:
    holding = ["RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT", "SIGNALING"]
    assert [job("1", "q", s).running for s in holding] == [True] * 6
    assert [job("1", "q", s).running for s in ["PENDING", "COMPLETED", "CANCELLED", "running"]] == [False] * 4


# ----------------------------------------------------------------------------------------------- the fleet item


def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(
        service,
        region_name="eu-west-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    return client, Stubber(client)


def target(**clients: Any) -> Any:
    return SimpleNamespace(name="dev", region="eu-west-1", client=lambda service: clients[service])


GET = {"TableName": "parallelcluster-dev-c", "Key": {"Id": {"S": "COMPUTE_FLEET"}}, "ConsistentRead": True}


def test_the_fleet_status_is_a_consistent_read_of_parallelclusters_item_and_missing_reads_unknown() -> None:
    client, stub = stubbed("dynamodb")
    stub.add_response("get_item", {"Item": {"Data": {"M": {"status": {"S": "STOPPING"}}}}}, GET)
    stub.add_response("get_item", {}, GET)
    stub.add_response("get_item", {"Item": {"Data": {"M": {}}}}, GET)
    stub.add_client_error("get_item", "AccessDeniedException", "no", 400, expected_params=GET)
    fleet = update.Fleet(target(dynamodb=client), "dev-c")
    with stub:
        assert [fleet.status(), fleet.status(), fleet.status()] == ["STOPPING", "UNKNOWN", "UNKNOWN"]
        with pytest.raises(CliError) as raised:
            fleet.status()
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(
        "GetItem COMPUTE_FLEET from DynamoDB table parallelcluster-dev-c failed: AccessDeniedException: no\n"
    )
    stub.assert_no_pending_responses()


UPDATE = {
    "TableName": "parallelcluster-dev-c",
    "Key": {"Id": {"S": "COMPUTE_FLEET"}},
    "UpdateExpression": "SET #dt.#st = :s, #dt.#lut = :t",
    "ConditionExpression": "#dt.#st = :current",
    "ExpressionAttributeNames": {"#dt": "Data", "#st": "status", "#lut": "lastStatusUpdatedTime"},
    "ExpressionAttributeValues": {":s": {"S": "STOP_REQUESTED"}, ":t": ANY, ":current": {"S": "RUNNING"}},
}


def test_a_fleet_request_is_written_only_over_the_status_read_as_parallelcluster_writes_it() -> None:
    client, stub = stubbed("dynamodb")
    written: list[dict[str, Any]] = []
    client.meta.events.register("provide-client-params.dynamodb.UpdateItem", lambda params, **_: written.append(params))
    stub.add_response("update_item", {}, UPDATE)
    stub.add_client_error("update_item", "ConditionalCheckFailedException", "changed", 400, expected_params=UPDATE)
    stub.add_client_error("update_item", "ProvisionedThroughputExceededException", "slow", 400, expected_params=UPDATE)
    fleet = update.Fleet(target(dynamodb=client), "dev-c")
    with stub:
        fleet.request("RUNNING", "STOP_REQUESTED")
        with pytest.raises(CliError) as conflict:
            fleet.request("RUNNING", "STOP_REQUESTED")
        with pytest.raises(CliError) as throttled:
            fleet.request("RUNNING", "STOP_REQUESTED")
    stub.assert_no_pending_responses()
    # The time ParallelCluster's manager writes: str() of an aware UTC datetime.
    stamp = written[0]["ExpressionAttributeValues"][":t"]["S"]
    assert stamp.endswith("+00:00") and stamp[4] == "-" and stamp[10] == " "
    assert conflict.value.exit_code == EXIT_FAILED
    assert conflict.value.message == (
        "the compute fleet of dev-c changed status while mlcluster asked for STOP_REQUESTED (it was RUNNING): "
        "someone else is starting or stopping it\n"
        "  what to do: `mlcluster status dev`; run the command again once the fleet is settled"
    )
    assert throttled.value.exit_code == EXIT_AWS
    assert throttled.value.message.startswith(
        "UpdateItem COMPUTE_FLEET in DynamoDB table parallelcluster-dev-c (RUNNING -> STOP_REQUESTED) failed: "
        "ProvisionedThroughputExceededException: slow\n"
    )


class Clock:
    """``update.time`` for :meth:`Fleet.wait`: each sleep moves the clock on by the sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def waiting(monkeypatch: pytest.MonkeyPatch, statuses: list[str]) -> tuple[update.Fleet, Clock]:
    clock = Clock()
    monkeypatch.setattr(update, "time", clock)
    fleet = update.Fleet(target(), "dev-c")
    monkeypatch.setattr(fleet, "status", lambda: statuses.pop(0))
    return fleet, clock


def test_the_wait_polls_every_fifteen_seconds_until_done(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    fleet, clock = waiting(monkeypatch, ["STOP_REQUESTED", "STOPPING", "STOPPED"])
    fleet.wait(update.STOP_WAIT, "STOPPED", 60, Console(quiet=True))
    assert clock.sleeps == [15.0, 15.0]


@pytest.mark.parametrize(
    ("timeout", "polls"),
    [(30, ["STOPPING", "STOPPING", "STOPPING"]), (31, ["STOPPING", "STOPPING", "STOPPING", "STOPPING"])],
)
def test_the_wait_gives_up_at_its_timeout_after_a_last_read(
    monkeypatch: pytest.MonkeyPatch, timeout: int, polls: list[str]
) -> None:
    """A read at the deadline counts; one poll more when the deadline falls between two polls."""
    from rich.console import Console

    fleet, clock = waiting(monkeypatch, [*polls, "STOPPED"])
    with pytest.raises(CliError) as raised:
        fleet.wait(update.STOP_WAIT, "STOPPED", timeout, Console(quiet=True))
    assert raised.value.exit_code == EXIT_TIMEOUT
    assert (
        raised.value.message == f"the compute fleet of dev-c was still STOPPING after {timeout} s (waiting for STOPPED)"
    )
    assert len(clock.sleeps) == len(polls) - 1


@pytest.mark.parametrize(
    ("status", "why"),
    [
        ("PROTECTED", ": clustermgtd put queues with repeated bootstrap failures out of service"),
        ("STOPPED", ": another request changed it, or ParallelCluster cannot read its status"),
    ],
)
def test_a_start_that_ends_elsewhere_says_why(monkeypatch: pytest.MonkeyPatch, status: str, why: str) -> None:
    from rich.console import Console

    fleet, _ = waiting(monkeypatch, ["STARTING", status])
    with pytest.raises(CliError) as raised:
        fleet.wait(update.START_WAIT, "RUNNING", 600, Console(quiet=True))
    assert raised.value.exit_code == EXIT_FAILED
    assert raised.value.message == f"the compute fleet of dev-c went {status} while mlcluster waited for RUNNING{why}"


def test_a_status_no_table_knows_is_named_with_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    fleet, clock = waiting(monkeypatch, ["PAUSED"])
    with pytest.raises(CliError) as raised:
        fleet.wait({"B": "wait", "A": "done"}, "A", 600, Console(quiet=True))
    assert raised.value.exit_code == EXIT_FAILED
    assert (
        raised.value.message == "the compute fleet of dev-c is 'PAUSED', a status mlcluster does not know (known: A, B)"
    )
    assert clock.sleeps == []


# ----------------------------------------------------------------------------------------------- the state file


def test_the_state_folder_is_an_absolute_xdg_state_home_else_the_home_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert update.state_root() == tmp_path / "xdg" / "mlcluster"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert update.state_root() == tmp_path / "home" / ".local" / "state" / "mlcluster"
    monkeypatch.setenv("XDG_STATE_HOME", "")
    assert update.state_root() == tmp_path / "home" / ".local" / "state" / "mlcluster"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert update.state_root() == tmp_path / "home" / ".local" / "state" / "mlcluster"


def refusal(path: Path, *, folder: bool) -> str:
    with pytest.raises(CliError) as raised:
        update._check_private(path, folder=folder)
    assert raised.value.exit_code == EXIT_FAILED
    head, _, advice = raised.value.message.partition("\n")
    assert advice == "  what to do: find out who made it so; remove it (and `chmod 700` its folder), then run again"
    assert head.startswith(f"{path}: ") and head.endswith(
        ": only you may write mlcluster's update state; nothing was run"
    )
    return head.removeprefix(f"{path}: ").removesuffix(": only you may write mlcluster's update state; nothing was run")


def test_a_state_path_is_refused_for_each_reason_it_is_not_the_operators_alone(tmp_path: Path) -> None:
    plain = tmp_path / "state.json"
    plain.write_text("{}")
    folder = tmp_path / "folder"
    folder.mkdir()
    for mode in (0o600, 0o644, 0o755, 0o640):
        plain.chmod(mode)
        update._check_private(plain, folder=False)
    folder.chmod(0o755)
    update._check_private(folder, folder=True)
    plain.chmod(0o620)
    assert refusal(plain, folder=False) == "writable by group or others (mode 0620)"
    plain.chmod(0o602)
    assert refusal(plain, folder=False) == "writable by group or others (mode 0602)"
    plain.chmod(0o600)
    assert refusal(plain, folder=True) == "not a plain file/folder"
    assert refusal(folder, folder=False) == "not a plain file/folder"
    link = tmp_path / "link.json"
    link.symlink_to(plain)
    # A link's own mode is 0777 on Linux.
    assert refusal(link, folder=False) == "a link or another kind of file; writable by group or others (mode 0777)"
    other = os.geteuid() + 1000
    os.chown(plain, other, -1)
    plain.chmod(0o666)
    assert refusal(plain, folder=False) == (
        f"owned by uid {other}, not by you (uid {os.geteuid()}); writable by group or others (mode 0666)"
    )


def test_the_state_is_saved_private_read_back_and_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = update.UpdateState("dev", "eu-west-1")
    assert state.path == tmp_path / "mlcluster" / "update" / "eu-west-1" / "dev.json"
    assert state.load() is None
    state.data = {"steps": {}}
    state.mark("stop")
    assert state.done("stop") and not state.done("deploy")
    for folder in (tmp_path / "mlcluster", tmp_path / "mlcluster" / "update", state.folder):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(state.path.stat().st_mode) == 0o600
    assert [p.name for p in state.folder.iterdir()] == ["dev.json"]  # no temporary file left
    # The file the refusals tell the operator to inspect: JSON indented by two, nothing else.
    assert state.path.read_text() == json.dumps(state.data, indent=2)
    loaded = update.UpdateState("dev", "eu-west-1").load()
    assert loaded == state.data and update.TIMESTAMP.fullmatch(loaded["steps"]["stop"]["at"])
    state.unmark("stop")
    state.unmark("stop")
    assert update.UpdateState("dev", "eu-west-1").load() == {"steps": {}}
    state.remove()
    state.remove()
    assert not state.path.exists()


def test_a_state_file_that_is_not_json_is_named_with_the_way_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = update.UpdateState("dev", "eu-west-1")
    state.save()
    state.path.write_text("{not json")
    with pytest.raises(CliError) as raised:
        state.load()
    assert raised.value.exit_code == EXIT_FAILED
    assert raised.value.message == (
        f"{state.path} cannot be read as JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))\n  what to do: inspect it; remove it to start over"
    )


def test_a_folder_above_the_state_file_writable_by_others_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = update.UpdateState("dev", "eu-west-1")
    state.save()
    for folder in (tmp_path / "mlcluster", tmp_path / "mlcluster" / "update", state.folder):
        folder.chmod(0o777)
        with pytest.raises(CliError) as loading:
            state.load()
        with pytest.raises(CliError) as saving:
            state.save()
        assert loading.value.message.startswith(f"{folder}: writable by group or others (mode 0777)")
        assert saving.value.message == loading.value.message
        folder.chmod(0o700)


def good_state(**changes: Any) -> dict[str, Any]:
    state: dict[str, Any] = {
        "format": 1,
        "run": "20261128T120000Z",
        "environment": "dev",
        "cluster": "dev-c",
        "region": "eu-west-1",
        "plan_sha256": "a" * 64,
        "stacks_sha256": "b" * 64,
        "stop": True,
        "fleet_before": "RUNNING",
        "steps": {"stop": {"at": "2026-11-28T12:00:01Z"}},
        "complete": None,
    }
    state.update(changes)
    return state


@pytest.mark.parametrize(
    "state",
    [
        good_state(),
        good_state(fleet_before=None, stop=False, steps={}, complete="2026-11-28T13:00:00Z"),
        good_state(fleet_before="PROTECTED", steps={s: {"at": "2026-11-28T12:00:01Z"} for s in update.STEPS}),
    ],
)
def test_every_state_this_command_writes_is_read_back_as_it_is(state: dict[str, Any]) -> None:
    assert update.checked_state(state, Path("/s.json"), "dev", "dev-c", "eu-west-1") == state


def test_a_state_with_every_field_wrong_names_each_one_and_what_is_allowed() -> None:
    bad = {
        "format": 2,
        "run": "2026-11-28T12:00:00Z",
        "environment": "prod",
        "cluster": "prod-c",
        "region": "us-east-1",
        "plan_sha256": "A" * 64,
        "stacks_sha256": "b" * 63,
        "stop": "yes",
        "fleet_before": "GONE",
        "steps": {"stop": {"at": "2026-11-28T12:00:01Z", "by": "x"}, "deploy": "done", "start": {"at": "later"}},
        "complete": "2026-11-28",
        "extra": 1,
    }
    with pytest.raises(CliError) as raised:
        update.checked_state(bad, Path("/s.json"), "dev", "dev-c", "eu-west-1")
    assert raised.value.exit_code == EXIT_FAILED
    assert raised.value.message.splitlines() == [
        "/s.json is not a state this command wrote; nothing was run:",
        "  extra: 1 is not allowed; allowed: no such key",
        "  format: 2 is not allowed; allowed: 1",
        '  run: "2026-11-28T12:00:00Z" is not allowed; allowed: a run id such as 20260101T120000Z',
        "  environment: \"prod\" is not allowed; allowed: 'dev'",
        "  cluster: \"prod-c\" is not allowed; allowed: 'dev-c'",
        "  region: \"us-east-1\" is not allowed; allowed: 'eu-west-1'",
        f'  plan_sha256: "{"A" * 64}" is not allowed; allowed: a SHA-256 in lower-case hex',
        f'  stacks_sha256: "{"b" * 63}" is not allowed; allowed: a SHA-256 in lower-case hex',
        '  stop: "yes" is not allowed; allowed: true or false',
        '  fleet_before: "GONE" is not allowed; allowed: null or a ComputeFleetStatus',
        '  complete: "2026-11-28" is not allowed; allowed: null or a UTC time',
        '  steps.stop: {"at": "2026-11-28T12:00:01Z", "by": "x"} is not allowed; allowed: {"at": "<UTC time>"}',
        '  steps.deploy: "done" is not allowed; allowed: {"at": "<UTC time>"}',
        '  steps.start: {"at": "later"} is not allowed; allowed: {"at": "<UTC time>"}',
        "  what to do: remove it, check the cluster (`mlcluster status ENV`) and run `mlcluster update` again",
    ]


@pytest.mark.parametrize(
    ("changes", "line"),
    [
        (
            {"steps": {"stop": {"at": "2026-11-28T12:00:01Z"}, "rollback": {}}},
            'steps: {"stop": {"at": "2026-11-28T12:00:01Z"}, "rollback": {}} is not allowed; allowed: an object keyed '
            "by stop, deploy, start, verify",
        ),
        ({"steps": []}, "steps: [] is not allowed; allowed: an object keyed by stop, deploy, start, verify"),
        ({"stop": 1}, "stop: 1 is not allowed"),
        ({"run": 20261128}, "run: 20261128 is not allowed"),
        ({"run": "20261128T120000Zx"}, 'run: "20261128T120000Zx" is not allowed'),
        ({"plan_sha256": None}, "plan_sha256: null is not allowed"),
        ({"complete": 5}, "complete: 5 is not allowed"),
        ({"complete": "2026-11-28T13:00:00Z "}, 'complete: "2026-11-28T13:00:00Z " is not allowed'),
        ({"steps": {"stop": {"at": 5}}}, 'steps.stop: {"at": 5} is not allowed'),
        ({"steps": {"stop": ["at"]}}, 'steps.stop: ["at"] is not allowed'),
        ({"steps": {"stop": {}}}, "steps.stop: {} is not allowed"),
    ],
)
def test_a_state_field_just_outside_what_the_command_writes_is_refused(changes: dict[str, Any], line: str) -> None:
    with pytest.raises(CliError) as raised:
        update.checked_state(good_state(**changes), Path("/s.json"), "dev", "dev-c", "eu-west-1")
    (problem,) = raised.value.message.splitlines()[1:-1]
    assert problem.startswith(f"  {line}")


def test_a_state_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(CliError) as raised:
        update.checked_state([1], Path("/s.json"), "dev", "dev-c", "eu-west-1")
    assert (raised.value.message, raised.value.exit_code) == (
        "/s.json is not an update state object; remove it to start over",
        EXIT_FAILED,
    )


def test_a_long_bad_value_is_quoted_to_one_hundred_and_twenty_characters() -> None:
    with pytest.raises(CliError) as raised:
        update.checked_state(good_state(run="x" * 200), Path("/s.json"), "dev", "dev-c", "eu-west-1")
    assert raised.value.message.splitlines()[1] == (
        f"  run: {json.dumps('x' * 200)[:120]} is not allowed; allowed: a run id such as 20260101T120000Z"
    )


# ----------------------------------------------------------------------------------------------- stacks


STACK_NAMES = ["dev-Network", "dev-Storage", "dev-DataRepository", "dev-Observability", "dev-Cluster", "dev-c"]


def stack(name: str, status: str) -> dict[str, Any]:
    return {"Stacks": [{"StackName": name, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": status}]}


def test_every_stack_is_read_and_each_failure_named_never_read_as_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    client, stub = stubbed("cloudformation")
    stub.add_response("describe_stacks", stack("dev-Network", "CREATE_COMPLETE"), {"StackName": "dev-Network"})
    stub.add_client_error(
        "describe_stacks", "ValidationError", "Stack with id dev-Storage does not exist", 400,
        expected_params={"StackName": "dev-Storage"},
    )  # fmt: skip
    stub.add_client_error(
        "describe_stacks", "AccessDenied", "not authorized", 403, expected_params={"StackName": "dev-DataRepository"}
    )
    stub.add_client_error(
        "describe_stacks", "Throttling", "Rate exceeded", 400, expected_params={"StackName": "dev-Observability"}
    )
    stub.add_response("describe_stacks", {"Stacks": []}, {"StackName": "dev-Cluster"})
    stub.add_response("describe_stacks", stack("dev-c", "UPDATE_ROLLBACK_COMPLETE"), {"StackName": "dev-c"})
    with stub:
        states = update.stack_states(target(cloudformation=client), "dev-c")
    stub.assert_no_pending_responses()
    assert list(states.items()) == [
        ("dev-Network", "CREATE_COMPLETE"),
        ("dev-Storage", "not found"),
        ("dev-DataRepository", "unknown (DescribeStacks failed: AccessDenied)"),
        ("dev-Observability", "unknown (DescribeStacks failed: Throttling)"),
        ("dev-Cluster", "not found"),
        ("dev-c", "UPDATE_ROLLBACK_COMPLETE"),
    ]


def test_a_stack_read_that_cannot_reach_aws_is_unknown() -> None:
    class Unreachable:
        def describe_stacks(self, StackName: str) -> Any:  # noqa: N803
            raise EndpointConnectionError(endpoint_url="https://cloudformation")

    states = update.stack_states(target(cloudformation=Unreachable()), "dev-c")
    assert states == {name: "unknown (DescribeStacks failed: EndpointConnectionError)" for name in STACK_NAMES}


def test_each_stack_line_says_its_state_and_the_command_that_moves_a_stuck_one_on() -> None:
    states = {
        "dev-Network": "CREATE_COMPLETE",
        "dev-Storage": "UPDATE_ROLLBACK_FAILED",
        "dev-Cluster": "UPDATE_ROLLBACK_FAILED",
        "dev-Observability": "UPDATE_IN_PROGRESS",
        "dev-DataRepository": "UPDATE_ROLLBACK_IN_PROGRESS",
        "dev-c": "UPDATE_ROLLBACK_COMPLETE",
    }
    where = target()
    plain = "  -> `aws cloudformation continue-update-rollback --region eu-west-1 --stack-name"
    working = "  -> CloudFormation is still working: wait for it to settle"
    assert update.stack_advice(where, states, cluster="dev-c", resource="ClusterX") == [
        "  dev-Network: CREATE_COMPLETE",
        f"  dev-Storage: UPDATE_ROLLBACK_FAILED{plain} dev-Storage`",
        f"  dev-Cluster: UPDATE_ROLLBACK_FAILED{plain} dev-Cluster --resources-to-skip ClusterX` (safe: "
        "ParallelCluster's stack dev-c rolled back, the cluster already runs its old configuration; its provider "
        "cannot finish the rollback by itself)",
        f"  dev-Observability: UPDATE_IN_PROGRESS{working}",
        f"  dev-DataRepository: UPDATE_ROLLBACK_IN_PROGRESS{working}",
        "  dev-c: UPDATE_ROLLBACK_COMPLETE",
    ]
    assert update.stack_advice(where, states, cluster="dev-c", shown={"dev-Cluster"}) == [
        f"  dev-Cluster: UPDATE_ROLLBACK_FAILED{plain} dev-Cluster --resources-to-skip "
        "<logical id of the Custom::PclusterCluster>` (safe: ParallelCluster's stack dev-c rolled back, the cluster "
        "already runs its old configuration; its provider cannot finish the rollback by itself)",
    ]
    # Without ParallelCluster's stack rolled back (or its name), no resource is skipped.
    assert update.stack_advice(where, states, resource="ClusterX", shown={"dev-Cluster"}) == [
        f"  dev-Cluster: UPDATE_ROLLBACK_FAILED{plain} dev-Cluster`"
    ]
    moving = {**states, "dev-c": "UPDATE_IN_PROGRESS"}
    assert update.stack_advice(where, moving, cluster="dev-c", resource="ClusterX", shown={"dev-Cluster"}) == [
        f"  dev-Cluster: UPDATE_ROLLBACK_FAILED{plain} dev-Cluster`"
    ]
    assert update.stack_advice(where, states, cluster="dev-c", shown=set()) == []


def test_the_cluster_configuration_is_that_of_the_one_parallelcluster_resource() -> None:
    config = {"Region": "eu-west-1"}
    custom = {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": config}}
    other = {"Type": "AWS::S3::Bucket", "Properties": {"ClusterConfiguration": {"x": 1}}}
    assert update.cluster_configuration({"Resources": {"A": other, "B": custom}}, "t") == config
    for template in (
        {},
        {"Resources": {"A": custom, "B": custom}},
        {"Resources": {"A": {"Type": "Custom::PclusterCluster"}}},
        {"Resources": {"A": {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": "x"}}}},
    ):
        with pytest.raises(CliError) as raised:
            update.cluster_configuration(template, "the deployed dev-Cluster")
        count = len(template.get("Resources", {}))
        assert (raised.value.message, raised.value.exit_code) == (
            f"the deployed dev-Cluster has {count} Custom::PclusterCluster resources with a ClusterConfiguration; "
            "expected one\n  what to do: check that this is a ParallelCluster environment deployed by mlcluster",
            EXIT_FAILED,
        )


def test_the_plan_digest_is_the_sha256_of_canonical_json() -> None:
    import hashlib

    assert update.config_digest({"b": 1, "a": [1, 2]}) == hashlib.sha256(b'{"a":[1,2],"b":1}').hexdigest()
    assert update.config_digest({"a": [1, 2], "b": 1}) == update.config_digest({"b": 1, "a": [1, 2]})


# ----------------------------------------------------------------------------------------------- the CDK CLI


def test_the_deploy_command_deploys_every_stack_of_the_assembly_with_the_profile_if_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(update, "cdk_cli", lambda: Path("/p/node_modules/.bin/cdk"))
    common = ["/p/node_modules/.bin/cdk", "deploy", "--app", "/tmp/a", "dev/*", "--require-approval", "never"]
    assert update.deploy_command(Path("/tmp/a"), "dev", None) == [*common, "--progress", "events"]
    assert update.deploy_command(Path("/tmp/a"), "dev", "ops") == [*common, "--progress", "events", "--profile", "ops"]


def test_a_deploy_past_its_time_is_minus_one_and_otherwise_the_cli_exit_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=tmp_path, cdk_json=None))
    seen: list[tuple[list[str], dict[str, Any]]] = []

    def run(argv: list[str], **kwargs: Any) -> Any:
        seen.append((argv, kwargs))
        if argv[0] == "slow":
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        return subprocess.CompletedProcess(argv, 3)

    monkeypatch.setattr(update.subprocess, "run", run)
    assert update.run_deploy(["cdk", "deploy"], 300) == 3
    assert update.run_deploy(["slow"], 301) == -1
    assert seen == [
        (["cdk", "deploy"], {"stdout": 2, "cwd": tmp_path, "timeout": 300, "check": False, "env": None}),
        (["slow"], {"stdout": 2, "cwd": tmp_path, "timeout": 301, "check": False, "env": None}),
    ]


def test_the_deploy_runs_in_the_environments_region_whatever_the_profile_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The stacks name no region, so the CDK CLI takes AWS_REGION, AWS_DEFAULT_REGION or the profile's: it is given
    the environment's, the one the fleet was stopped in (user review: `--region` let them differ)."""
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=tmp_path, cdk_json=None))
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    seen: list[dict[str, str]] = []

    def run(argv: list[str], **kwargs: Any) -> Any:
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(update.subprocess, "run", run)
    assert update.run_deploy(["cdk", "deploy"], 300, region="us-west-2") == 0
    assert (seen[0]["AWS_REGION"], seen[0]["AWS_DEFAULT_REGION"]) == ("us-west-2", "us-west-2")
    assert seen[0]["PATH"] == os.environ["PATH"]  # the rest of the operator's environment stays


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with cdk.json and the pinned CLI in node_modules, only the operator's."""
    root = tmp_path / "checkout"
    (root / "node_modules" / ".bin").mkdir(parents=True)
    (root / "cdk.json").write_text("{}")
    cli = root / "node_modules" / ".bin" / "cdk"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    root.chmod(0o755)
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=root, cdk_json=root / "cdk.json"))
    monkeypatch.setenv("PATH", "")
    return root


@pytest.mark.parametrize("said", ["2.1148.1 (build 1)", "2.1148.2", "2.1149.0", "2.2000.0"])
def test_the_projects_cdk_cli_of_the_pinned_release_or_newer_is_used(
    project: Path, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    asked: list[tuple[str, Path]] = []
    monkeypatch.setattr(update, "cdk_version", lambda cli, folder: asked.append((cli, folder)) or said)
    assert update.cdk_cli() == project / "node_modules" / ".bin" / "cdk"
    assert asked == [(str(project / "node_modules" / ".bin" / "cdk"), project)]


@pytest.mark.parametrize("said", ["2.1148.0", "2.1147.9", "3.0.0", "1.2000.0", "v2.1148.1", "exit 127", ""])
def test_a_cdk_cli_older_than_the_pin_or_of_another_major_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    monkeypatch.setattr(update, "cdk_version", lambda cli, folder: said)
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert raised.value.message == (
        f"the CDK CLI {project}/node_modules/.bin/cdk says {said!r}; mlcluster deploys with aws-cdk 2.x, 2.1148.1 or "
        "newer\n  what to do: `npm ci` in an mlcluster checkout, or `npm install -g aws-cdk@2.1148.1`"
    )


def test_without_a_cdk_json_only_an_absolute_path_entry_is_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "app"
    (app / "node_modules" / ".bin").mkdir(parents=True)
    planted = app / "node_modules" / ".bin" / "cdk"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    app.chmod(0o755)
    monkeypatch.chdir(app)
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=app, cdk_json=None))
    monkeypatch.setattr(update, "cdk_version", lambda cli, folder: "2.1148.1")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "cdk").write_text("not executable")
    good = tmp_path / "bin"
    good.mkdir()
    (good / "cdk").write_text("#!/bin/sh\n")
    (good / "cdk").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join(["node_modules/.bin", str(plain), str(good)]))
    assert update.cdk_cli() == good / "cdk"
    monkeypatch.setenv("PATH", os.pathsep.join(["node_modules/.bin", str(plain)]))
    with pytest.raises(CliError) as raised:
        update.cdk_cli()
    assert raised.value.exit_code == EXIT_SETUP
    assert raised.value.message == (
        f"the CDK CLI is not installed: neither {planted} (beside a cdk.json) nor a `cdk` on PATH\n"
        "  what to do: run `npm ci` in an mlcluster checkout (package.json pins it), or install aws-cdk@2.1148.1 "
        "(`npm install -g aws-cdk@2.1148.1`) for your own app"
    )


def test_the_cdk_version_is_what_the_cli_prints_or_its_error(tmp_path: Path) -> None:
    cli = tmp_path / "cdk"
    cli.write_text("#!/bin/sh\npwd\n")
    cli.chmod(0o755)
    assert update.cdk_version(str(cli), tmp_path) == str(tmp_path)
    cli.write_text("#!/bin/sh\necho '  oops  ' >&2\nexit 4\n")
    assert update.cdk_version(str(cli), tmp_path) == "oops"
    cli.write_text("#!/bin/sh\nexit 4\n")
    assert update.cdk_version(str(cli), tmp_path) == "exit 4"


@pytest.mark.parametrize(
    ("mode", "json_mode", "unsafe"),
    [
        (0o755, 0o644, False),
        (0o775, 0o644, True),
        (0o757, 0o644, True),
        (0o755, 0o664, True),
        (0o755, 0o646, True),
    ],
)
def test_the_deploy_folder_and_its_cdk_json_must_be_the_operators_alone(
    project: Path, mode: int, json_mode: int, unsafe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(update, "private_group", lambda gid: False)
    project.chmod(mode)
    (project / "cdk.json").chmod(json_mode)
    if not unsafe:
        assert update.deploy_folder() == project
        return
    with pytest.raises(CliError) as raised:
        update.deploy_folder()
    assert raised.value.exit_code == EXIT_SETUP
    assert raised.value.message == (
        f"the project folder {project} (its cdk.json found from the current folder) or its cdk.json is not the "
        "operator's or root's, or others can write it: the CDK CLI would load what a cdk.json there names with your "
        f"credentials\n  what to do: run from your own checkout or folder (`chmod g-w,o-w {project}` if it is yours), "
        "or name it with --app-dir"
    )


def test_a_cdk_json_in_a_folder_without_a_project_is_checked_too(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No cdk.json was found from the current folder, yet the CLI would read one planted there."""
    monkeypatch.setattr(update, "current_project", lambda: SimpleNamespace(root=project, cdk_json=None))
    assert update.deploy_folder() == project
    os.chown(project / "cdk.json", os.getuid() + 1000, -1)
    with pytest.raises(CliError) as planted:
        update.deploy_folder()
    assert planted.value.message.startswith(f"the project folder {project} (the current folder) or its cdk.json is not")
    (project / "cdk.json").unlink()
    assert update.deploy_folder() == project
    (tmp_path / "elsewhere.json").write_text("{}")
    (project / "cdk.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(CliError) as linked:
        update.deploy_folder()
    assert linked.value.message == planted.value.message


# ----------------------------------------------------------------------------------------------- who may change it


@pytest.fixture
def accounts(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The operator ``ann`` (uid 1000, private group 1000), ``bob`` (uid 1001, group 1001), group ``team`` (1002)."""
    users = [
        SimpleNamespace(pw_name="ann", pw_uid=1000, pw_gid=1000),
        SimpleNamespace(pw_name="bob", pw_uid=1001, pw_gid=1001),
    ]
    groups: dict[int, Any] = {1000: SimpleNamespace(gr_mem=[]), 1001: SimpleNamespace(gr_mem=[])}
    groups[1002] = SimpleNamespace(gr_mem=["ann", "bob"])
    monkeypatch.setattr(update.os, "getuid", lambda: 1000)
    monkeypatch.setattr(update.os, "getgid", lambda: 1000)
    monkeypatch.setattr(update.pwd, "getpwuid", lambda uid: next(u for u in users if u.pw_uid == uid))
    monkeypatch.setattr(update.pwd, "getpwall", lambda: users)
    monkeypatch.setattr(update.grp, "getgrgid", lambda gid: groups[gid])
    return {"users": users, "groups": groups}


def test_a_private_group_is_the_operators_primary_group_shared_with_nobody(accounts: dict[str, Any]) -> None:
    assert update.private_group(1000) is True
    accounts["groups"][1000].gr_mem = ["ann"]  # listing yourself changes nothing
    assert update.private_group(1000) is True
    assert update.private_group(1001) is False  # bob's
    assert update.private_group(1002) is False  # shared
    assert update.private_group(4242) is False  # no such group
    accounts["groups"][1000].gr_mem = ["ann", "bob"]
    assert update.private_group(1000) is False
    accounts["groups"][1000].gr_mem = []
    accounts["users"].append(SimpleNamespace(pw_name="eve", pw_uid=1003, pw_gid=1000))
    assert update.private_group(1000) is False  # another user's primary group too


@pytest.mark.parametrize(
    ("uid", "gid", "mode", "mine"),
    [
        (1000, 1000, 0o755, True),
        (0, 0, 0o755, True),  # root's
        (1001, 1000, 0o755, False),  # bob's
        (1000, 1000, 0o757, False),  # others write
        (1000, 1000, 0o775, True),  # group write by the private group
        (1000, 1002, 0o775, False),  # group write by a shared group
        (1000, 1002, 0o755, True),  # a shared group that cannot write
        (0, 1002, 0o775, False),
    ],
)
def test_only_the_operator_or_root_may_change_what_they_use(
    accounts: dict[str, Any], uid: int, gid: int, mode: int, mine: bool
) -> None:
    info = SimpleNamespace(st_uid=uid, st_gid=gid, st_mode=stat.S_IFDIR | mode)
    assert update.only_mine(info) is mine  # type: ignore[arg-type]


def test_an_operator_folder_is_a_real_folder_only_they_can_change(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert update.operator_owned(folder) is True
    folder.chmod(0o757)
    assert update.operator_owned(folder) is False
    folder.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(folder)
    assert update.operator_owned(link) is False
    plain = tmp_path / "file"
    plain.write_text("")
    plain.chmod(0o755)
    assert update.operator_owned(plain) is False


# ----------------------------------------------------------------------------------------------- the plan's reads


class PlanRun:
    """A :class:`update.Run` for ``_plan``: the deployed configuration, and a count of the squeue reads."""

    def __init__(self, deployed: dict[str, Any]) -> None:
        self.target = target()
        self.cluster = "dev-c"
        self.deployed = deployed
        self.squeue_reads = 0

    def deployed_config(self) -> dict[str, Any]:
        return self.deployed

    def read_jobs(self) -> list[update.Job]:
        self.squeue_reads += 1
        return [job("1", "a", "RUNNING")]


def queues(*names: str, strategy: str | None = None) -> dict[str, Any]:
    settings = {} if strategy is None else {"SlurmSettings": {"QueueUpdateStrategy": strategy}}
    return {"Scheduling": {**settings, "SlurmQueues": [{"Name": n, "ComputeResources": []} for n in names]}}


def rules(forward: list[Any], back: list[Any], asked: list[tuple[Any, Any]]) -> Any:
    def classify(old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
        asked.append((old, new))
        return forward if len(asked) == 1 else back

    return classify


def test_a_plan_that_stops_the_fleet_reads_the_nodes_the_removed_queues_and_the_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = queues("c", "a", "b"), queues("a")
    nodes = [node("a", "running"), node("b", "pending"), node("c", "stopped")]
    monkeypatch.setattr(update, "pcluster_nodes", lambda where: nodes)
    run, asked = PlanRun(old), []
    stop = change("Scheduling.SlurmQueues[b]", "fleet_stop", {"Name": "b"}, None)
    made = update._plan(run, new, rules([stop], [], asked), with_jobs=True)  # type: ignore[arg-type]
    assert asked == [(old, new), (new, old)]
    assert made == update.Plan(
        "dev", "dev-c", "eu-west-1", update.config_digest(new), [stop], [],
        queues=[update.QueueInfo("c", (), 0), update.QueueInfo("a", (), 1), update.QueueInfo("b", (), 1)],
        removed_queues=["b", "c"], jobs=[job("1", "a", "RUNNING")], strategy="COMPUTE_FLEET_STOP", replaced=[],
    )  # fmt: skip
    # A resume plans again without reading squeue (it asks nothing).
    again = update._plan(run, new, rules([stop], [], []), with_jobs=False)  # type: ignore[arg-type]
    assert again.jobs == [] and run.squeue_reads == 1 and again.removed_queues == ["b", "c"]


def test_a_plan_in_place_reads_jobs_only_where_nodes_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(update, "pcluster_nodes", lambda where: pytest.fail("no fleet stop: EC2 is not read"))
    image = change("Scheduling.SlurmQueues[a].Image", "in_place", "x", "y", "QUEUE_UPDATE_STRATEGY")
    run = PlanRun(queues("a"))
    made = update._plan(run, queues("a", strategy="DRAIN"), rules([image], [image], []), with_jobs=True)  # type: ignore[arg-type]
    assert (made.strategy, made.replaced, made.jobs, made.queues, run.squeue_reads) == (
        "DRAIN", ["a"], [job("1", "a", "RUNNING")], [], 1,
    )  # fmt: skip
    plain = change("Monitoring.X", "in_place", 1, 2, "SUPPORTED")
    made = update._plan(run, queues("a", strategy=""), rules([plain], [plain], []), with_jobs=True)  # type: ignore[arg-type]
    assert (made.strategy, made.replaced, made.jobs, run.squeue_reads) == ("COMPUTE_FLEET_STOP", [], [], 1)
    made = update._plan(run, queues("a", strategy="TERMINATE"), rules([plain], [plain], []), with_jobs=True)  # type: ignore[arg-type]
    assert made.strategy == "TERMINATE"


def test_a_refused_plan_reads_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(update, "pcluster_nodes", lambda where: pytest.fail("refused: EC2 is not read"))
    refused = change("Scheduling.SlurmQueues[a].Name", "refused", "a", "b")
    stop = change("Scheduling.SlurmQueues[a].X", "fleet_stop", 1, 2, "MANAGED_FSX")
    run = PlanRun(queues("a"))
    made = update._plan(run, queues("a"), rules([refused, stop], [], []), with_jobs=True)  # type: ignore[arg-type]
    assert (made.refused, made.queues, made.jobs, run.squeue_reads) == ([refused], [], [], 0)


def test_an_outcome_unknown_either_way_is_named_before_anything_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(update, "pcluster_nodes", lambda where: pytest.fail("not read"))
    odd = [change("A", "maybe"), change("B", "later"), change("C", "maybe"), change("D", "in_place")]
    with pytest.raises(CliError) as raised:
        update._plan(PlanRun({}), {}, rules([odd[3]], odd, []), with_jobs=True)  # type: ignore[arg-type]
    assert (raised.value.message, raised.value.exit_code) == (
        "the update rules returned outcomes mlcluster does not know: later, maybe",
        EXIT_FAILED,
    )


# ----------------------------------------------------------------------------------------------- a run's reads


def a_run(**clients: Any) -> update.Run:
    where = SimpleNamespace(name="dev", region="eu-west-1", default_user="ubuntu", client=lambda s: clients[s])
    fleet = update.Fleet(where, "dev-c")  # type: ignore[arg-type]
    return update.Run(where, "dev-c", fleet, update.UpdateState("dev", "eu-west-1"), None)  # type: ignore[arg-type]


def test_squeue_runs_on_the_head_node_as_the_default_user_with_a_fresh_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlcluster.cli import nodes, runcommand

    head = node("head", "running", "HeadNode")
    run = a_run()
    monkeypatch.setattr(nodes, "controller", lambda where: head if where is run.target else pytest.fail(f"{where}"))
    monkeypatch.setattr(update, "record_mark", lambda: "M1:")
    sent: list[tuple[Any, ...]] = []

    def answer(where: Any, at: Node, script: str, **options: Any) -> runcommand.Result:
        sent.append((at, script, options))
        return runcommand.Result("cmd-1", "Success", 0, "M1:5|q|u|RUNNING|1|0:01|j\n", "")

    monkeypatch.setattr(update.runcommand, "run", answer)
    assert run.read_jobs() == [update.Job("5", "q", "u", "RUNNING", 1, "0:01", "j")]
    assert sent == [
        (
            head,
            "squeue --all --noheader --format 'M1:%i|%P|%u|%T|%D|%M|%j'\n",
            {"comment": "mlcluster update dev: squeue", "timeout_seconds": 120, "user": "ubuntu", "console": None},
        )
    ]


@pytest.mark.parametrize(
    ("status", "code", "out", "err", "shown"),
    [
        ("Failed", 1, "", "squeue: error: Invalid user\n", "(Failed, exit 1): squeue: error: Invalid user"),
        ("Success", 2, "x" * 400, "", f"(Success, exit 2): {'x' * 300}"),
        ("TimedOut", 0, "out\n", "\x1b[31m", "(TimedOut, exit 0): out\\n\\x1b[31m"),
    ],
)
def test_a_failed_squeue_is_quoted_escaped_to_its_last_300_characters(
    monkeypatch: pytest.MonkeyPatch, status: str, code: int, out: str, err: str, shown: str
) -> None:
    from mlcluster.cli import nodes, runcommand

    head = node("head", "running", "HeadNode")
    monkeypatch.setattr(nodes, "controller", lambda where: head)
    result = runcommand.Result("cmd-9", status, code, out, err)
    monkeypatch.setattr(update.runcommand, "run", lambda *a, **k: result)
    with pytest.raises(CliError) as raised:
        a_run().read_jobs()
    assert (raised.value.message, raised.value.exit_code) == (
        f"squeue on the head node failed {shown}\n  what to do: `aws ssm get-command-invocation --region eu-west-1 "
        f"--command-id cmd-9 --instance-id {head.ssm_target}`; nothing was changed",
        EXIT_FAILED,
    )


def test_a_listing_one_character_short_of_the_limit_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlcluster.cli import nodes, runcommand

    monkeypatch.setattr(nodes, "controller", lambda where: node("head", "running", "HeadNode"))
    monkeypatch.setattr(update, "record_mark", lambda: "M:")
    record = "M:1|q|u|PENDING|1|0:00|"
    name = "n" * (runcommand.OUTPUT_LIMIT - len(record) - 2)
    listing = record + name + "\n"
    monkeypatch.setattr(update.runcommand, "run", lambda *a, **k: runcommand.Result("c", "Success", 0, listing, ""))
    assert len(listing) == runcommand.OUTPUT_LIMIT - 1
    assert [j.name for j in a_run().read_jobs()] == [name]
    listing = record + name + "n\n"
    with pytest.raises(CliError) as raised:
        a_run().read_jobs()
    assert raised.value.message.startswith(
        "squeue's listing on the head node was cut at Run Command's 24000 characters"
    )


def test_the_skip_names_the_custom_resource_only_when_the_cluster_stack_is_stuck() -> None:
    client, stub = stubbed("cloudformation")
    asked = {"StackName": "dev-Cluster", "TemplateStage": "Original"}
    # Built here: botocore decodes GetTemplate's TemplateBody in the answer it is given, in place, so a
    # module-level answer is a dict by a second run in the same process (mutmut runs the suite twice).
    one = {"Resources": {"Pc": {"Type": "Custom::PclusterCluster", "Properties": {}}}}
    stub.add_response("get_template", {"TemplateBody": json.dumps(one)}, asked)
    two = {"Resources": {"A": {"Type": "Custom::PclusterCluster"}, "B": {"Type": "Custom::PclusterCluster"}}}
    stub.add_response("get_template", {"TemplateBody": json.dumps(two)}, asked)
    stub.add_client_error("get_template", "Throttling", "slow", 400, expected_params=asked)
    run = a_run(cloudformation=client)
    stuck = {"dev-Cluster": "UPDATE_ROLLBACK_FAILED", "dev-c": "UPDATE_ROLLBACK_COMPLETE"}
    with stub:
        assert run.advice({"dev-Cluster": "UPDATE_ROLLBACK_COMPLETE"}) == ["  dev-Cluster: UPDATE_ROLLBACK_COMPLETE"]
        assert "--resources-to-skip Pc`" in run.advice(stuck)[0]
        assert "--resources-to-skip <logical id of the Custom::PclusterCluster>`" in run.advice(stuck)[0]
        assert run.cluster_resource() == ""
    stub.assert_no_pending_responses()


def test_only_compute_instances_not_ended_count_as_live(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [
        node("head-node", "running", "HeadNode"),
        node("login", "running", "LoginNode"),
        node("gpu", "pending"),
        node("gpu", "running"),
        node("gpu", "stopping"),
        node("gpu", "shutting-down"),
        node("gpu", "terminated"),
        node("gpu", "stopped"),
        node("untagged", "running", ""),
        node("gpu", "rebooting"),
    ]
    monkeypatch.setattr(update, "pcluster_nodes", lambda where: found)
    assert [(n.group, n.status) for n in a_run().live_compute_instances()] == [
        ("gpu", "pending"),
        ("gpu", "running"),
        ("gpu", "stopping"),
        ("untagged", "running"),
        ("gpu", "rebooting"),
    ]


# ----------------------------------------------------------------------------------------------- the assembly


def artifacts(tmp_path: Path, templates: dict[str, str]) -> list[Any]:
    found = []
    for name, body in templates.items():
        (tmp_path / f"{name}.template.json").write_text(body)
        found.append(SimpleNamespace(name=name, template_file=tmp_path / f"{name}.template.json"))
    return found


def test_the_assembly_digest_covers_every_stacks_name_and_template_in_name_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from mlcluster.cli import diff

    stacks = artifacts(tmp_path, {"dev-Storage": "{}", "dev-Cluster": '{"Resources": {}}'})
    asked: list[tuple[Path, str]] = []
    monkeypatch.setattr(diff, "stack_artifacts", lambda assembly, stage: asked.append((assembly, stage)) or stacks)
    expected = hashlib.sha256()
    for name, body in (("dev-Cluster", b'{"Resources": {}}'), ("dev-Storage", b"{}")):
        expected.update(f"{name}\0{hashlib.sha256(body).hexdigest()}\0".encode())
    assert update.assembly_digest(tmp_path, "dev") == expected.hexdigest()
    assert asked == [(tmp_path, "dev")]
    stacks.reverse()
    assert update.assembly_digest(tmp_path, "dev") == expected.hexdigest()
    (tmp_path / "dev-Storage.template.json").write_text("{ }")
    assert update.assembly_digest(tmp_path, "dev") != expected.hexdigest()


def test_the_synthesis_returns_the_assembly_the_cluster_template_and_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlcluster.cli import diff

    stacks = artifacts(tmp_path, {"dev-Network": '{"n": 1}', "dev-Cluster": '{"c": 2}'})
    made: list[tuple[Path, str, Path]] = []
    monkeypatch.setattr(diff, "synthesize", lambda folder, env, out: made.append((folder, env, out)) or out / "asm")
    monkeypatch.setattr(diff, "stack_artifacts", lambda assembly, stage: stacks)
    monkeypatch.setattr(update, "assembly_digest", lambda assembly, env: f"digest of {assembly} {env}")
    assert update.synthesize_assembly(Path("envs"), "dev", tmp_path) == (
        tmp_path / "asm",
        {"c": 2},
        f"digest of {tmp_path / 'asm'} dev",
    )
    assert made == [(Path("envs"), "dev", tmp_path)]
    stacks.pop()
    with pytest.raises(CliError) as raised:
        update.synthesize_assembly(Path("envs"), "dev", tmp_path)
    assert (raised.value.message, raised.value.exit_code) == (
        "the synthesized dev has no stack dev-Cluster",
        EXIT_FAILED,
    )


def test_a_refusal_of_the_lock_files_says_nothing_was_changed_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from mlcluster import lockfile
    from mlcluster.cli import diff
    from mlcluster.config.schema import NOT_A_VALUE, ConfigError, Problem

    monkeypatch.setattr(diff, "load_one", lambda folder, env: f"environment {env} of {folder}")

    def guard(assembly: Path, environments: list[Any]) -> list[str]:
        if assembly == Path("bad"):
            raise ConfigError("dev.lock.json", [Problem("Bucket", NOT_A_VALUE, "the bucket would be replaced")])
        return [f"note on {assembly} for {environments}"]

    monkeypatch.setattr(lockfile, "guard_assembly", guard)
    assert update.guard_assembly(Path("envs"), "dev", Path("good")) == ["note on good for ['environment dev of envs']"]
    with pytest.raises(CliError) as raised:
        update.guard_assembly(Path("envs"), "dev", Path("bad"))
    assert (raised.value.message, raised.value.exit_code) == (
        "the lock files refuse the synthesized dev (the check `cdk synth` runs); nothing was changed\n"
        "dev.lock.json: Bucket: the bucket would be replaced",
        EXIT_FAILED,
    )


# ----------------------------------------------------------------------------------------------- stop, start, restore


class FakeFleet:
    """The fleet item as :class:`update.Run` uses it: statuses read in turn, and every request and wait."""

    def __init__(self, *statuses: str) -> None:
        self.statuses = list(statuses)
        self.calls: list[tuple[Any, ...]] = []
        self.table = "parallelcluster-dev-c"

    def status(self) -> str:
        self.calls.append(("status",))
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def request(self, current: str, wanted: str) -> None:
        self.calls.append(("request", current, wanted))

    def wait(self, table: dict[str, str], goal: str, timeout: int, console: Any) -> None:
        self.calls.append(("wait", table is update.STOP_WAIT, table is update.START_WAIT, goal, timeout))


def fleet_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fleet: FakeFleet, before: str | None) -> Any:
    from io import StringIO

    from rich.console import Console

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    where = SimpleNamespace(name="dev", region="eu-west-1")
    out = StringIO()
    run = update.Run(where, "dev-c", fleet, update.UpdateState("dev", "eu-west-1"), Console(file=out, width=300))  # type: ignore[arg-type]
    run.state.data = {"fleet_before": before, "steps": {}, "plan_sha256": "p" * 64}
    monkeypatch.setattr(
        run, "wait_compute_instances_ended", lambda deadline, timeout: fleet.calls.append(("ec2", timeout))
    )
    monkeypatch.setattr(run, "check_no_compute_instances", lambda: fleet.calls.append(("ec2 once",)))
    monkeypatch.setattr(update, "time", SimpleNamespace(monotonic=lambda: 0.0))
    return run, out


@pytest.mark.parametrize(
    ("before", "status", "calls", "printed", "recorded"),
    [
        (
            None, "RUNNING",
            [("status",), ("request", "RUNNING", "STOP_REQUESTED"), ("wait", True, False, "STOPPED", 90), ("ec2", 90)],
            "requested STOP_REQUESTED for the compute fleet of dev-c (was RUNNING)\n", "RUNNING",
        ),
        (
            None, "PROTECTED",
            [("status",), ("request", "PROTECTED", "STOP_REQUESTED"), ("wait", True, False, "STOPPED", 90), ("ec2", 90)],
            "requested STOP_REQUESTED for the compute fleet of dev-c (was PROTECTED)\n", "PROTECTED",
        ),
        (None, "STOPPED", [("status",), ("ec2 once",)], "", "STOPPED"),
        # A resume: the stop this run asked for is under way, done, or was undone by a failed run's restore.
        ("RUNNING", "STOP_REQUESTED", [("status",), ("wait", True, False, "STOPPED", 90), ("ec2", 90)], "", "RUNNING"),
        ("RUNNING", "STOPPING", [("status",), ("wait", True, False, "STOPPED", 90), ("ec2", 90)], "", "RUNNING"),
        ("RUNNING", "STOPPED", [("status",), ("ec2", 90)], "", "RUNNING"),
        (
            "RUNNING", "RUNNING",
            [("status",), ("request", "RUNNING", "STOP_REQUESTED"), ("wait", True, False, "STOPPED", 90), ("ec2", 90)],
            "requested STOP_REQUESTED for the compute fleet of dev-c (was RUNNING)\n", "RUNNING",
        ),
        ("STOPPED", "STOPPED", [("status",), ("ec2 once",)], "", "STOPPED"),
    ],
)  # fmt: skip
def test_the_stop_asks_only_what_is_needed_and_records_what_the_fleet_was(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    before: str | None,
    status: str,
    calls: list[Any],
    printed: str,
    recorded: str,
) -> None:
    fleet = FakeFleet(status)
    run, out = fleet_run(monkeypatch, tmp_path, fleet, before)
    run.stop(90)
    assert fleet.calls == calls
    assert out.getvalue() == printed + "the compute fleet of dev-c is STOPPED\n"
    saved = update.UpdateState("dev", "eu-west-1").load()
    assert saved["fleet_before"] == recorded and list(saved["steps"]) == ["stop"]


@pytest.mark.parametrize(
    ("before", "status", "why"),
    [
        (None, "STOPPING", "a start or stop is under way"),
        (None, "UNKNOWN", "mlcluster cannot tell its state"),
        (None, "BROKEN", "mlcluster cannot tell its state"),
        ("RUNNING", "START_REQUESTED", "a start or stop is under way"),
        ("RUNNING", "STARTING", "a start or stop is under way"),
    ],
)
def test_the_stop_leaves_a_fleet_alone_that_is_moving_or_unreadable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, before: str | None, status: str, why: str
) -> None:
    fleet = FakeFleet(status)
    run, _ = fleet_run(monkeypatch, tmp_path, fleet, before)
    with pytest.raises(CliError) as raised:
        run.stop(90)
    assert (raised.value.message, raised.value.exit_code) == (
        f"the compute fleet of dev-c is {status}: {why}; nothing was changed\n"
        "  what to do: `mlcluster status dev`; run again once it is RUNNING or STOPPED",
        EXIT_FAILED,
    )
    assert fleet.calls == [("status",)] and run.state.data["fleet_before"] == before
    assert not run.state.path.exists()


@pytest.mark.parametrize(
    ("before", "status", "calls", "printed"),
    [
        (None, "RUNNING", [], ""),
        ("STOPPED", "STOPPED", [], ""),
        ("RUNNING", "RUNNING", [("status",)], "the compute fleet of dev-c is RUNNING\n"),
        (
            "RUNNING", "STOPPED",
            [("status",), ("request", "STOPPED", "START_REQUESTED"), ("wait", False, True, "RUNNING", 90)],
            "requested START_REQUESTED for the compute fleet of dev-c\nthe compute fleet of dev-c is RUNNING\n",
        ),
        (
            "PROTECTED", "STARTING",
            [("status",), ("wait", False, True, "RUNNING", 90)], "the compute fleet of dev-c is RUNNING\n",
        ),
        (
            "RUNNING", "START_REQUESTED",
            [("status",), ("wait", False, True, "RUNNING", 90)], "the compute fleet of dev-c is RUNNING\n",
        ),
    ],
)  # fmt: skip
def test_the_start_restores_only_a_fleet_this_run_found_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, before: str | None, status: str, calls: list[Any], printed: str
) -> None:
    fleet = FakeFleet(status)
    run, out = fleet_run(monkeypatch, tmp_path, fleet, before)
    run.start(90)
    assert fleet.calls == calls and out.getvalue() == printed
    assert list(update.UpdateState("dev", "eu-west-1").load()["steps"]) == ["start"]


def test_a_restore_after_a_failure_says_what_became_of_the_fleet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settled = {"dev-c": "UPDATE_COMPLETE", "dev-Cluster": "UPDATE_ROLLBACK_COMPLETE"}
    monkeypatch.setattr(update, "stack_states", lambda where, cluster: settled)
    digest: list[str | None] = [None]
    monkeypatch.setattr(update, "_deployed_digest", lambda run: digest[0])

    def restored(before: str | None, *statuses: str) -> tuple[str, list[Any], list[str]]:
        fleet = FakeFleet(*statuses)
        run, _ = fleet_run(monkeypatch, tmp_path, fleet, before)
        run.state.data["steps"] = {"stop": {"at": "2026-11-28T12:00:00Z"}}
        said = run.restore(60)
        return said, fleet.calls, list(run.state.data["steps"])

    assert restored("STOPPED", "STOPPED") == ("the compute fleet was not stopped by this run", [], ["stop"])
    assert restored(None, "STOPPED") == ("the compute fleet was not stopped by this run", [], ["stop"])
    assert restored("RUNNING", "RUNNING") == (
        "the compute fleet of dev-c is RUNNING (it was not stopped)",
        [("status",)],
        [],
    )
    start = [("status",), ("status",), ("request", "STOPPED", "START_REQUESTED"), ("wait", False, True, "RUNNING", 60)]
    assert restored("PROTECTED", "STOPPED") == (
        "the compute fleet of dev-c was started again: the cluster runs its previous configuration",
        start,
        [],
    )
    digest[0] = "p" * 64
    assert restored("RUNNING", "STOPPED") == (
        "the compute fleet of dev-c was started again (its stack has the new configuration)",
        start,
        [],
    )
    settled["dev-Cluster"] = "UPDATE_ROLLBACK_FAILED"
    assert restored("RUNNING", "STOPPED") == (
        "the compute fleet stays STOPPED: dev-Cluster is UPDATE_ROLLBACK_FAILED, not settled",
        [],
        ["stop"],
    )


def test_a_restore_whose_start_fails_names_the_first_line_of_the_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        update, "stack_states", lambda where, cluster: {"dev-c": "CREATE_COMPLETE"} | {"dev-Cluster": "UPDATE_COMPLETE"}
    )
    fleet = FakeFleet("STOPPED")

    def denied(current: str, wanted: str) -> None:
        raise CliError("UpdateItem failed: AccessDenied\n  what to do: ask", EXIT_AWS)

    fleet.request = denied  # type: ignore[method-assign]
    run, _ = fleet_run(monkeypatch, tmp_path, fleet, "RUNNING")
    run.state.data["steps"] = {"stop": {"at": "2026-11-28T12:00:00Z"}, "start": {"at": "2026-11-28T12:00:00Z"}}
    assert run.restore(60) == "starting the compute fleet again failed too: UpdateItem failed: AccessDenied"
    assert list(run.state.data["steps"]) == ["stop"]


@pytest.mark.parametrize(
    ("states", "blocker"),
    [
        ({"dev-c": "UPDATE_ROLLBACK_COMPLETE", "dev-Cluster": "IMPORT_COMPLETE"}, None),
        ({"dev-c": "CREATE_COMPLETE", "dev-Cluster": "IMPORT_ROLLBACK_COMPLETE"}, None),
        (
            {"dev-Cluster": "UPDATE_COMPLETE"},
            "ParallelCluster's stack dev-c is unknown, and a fleet starts only from CREATE_COMPLETE, UPDATE_COMPLETE, "
            "UPDATE_ROLLBACK_COMPLETE",
        ),
        (
            {"dev-c": "IMPORT_COMPLETE", "dev-Cluster": "UPDATE_COMPLETE"},
            "ParallelCluster's stack dev-c is IMPORT_COMPLETE, and a fleet starts only from CREATE_COMPLETE, "
            "UPDATE_COMPLETE, UPDATE_ROLLBACK_COMPLETE",
        ),
        ({"dev-c": "UPDATE_COMPLETE"}, "dev-Cluster is None, not settled"),
        ({"dev-c": "UPDATE_COMPLETE", "dev-Cluster": "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS"},
         "dev-Cluster is UPDATE_COMPLETE_CLEANUP_IN_PROGRESS, not settled"),
    ],
)  # fmt: skip
def test_the_fleet_starts_only_from_a_working_parallelcluster_stack_under_a_settled_cluster_stack(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, states: dict[str, str], blocker: str | None
) -> None:
    run, _ = fleet_run(monkeypatch, tmp_path, FakeFleet("STOPPED"), "RUNNING")
    assert run.start_blocker(states) == blocker
    monkeypatch.setattr(update, "stack_states", lambda where, cluster: states)
    assert run.start_blocker() == blocker


def test_unsettled_stacks_are_an_aws_error_when_one_could_not_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    states = {"dev-Network": "not found", "dev-Storage": "UPDATE_COMPLETE", "dev-c": "IMPORT_ROLLBACK_COMPLETE"}
    monkeypatch.setattr(update, "stack_states", lambda where, cluster: states)
    run = a_run()
    update._check_stacks_settled(run)  # "not found" is no stack to wait for
    states["dev-Storage"] = "UPDATE_ROLLBACK_FAILED"
    with pytest.raises(CliError) as stuck:
        update._check_stacks_settled(run)
    assert (stuck.value.exit_code, stuck.value.message.splitlines()[0]) == (
        EXIT_FAILED,
        "these stacks are not settled; nothing was changed:",
    )
    states["dev-Network"] = "unknown (DescribeStacks failed: AccessDenied)"
    with pytest.raises(CliError) as unread:
        update._check_stacks_settled(run)
    assert (unread.value.exit_code, unread.value.message) == (
        EXIT_AWS,
        "these stacks are not settled; nothing was changed:\n"
        "  dev-Network: unknown (DescribeStacks failed: AccessDenied)\n"
        "  dev-Storage: UPDATE_ROLLBACK_FAILED  -> `aws cloudformation continue-update-rollback --region eu-west-1 "
        "--stack-name dev-Storage`\n"
        "  what to do: let them settle (or fix them as shown), then run `mlcluster update dev`",
    )


def instance_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live: list[int], statuses: list[str]
) -> tuple[Any, Clock, list[str]]:
    fleet = FakeFleet(*statuses)
    run, _ = fleet_run(monkeypatch, tmp_path, fleet, "RUNNING")
    monkeypatch.undo()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    clock = Clock()
    monkeypatch.setattr(update, "time", clock)
    reads: list[str] = []

    def instances() -> list[Node]:
        reads.append("ec2")
        return [node("gpu", "running") for _ in range(live.pop(0) if len(live) > 1 else live[0])]

    monkeypatch.setattr(run, "live_compute_instances", instances)
    return run, clock, reads


def test_the_instance_wait_ends_once_ec2_shows_none_live_under_a_stopped_item(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run, clock, reads = instance_wait(monkeypatch, tmp_path, [2, 1, 0], ["STOPPED"])
    run.wait_compute_instances_ended(clock.now + 30, 30)
    assert clock.sleeps == [15.0, 15.0] and reads == ["ec2"] * 3
    assert run.fleet.calls == [("status",)] * 3


@pytest.mark.parametrize(
    ("live", "listed"),
    [(5, ", ".join(["i-gpu-running running"] * 5)), (6, ", ".join(["i-gpu-running running"] * 5) + ", ...")],
)
def test_the_instance_wait_gives_up_at_the_deadline_naming_five_instances(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live: int, listed: str
) -> None:
    run, clock, reads = instance_wait(monkeypatch, tmp_path, [live], ["STOPPED"])
    with pytest.raises(CliError) as raised:
        run.wait_compute_instances_ended(clock.now + 30, 30)
    assert clock.sleeps == [15.0, 15.0] and len(reads) == 3  # a read at the deadline counts
    assert (raised.value.exit_code, raised.value.message) == (
        EXIT_TIMEOUT,
        f"the status item of dev-c says STOPPED but after --stop-timeout 30 s EC2 still shows {live} compute "
        f"instance(s) pending, running or stopping ({listed}): clustermgtd did not terminate them, or someone else "
        "wrote STOPPED; nothing was deployed\n  what to do: check who wrote the item (DynamoDB table "
        "parallelcluster-dev-c), clustermgtd's log on the head node (/var/log/parallelcluster/clustermgtd) and "
        "`mlcluster status dev`",
    )


def test_the_instance_wait_reads_once_even_past_its_deadline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run, clock, reads = instance_wait(monkeypatch, tmp_path, [0], ["STOPPED"])
    run.wait_compute_instances_ended(clock.now - 1, 30)
    assert reads == ["ec2"] and clock.sleeps == []


def test_the_instance_wait_stops_when_the_item_leaves_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run, clock, reads = instance_wait(monkeypatch, tmp_path, [0], ["START_REQUESTED"])
    with pytest.raises(CliError) as raised:
        run.wait_compute_instances_ended(clock.now + 30, 30)
    assert reads == ["ec2"] and clock.sleeps == []
    assert (raised.value.exit_code, raised.value.message) == (
        EXIT_FAILED,
        "the compute fleet of dev-c went 'START_REQUESTED' while mlcluster waited for EC2 to show its compute "
        "instances ended: another request changed it, or ParallelCluster cannot read its status; nothing was "
        "deployed\n  what to do: `mlcluster status dev`; check who wrote the item (DynamoDB table "
        "parallelcluster-dev-c)",
    )


def test_a_stopped_item_with_no_live_compute_instance_is_trusted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run, _, reads = instance_wait(monkeypatch, tmp_path, [0], ["STOPPED"])
    run.check_no_compute_instances()
    assert reads == ["ec2"]


def test_a_save_that_fails_midway_leaves_the_old_state_and_no_temporary_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    state = update.UpdateState("dev", "eu-west-1")
    state.data = {"steps": {}}
    state.save()

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(update.json, "dump", full)
    state.data = {"steps": {"stop": {}}}
    with pytest.raises(OSError, match="No space left on device"):
        state.save()
    assert [p.name for p in state.folder.iterdir()] == ["dev.json"]
    assert json.loads(state.path.read_text()) == {"steps": {}}


def test_the_deployed_configuration_is_read_from_the_original_template_as_text_or_object() -> None:
    client, stub = stubbed("cloudformation")
    asked = {"StackName": "dev-Cluster", "TemplateStage": "Original"}
    config = {"Region": "eu-west-1", "Image": {"Os": "ubuntu2204"}}
    body = {"Resources": {"Pc": {"Type": "Custom::PclusterCluster", "Properties": {"ClusterConfiguration": config}}}}
    stub.add_response("get_template", {"TemplateBody": json.dumps(body)}, asked)
    stub.add_response("get_template", {"TemplateBody": json.dumps({"Resources": {}})}, asked)
    stub.add_client_error(
        "get_template", "ValidationError", "Stack with id dev-Cluster does not exist", 400, expected_params=asked
    )
    run = a_run(cloudformation=client)
    with stub:
        assert run.deployed_config() == config
        with pytest.raises(CliError) as missing:
            run.deployed_config()
        with pytest.raises(CliError) as gone:
            run.deployed_config()
    assert missing.value.message.startswith("the deployed dev-Cluster has 0 Custom::PclusterCluster resources")
    assert (gone.value.exit_code, gone.value.message.splitlines()[0]) == (
        EXIT_AWS,
        "GetTemplate for dev-Cluster failed: ValidationError: Stack with id dev-Cluster does not exist",
    )
    # A client that hands the body over already parsed (botocore does for JSON) is read the same way.
    parsed = a_run(cloudformation=SimpleNamespace(get_template=lambda **asked_: {"TemplateBody": body}))
    assert parsed.deployed_config() == config
    assert parsed.cluster_resource() == "Pc"
