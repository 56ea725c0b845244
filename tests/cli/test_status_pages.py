"""``mlcluster status`` reads every page of FSx's data repository describe calls (user review, round 2).

botocore's FSx model gives DescribeDataRepositoryTasks and DescribeDataRepositoryAssociations ``NextToken``
and no paginator; the first page alone may miss the newest task, and so show another as a DRA's latest.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.stub import Stubber

from mlcluster.cli.status import _pages

FILTERS = [{"Name": "file-system-id", "Values": ["fs-0123456789abcdef0"]}]


def _task(task_id: str) -> dict[str, Any]:
    return {"TaskId": task_id, "Lifecycle": "SUCCEEDED", "Type": "EXPORT_TO_REPOSITORY", "CreationTime": 0}


def test_every_page_is_read_with_the_token_the_one_before_gave() -> None:
    fsx = boto3.client("fsx", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(fsx) as stub:
        stub.add_response(
            "describe_data_repository_tasks",
            {"DataRepositoryTasks": [_task("task-0123456789abcdef1")], "NextToken": "page-2"},
            {"Filters": FILTERS},
        )
        stub.add_response(
            "describe_data_repository_tasks",
            {"DataRepositoryTasks": [_task("task-0123456789abcdef2"), _task("task-0123456789abcdef3")]},
            {"Filters": FILTERS, "NextToken": "page-2"},
        )
        tasks = _pages(fsx.describe_data_repository_tasks, "DataRepositoryTasks", Filters=FILTERS)
        stub.assert_no_pending_responses()
    assert [t["TaskId"] for t in tasks] == [
        "task-0123456789abcdef1",
        "task-0123456789abcdef2",
        "task-0123456789abcdef3",
    ]


def test_one_page_is_one_call() -> None:
    calls: list[dict[str, Any]] = []

    def describe(**request: Any) -> dict[str, Any]:
        calls.append(request)
        return {"Associations": []}

    assert _pages(describe, "Associations", Filters=FILTERS) == []
    assert calls == [{"Filters": FILTERS}]
