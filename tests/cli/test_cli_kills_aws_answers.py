"""AWS answers the operator command must read right, and the options it takes (issue 27, the cli sample).

Fakes answer in the shapes botocore's models allow (a page may leave out an optional list); each test
asserts what the operator gets: the orphans listed, the call named in an error, the child's environment,
the usage error for a bad option.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from mlcluster.cli import orphans, preflight
from mlcluster.cli.errors import EXIT_AWS, CliError
from mlcluster.config import load_environment
from tests.cli.conftest import REPO, invoke
from tests.test_day_two_cli import (
    cfn,  # noqa: F401 (the fixture)
    change_set,
    expect_create_and_delete,
    resource_change,
    verdicts,
)

ACCOUNT = "123456789012"


class Paged:
    """A client whose paginators answer fixed pages per operation and record each request."""

    def __init__(self, pages: dict[str, list[dict[str, Any]]]) -> None:
        self.pages, self.asked = pages, []

    def get_paginator(self, operation: str) -> Paged:
        self.operation = operation
        return self

    def paginate(self, **params: Any) -> list[dict[str, Any]]:
        self.asked.append((self.operation, params))
        return self.pages.get(self.operation, [{}])


def test_a_describe_stacks_page_without_stacks_lists_no_orphan() -> None:
    """Stacks is optional in DescribeStacks' output: a page without it is no stack, not a traceback."""
    env = load_environment(REPO / "environments" / "dev.yaml")
    assert orphans.orphan_stacks(Paged({"describe_stacks": [{}]}), env) == []


def test_a_get_resources_page_without_a_list_is_no_resource_and_unknown_services_say_where_to_look() -> None:
    env = load_environment(REPO / "environments" / "dev.yaml")
    efs = f"arn:aws:elasticfilesystem:us-east-1:{ACCOUNT}:file-system/fs-0123456789abcdef0"
    tagging = Paged({"get_resources": [{}, {"ResourceTagMappingList": [{"ResourceARN": efs}]}]})
    found = orphans.orphan_resources(Paged({}), tagging, Paged({}), env)
    assert [(o["resource"], o["bills"]) for o in found] == [(efs, "see the service's pricing")]


def test_the_backups_of_many_live_file_systems_are_asked_twenty_file_systems_at_a_time() -> None:
    """DescribeBackups' file-system-id filter takes at most 20 values (FSx API reference, Filter Values)."""
    systems = {f"fs-{i:017x}" for i in range(21)}
    backup = f"arn:aws:fsx:us-east-1:{ACCOUNT}:backup/backup-0123456789abcdef0"
    fsx = Paged({"describe_backups": [{"Backups": [{"ResourceARN": backup, "Type": "AUTOMATIC"}]}]})
    assert orphans._live_backups(fsx, [backup], systems) == {backup}
    sizes = [len(params["Filters"][0]["Values"]) for _, params in fsx.asked]
    assert sizes == [20, 1]
    assert sorted(v for _, params in fsx.asked for v in params["Filters"][0]["Values"]) == sorted(systems)


def test_a_failed_delete_of_the_change_set_names_the_call(
    cfn: tuple[Any, Stubber],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The change set read fine but could not be deleted: an AWS error naming DeleteChangeSet and the stack."""
    client, stubber = cfn
    expect_create_and_delete(stubber)
    stubber.add_response("describe_change_set", change_set("CREATE_COMPLETE", []))
    stubber.add_client_error("delete_change_set", "AccessDenied", "not allowed to delete", 403)
    with pytest.raises(CliError) as raised:
        verdicts(client, tmp_path)
    assert raised.value.exit_code == EXIT_AWS
    first = raised.value.message.splitlines()[0]
    assert first.startswith("DeleteChangeSet mlcluster-diff-") and " of p5-Storage failed: AccessDenied" in first


def test_an_added_resource_has_no_replacement_and_its_line_says_so(
    cfn: tuple[Any, Stubber],  # noqa: F811
    tmp_path: Path,
) -> None:
    """An Add carries no Replacement field: the verdict's replacement is empty and its line shows "-"."""
    client, stubber = cfn
    expect_create_and_delete(stubber)
    added = resource_change("DataBucketB1A7365C", "AWS::S3::Bucket", "Add", None)
    stubber.add_response("describe_change_set", change_set("CREATE_COMPLETE", [added]))
    stubber.add_response("delete_change_set", {})
    (verdict,) = verdicts(client, tmp_path) or []
    assert verdict.replacement == ""
    assert verdict.line() == (
        "p5-Storage: Add     DataBucketB1A7365C (AWS::S3::Bucket) replacement=- Storage/DataBucket/Resource/Resource"
    )


def test_the_child_gets_this_process_environment_with_only_the_targets_aws_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A profile or keys of the operator's shell never reach the child: only the resolved credentials do."""
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("AWS_PROFILE", "someone-else")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "stale")
    session = SimpleNamespace(get_credentials=lambda: Credentials("AKIDEXAMPLE", "secret"))
    environ = preflight.operator_environ(SimpleNamespace(region="us-east-2", session=session))  # type: ignore[arg-type]
    assert environ["PATH"] == "/usr/bin"
    assert "AWS_PROFILE" not in environ and "AWS_SESSION_TOKEN" not in environ
    assert (environ["AWS_REGION"], environ["AWS_ACCESS_KEY_ID"]) == ("us-east-2", "AKIDEXAMPLE")


def test_environments_must_be_a_folder(tmp_path: Path) -> None:
    """--environments names the folder of environment files; a file is a usage error (exit 2) naming it."""
    given = tmp_path / "p5.yaml"
    given.write_text("name: p5\n")
    result = invoke("status", "p5", "--environments", str(given))
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--environments': Directory '{given}' is a file." in result.output
