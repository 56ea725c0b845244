"""``mlcluster status``: the screen and the ``--json`` document an operator reads (issue 27, survivors of the cli
sample with seed 3).

Driven like ``test_status``: the command against moto, FSx's DRA and task answers recorded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from mlcluster.cli import status as status_module
from tests.cli.conftest import Aws, World, aws_client
from tests.cli.test_status import dras, fsx_answers  # noqa: F401 (the fixture)


def task(task_id: str, kind: str, paths: list[str], day: int) -> dict[str, Any]:
    """A finished data repository task of ``kind`` over ``paths``, created on November ``day``."""
    return {
        "TaskId": task_id,
        "Lifecycle": "SUCCEEDED",
        "Type": kind,
        "CreationTime": datetime(2026, 11, day, 8, 0, tzinfo=UTC),
        "Paths": paths,
        "Status": {"TotalCount": 12, "SucceededCount": 12, "FailedCount": 0},
    }


def test_a_dras_latest_task_is_the_newest_export_of_a_path_under_it(aws: Aws, hyperpod: World) -> None:
    """An export of ``data/checkpoints`` (Paths relative to the mount point, as FSx takes them) is newer than the
    import over the whole file system: it is the /data DRA's latest task, in ``--json`` and in the DRA table.
    At the edge: a newer export of another folder (``scratch``) is not the /data DRA's."""
    aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(hyperpod), dras(hyperpod))
    answer = {
        "DataRepositoryTasks": [
            task("task-0000000000000000a", "IMPORT_METADATA_FROM_REPOSITORY", [], 19),
            task("task-0000000000000000b", "EXPORT_TO_REPOSITORY", ["data/checkpoints"], 20),
            task("task-0000000000000000c", "EXPORT_TO_REPOSITORY", ["/scratch/tmp"], 21),
        ]
    }
    aws.answer("fsx", "DescribeDataRepositoryTasks", answer, answer)
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    [dra] = json.loads(result.stdout)["lustre"]["dras"]
    assert (dra["file_system_path"], dra["latest_task"]["task"], dra["latest_task"]["type"]) == (
        "/data",
        "task-0000000000000000b",
        "EXPORT_TO_REPOSITORY",
    )
    text = hyperpod.run("status", "hyperpod")
    assert text.exit_code == 0, text.output
    row = next(line for line in text.stdout.splitlines() if line.startswith("│ /data "))
    assert "export SUCCEEDED" in row and "12/12, 0 failed" in row, row


def test_status_json_gives_an_empty_reason_for_a_stack_cloudformation_gives_none(
    hyperpod: World,
    fsx_answers: None,  # noqa: F811
) -> None:
    """CloudFormation leaves StackStatusReason out for a complete stack: ``reason`` is then the empty string,
    text as for a stack not deployed, so a script reading ``--json`` never meets null there."""
    described = aws_client("cloudformation", hyperpod.region).describe_stacks(StackName="hyperpod-Network")
    assert "StackStatusReason" not in described["Stacks"][0]
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    stacks = json.loads(result.stdout)["stacks"]
    assert {s["stack"]: s["reason"] for s in stacks} == {
        "hyperpod-Network": "",
        "hyperpod-Storage": "",
        "hyperpod-Cluster": "",
        "hyperpod-Observability": "",
    }


def test_a_file_system_described_without_a_capacity_shows_none_made_up(aws: Aws, hyperpod: World) -> None:
    """StorageCapacity is optional in FSx's DescribeFileSystems answer (botocore's model): without it status shows
    0 GiB, no size it was not given."""
    [described] = aws_client("fsx", hyperpod.region).describe_file_systems(FileSystemIds=[hyperpod.file_system])[
        "FileSystems"
    ]
    del described["StorageCapacity"]
    aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [described]}, {"FileSystems": [described]})
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []}, {"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": []}, {"DataRepositoryTasks": []})
    result = hyperpod.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lustre"]["capacity_gib"] == 0
    text = hyperpod.run("status", "hyperpod")
    assert text.exit_code == 0, text.output
    row = next(line for line in text.stdout.splitlines() if "PERSISTENT_2" in line)
    assert "0 GiB" in row and "1 GiB" not in row


def test_the_heading_naming_the_environment_is_bold_on_a_terminal() -> None:
    """The first line, which environment, region and backend the screen is about, is printed bold."""
    data = {
        "environment": "p5",
        "region": "us-east-2",
        "backend": "pcluster",
        "stacks": [],
        "cluster": None,
        "lustre": None,
        "orphans": [],
        "next": [],
        "problems": [],
    }
    console = Console(record=True, width=120, force_terminal=True, color_system="standard")
    console.print(status_module.render(data))
    first = console.export_text(styles=True).splitlines()[0]
    assert first == "\x1b[1mp5 (us-east-2, backend pcluster)\x1b[0m"
