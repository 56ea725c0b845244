"""``mlcluster diff`` and ``protect``: the exact change-set requests, the whole report an operator reads, the policies.

Each test pins the complete observable result: every parameter of every CloudFormation and S3 call (botocore
Stubber with exact ``expected_params``), the full text and ``--json`` document, the exact refusal and exit code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from click.testing import CliRunner

from mlcluster.cli import diff as diff_module
from mlcluster.cli.diff import (
    StackArtifact,
    Verdict,
    apply_protection,
    change_set_verdicts,
    report,
    stack_artifacts,
    stack_policy,
)
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_REPLACEMENT, CliError
from mlcluster.cli.main import cli
from mlcluster.config import load_environment
from tests.support import MINIMAL, write_env

STACK = "p5-Storage"
NAME = "mlcluster-diff-1700000000"
DESCRIPTION = "mlcluster diff: never executed, deleted after reading"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/p5-Storage/1f2e3d4c"
CHANGE_SET_ID = "arn:aws:cloudformation:us-east-1:123456789012:changeSet/mlcluster-diff-1700000000/abcd"
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "LustreF8935BA0": {"Type": "AWS::FSx::FileSystem"},
        "QueueAB12": {"Type": "AWS::SQS::Queue"},
        "DataBucketB1A7365C": {"Type": "AWS::S3::Bucket"},
    }
}
PATHS = {"LustreF8935BA0": "Storage/Lustre/Resource", "DataBucketB1A7365C": "Storage/DataBucket/Resource/Resource"}


@pytest.fixture
def cfn(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Stubber]]:
    """A stubbed CloudFormation client; the change set's name is fixed by a fixed clock."""
    monkeypatch.setattr(diff_module, "time", SimpleNamespace(time=lambda: 1_700_000_000.9))
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def artifact(tmp_path: Path, body: str | None = None, s3_url: str | None = None) -> StackArtifact:
    path = tmp_path / "p5Storage.template.json"
    path.write_text(json.dumps(TEMPLATE) if body is None else body, encoding="utf-8")
    return StackArtifact(name=STACK, template_file=path, template_s3_url=s3_url, paths=PATHS)


def change(lid: str, kind: str, action: str, replacement: str | None = None) -> dict[str, Any]:
    rc: dict[str, Any] = {"Action": action, "LogicalResourceId": lid, "ResourceType": kind}
    if replacement is not None:
        rc["Replacement"] = replacement
    return {"Type": "Resource", "ResourceChange": rc}


def page(status: str, changes: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"ChangeSetName": NAME, "StackName": STACK, "Status": status, "Changes": changes or [], **extra}


def expect_describe_stack(stubber: Stubber) -> None:
    stubber.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": STACK, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": "UPDATE_COMPLETE"}]},
        {"StackName": STACK},
    )


def expect_create(stubber: Stubber, body: str | None = None) -> None:
    stubber.add_response(
        "create_change_set",
        {"Id": CHANGE_SET_ID, "StackId": STACK_ID},
        {
            "StackName": STACK,
            "ChangeSetName": NAME,
            "ChangeSetType": "UPDATE",
            "Capabilities": CAPABILITIES,
            "Description": DESCRIPTION,
            "TemplateBody": json.dumps(TEMPLATE) if body is None else body,
        },
    )


def expect_page(stubber: Stubber, answer: dict[str, Any], token: str | None = None) -> None:
    params = {"StackName": STACK, "ChangeSetName": NAME} | ({"NextToken": token} if token else {})
    stubber.add_response("describe_change_set", answer, params)


def expect_delete(stubber: Stubber) -> None:
    stubber.add_response("delete_change_set", {}, {"StackName": STACK, "ChangeSetName": NAME})


def read(client: Any, tmp_path: Path, sleeps: list[float] | None = None, **kwargs: Any) -> list[Verdict] | None:
    """``change_set_verdicts`` of the small storage stack; an account lookup here would be a bug (small template)."""

    def no_account() -> str:
        raise AssertionError("the account is asked only for a template that goes through S3")

    return change_set_verdicts(
        client,
        None,
        artifact(tmp_path),
        region="us-east-1",
        account=no_account,
        sleep=(sleeps if sleeps is not None else []).append,
        **kwargs,
    )


def test_a_change_set_is_created_polled_paged_read_and_deleted_with_exact_requests(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    expect_create(stubber)
    expect_page(stubber, page("CREATE_PENDING"))
    expect_page(stubber, page("CREATE_IN_PROGRESS"))
    expect_page(
        stubber,
        page(
            "CREATE_COMPLETE",
            [
                change("LustreF8935BA0", "AWS::FSx::FileSystem", "Modify", "True"),
                change("QueueAB12", "AWS::SQS::Queue", "Add"),
            ],
            NextToken="page-2",
        ),
    )
    expect_page(
        stubber,
        page(
            "CREATE_COMPLETE",
            [change("DataBucketB1A7365C", "AWS::S3::Bucket", "Remove"), {"Type": "Resource", "ResourceChange": {}}],
        ),
        token="page-2",
    )
    expect_delete(stubber)
    sleeps: list[float] = []
    found = read(client, tmp_path, sleeps)
    assert sleeps == [5.0, 5.0]
    assert found == [
        Verdict(STACK, "LustreF8935BA0", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "True"),
        Verdict(STACK, "QueueAB12", "AWS::SQS::Queue", "QueueAB12", "Add", ""),
        Verdict(STACK, "DataBucketB1A7365C", "AWS::S3::Bucket", "Storage/DataBucket/Resource/Resource", "Remove", ""),
        Verdict(STACK, "", "", "", "", ""),
    ]


def test_the_poll_interval_given_is_the_one_slept(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    expect_create(stubber)
    expect_page(stubber, page("CREATE_PENDING"))
    expect_page(stubber, page("CREATE_COMPLETE"))
    expect_delete(stubber)
    sleeps: list[float] = []
    assert read(client, tmp_path, sleeps, poll_seconds=0.25) == []
    assert sleeps == [0.25]


def test_a_change_set_never_ready_gives_up_after_120_polls_ten_minutes(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    expect_create(stubber)
    for _ in range(120):
        expect_page(stubber, page("CREATE_IN_PROGRESS"))
    expect_delete(stubber)
    sleeps: list[float] = []
    with pytest.raises(CliError) as raised:
        read(client, tmp_path, sleeps)
    assert (raised.value.message, raised.value.exit_code) == (
        f"change set {NAME} of {STACK} was not ready after 120 polls",
        EXIT_FAILED,
    )
    assert sleeps == [5.0] * 120


@pytest.mark.parametrize(
    "reason",
    [
        "The submitted information didn't contain changes. Submit different information to create a change set.",
        "No updates are to be performed.",
    ],
)
def test_a_change_set_without_changes_reads_as_no_changes(
    cfn: tuple[Any, Stubber], tmp_path: Path, reason: str
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    expect_create(stubber)
    expect_page(stubber, page("FAILED", StatusReason=reason))
    expect_delete(stubber)
    assert read(client, tmp_path) == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            page("FAILED", StatusReason="Template format error: Unrecognized resource types: [AWS::FSx::Nope]"),
            f"change set for {STACK} failed: Template format error: Unrecognized resource types: [AWS::FSx::Nope]",
        ),
        (page("FAILED"), f"change set for {STACK} failed: "),
        (
            page("DELETE_COMPLETE", StatusReason="gone"),
            f"change set {NAME} of {STACK} is DELETE_COMPLETE: it was deleted while it was read (gone)\n"
            "  what to do: run `mlcluster diff` again",
        ),
        (
            page("DELETE_PENDING"),
            f"change set {NAME} of {STACK} is DELETE_PENDING: it was deleted while it was read ()\n"
            "  what to do: run `mlcluster diff` again",
        ),
        (
            page("NEW"),
            f"change set {NAME} of {STACK} is NEW: a status mlcluster does not know ()\n"
            "  what to do: run `mlcluster diff` again",
        ),
    ],
)
def test_a_failed_or_vanished_change_set_is_refused_with_its_reason_and_still_deleted(
    cfn: tuple[Any, Stubber], tmp_path: Path, answer: dict[str, Any], message: str
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    expect_create(stubber)
    expect_page(stubber, answer)
    expect_delete(stubber)
    with pytest.raises(CliError) as raised:
        read(client, tmp_path)
    assert (raised.value.message, raised.value.exit_code) == (message, EXIT_FAILED)


def test_a_stack_that_does_not_exist_is_not_deployed_and_nothing_is_created(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    stubber.add_client_error(
        "describe_stacks", "ValidationError", "Stack with id p5-Storage does not exist", 400, None, {"StackName": STACK}
    )
    assert read(client, tmp_path) is None


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("ValidationError", "Stack name p5-Storage is invalid"),
        ("AccessDenied", "not authorized"),
        ("Throttling", "Rate exceeded"),
    ],
)
def test_any_other_describe_stacks_failure_is_an_aws_error(
    cfn: tuple[Any, Stubber], tmp_path: Path, code: str, text: str
) -> None:
    client, stubber = cfn
    stubber.add_client_error("describe_stacks", code, text, 400, None, {"StackName": STACK})
    with pytest.raises(CliError) as raised:
        read(client, tmp_path)
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(f"DescribeStacks for {STACK} failed: {code}: {text}\n  what to do: ")


@pytest.mark.parametrize(
    ("failing", "doing"),
    [
        ("create_change_set", f"CreateChangeSet for {STACK}"),
        ("describe_change_set", f"DescribeChangeSet {NAME} of {STACK}"),
        ("delete_change_set", f"DeleteChangeSet {NAME} of {STACK}"),
    ],
)
def test_each_change_set_call_failing_names_the_call(
    cfn: tuple[Any, Stubber], tmp_path: Path, failing: str, doing: str
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    if failing == "create_change_set":
        stubber.add_client_error("create_change_set", "AccessDenied", "denied", 403)
    else:
        expect_create(stubber)
        if failing == "describe_change_set":
            stubber.add_client_error("describe_change_set", "Throttling", "Rate exceeded", 400)
            expect_delete(stubber)
        else:
            expect_page(stubber, page("CREATE_COMPLETE"))
            stubber.add_client_error("delete_change_set", "AccessDenied", "denied", 403)
    with pytest.raises(CliError) as raised:
        read(client, tmp_path)
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(f"{doing} failed: ")


def big_body(size: int, filler: str = "x") -> str:
    """A template text of exactly ``size`` bytes in UTF-8."""
    head = '{"Resources": {}, "Metadata": {"pad": "'
    tail = '"}}'
    room = size - len((head + tail).encode())
    return head + filler * (room // len(filler.encode())) + tail


def test_a_template_of_exactly_the_body_limit_goes_inline(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    body = big_body(51_200)
    assert len(body.encode()) == 51_200
    expect_describe_stack(stubber)
    expect_create(stubber, body)
    expect_page(stubber, page("CREATE_COMPLETE"))
    expect_delete(stubber)
    found = change_set_verdicts(
        client, None, artifact(tmp_path, body), region="us-east-1", account=lambda: "1", sleep=lambda _: None
    )
    assert found == []


@pytest.mark.parametrize("filler", ["x", "é"])
def test_a_template_one_byte_over_goes_through_the_assets_bucket(
    cfn: tuple[Any, Stubber], tmp_path: Path, filler: str
) -> None:
    """Over 51,200 bytes (counted in UTF-8: an accented text is longer in bytes than in characters)."""
    client, stubber = cfn
    body = big_body(51_201 if filler == "x" else 51_202, filler)
    assert len(body) <= 51_200 or filler == "x"
    s3 = boto3.client("s3", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    url = "s3://cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}/f00d.json"
    with Stubber(s3) as s3_stub:
        s3_stub.add_response(
            "put_object",
            {},
            {"Bucket": "cdk-hnb659fds-assets-123456789012-eu-west-1", "Key": "f00d.json", "Body": body.encode()},
        )
        expect_describe_stack(stubber)
        stubber.add_response(
            "create_change_set",
            {"Id": CHANGE_SET_ID},
            {
                "StackName": STACK,
                "ChangeSetName": NAME,
                "ChangeSetType": "UPDATE",
                "Capabilities": CAPABILITIES,
                "Description": DESCRIPTION,
                "TemplateURL": "https://cdk-hnb659fds-assets-123456789012-eu-west-1.s3.eu-west-1.amazonaws.com/f00d.json",
            },
        )
        expect_page(stubber, page("CREATE_COMPLETE"))
        expect_delete(stubber)
        found = change_set_verdicts(
            client,
            s3,
            artifact(tmp_path, body, url),
            region="eu-west-1",
            account=lambda: "123456789012",
            sleep=lambda _: None,
        )
        s3_stub.assert_no_pending_responses()
    assert found == []


def test_a_large_template_without_an_s3_location_is_refused_before_any_change_set(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    expect_describe_stack(stubber)
    with pytest.raises(CliError) as raised:
        change_set_verdicts(client, None, artifact(tmp_path, big_body(51_201)), region="us-east-1", account=lambda: "1")
    assert (raised.value.message, raised.value.exit_code) == (
        "p5-Storage: the template is over 51200 bytes and has no S3 location",
        EXIT_FAILED,
    )


def test_a_failed_upload_of_a_large_template_names_the_object(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(s3) as s3_stub:
        s3_stub.add_client_error("put_object", "AccessDenied", "Access Denied", 403)
        expect_describe_stack(stubber)
        with pytest.raises(CliError) as raised:
            change_set_verdicts(
                client,
                s3,
                artifact(tmp_path, big_body(51_201), "s3://assets-${AWS::Region}/k/t.json"),
                region="us-east-1",
                account=lambda: "1",
            )
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(
        "PutObject s3://assets-us-east-1/k/t.json failed: AccessDenied: Access Denied\n  what to do: "
    )


LUSTRE = Verdict(STACK, "LustreF8935BA0", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "True")
BUCKET = Verdict(STACK, "DataBucketB1A7365C", "AWS::S3::Bucket", "Storage/DataBucket/Resource/Resource", "Remove", "")
MAYBE = Verdict(STACK, "Zfs", "AWS::FSx::FileSystem", "Storage/OpenZfs/Resource", "Modify", "Conditional")
GROUP = Verdict("p5-Network", "Group", "AWS::EC2::SecurityGroup", "Network/Group/Resource", "Modify", "True")
QUEUE = Verdict("p5-Cluster", "Queue", "AWS::SQS::Queue", "Cluster/Queue/Resource", "Add", "")
ROLE = Verdict("p5-Cluster", "Role", "AWS::IAM::Role", "Cluster/Role/Resource", "Modify", "False")
IN_PLACE = Verdict(STACK, "LustreF8935BA0", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "False")
GONE_QUEUE = Verdict("p5-Cluster", "Old", "AWS::SQS::Queue", "Cluster/Old/Resource", "Remove", "")


@pytest.mark.parametrize(
    ("verdict", "dangerous"),
    [
        (LUSTRE, True),
        (BUCKET, True),
        (MAYBE, True),
        (IN_PLACE, False),
        (GROUP, False),
        (QUEUE, False),
        (GONE_QUEUE, False),
        (Verdict(STACK, "L", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "true"), False),
    ],
)
def test_dangerous_is_a_data_bearing_resource_replaced_maybe_replaced_or_removed(
    verdict: Verdict, dangerous: bool
) -> None:
    assert verdict.dangerous is dangerous


def test_a_verdict_line_names_stack_action_resource_replacement_and_path() -> None:
    assert LUSTRE.line() == (
        "p5-Storage: Modify  LustreF8935BA0 (AWS::FSx::FileSystem) replacement=True Storage/Lustre/Resource"
    )
    assert QUEUE.line() == "p5-Cluster: Add     Queue (AWS::SQS::Queue) replacement=- Cluster/Queue/Resource"


def test_the_report_lists_data_bearing_first_then_the_others_replacements_first_and_exits_6(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(CliError) as raised:
        report([ROLE, LUSTRE, QUEUE, GROUP, BUCKET, GONE_QUEUE, MAYBE])
    assert raised.value.exit_code == EXIT_REPLACEMENT
    assert raised.value.message == (
        "3 data-bearing resource(s) would be replaced or deleted; see the docs (docs/reference/edits.md) for the "
        "safe way, and retention.allow_replacement to allow it deliberately"
    )
    assert capsys.readouterr().out == (
        "DATA-BEARING resources AWS would replace or delete:\n"
        "  p5-Storage: Modify  LustreF8935BA0 (AWS::FSx::FileSystem) replacement=True Storage/Lustre/Resource\n"
        "  p5-Storage: Remove  DataBucketB1A7365C (AWS::S3::Bucket) replacement=- Storage/DataBucket/Resource/Resource\n"
        "  p5-Storage: Modify  Zfs (AWS::FSx::FileSystem) replacement=Conditional Storage/OpenZfs/Resource\n"
        "Other changes:\n"
        "  p5-Network: Modify  Group (AWS::EC2::SecurityGroup) replacement=True Network/Group/Resource\n"
        "  p5-Cluster: Remove  Old (AWS::SQS::Queue) replacement=- Cluster/Old/Resource\n"
        "  p5-Cluster: Add     Queue (AWS::SQS::Queue) replacement=- Cluster/Queue/Resource\n"
        "  p5-Cluster: Modify  Role (AWS::IAM::Role) replacement=False Cluster/Role/Resource\n"
    )


def test_the_report_of_changes_in_place_only_lists_them_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    report([IN_PLACE, GROUP])
    assert capsys.readouterr().out == (
        "Other changes:\n"
        "  p5-Network: Modify  Group (AWS::EC2::SecurityGroup) replacement=True Network/Group/Resource\n"
        "  p5-Storage: Modify  LustreF8935BA0 (AWS::FSx::FileSystem) replacement=False Storage/Lustre/Resource\n"
    )
    report([])
    assert capsys.readouterr().out == ""


def test_the_json_report_is_the_whole_document_and_still_exits_6(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CliError) as raised:
        report([ROLE, LUSTRE, GROUP], stacks={STACK: "changes"}, region="eu-west-1", as_json=True)
    assert raised.value.exit_code == EXIT_REPLACEMENT
    assert json.loads(capsys.readouterr().out) == {
        "region": "eu-west-1",
        "stacks": {STACK: "changes"},
        "data_bearing": [LUSTRE.__dict__],
        "other": [GROUP.__dict__, ROLE.__dict__],
        "safe": False,
    }
    report([IN_PLACE], as_json=True)
    assert json.loads(capsys.readouterr().out) == {
        "region": "",
        "stacks": {},
        "data_bearing": [],
        "other": [IN_PLACE.__dict__],
        "safe": True,
    }


def fake_assembly(outdir: Path) -> Path:
    """A synthesized stage of three stacks (one named by its artifact id only) and a non-stack artifact."""
    nested = outdir / "assembly-p5"
    nested.mkdir(parents=True)
    artifacts: dict[str, Any] = {"p5.assets": {"type": "cdk:asset-manifest", "properties": {"file": "x.json"}}}
    for artifact_id, stack_name in (("p5Network", "p5-Network"), ("p5Storage", "p5-Storage"), ("p5-Cluster", None)):
        (nested / f"{artifact_id}.template.json").write_text(json.dumps(TEMPLATE), encoding="utf-8")
        (nested / f"{artifact_id}.metadata.json").write_text(
            json.dumps(
                {f"/p5/{artifact_id}/Lustre/Resource": [{"type": "aws:cdk:logicalId", "data": "LustreF8935BA0"}]}
            ),
            encoding="utf-8",
        )
        properties: dict[str, Any] = {"templateFile": f"{artifact_id}.template.json"}
        if stack_name:
            properties["stackName"] = stack_name
        if artifact_id == "p5Storage":
            properties["stackTemplateAssetObjectUrl"] = "s3://assets/t.json"
        artifacts[artifact_id] = {
            "type": "aws:cloudformation:stack",
            "properties": properties,
            "additionalMetadataFile": f"{artifact_id}.metadata.json",
        }
    (nested / "manifest.json").write_text(json.dumps({"artifacts": artifacts}), encoding="utf-8")
    return outdir


def test_stack_artifacts_are_the_stacks_of_the_stage_in_manifest_order(tmp_path: Path) -> None:
    fake_assembly(tmp_path)
    nested = tmp_path / "assembly-p5"

    def paths(artifact_id: str) -> dict[str, str]:
        """The construct path from the metadata; a resource without one is named by its logical id."""
        return {
            "LustreF8935BA0": f"{artifact_id}/Lustre/Resource",
            "QueueAB12": "QueueAB12",
            "DataBucketB1A7365C": "DataBucketB1A7365C",
        }

    assert stack_artifacts(tmp_path, "p5") == [
        StackArtifact("p5-Network", nested / "p5Network.template.json", None, paths("p5Network")),
        StackArtifact("p5-Storage", nested / "p5Storage.template.json", "s3://assets/t.json", paths("p5Storage")),
        StackArtifact("p5-Cluster", nested / "p5-Cluster.template.json", None, paths("p5-Cluster")),
    ]


def stubbed_stack(stubber: Stubber, stack: str, answer: dict[str, Any] | None) -> None:
    """One stack of ``mlcluster diff``: not deployed (None), else a change set answering ``answer``."""
    if answer is None:
        stubber.add_client_error(
            "describe_stacks",
            "ValidationError",
            f"Stack with id {stack} does not exist",
            400,
            None,
            {"StackName": stack},
        )
        return
    stubber.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": stack, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": "CREATE_COMPLETE"}]},
        {"StackName": stack},
    )
    stubber.add_response(
        "create_change_set",
        {"Id": CHANGE_SET_ID},
        {
            "StackName": stack,
            "ChangeSetName": NAME,
            "ChangeSetType": "UPDATE",
            "Capabilities": CAPABILITIES,
            "Description": DESCRIPTION,
            "TemplateBody": json.dumps(TEMPLATE),
        },
    )
    stubber.add_response("describe_change_set", answer, {"StackName": stack, "ChangeSetName": NAME})
    stubber.add_response("delete_change_set", {}, {"StackName": stack, "ChangeSetName": NAME})


def run_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: Any, *extra: str
) -> tuple[Any, list[tuple[Path, str, Path]]]:
    envs = tmp_path / "environments"
    write_env(envs, "p5", MINIMAL)
    synths: list[tuple[Path, str, Path]] = []

    def synthesize(environments: Path, name: str, outdir: Path) -> Path:
        synths.append((environments, name, outdir))
        return fake_assembly(outdir)

    monkeypatch.setattr(diff_module, "synthesize", synthesize)
    monkeypatch.setattr(diff_module, "_clients", lambda env, region, profile: (client, None, lambda: "1", "eu-west-1"))
    result = CliRunner().invoke(cli, ["diff", "p5", "--environments", str(envs), *extra], standalone_mode=False)
    return result, synths


NO_CHANGES_PAGE = page("FAILED", StatusReason="No updates are to be performed.")
DATA_CHANGE_PAGE = page(
    "CREATE_COMPLETE",
    [
        change("LustreF8935BA0", "AWS::FSx::FileSystem", "Modify", "True"),
        change("QueueAB12", "AWS::SQS::Queue", "Modify", "False"),
    ],
)


def test_diff_prints_each_stacks_state_then_the_report_and_exits_6(
    cfn: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = cfn
    stubbed_stack(stubber, "p5-Network", None)
    stubbed_stack(stubber, "p5-Storage", NO_CHANGES_PAGE)
    stubbed_stack(stubber, "p5-Cluster", DATA_CHANGE_PAGE)
    result, synths = run_diff(tmp_path, monkeypatch, client)
    assert isinstance(result.exception, CliError)
    assert result.exception.exit_code == EXIT_REPLACEMENT
    assert [(folder, name) for folder, name, _ in synths] == [(tmp_path / "environments", "p5")]
    assert synths[0][2].name.startswith("mlcluster-diff-")
    assert not synths[0][2].exists()  # the synthesized assembly is removed afterwards
    assert result.output == (
        "p5-Network: not deployed (every resource would be created)\n"
        "p5-Storage: no changes\n"
        "DATA-BEARING resources AWS would replace or delete:\n"
        "  p5-Cluster: Modify  LustreF8935BA0 (AWS::FSx::FileSystem) replacement=True p5-Cluster/Lustre/Resource\n"
        "Other changes:\n"
        "  p5-Cluster: Modify  QueueAB12 (AWS::SQS::Queue) replacement=False QueueAB12\n"
    )


def test_diff_json_is_one_document_with_every_stacks_state(
    cfn: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = cfn
    stubbed_stack(stubber, "p5-Network", None)
    stubbed_stack(stubber, "p5-Storage", NO_CHANGES_PAGE)
    stubbed_stack(stubber, "p5-Cluster", page("CREATE_COMPLETE", [change("QueueAB12", "AWS::SQS::Queue", "Add")]))
    result, _ = run_diff(tmp_path, monkeypatch, client, "--json")
    assert result.exception is None, result.output
    assert json.loads(result.output) == {
        "region": "eu-west-1",
        "stacks": {"p5-Network": "not deployed", "p5-Storage": "no changes", "p5-Cluster": "changes"},
        "data_bearing": [],
        "other": [
            {
                "stack": "p5-Cluster",
                "logical_id": "QueueAB12",
                "type": "AWS::SQS::Queue",
                "path": "QueueAB12",
                "action": "Add",
                "replacement": "",
            }
        ],
        "safe": True,
    }


def test_diff_of_an_undeployed_environment_passes_with_one_line_per_stack(
    cfn: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = cfn
    for stack in ("p5-Network", "p5-Storage", "p5-Cluster"):
        stubbed_stack(stubber, stack, None)
    result, _ = run_diff(tmp_path, monkeypatch, client)
    assert result.exception is None, result.output
    assert result.output == "".join(
        f"{stack}: not deployed (every resource would be created)\n"
        for stack in ("p5-Network", "p5-Storage", "p5-Cluster")
    )


def test_the_stack_policy_denies_replace_and_delete_of_each_data_bearing_resource_by_its_path() -> None:
    template = {
        "Resources": {
            # A bucket named by its construct path in the storage stack: data.
            "Data": {"Type": "AWS::S3::Bucket", "Metadata": {"aws:cdk:path": "p5/Storage/DataBucket/Resource"}},
            # A bucket without path metadata in the storage stack: named Storage/<id>, data.
            "Plain": {"Type": "AWS::S3::Bucket"},
            # A path of one part (no stage): named by the stack and its id.
            "Odd": {"Type": "AWS::S3::Bucket", "Metadata": {"aws:cdk:path": "Nostage"}},
            "Fs": {"Type": "AWS::FSx::FileSystem"},
            "Queue": {"Type": "AWS::SQS::Queue"},
        }
    }
    assert stack_policy(template, "p5-Storage", ("Fs",)) == {
        "Statement": [
            {"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": ["Update:Replace", "Update:Delete"],
                "Principal": "*",
                "Resource": ["LogicalResourceId/Data", "LogicalResourceId/Odd", "LogicalResourceId/Plain"],
            },
        ]
    }
    # The same buckets in a cluster stack (no path below the storage stack) hold no data; a type always does.
    assert stack_policy(
        {"Resources": {k: v for k, v in template["Resources"].items() if k != "Data"}}, "my-env-Cluster", ()
    ) == {
        "Statement": [
            {"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": ["Update:Replace", "Update:Delete"],
                "Principal": "*",
                "Resource": ["LogicalResourceId/Fs"],
            },
        ]
    }
    # An environment named with a dash: the storage stack is still found by its suffix.
    assert stack_policy({"Resources": {"Plain": {"Type": "AWS::S3::Bucket"}}}, "my-env-Storage", ())["Statement"][1][
        "Resource"
    ] == ["LogicalResourceId/Plain"]
    assert stack_policy({}, "p5-Network", ()) == {
        "Statement": [{"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"}]
    }


def protect_stubs(stubber: Stubber, templates: dict[str, dict[str, Any] | None]) -> None:
    for part in ("Network", "Storage", "DataRepository", "Observability", "Cluster"):
        name = f"p5-{part}"
        body = templates.get(name)
        if body is None:
            stubber.add_client_error(
                "get_template",
                "ValidationError",
                f"Stack with id {name} does not exist",
                400,
                None,
                {"StackName": name, "TemplateStage": "Original"},
            )
            continue
        stubber.add_response(
            "get_template", {"TemplateBody": json.dumps(body)}, {"StackName": name, "TemplateStage": "Original"}
        )
        stubber.add_response(
            "set_stack_policy",
            {},
            {"StackName": name, "StackPolicyBody": json.dumps(stack_policy(body, name, ("Fs",)))},
        )


def test_protection_sets_each_deployed_stacks_policy_and_reports_each(
    cfn: tuple[Any, Stubber], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    storage = {"Resources": {"Fs": {"Type": "AWS::FSx::FileSystem"}, "Plain": {"Type": "AWS::S3::Bucket"}}}
    protect_stubs(stubber, {"p5-Network": {"Resources": {}}, "p5-Storage": storage, "p5-Cluster": TEMPLATE})
    assert apply_protection(client, env, ("Fs",)) == {
        "p5-Network": [],
        "p5-Storage": ["Plain"],
        "p5-Cluster": ["LustreF8935BA0"],
    }
    assert capsys.readouterr().out == (
        "p5-Network: 0 data-bearing resource(s) protected from replacement and deletion\n"
        "p5-Storage: 1 data-bearing resource(s) protected from replacement and deletion\n"
        "p5-Cluster: 1 data-bearing resource(s) protected from replacement and deletion\n"
    )


def test_quiet_protection_prints_nothing(
    cfn: tuple[Any, Stubber], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    protect_stubs(stubber, {"p5-Storage": TEMPLATE})
    assert apply_protection(client, env, ("Fs",), quiet=True) == {
        "p5-Storage": ["DataBucketB1A7365C", "LustreF8935BA0"]
    }
    assert capsys.readouterr().out == ""


def test_a_get_template_failure_other_than_absence_refuses_protection(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    stubber.add_client_error("get_template", "AccessDenied", "not authorized to perform GetTemplate", 403)
    with pytest.raises(CliError) as raised:
        apply_protection(client, env, ())
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(
        "GetTemplate for p5-Network failed: AccessDenied: not authorized to perform GetTemplate\n  what to do: "
    )


def run_protect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: Any, *extra: str) -> Any:
    envs = tmp_path / "environments"
    write_env(envs, "p5", MINIMAL)
    monkeypatch.setattr(diff_module, "_clients", lambda env, region, profile: (client, None, lambda: "1", "us-east-1"))
    return CliRunner().invoke(cli, ["protect", "p5", "--environments", str(envs), *extra], standalone_mode=False)


def test_protect_json_lists_the_protected_ids_per_stack(
    cfn: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = cfn
    protect_stubs(stubber, {"p5-Storage": TEMPLATE})
    result = run_protect(tmp_path, monkeypatch, client, "--json", "--allow", "Fs")
    assert result.exception is None, result.output
    assert json.loads(result.output) == {"protected": {"p5-Storage": ["DataBucketB1A7365C", "LustreF8935BA0"]}}


def test_protect_with_nothing_deployed_fails_naming_the_region(
    cfn: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = cfn
    protect_stubs(stubber, {})
    result = run_protect(tmp_path, monkeypatch, client)
    assert isinstance(result.exception, CliError)
    assert (result.exception.message, result.exception.exit_code) == (
        "protect: nothing protected: no stack of p5 is deployed in us-east-1\n"
        "  what to do: deploy first (`npx cdk deploy`), or check the account and region",
        EXIT_FAILED,
    )
    assert result.output == ""


def describe(stubber: Stubber, name: str, status: str | None, *, protected: bool | None = None) -> None:
    """DescribeStacks of ``name``: absent (None) or in ``status``."""
    if status is None:
        stubber.add_client_error(
            "describe_stacks", "ValidationError", f"Stack with id {name} does not exist", 400, None, {"StackName": name}
        )
        return
    stack: dict[str, Any] = {"StackName": name, "CreationTime": "2026-01-01T00:00:00Z", "StackStatus": status}
    if protected is not None:
        stack["EnableTerminationProtection"] = protected
    stubber.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": name})


def test_the_deployed_snapshot_reads_each_settled_stack_with_its_paths_and_protection(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    with_paths = {
        "Resources": {
            "Fs": {"Type": "AWS::FSx::FileSystem", "Metadata": {"aws:cdk:path": "p5/DataRepository/Fs/Resource"}},
            "Bare": {"Type": "AWS::SQS::Queue"},
        }
    }
    bare = {"Resources": {"Workspace": {"Type": "AWS::APS::Workspace"}}}
    describe(stubber, "p5-Network", None)
    describe(stubber, "p5-Storage", "REVIEW_IN_PROGRESS")
    describe(stubber, "p5-DataRepository", "UPDATE_ROLLBACK_COMPLETE", protected=True)
    stubber.add_response(
        "get_template",
        {"TemplateBody": json.dumps(with_paths)},
        {"StackName": "p5-DataRepository", "TemplateStage": "Original"},
    )
    describe(stubber, "p5-Observability", "IMPORT_ROLLBACK_COMPLETE")
    stubber.add_response(
        "get_template",
        {"TemplateBody": json.dumps(bare)},
        {"StackName": "p5-Observability", "TemplateStage": "Original"},
    )
    describe(stubber, "p5-Cluster", "IMPORT_COMPLETE", protected=False)
    stubber.add_response(
        "get_template", {"TemplateBody": json.dumps({})}, {"StackName": "p5-Cluster", "TemplateStage": "Original"}
    )
    snapshot = diff_module.deployed_snapshot(client, env)
    assert sorted(snapshot) == ["p5-Cluster", "p5-DataRepository", "p5-Observability"]
    data = snapshot["p5-DataRepository"]
    assert data.termination_protection is True
    assert {lid: (r.type, r.path) for lid, r in data.resources.items()} == {
        "Fs": ("AWS::FSx::FileSystem", "DataRepository/Fs/Resource"),
        "Bare": ("AWS::SQS::Queue", "DataRepository/Bare"),
    }
    observability = snapshot["p5-Observability"]
    assert observability.termination_protection is False
    assert {lid: r.path for lid, r in observability.resources.items()} == {"Workspace": "Observability/Workspace"}
    assert snapshot["p5-Cluster"].resources == {}


@pytest.mark.parametrize(
    "status", ["UPDATE_IN_PROGRESS", "ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED", "DELETE_FAILED"]
)
def test_an_unsettled_stack_refuses_the_snapshot_with_the_way(
    cfn: tuple[Any, Stubber], tmp_path: Path, status: str
) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    describe(stubber, "p5-Network", "CREATE_COMPLETE")
    stubber.add_response(
        "get_template", {"TemplateBody": "{}"}, {"StackName": "p5-Network", "TemplateStage": "Original"}
    )
    describe(stubber, "p5-Storage", status)
    with pytest.raises(CliError) as raised:
        diff_module.deployed_snapshot(client, env)
    assert (raised.value.message, raised.value.exit_code) == (
        f"p5-Storage is {status}: its deployed template is not settled. Let the operation finish, or continue the "
        "rollback (or delete a stack whose first create failed; 'mlcluster status' lists what it retained), then "
        "run 'mlcluster lock' again",
        EXIT_FAILED,
    )


@pytest.mark.parametrize("failing", ["describe_stacks", "get_template"])
def test_a_failed_read_of_a_deployed_stack_refuses_the_snapshot(
    cfn: tuple[Any, Stubber], tmp_path: Path, failing: str
) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    if failing == "get_template":
        describe(stubber, "p5-Network", "UPDATE_COMPLETE")
    stubber.add_client_error(failing, "ValidationError", "Stack name is invalid", 400)
    with pytest.raises(CliError) as raised:
        diff_module.deployed_snapshot(client, env)
    doing = "DescribeStacks" if failing == "describe_stacks" else "GetTemplate"
    assert raised.value.exit_code == EXIT_AWS
    assert raised.value.message.startswith(f"{doing} for p5-Network failed: ValidationError: Stack name is invalid\n")


def file_system(kind: str) -> dict[str, Any]:
    return {
        "Resources": {
            "Fs": {"Type": "AWS::FSx::FileSystem", "Properties": {"FileSystemType": kind, "SubnetIds": ["s"]}},
            "Queue": {"Type": "AWS::SQS::Queue"},
        }
    }


def storage(kind: str, *, protected: bool) -> Any:
    from mlcluster.replacement import stack_state

    return stack_state(file_system(kind), {"Fs": "Storage/Lustre/Resource"}, termination_protection=protected)


def environment(tmp_path: Path, *allow: str) -> Any:
    data: dict[str, Any] = {**MINIMAL, "retention": {"allow_replacement": list(allow)}} if allow else MINIMAL
    return load_environment(write_env(tmp_path, "p5", data))


REPLACED = 'Storage/Lustre/Resource (AWS::FSx::FileSystem) REPLACED: FileSystemType "LUSTRE" -> "OPENZFS"'


def locked(**kwargs: Any) -> Any:
    from mlcluster.lockfile import Lock

    return Lock({"p5-Storage": storage("LUSTRE", protected=True)}, "deployed", **kwargs)


NOW_REPLACED = {"p5-Storage": storage("OPENZFS", protected=False)}


def test_settle_with_no_earlier_lock_records_nothing(tmp_path: Path) -> None:
    assert diff_module.settle(environment(tmp_path), None, NOW_REPLACED, ()) == ([], [])


def test_settle_refuses_each_unexplained_data_change_naming_how_to_accept_it(tmp_path: Path) -> None:
    with pytest.raises(CliError) as raised:
        diff_module.settle(environment(tmp_path), locked(), NOW_REPLACED, ("Storage/Other",))
    assert (raised.value.message, raised.value.exit_code) == (
        "these data-bearing changes since the last lock were not allowed by the environment file:\n"
        f"  p5-Storage: {REPLACED}  (--accept Storage/Lustre)\n"
        "  p5-Storage: termination protection off, so a stack deletion deletes Storage/Lustre/Resource  "
        "(--accept termination-protection:p5-Storage)\n"
        "Check what happened to them (a deploy from elsewhere, a console edit). To record them in the lock "
        "knowingly, repeat the command with --accept for each",
        EXIT_FAILED,
    )


@pytest.mark.parametrize("name", ["Storage/Lustre", "Storage/Lustre/Resource"])
def test_settle_records_what_accept_names(tmp_path: Path, name: str) -> None:
    assert diff_module.settle(
        environment(tmp_path), locked(), NOW_REPLACED, (name, "termination-protection:p5-Storage")
    ) == (
        [],
        [
            f"p5-Storage/{REPLACED}",
            "p5-Storage termination protection off (exposes Storage/Lustre/Resource)",
        ],
    )


@pytest.mark.parametrize("allowance", ["Storage/Lustre", "Storage/Lustre/Resource"])
def test_settle_uses_up_the_allowance_of_the_file_for_the_change_and_the_protection(
    tmp_path: Path, allowance: str
) -> None:
    assert diff_module.settle(environment(tmp_path, allowance), locked(), NOW_REPLACED, ()) == ([allowance], [])


def test_an_allowance_the_last_lock_used_allows_nothing_more(tmp_path: Path) -> None:
    env = environment(tmp_path, "Storage/Lustre")
    with pytest.raises(CliError, match="were not allowed by the environment file"):
        diff_module.settle(env, locked(allowances_used=("Storage/Lustre",)), NOW_REPLACED, ())


def test_a_change_in_a_stack_gone_since_is_left_to_the_gone_check(tmp_path: Path) -> None:
    old = locked()
    old.snapshot["p5-Cluster"] = storage("LUSTRE", protected=False)
    new = {"p5-Storage": storage("LUSTRE", protected=True)}
    assert diff_module.settle(environment(tmp_path), old, new, ()) == ([], [])


def test_gone_stacks_are_recorded_only_when_each_is_named(tmp_path: Path) -> None:
    env = environment(tmp_path)
    lock_file = tmp_path / "p5.lock.json"
    assert diff_module._gone(env, "deployed", [], ()) == []
    assert diff_module._gone(env, "deployed", ["p5-A", "p5-B"], ("p5-A", "p5-B")) == [
        "p5-A gone (destroyed)",
        "p5-B gone (destroyed)",
    ]
    with pytest.raises(CliError) as raised:
        diff_module._gone(env, "new", ["p5-A", "p5-B", "p5-C"], ("p5-B",))
    assert (raised.value.message, raised.value.exit_code) == (
        f"p5-A, p5-C recorded in {lock_file} is not deployed in this account and region (destroyed, or wrong "
        "credentials or region). Check that it was destroyed on purpose and where its retained data is "
        "('mlcluster status p5'), then repeat the command with --accept p5-A --accept p5-C",
        EXIT_FAILED,
    )
    with pytest.raises(CliError) as raised:
        diff_module._gone(env, "templates", ["p5-A", "p5-B"], ("p5-A", "p5-B"))
    assert (raised.value.message, raised.value.exit_code) == (
        f"the templates drop p5-A, p5-B, which {lock_file} records; only a lock read from the deployed stacks "
        "('mlcluster lock p5' with credentials) records a stack gone",
        EXIT_FAILED,
    )


def test_a_lock_read_in_another_account_or_region_is_refused(tmp_path: Path) -> None:
    from mlcluster.lockfile import Lock

    env = environment(tmp_path)
    lock_file = tmp_path / "p5.lock.json"
    old = Lock({}, "deployed", account="111111111111", region="us-east-2")
    diff_module._same_place(env, None, "2", "x")
    diff_module._same_place(env, old, "111111111111", "us-east-2")
    diff_module._same_place(env, Lock({}, "templates"), "2", "x")
    with pytest.raises(CliError) as raised:
        diff_module._same_place(env, old, "222222222222", "us-east-2")
    assert (raised.value.message, raised.value.exit_code) == (
        f"{lock_file} was read in account 111111111111, these credentials are for account 222222222222: the "
        "stacks recorded there would all look destroyed. Use credentials (--profile) and --region for account "
        "111111111111",
        EXIT_FAILED,
    )
    with pytest.raises(CliError) as raised:
        diff_module._same_place(env, old, "111111111111", "eu-west-1")
    assert raised.value.message == (
        f"{lock_file} was read in region us-east-2, these credentials are for region eu-west-1: the stacks "
        "recorded there would all look destroyed. Use credentials (--profile) and --region for region us-east-2"
    )


def test_from_templates_replaces_only_a_lock_the_templates_wrote(tmp_path: Path) -> None:
    from mlcluster.lockfile import Lock

    env = environment(tmp_path)
    lock_file = tmp_path / "p5.lock.json"
    diff_module._templates_may_replace(env, None)  # no lock at all
    diff_module._templates_may_replace(env, Lock({}, "templates"))
    tail = (
        "; --from-templates would record the working tree as deployed although it never was, and the guard would "
        "then let through every change the templates make. Run 'mlcluster lock p5' with credentials for its "
        "account (it reads the deployed stacks), and name with --accept each data-bearing change it reports that "
        "you mean to record"
    )
    for old, what in (
        (Lock({}, "deployed"), "was read from the deployed stacks"),
        (Lock({}, "new"), "declares that nothing is deployed ('--new'), read from the account"),
    ):
        with pytest.raises(CliError) as raised:
            diff_module._templates_may_replace(env, old)
        assert (raised.value.message, raised.value.exit_code) == (f"{lock_file} {what}{tail}", EXIT_FAILED)
    lock_file.write_text("{}")
    with pytest.raises(CliError) as raised:
        diff_module._templates_may_replace(env, None)
    assert raised.value.message == f"{lock_file} is format 1 (written before 0.2.0 for a deployed one){tail}"
    record = tmp_path / "p5.allowances.json"
    record.write_text("{}")
    with pytest.raises(CliError) as raised:
        diff_module._templates_may_replace(env, Lock({}, "templates"))
    assert (raised.value.message, raised.value.exit_code) == (
        f"{record} records replacements a synth allowed since {lock_file} was written; they may be deployed, and "
        "--from-templates would forget them without reading what is. Run 'mlcluster lock p5' with credentials "
        "for its account (it reads the deployed stacks and removes the record)",
        EXIT_FAILED,
    )


def test_synthesis_runs_our_interpreter_with_the_projects_flags_and_reports_the_last_15_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    runs: list[tuple[list[str], dict[str, Any]]] = []
    stderr = "\n".join(f"line {n}" for n in range(1, 21)) + "\n\n"

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        runs.append((command, kwargs))
        return subprocess.CompletedProcess(command, 1 if len(runs) == 1 else 0, "", stderr)

    monkeypatch.setattr(diff_module, "project_context", lambda: {"@aws-cdk/flag": True})
    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(CliError) as raised:
        diff_module.synthesize(tmp_path / "envs", "p5", tmp_path / "out")
    assert (raised.value.message, raised.value.exit_code) == (
        "synthesizing p5 failed:\n" + "\n".join(f"line {n}" for n in range(6, 21)),
        EXIT_FAILED,
    )
    assert diff_module.synthesize(tmp_path / "envs", "p5", tmp_path / "out") == tmp_path / "out"
    expected = (
        [sys.executable, "-c", diff_module._SYNTH, str(tmp_path / "envs"), "p5", str(tmp_path / "out")],
        {"input": '{"@aws-cdk/flag": true}', "capture_output": True, "text": True, "check": False},
    )
    assert runs == [expected, expected]


def test_environments_must_be_a_folder(tmp_path: Path) -> None:
    afile = tmp_path / "p5.yaml"
    afile.write_text("network: {}\n")
    for command in ("diff", "lock", "protect"):
        result = CliRunner().invoke(cli, [command, "p5", "--environments", str(afile)])
        assert result.exit_code == 2, result.output
        assert f"Directory '{afile}' is a file." in result.output


def test_a_renamed_environments_lock_the_only_record_of_its_stacks_is_not_replaced(tmp_path: Path) -> None:
    from mlcluster.lockfile import ForeignLockError, Lock

    env = environment(tmp_path)
    lock = Lock(
        {"dev-Storage": storage("LUSTRE", protected=True), "dev-Network": storage("LUSTRE", protected=True)}, "deployed"
    )
    lock_file = tmp_path / "p5.lock.json"
    expected = (
        f"{lock_file} records environment 'dev' and its stacks dev-Network, dev-Storage, and dev.lock.json is not "
        "beside it: this file is their only record (an environment file and its lock renamed to p5?). Replaced by "
        "p5's deployed stacks, it would no longer name them while they keep running, and the next deploy would "
        "build a second environment. Give both files their old names back (dev.yaml and dev.lock.json) and run "
        "'mlcluster status' there; to rename an environment, see the refusal of a lock whose environment file is "
        "gone"
    )
    with pytest.raises(CliError) as raised:
        diff_module._only_record(env, ForeignLockError(lock_file, "p5", "dev", lock))
    assert (raised.value.message, raised.value.exit_code) == (expected, EXIT_FAILED)
    # A lock recording no stack loses nothing.
    diff_module._only_record(env, ForeignLockError(lock_file, "p5", "dev", Lock({}, "deployed")))
