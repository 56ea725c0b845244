"""``mlcluster status``: the whole screen an operator reads, the colour of each state, which task is a DRA's.

The screen is drawn from a full status document (every part: stacks, a cluster with failing and scaling nodes
and a late daily copy, Lustre with its DRAs, what is left outside the app, the outputs, the problems) and
compared whole with a committed snapshot.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from mlcluster.cli import status as status_module
from mlcluster.cli.status import HEALTHY_NODE, HEALTHY_STACK, _pages, _state, _task_matches, _when

WHEN = datetime(2026, 11, 28, 9, 5, tzinfo=UTC)


def screen(data: dict[str, Any]) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(status_module.render(data))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def node(group: str, instance: str, status: str, message: str) -> dict[str, Any]:
    return {"group": group, "instance_id": instance, "status": status, "message": message}


FULL: dict[str, Any] = {
    "environment": "p5",
    "region": "us-east-2",
    "backend": "pcluster",
    "stacks": [
        {
            "stack": "p5-Network",
            "status": "UPDATE_COMPLETE",
            "last_change": WHEN,
            "reason": "",
            "outputs": {"VpcId": "vpc-1"},
        },
        {
            "stack": "p5-Storage",
            "status": "UPDATE_ROLLBACK_FAILED",
            "last_change": "2026-11-27",
            "reason": "Resource update cancelled",
            "outputs": {"LustreFileSystemId": "fs-1", "DataBucketName": "data"},
        },
        {"stack": "p5-Cluster", "status": "NOT_DEPLOYED", "last_change": None, "reason": "", "outputs": {}},
    ],
    "cluster": {
        "backend": "pcluster",
        "name": "p5-train",
        "status": "UPDATE_FAILED",
        "failure": "head node bootstrap failed",
        "groups": [
            {
                "group": "compute-gpu",
                "instance_type": "p5.48xlarge",
                "current": 3,
                "target": 4,
                "status": "",
                "nodes": {"running": 3, "pending": 1},
            },
            {"group": "idle", "instance_type": "c5.large", "current": 0, "target": 0, "status": "", "nodes": {}},
        ],
        "failing_nodes": [node("compute-gpu", "i-0bad", "stopped", "stopped by the user")],
        "scaling_nodes": [node("compute-gpu", "i-0new", "pending", "")],
        "log_group": "/aws/parallelcluster/p5-train-<timestamp>",
        "daily_copy": {
            "where": "s3://backups/patch/p5/daily/",
            "last": WHEN,
            "last_copy": "s3://backups/patch/p5/daily/2026-11-28/SHA256SUMS",
            "age_hours": 50.5,
            "late": True,
        },
    },
    "lustre": {
        "file_system": "fs-1",
        "lifecycle": "UPDATING",
        "failure": "",
        "deployment_type": "PERSISTENT_2",
        "capacity_gib": 2400,
        "throughput_mbps_per_tib": 250,
        "throughput_mbps": 600,
        "dns_name": "fs-1.fsx.us-east-2.amazonaws.com",
        "mount_name": "abcdefgh",
        "dras": [
            {
                "association": "dra-1",
                "file_system_path": "/data",
                "repository": "s3://data/data",
                "lifecycle": "AVAILABLE",
                "failure": "",
                "latest_task": {
                    "task": "task-1",
                    "type": "EXPORT_TO_REPOSITORY",
                    "lifecycle": "EXECUTING",
                    "total": 10,
                    "succeeded": 7,
                    "failed": 1,
                    "updated": WHEN,
                    "failure": "",
                },
            },
            {
                "association": "dra-2",
                "file_system_path": "/scratch",
                "repository": "s3://data/scratch",
                "lifecycle": "MISCONFIGURED",
                "failure": "bucket policy",
                "latest_task": {
                    "task": "task-2",
                    "type": "NEW_KIND",
                    "lifecycle": "PENDING",
                    "total": None,
                    "succeeded": None,
                    "failed": None,
                    "updated": None,
                    "failure": "",
                },
            },
            {
                "association": "dra-3",
                "file_system_path": "/models",
                "repository": "s3://data/models",
                "lifecycle": "CREATING",
                "failure": "",
                "latest_task": None,
            },
        ],
    },
    "orphans": [
        {"stack": "p5-Old", "bills": "nothing", "remove": "delete the stack", "adopt": "-"},
        {"resource": "arn:aws:s3:::kept", "bills": "storage", "remove": "empty and delete", "adopt": "import"},
    ],
    "next": ["mlcluster ssh p5", "mlcluster smoke p5"],
    "problems": ["p5-Storage is UPDATE_ROLLBACK_FAILED", "cluster p5-train is UPDATE_FAILED"],
}


def test_the_whole_status_screen_of_an_environment_needing_attention(snapshot: Any) -> None:
    assert screen(FULL) == snapshot


def test_the_screen_without_a_cluster_a_file_system_or_problems_is_the_stacks_and_outputs() -> None:
    data = {**FULL, "cluster": None, "lustre": None, "orphans": [], "next": [], "problems": []}
    data["stacks"] = FULL["stacks"][:1]
    assert screen(data) == "\n".join(
        [
            "p5 (us-east-2, backend pcluster)",
            "Stacks",
            "┏━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┓",
            "┃ stack      ┃ status          ┃ last change          ┃ reason ┃",
            "┡━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━┩",
            "│ p5-Network │ UPDATE_COMPLETE │ 2026-11-28 09:05 UTC │        │",
            "└────────────┴─────────────────┴──────────────────────┴────────┘",
            "Outputs",
            "┌───────┬───────┐",
            "│ VpcId │ vpc-1 │",
            "└───────┴───────┘",
        ]
    )


def test_a_hyperpod_cluster_without_failures_shows_no_failure_line_and_a_first_daily_copy_not_yet_made() -> None:
    cluster = {
        **FULL["cluster"],
        "backend": "hyperpod",
        "status": "InService",
        "failure": "",
        "failing_nodes": [],
        "scaling_nodes": [],
        "groups": [],
        "daily_copy": {"where": "s3://b/p/", "last": None, "last_copy": "", "age_hours": None, "late": False},
    }
    shown = screen(
        {**FULL, "stacks": [], "cluster": cluster, "lustre": None, "orphans": [], "next": [], "problems": []}
    )
    lines = shown.splitlines()
    assert lines[lines.index("Outputs") - 2 : lines.index("Outputs")] == [
        "logs: /aws/parallelcluster/p5-train-<timestamp>",
        "daily copy of the controller's Slurm state: none yet in s3://b/p/",
    ]
    assert "failure:" not in shown and "Nodes needing attention" not in shown and "Scaling" not in shown


@pytest.mark.parametrize(
    ("text", "good", "style"),
    [
        ("CREATE_COMPLETE", HEALTHY_STACK, "green"),
        ("UPDATE_ROLLBACK_FAILED", HEALTHY_STACK, "bold red"),
        ("NOT_DEPLOYED", HEALTHY_STACK, "yellow"),
        ("running", HEALTHY_NODE, "green"),
        ("failed", HEALTHY_NODE, "bold red"),
        ("pending", HEALTHY_NODE, "yellow"),
    ],
)
def test_each_state_is_green_when_good_red_when_failed_else_yellow(text: str, good: set[str], style: str) -> None:
    shown = _state(text, good)
    assert (shown.plain, shown.style) == (text, style)


def test_a_time_is_shown_in_utc_minutes_and_nothing_as_a_dash() -> None:
    assert [_when(WHEN), _when("2026-11-27"), _when(None), _when("")] == [
        "2026-11-28 09:05 UTC",
        "2026-11-27",
        "-",
        "-",
    ]


DRA = {"FileSystemPath": "/data/train", "DataRepositoryPath": "s3://bucket/prefix/train/"}


@pytest.mark.parametrize(
    ("paths", "matches"),
    [
        (None, True),
        ([], True),
        (["/data/train"], True),
        (["data/train/"], True),
        (["/data"], True),  # above the DRA's folder
        (["/data/train/shard-1"], True),  # inside it
        (["/data/train2"], False),  # a sibling sharing a prefix
        (["/other", "/data/train/x"], True),  # any path of several
        (["/other"], False),
        (["s3://bucket/prefix/train/part"], True),
        (["s3://bucket/prefix"], True),
        (["s3://bucket/prefix/training"], False),
        (["s3://other/prefix/train"], False),
        (["/"], True),  # the whole file system
    ],
)
def test_a_task_reaches_a_dra_when_a_path_is_its_folder_above_or_inside_it(
    paths: list[str] | None, matches: bool
) -> None:
    task = {} if paths is None else {"Paths": paths}
    assert _task_matches(task, DRA) is matches


def test_a_dra_without_paths_is_reached_only_by_the_whole_file_system() -> None:
    assert _task_matches({"Paths": ["/x"]}, {}) is True  # a DRA on the root (no folder) holds every path


def test_every_page_of_a_paged_fsx_call_is_read_with_its_token() -> None:
    calls: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = [
        {"Items": [{"n": 1}, {"n": 2}], "NextToken": "a"},
        {"NextToken": "b"},
        {"Items": [{"n": 3}], "NextToken": ""},
    ]

    def call(**request: Any) -> dict[str, Any]:
        calls.append(request)
        return answers[len(calls) - 1]

    assert _pages(call, "Items", Filters=["f"]) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert calls == [{"Filters": ["f"]}, {"Filters": ["f"], "NextToken": "a"}, {"Filters": ["f"], "NextToken": "b"}]
