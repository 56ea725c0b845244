"""``mlcluster diff`` and ``protect`` against botocore's Stubber with recorded CloudFormation shapes.

Every request is validated against botocore's CloudFormation model; the
responses have the shapes CloudFormation returns (DescribeChangeSet of a
Lustre file system whose DeploymentType changed, a FAILED change set
"didn't contain changes", stack not found, AccessDenied, throttling).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from click.testing import CliRunner

from mlcluster.cli import diff as diff_module
from mlcluster.cli.diff import StackArtifact, Verdict, apply_protection, change_set_verdicts, report, stack_policy
from mlcluster.cli.errors import EXIT_AWS, EXIT_REPLACEMENT, CliError
from mlcluster.cli.main import cli
from mlcluster.config import load_environment
from tests.support import MINIMAL, write_env

NOW = datetime.datetime(2026, 11, 23, tzinfo=datetime.UTC)
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/p5-Storage/1f2e3d4c-0000-0000-0000-000000000000"
CHANGE_SET_ID = "arn:aws:cloudformation:us-east-1:123456789012:changeSet/mlcluster-diff-1/abcd"

TEMPLATE: dict[str, Any] = {
    "Resources": {
        "LustreF8935BA0": {"Type": "AWS::FSx::FileSystem", "Properties": {"FileSystemType": "LUSTRE"}},
        "LustreLogGroup600912ED": {"Type": "AWS::Logs::LogGroup", "Properties": {}},
        "DataBucketB1A7365C": {"Type": "AWS::S3::Bucket", "Properties": {}},
    }
}


def artifact(tmp_path: Path, body: dict[str, Any] = TEMPLATE, s3_url: str | None = None) -> StackArtifact:
    path = tmp_path / "p5Storage.template.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    return StackArtifact(
        name="p5-Storage",
        template_file=path,
        template_s3_url=s3_url,
        paths={
            "LustreF8935BA0": "Storage/Lustre/Resource",
            "LustreLogGroup600912ED": "Storage/Lustre/LogGroup/Resource",
            "DataBucketB1A7365C": "Storage/DataBucket/Resource/Resource",
        },
    )


def stack_description() -> dict[str, Any]:
    return {
        "Stacks": [
            {"StackName": "p5-Storage", "StackId": STACK_ID, "CreationTime": NOW, "StackStatus": "UPDATE_COMPLETE"}
        ]
    }


def resource_change(lid: str, kind: str, action: str, replacement: str | None) -> dict[str, Any]:
    change: dict[str, Any] = {
        "Action": action,
        "LogicalResourceId": lid,
        "ResourceType": kind,
        "Scope": ["Properties"],
        "Details": [
            {
                "Target": {"Attribute": "Properties", "Name": "LustreConfiguration", "RequiresRecreation": "Always"},
                "Evaluation": "Static",
                "ChangeSource": "DirectModification",
            }
        ],
    }
    if replacement is not None:
        change["Replacement"] = replacement
        change["PhysicalResourceId"] = "fs-0123456789abcdef0"
    return {"Type": "Resource", "ResourceChange": change}


def change_set(status: str, changes: list[dict[str, Any]], reason: str | None = None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "ChangeSetName": "mlcluster-diff-1",
        "ChangeSetId": CHANGE_SET_ID,
        "StackId": STACK_ID,
        "StackName": "p5-Storage",
        "CreationTime": NOW,
        "ExecutionStatus": "AVAILABLE" if status == "CREATE_COMPLETE" else "UNAVAILABLE",
        "Status": status,
        "Changes": changes,
    }
    if reason:
        page["StatusReason"] = reason
    return page


@pytest.fixture
def cfn() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_create_and_delete(stubber: Stubber) -> None:
    stubber.add_response("describe_stacks", stack_description(), {"StackName": "p5-Storage"})
    stubber.add_response(
        "create_change_set",
        {"Id": CHANGE_SET_ID, "StackId": STACK_ID},
        {
            "StackName": "p5-Storage",
            "ChangeSetName": ANY,
            "ChangeSetType": "UPDATE",
            "Capabilities": ANY,
            "Description": ANY,
            "TemplateBody": ANY,
        },
    )


def expect_delete(stubber: Stubber) -> None:
    stubber.add_response("delete_change_set", {}, {"StackName": "p5-Storage", "ChangeSetName": ANY})


def verdicts(client: Any, tmp_path: Path, **kwargs: Any) -> list[Verdict] | None:
    return change_set_verdicts(
        client,
        None,
        artifact(tmp_path),
        region="us-east-1",
        account=lambda: "123456789012",
        sleep=lambda _: None,
        **kwargs,
    )


def test_replacement_verdicts_read_after_polling_and_change_set_deleted(
    cfn: tuple[Any, Stubber], tmp_path: Path
) -> None:
    client, stubber = cfn
    expect_create_and_delete(stubber)
    stubber.add_response(
        "describe_change_set", change_set("CREATE_IN_PROGRESS", []), {"StackName": "p5-Storage", "ChangeSetName": ANY}
    )
    first = change_set(
        "CREATE_COMPLETE", [resource_change("LustreLogGroup600912ED", "AWS::Logs::LogGroup", "Modify", "False")]
    )
    first["NextToken"] = "page-2"
    stubber.add_response("describe_change_set", first, {"StackName": "p5-Storage", "ChangeSetName": ANY})
    stubber.add_response(
        "describe_change_set",
        change_set("CREATE_COMPLETE", [resource_change("LustreF8935BA0", "AWS::FSx::FileSystem", "Modify", "True")]),
        {"StackName": "p5-Storage", "ChangeSetName": ANY, "NextToken": "page-2"},
    )
    expect_delete(stubber)
    found = verdicts(client, tmp_path)
    assert found is not None
    assert [(v.logical_id, v.replacement, v.dangerous) for v in found] == [
        ("LustreLogGroup600912ED", "False", False),
        ("LustreF8935BA0", "True", True),
    ]
    assert found[1].path == "Storage/Lustre/Resource"


def test_no_changes_is_not_a_failure(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    expect_create_and_delete(stubber)
    reason = "The submitted information didn't contain changes. Submit different information to create a change set."
    stubber.add_response(
        "describe_change_set", change_set("FAILED", [], reason), {"StackName": "p5-Storage", "ChangeSetName": ANY}
    )
    expect_delete(stubber)
    assert verdicts(client, tmp_path) == []


def test_failed_change_set_is_reported_and_still_deleted(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    expect_create_and_delete(stubber)
    reason = "Template format error: Unrecognized resource types: [AWS::FSx::Nope]"
    stubber.add_response(
        "describe_change_set", change_set("FAILED", [], reason), {"StackName": "p5-Storage", "ChangeSetName": ANY}
    )
    expect_delete(stubber)
    with pytest.raises(CliError, match="Unrecognized resource types"):
        verdicts(client, tmp_path)


def test_change_set_never_ready_times_out_and_is_deleted(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    expect_create_and_delete(stubber)
    for _ in range(2):
        stubber.add_response(
            "describe_change_set", change_set("CREATE_PENDING", []), {"StackName": "p5-Storage", "ChangeSetName": ANY}
        )
    expect_delete(stubber)
    with pytest.raises(CliError, match="not ready after 2 polls"):
        verdicts(client, tmp_path, max_polls=2)


def test_stack_not_deployed(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    stubber.add_client_error(
        "describe_stacks",
        "ValidationError",
        "Stack with id p5-Storage does not exist",
        400,
        expected_params={"StackName": "p5-Storage"},
    )
    assert verdicts(client, tmp_path) is None


@pytest.mark.parametrize(
    ("call", "code"),
    [("describe_stacks", "AccessDenied"), ("create_change_set", "Throttling"), ("describe_change_set", "AccessDenied")],
)
def test_aws_failures_are_reported_not_swallowed(
    cfn: tuple[Any, Stubber], tmp_path: Path, call: str, code: str
) -> None:
    client, stubber = cfn
    calls = ["describe_stacks", "create_change_set", "describe_change_set"]
    for name in calls[: calls.index(call)]:
        if name == "describe_stacks":
            stubber.add_response(name, stack_description())
        else:
            stubber.add_response(name, {"Id": CHANGE_SET_ID, "StackId": STACK_ID})
    stubber.add_client_error(call, code, f"{code} on {call}", 400)
    if call == "describe_change_set":
        expect_delete(stubber)
    with pytest.raises(CliError) as raised:
        verdicts(client, tmp_path)
    assert raised.value.exit_code == EXIT_AWS
    assert code in raised.value.message


def test_large_template_goes_through_the_bootstrap_bucket(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    big = {"Resources": {**TEMPLATE["Resources"]}, "Metadata": {"pad": "x" * 60_000}}
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    url = "s3://cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}/abc.json"
    with Stubber(s3) as s3_stub:
        s3_stub.add_response(
            "put_object", {}, {"Bucket": "cdk-hnb659fds-assets-123456789012-us-east-1", "Key": "abc.json", "Body": ANY}
        )
        stubber.add_response("describe_stacks", stack_description())
        stubber.add_response(
            "create_change_set",
            {"Id": CHANGE_SET_ID},
            {
                "StackName": "p5-Storage",
                "ChangeSetName": ANY,
                "ChangeSetType": "UPDATE",
                "Capabilities": ANY,
                "Description": ANY,
                "TemplateURL": "https://cdk-hnb659fds-assets-123456789012-us-east-1.s3.us-east-1.amazonaws.com/abc.json",
            },
        )
        stubber.add_response("describe_change_set", change_set("CREATE_COMPLETE", []))
        expect_delete(stubber)
        found = change_set_verdicts(
            client, s3, artifact(tmp_path, big, url), region="us-east-1", account=lambda: "123456789012"
        )
    assert found == []


def test_report_prints_data_bearing_first_and_exits_6(capsys: pytest.CaptureFixture[str]) -> None:
    group = Verdict(
        "p5-Storage", "Group", "AWS::EC2::SecurityGroup", "Storage/Lustre/SecurityGroup/Resource", "Modify", "True"
    )
    lustre = Verdict("p5-Storage", "Lustre", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "True")
    with pytest.raises(CliError) as raised:
        report([group, lustre])
    assert raised.value.exit_code == EXIT_REPLACEMENT
    out = capsys.readouterr().out
    assert out.index("Lustre (AWS::FSx::FileSystem)") < out.index("Group (AWS::EC2::SecurityGroup)")
    assert out.startswith("DATA-BEARING")


def test_report_of_in_place_changes_passes(capsys: pytest.CaptureFixture[str]) -> None:
    lustre = Verdict("p5-Storage", "Lustre", "AWS::FSx::FileSystem", "Storage/Lustre/Resource", "Modify", "False")
    report([lustre])
    assert "DATA-BEARING" not in capsys.readouterr().out


def test_diff_command_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cfn: tuple[Any, Stubber]) -> None:
    """The command: synthesis (faked: a one-stack assembly), one change set, exit 6 on a Lustre replacement."""
    client, stubber = cfn
    envs = tmp_path / "environments"
    write_env(envs, "p5", MINIMAL)

    def fake_synth(environments: Path, name: str, outdir: Path) -> Path:
        nested = outdir / "assembly-p5"
        nested.mkdir(parents=True)
        (nested / "p5Storage.template.json").write_text(json.dumps(TEMPLATE), encoding="utf-8")
        (nested / "p5Storage.metadata.json").write_text(
            json.dumps({"/p5/Storage/Lustre/Resource": [{"type": "aws:cdk:logicalId", "data": "LustreF8935BA0"}]}),
            encoding="utf-8",
        )
        manifest = {
            "artifacts": {
                "p5Storage": {
                    "type": "aws:cloudformation:stack",
                    "properties": {"templateFile": "p5Storage.template.json", "stackName": "p5-Storage"},
                    "additionalMetadataFile": "p5Storage.metadata.json",
                }
            }
        }
        (nested / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        return outdir

    monkeypatch.setattr(diff_module, "synthesize", fake_synth)
    monkeypatch.setattr(
        diff_module, "_clients", lambda env, region, profile: (client, None, lambda: "123456789012", "us-east-1")
    )
    expect_create_and_delete(stubber)
    stubber.add_response(
        "describe_change_set",
        change_set("CREATE_COMPLETE", [resource_change("LustreF8935BA0", "AWS::FSx::FileSystem", "Modify", "True")]),
    )
    expect_delete(stubber)
    result = CliRunner().invoke(cli, ["diff", "p5", "--environments", str(envs)], standalone_mode=False)
    assert isinstance(result.exception, CliError)
    assert result.exception.exit_code == EXIT_REPLACEMENT
    assert "Storage/Lustre/Resource" in result.output


def test_stack_policy_denies_replace_and_delete_of_data_only() -> None:
    policy = stack_policy(TEMPLATE, "p5-Storage", ())
    allow, deny = policy["Statement"]
    assert allow == {"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"}
    assert deny["Action"] == ["Update:Replace", "Update:Delete"]
    # The log group holds the file system's logs: data-bearing too.
    assert deny["Resource"] == [
        "LogicalResourceId/DataBucketB1A7365C",
        "LogicalResourceId/LustreF8935BA0",
        "LogicalResourceId/LustreLogGroup600912ED",
    ]
    # The override: one deliberate replacement.
    (_, deny) = stack_policy(TEMPLATE, "p5-Storage", ("LustreF8935BA0",))["Statement"]
    assert deny["Resource"] == ["LogicalResourceId/DataBucketB1A7365C", "LogicalResourceId/LustreLogGroup600912ED"]
    # Buckets outside the storage stack hold no data: nothing to deny on a cluster stack with only a bucket.
    cluster = {"Resources": {"NodeScripts": {"Type": "AWS::S3::Bucket"}}}
    assert len(stack_policy(cluster, "p5-Cluster", ())["Statement"]) == 1
    # But the patch backups (the controller's Slurm state), found by their construct path, are data.
    cluster["Resources"]["PatchBackups"] = {
        "Type": "AWS::S3::Bucket",
        "Metadata": {"aws:cdk:path": "hyperpod/Cluster/PatchBackups/Resource/Resource/Resource"},
    }
    (_, deny) = stack_policy(cluster, "hyperpod-Cluster", ())["Statement"]
    assert deny["Resource"] == ["LogicalResourceId/PatchBackups"]


def test_protect_sets_policies_on_deployed_stacks(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    stubber.add_response(
        "get_template",
        {"TemplateBody": json.dumps({"Resources": {}})},
        {"StackName": "p5-Network", "TemplateStage": "Original"},
    )
    stubber.add_response("set_stack_policy", {}, {"StackName": "p5-Network", "StackPolicyBody": ANY})
    stubber.add_response(
        "get_template", {"TemplateBody": json.dumps(TEMPLATE)}, {"StackName": "p5-Storage", "TemplateStage": "Original"}
    )
    stubber.add_response("set_stack_policy", {}, {"StackName": "p5-Storage", "StackPolicyBody": ANY})
    # The Observability stack too (its workspaces, log groups and the alarm topic's key hold history).
    observability = {"Resources": {"Prometheus": {"Type": "AWS::APS::Workspace"}, "Topic": {"Type": "AWS::SNS::Topic"}}}
    stubber.add_client_error("get_template", "ValidationError", "Stack with id p5-DataRepository does not exist", 400)
    stubber.add_response(
        "get_template",
        {"TemplateBody": json.dumps(observability)},
        {"StackName": "p5-Observability", "TemplateStage": "Original"},
    )
    stubber.add_response("set_stack_policy", {}, {"StackName": "p5-Observability", "StackPolicyBody": ANY})
    stubber.add_client_error("get_template", "ValidationError", "Stack with id p5-Cluster does not exist", 400)
    apply_protection(client, env, ())
    stubber.assert_no_pending_responses()
    (_, deny) = stack_policy(observability, "p5-Observability", ())["Statement"]
    assert deny["Resource"] == ["LogicalResourceId/Prometheus"]


def test_protect_access_denied_is_reported(cfn: tuple[Any, Stubber], tmp_path: Path) -> None:
    client, stubber = cfn
    env = load_environment(write_env(tmp_path, "p5", MINIMAL))
    stubber.add_response("get_template", {"TemplateBody": json.dumps(TEMPLATE)})
    stubber.add_client_error(
        "set_stack_policy", "AccessDenied", "not authorized to perform cloudformation:SetStackPolicy", 403
    )
    with pytest.raises(CliError) as raised:
        apply_protection(client, env, ())
    assert raised.value.exit_code == EXIT_AWS
    assert "SetStackPolicy on p5-Network" in raised.value.message


def test_the_command_does_not_import_aws_cdk_lib() -> None:
    code = "import sys, mlcluster.cli.main; print(any(m.startswith('aws_cdk') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_lock_from_templates_synthesizes_in_a_subprocess_and_writes_the_lock(tmp_path: Path) -> None:
    envs = tmp_path / "environments"
    write_env(envs, "small", MINIMAL)
    # A lock the templates wrote (a first one from the templates needs AWS to prove nothing is deployed).
    empty = {"format": 2, "environment": "small", "source": "templates", "allowances_used": [], "accepted": []}
    (envs / "small.lock.json").write_text(json.dumps(empty | {"stacks": {}}), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["lock", "small", "--environments", str(envs), "--from-templates"], standalone_mode=False
    )
    assert result.exception is None, result.output
    lock = json.loads((envs / "small.lock.json").read_text(encoding="utf-8"))
    assert lock["format"] == 2 and lock["environment"] == "small" and lock["source"] == "templates"
    assert set(lock["stacks"]) == {"small-Network", "small-Storage", "small-DataRepository"}
    lustre = lock["stacks"]["small-Storage"]["resources"]
    assert any(r["path"] == "Storage/Lustre/Resource" for r in lustre.values())


def test_synthesis_failure_is_reported(tmp_path: Path) -> None:
    envs = tmp_path / "environments"
    write_env(envs, "bad", {"network": {"availability_zone": "us-east-1a"}, "storage": {"lustre": {"nope": 1}}})
    with pytest.raises(CliError, match="configuration error"):
        diff_module.load_one(envs, "bad")
    with pytest.raises(CliError, match="synthesizing bad failed"):
        diff_module.synthesize(envs, "bad", tmp_path / "out")


def test_every_change_set_status_has_a_decision() -> None:
    """Issue 25: the states a wait can meet come from botocore's model, each with its decision."""
    from mlcluster.cli.diff import CHANGE_SET_DECISIONS

    model = botocore_model("cloudformation")
    assert sorted(CHANGE_SET_DECISIONS) == sorted(model.shape_for("ChangeSetStatus").enum)


@pytest.mark.parametrize("status", ["DELETE_PENDING", "DELETE_IN_PROGRESS", "DELETE_COMPLETE", "DELETE_FAILED", "NEW"])
def test_a_change_set_deleted_under_the_reader_is_no_empty_diff(
    cfn: tuple[Any, Stubber], tmp_path: Path, status: str
) -> None:
    """A change set deleted by someone else (or a status added later) fails; it never reads as "no changes"."""
    client, stubber = cfn
    expect_create_and_delete(stubber)
    stubber.add_response(
        "describe_change_set", change_set(status, []), {"StackName": "p5-Storage", "ChangeSetName": ANY}
    )
    expect_delete(stubber)
    expected = "a status mlcluster does not know" if status == "NEW" else "it was deleted while it was read"
    with pytest.raises(CliError, match=expected):
        verdicts(client, tmp_path)


def botocore_model(service: str) -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model(service)
