"""``mlcluster status``: which data repository task is a DRA's latest (the folders and S3 prefixes a task names).

FSx's CreateDataRepositoryTask Paths (botocore's model): export and release tasks name folders on the file
system relative to the mount point, import tasks S3 URIs. Driven like ``test_status``, FSx's answers recorded.
"""

from __future__ import annotations

import json
from typing import Any

from tests.cli.conftest import Aws, World
from tests.cli.test_status import dras
from tests.cli.test_status_kills_seed3 import task


def latest_task_of_data(aws: Aws, world: World, *answered: dict[str, Any]) -> str:
    """The task ``status --json`` shows as the /data DRA's latest, FSx answering ``answered`` (newest last)."""
    aws.answer("fsx", "DescribeDataRepositoryAssociations", dras(world))
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": list(answered)})
    result = world.run("status", "hyperpod", "--json")
    assert result.exit_code == 0, result.output
    [dra] = json.loads(result.stdout)["lustre"]["dras"]
    return str(dra["latest_task"]["task"])


def test_a_task_of_a_sibling_folder_sharing_the_name_is_not_the_dras(aws: Aws, hyperpod: World) -> None:
    """An export of ``data2/x`` is not under the /data DRA (compared folder by folder, not letter by letter)."""
    older = task("task-0000000000000000a", "EXPORT_TO_REPOSITORY", ["data/checkpoints"], 19)
    sibling = task("task-0000000000000000b", "EXPORT_TO_REPOSITORY", ["data2/x"], 20)
    assert latest_task_of_data(aws, hyperpod, older, sibling) == "task-0000000000000000a"


def test_an_import_from_the_dras_bucket_is_its_latest_task(aws: Aws, hyperpod: World) -> None:
    """Import tasks name S3 URIs (botocore's model of CreateDataRepositoryTask Paths): an import from the DRA's
    repository prefix is the DRA's task. At the edge: an import from another bucket whose name starts the same
    is not."""
    older = task("task-0000000000000000a", "EXPORT_TO_REPOSITORY", ["data/checkpoints"], 19)
    mine = task("task-0000000000000000b", "IMPORT_METADATA_FROM_REPOSITORY", [f"s3://{hyperpod.bucket}/shards"], 20)
    other = task("task-0000000000000000c", "IMPORT_METADATA_FROM_REPOSITORY", [f"s3://{hyperpod.bucket}-2/x"], 21)
    assert latest_task_of_data(aws, hyperpod, older, mine, other) == "task-0000000000000000b"


def test_a_release_of_the_whole_file_system_is_the_dras_latest_task(aws: Aws, hyperpod: World) -> None:
    """A release of ``/`` (every exported file, as FSx documents it) covers the /data DRA too."""
    older = task("task-0000000000000000a", "EXPORT_TO_REPOSITORY", ["data/checkpoints"], 19)
    everything = task("task-0000000000000000b", "RELEASE_DATA_FROM_FILESYSTEM", ["/"], 20)
    assert latest_task_of_data(aws, hyperpod, older, everything) == "task-0000000000000000b"
