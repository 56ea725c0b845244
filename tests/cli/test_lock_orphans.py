"""``mlcluster lock`` records the deployed stacks; ``mlcluster status`` finds what the app left behind (moto).

The lock is read from CloudFormation (``DescribeStacks``, ``GetTemplate``), never from the working
tree: a stack in an unsettled state, missing credentials or an AWS failure refuse, and a change the
environment file did not allow is recorded only with ``--accept`` naming it. ``status`` lists the
stacks tagged with the environment that the app no longer builds, and tagged resources that no live
stack holds (retained after a delete).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mlcluster.cli import diff as diff_module
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_SETUP, CliError
from mlcluster.cli.main import cli
from tests.cli.conftest import Aws, aws_client, error
from tests.support import write_env

REGION = "us-east-2"
TAG = [{"Key": "mlcluster:environment", "Value": "team"}]


@pytest.fixture
def recorded(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    """The lock command's clients checked and answered by the same recorder as the other verbs'."""
    original = diff_module._clients

    def clients(env: Any, region: str | None, profile: str | None) -> Any:
        made = original(env, region, profile)
        aws.attach(made[0])
        return made

    monkeypatch.setattr(diff_module, "_clients", clients)
    return aws


def template(policy: str = "Retain", days: int = 365) -> dict[str, Any]:
    """A storage stack as CDK writes it: construct paths in each resource's metadata."""
    return {
        "Resources": {
            "LogsAB12": {
                "Type": "AWS::Logs::LogGroup",
                "DeletionPolicy": policy,
                "UpdateReplacePolicy": policy,
                "Properties": {"RetentionInDays": days},
                "Metadata": {"aws:cdk:path": "team/Storage/Lustre/LogGroup/Resource"},
            },
            "DataCD34": {
                "Type": "AWS::S3::Bucket",
                "DeletionPolicy": "Retain",
                "UpdateReplacePolicy": "Retain",
                "Properties": {"VersioningConfiguration": {"Status": "Enabled"}},
                "Metadata": {"aws:cdk:path": "team/Storage/DataBucket/Resource/Resource"},
            },
        }
    }


def folder(tmp_path: Path, **retention: Any) -> Path:
    envs = tmp_path / "environments"
    data: dict[str, Any] = {"region": REGION, "network": {"availability_zone": "us-east-2a"}}
    if retention:
        data["retention"] = retention
    write_env(envs, "team", data)
    return envs


def deploy(name: str, body: dict[str, Any], *, protect: bool = False) -> None:
    cfn = aws_client("cloudformation", REGION)
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(body), Tags=TAG, EnableTerminationProtection=protect)


def recorded_clients(aws: Aws, *services: str) -> list[Any]:
    """Fresh clients (not the shared test-side ones) whose requests the recorder checks and answers."""
    import boto3

    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    made = [session.client(service, region_name=REGION) for service in services]  # type: ignore[call-overload]
    for client in made:
        aws.attach(client)
    return made


def lock(envs: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["lock", "team", "--environments", str(envs), *args], standalone_mode=False)


def test_lock_records_the_deployed_templates_policies_and_protection(recorded: Aws, tmp_path: Path) -> None:
    aws = recorded
    envs = folder(tmp_path)
    deploy("team-Storage", template(), protect=True)
    result = lock(envs)
    assert result.exception is None, result.output
    assert "1 stacks, 2 resources locked (deployed)" in result.output
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert data["format"] == 2 and data["source"] == "deployed"
    storage = data["stacks"]["team-Storage"]
    assert storage["termination_protection"] is True
    logs = storage["resources"]["LogsAB12"]
    assert logs["path"] == "Storage/Lustre/LogGroup/Resource"
    assert logs["deletion_policy"] == "Retain" and logs["fate"] == {"RetentionInDays": 365}
    # Every stack the app can build was asked for; only the deployed one was read.
    asked = [p["StackName"] for p in aws.params("DescribeStacks")]
    assert asked == [f"team-{part}" for part in ("Network", "Storage", "DataRepository", "Observability", "Cluster")]
    assert [p["StackName"] for p in aws.params("GetTemplate")] == ["team-Storage"]


def test_lock_never_records_over_a_refusal_without_naming_what_it_accepts(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    # Deployed from elsewhere: the log group is no longer retained.
    aws_client("cloudformation", REGION).update_stack(
        StackName="team-Storage", TemplateBody=json.dumps(template(policy="Delete"))
    )
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_FAILED
    assert "not allowed by the environment file" in result.exception.message
    assert "DeletionPolicy Retain -> Delete" in result.exception.message
    assert "(--accept Storage/Lustre/LogGroup)" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    result = lock(envs, "--accept", "Storage/Lustre/LogGroup")
    assert result.exception is None, result.output
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    recorded = [
        "team-Storage/Storage/Lustre/LogGroup/Resource (AWS::Logs::LogGroup) WEAKENED: "
        "DeletionPolicy Retain -> Delete; UpdateReplacePolicy Retain -> Delete"
    ]
    assert data["accepted"] == recorded
    # A later lock (nothing new to accept) carries the acceptance forward: the record of what was let through.
    result = lock(envs)
    assert result.exception is None, result.output
    assert "accepted:" not in result.output  # not reported as accepted again
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["accepted"] == recorded


def test_lock_records_the_allowance_its_deploy_used(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    aws_client("cloudformation", REGION).update_stack(
        StackName="team-Storage", TemplateBody=json.dumps(template(days=90))
    )
    envs = folder(tmp_path, allow_replacement=["Storage/Lustre/LogGroup"])
    result = lock(envs)
    assert result.exception is None, result.output
    assert "allowances used by this deploy: Storage/Lustre/LogGroup; remove them" in result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["allowances_used"] == [
        "Storage/Lustre/LogGroup"
    ]


def test_nothing_deployed_locks_no_stacks_and_new_refuses_to_forget_stacks(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    result = lock(envs)
    assert result.exception is None, result.output
    assert "0 stacks, 0 resources locked (deployed)" in result.output
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    result = lock(envs, "--new")
    assert isinstance(result.exception, CliError)
    assert "team.lock.json exists: --new declares a first lock" in result.exception.message


def test_an_unsettled_stack_is_refused(recorded: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)

    def described(params: dict[str, Any]) -> dict[str, Any]:
        if params["StackName"] != "team-Storage":
            return error("ValidationError", f"Stack with id {params['StackName']} does not exist")
        stack = {"StackName": "team-Storage", "CreationTime": "2026-11-20T09:00:00Z"}
        return {"Stacks": [{**stack, "StackStatus": "UPDATE_ROLLBACK_FAILED"}]}

    recorded.answer("cloudformation", "DescribeStacks", always=described)
    result = lock(envs)
    assert isinstance(result.exception, CliError)
    assert "team-Storage is UPDATE_ROLLBACK_FAILED: its deployed template is not settled" in result.exception.message
    assert not (envs / "team.lock.json").exists()


@pytest.mark.parametrize(
    ("operation", "code", "exit_code"),
    [
        ("DescribeStacks", "AccessDenied", EXIT_AWS),
        ("DescribeStacks", "Throttling", EXIT_AWS),
        ("GetTemplate", "AccessDenied", EXIT_AWS),
    ],
)
def test_aws_failures_refuse_the_lock(recorded: Aws, tmp_path: Path, operation: str, code: str, exit_code: int) -> None:
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    recorded.answer("cloudformation", operation, always=error(code, f"{code} on {operation}", 403))
    result = lock(envs)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == exit_code
    assert f"{operation} for team-" in result.exception.message
    assert not (envs / "team.lock.json").exists()


def test_no_credentials_refuse_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    envs = folder(tmp_path)
    result = lock(envs)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_SETUP
    assert not (envs / "team.lock.json").exists()


# -- status: what the app left behind -----------------------------------------------------------------


def test_status_lists_dropped_stacks_and_retained_resources_with_the_way(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    minimal = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    for part in ("Network", "Storage", "DataRepository"):
        deploy(f"team-{part}", minimal)
    # Dropped from the app (cluster.backend is none now), still there and protected.
    deploy("team-Cluster", minimal, protect=True)
    s3 = aws_client("s3", REGION)
    s3.create_bucket(Bucket="team-old-data", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_tagging(Bucket="team-old-data", Tagging={"TagSet": TAG})
    s3.create_bucket(Bucket="someone-else", CreateBucketConfiguration={"LocationConstraint": REGION})
    aws.answer("fsx", "DescribeDataRepositoryAssociations", always={"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", always={"DataRepositoryTasks": []})
    result = CliRunner().invoke(cli, ["status", "team", "--environments", str(envs), "--json"])
    data = json.loads(result.output[: result.output.rindex("}") + 1])
    left = {o.get("stack") or o.get("resource"): o for o in data["orphans"]}
    assert set(left) == {"team-Cluster", "arn:aws:s3:::team-old-data"}
    assert "--no-enable-termination-protection --stack-name team-Cluster" in left["team-Cluster"]["remove"]
    assert "cdk import" in left["arn:aws:s3:::team-old-data"]["adopt"]
    assert "object storage" in left["arn:aws:s3:::team-old-data"]["bills"]
    assert result.exit_code == 1
    assert any("team-Cluster is left from team outside the app" in p for p in data["problems"])


def test_status_orphan_lookup_failure_is_reported(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    aws.answer("resourcegroupstaggingapi", "GetResources", always=error("AccessDenied", "no tag:GetResources", 403))
    result = CliRunner().invoke(cli, ["status", "team", "--environments", str(envs)])
    assert result.exit_code == EXIT_AWS
    assert "GetResources tagged mlcluster:environment=team failed: AccessDenied" in result.output


def test_a_destroyed_stack_is_recorded_gone_only_when_named(aws: Aws, tmp_path: Path) -> None:
    """The safe way for a dropped stack: destroy it while the app has it, then lock naming it (--accept STACK)."""
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    deploy("team-Cluster", template())
    assert lock(envs).exception is None
    aws_client("cloudformation", REGION).delete_stack(StackName="team-Cluster")
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    result = lock(envs)
    # Missing is not proof of a destroy (wrong credentials, a failed read): the operator names the stack.
    assert isinstance(result.exception, CliError), result.output
    assert "team-Cluster recorded in" in result.exception.message
    assert "--accept team-Cluster" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    result = lock(envs, "--accept", "team-Cluster")
    assert result.exception is None, result.output
    assert (
        "team-Cluster gone (destroyed)" in json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["accepted"]
    )
    assert "stacks gone since the last lock: team-Cluster" in result.output
    assert set(json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["stacks"]) == {"team-Storage"}
    # A data-bearing resource gone from a stack that stays is still refused (the edge).
    aws_client("cloudformation", REGION).update_stack(
        StackName="team-Storage",
        TemplateBody=json.dumps({"Resources": {k: v for k, v in template()["Resources"].items() if k != "LogsAB12"}}),
    )
    result = lock(envs)
    assert isinstance(result.exception, CliError)
    assert "Storage/Lustre/LogGroup/Resource (AWS::Logs::LogGroup) removed" in result.exception.message


def test_a_resource_without_path_metadata_is_named_by_its_stack(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    body = template()
    del body["Resources"]["DataCD34"]["Metadata"]
    deploy("team-Storage", body)
    assert lock(envs).exception is None
    resources = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["stacks"]["team-Storage"]["resources"]
    # Still in the storage stack, so still a data-bearing bucket for the guard and protect.
    assert resources["DataCD34"]["path"] == "Storage/DataCD34"
    assert resources["LogsAB12"]["path"] == "Storage/Lustre/LogGroup/Resource"


def test_the_lock_records_its_account_and_region_and_refuses_another(aws: Aws, tmp_path: Path) -> None:
    """Read in another region (or account) every stack looks destroyed: refused, the lock unchanged."""
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert (data["account"], data["region"]) == ("123456789012", REGION)
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    # Another region is refused before any call (issue 26: the file's zone pins the region), with the lock unchanged;
    # the lock's own region check stays behind it for a session that reaches AWS elsewhere.
    result = lock(envs, "--region", "us-west-2", "--accept", "team-Storage")
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_SETUP, result.output
    assert "two regions" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    (envs / "team.lock.json").write_text(json.dumps(data | {"account": "210987654321"}), encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError)
    assert "was read in account 210987654321, these credentials are for account 123456789012" in (
        result.exception.message
    )
    # The same account and region (the edge) locks.
    (envs / "team.lock.json").write_text(before, encoding="utf-8")
    assert lock(envs).exception is None


def test_new_asks_aws_and_refuses_any_lock_or_deployed_stack(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    deploy("team-Network", template())
    result = lock(envs, "--new")
    assert isinstance(result.exception, CliError), result.output
    assert "account 123456789012 in us-east-2 has team-Network" in result.exception.message
    assert not (envs / "team.lock.json").exists()
    aws_client("cloudformation", REGION).delete_stack(StackName="team-Network")
    result = lock(envs, "--new")
    assert result.exception is None, result.output
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert (data["source"], data["stacks"], data["account"], data["region"]) == ("new", {}, "123456789012", REGION)
    # A format-1 lock (no policies recorded) is a lock too.
    (envs / "team.lock.json").write_text(json.dumps({"format": 1, "stacks": {}}), encoding="utf-8")
    result = lock(envs, "--new")
    assert isinstance(result.exception, CliError)
    assert "exists: --new declares a first lock" in result.exception.message


def test_lock_replaces_a_lock_copied_from_another_environment_with_its_own_stacks(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way the refusal of a foreign lock names: `mlcluster lock ENV` reads ENV's deployed stacks and compares
    nothing with the other environment's record (neither its stacks as gone nor its acceptances carried)."""
    envs = folder(tmp_path)
    deploy("team-Storage", template(), protect=True)
    foreign = {
        "format": 2,
        "environment": "dev",
        "source": "deployed",
        "allowances_used": [],
        "accepted": ["dev-Network"],
        "account": "210987654321",
        "region": "eu-west-1",
        "stacks": {},
    }
    (envs / "team.lock.json").write_text(json.dumps(foreign), encoding="utf-8")
    # Every other reader refuses it: protect, and lock --from-templates (it never reads what team has deployed).
    result = CliRunner().invoke(cli, ["protect", "team", "--environments", str(envs)], standalone_mode=False)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_FAILED, result.output
    assert f"{envs / 'team.lock.json'}: environment: 'dev' is not valid;" in result.exception.message
    assert "run 'mlcluster lock team' with credentials" in result.exception.message
    templates_of(monkeypatch, {})
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_FAILED, result.output
    assert "environment: 'dev' is not valid" in result.exception.message
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8")) == foreign
    result = lock(envs)
    assert result.exception is None, result.output
    assert f"{envs / 'team.lock.json'}: records environment 'dev', not 'team': replaced by team's deployed stacks" in (
        result.output
    )
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert (data["environment"], data["source"], list(data["stacks"])) == ("team", "deployed", ["team-Storage"])
    assert (data["accepted"], data["account"], data["region"]) == ([], "123456789012", REGION)
    # The edge: the lock now records team and is read as before.
    result = lock(envs)
    assert result.exception is None and "records environment" not in result.output, result.output


def test_lock_refuses_to_replace_a_renamed_environments_lock_the_only_record_of_its_stacks(
    aws: Aws, tmp_path: Path
) -> None:
    """Review i33 finding 1: dev.yaml and dev.lock.json renamed to team. `mlcluster lock team` would write team's
    deployed stacks (none) over the only record of dev's, which keep running: refused, the file unchanged. A
    copy (dev.lock.json still beside it) is replaced as before."""
    from mlcluster.replacement import snapshot_to_json, stack_state

    envs = folder(tmp_path)
    deploy("dev-Storage", template(), protect=True)
    renamed = {
        "format": 2,
        "environment": "dev",
        "source": "deployed",
        "allowances_used": ["Storage/Lustre"],
        "accepted": [],
        "account": "123456789012",
        "region": REGION,
        "stacks": snapshot_to_json({"dev-Storage": stack_state(template(), {}, termination_protection=True)}),
    }
    (envs / "team.lock.json").write_text(json.dumps(renamed), encoding="utf-8")
    before = (envs / "team.lock.json").read_bytes()
    result = lock(envs)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_FAILED, result.output
    message = result.exception.message
    assert f"{envs / 'team.lock.json'} records environment 'dev' and its stacks dev-Storage, and dev.lock.json is " in (
        message
    )
    assert "not beside it: this file is their only record" in message
    assert "Give both files their old names back (dev.yaml and dev.lock.json)" in message
    assert (envs / "team.lock.json").read_bytes() == before
    # --accept names nothing here: the record is not given up for an accepted stack either.
    result = lock(envs, "--accept", "dev-Storage")
    assert isinstance(result.exception, CliError) and "only record" in result.exception.message
    assert (envs / "team.lock.json").read_bytes() == before
    # A lock recording no environment and stacks: whose they are is unknown, refused the same way.
    (envs / "team.lock.json").write_text(json.dumps({k: v for k, v in renamed.items() if k != "environment"}))
    result = lock(envs)
    assert isinstance(result.exception, CliError), result.output
    assert "records no environment and its stacks dev-Storage, and no other lock of theirs is" in (
        result.exception.message
    )
    # A dev.lock.json put back that records none of them (a first lock from git, say) is no record: refused
    # (whole-diff data-loss review).
    (envs / "team.lock.json").write_bytes(before)
    (envs / "dev.lock.json").write_text(json.dumps({**renamed, "stacks": {}}), encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError) and "only record" in result.exception.message, result.output
    assert (envs / "team.lock.json").read_bytes() == before
    # The edge: a copy (dev's own lock still beside it) is replaced with team's deployed stacks (none).
    (envs / "dev.lock.json").write_bytes(before)
    result = lock(envs)
    assert result.exception is None, result.output
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert (data["environment"], data["stacks"]) == ("team", {})
    assert (envs / "dev.lock.json").read_bytes() == before


def test_from_templates_never_overwrites_a_deployed_lock_nor_drops_a_stack(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlcluster.replacement import stack_state

    envs = folder(tmp_path)
    deploy("team-Storage", template())
    deploy("team-Cluster", template())
    assert lock(envs).exception is None
    storage_only = {"team-Storage": stack_state(template(), {}, termination_protection=False)}
    monkeypatch.setattr(diff_module, "synthesize", lambda folder, name, out: out)
    monkeypatch.setattr(diff_module, "snapshot_from_assembly", lambda assembly, name: storage_only)
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError), result.output
    assert "was read from the deployed stacks; --from-templates would record" in result.exception.message
    # Over a templates lock (the examples) it records the templates, but never a stack gone.
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    (envs / "team.lock.json").write_text(json.dumps(data | {"source": "templates"}), encoding="utf-8")
    result = lock(envs, "--from-templates", "--accept", "team-Cluster")
    assert isinstance(result.exception, CliError), result.output
    assert "the templates drop team-Cluster" in result.exception.message
    both = storage_only | {"team-Cluster": storage_only["team-Storage"]}
    monkeypatch.setattr(diff_module, "snapshot_from_assembly", lambda assembly, name: both)
    result = lock(envs, "--from-templates")
    assert result.exception is None, result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["source"] == "templates"


def test_parallelclusters_own_stack_is_an_orphan_once_the_cluster_stack_is_gone(aws: Aws, tmp_path: Path) -> None:
    from mlcluster.cli.orphans import orphan_stacks

    envs = folder(tmp_path, on_delete="retain")
    env = diff_module.load_one(envs, "team")
    body = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    cfn = aws_client("cloudformation", REGION)
    cfn.create_stack(StackName=env.cluster_name, TemplateBody=json.dumps(body), Tags=TAG)
    cfn.create_stack(StackName="team-Cluster", TemplateBody=json.dumps(body), Tags=TAG)
    # The edge: while team-Cluster (whose custom resource made it) is deployed, only team-Cluster is listed.
    assert [o["stack"] for o in orphan_stacks(cfn, env)] == ["team-Cluster"]
    cfn.delete_stack(StackName="team-Cluster")
    assert [o["stack"] for o in orphan_stacks(cfn, env)] == [env.cluster_name]


class _Pages:
    def __init__(self, pages: dict[str, list[dict[str, str]]]) -> None:
        self.pages = pages

    def paginate(self, StackName: str) -> list[dict[str, Any]]:  # noqa: N803 - boto3's parameter name
        return [{"StackResourceSummaries": self.pages.get(StackName, [])}]


class _NestedCfn:
    """ListStackResources for a stack whose nested stack (the ParallelCluster provider) holds a log group."""

    def get_paginator(self, name: str) -> _Pages:
        assert name == "list_stack_resources"
        nested = "arn:aws:cloudformation:us-east-2:123456789012:stack/team-Cluster-Provider-1/abc"
        return _Pages(
            {
                "team-Cluster": [{"ResourceType": "AWS::CloudFormation::Stack", "PhysicalResourceId": nested}],
                nested: [{"ResourceType": "AWS::Logs::LogGroup", "PhysicalResourceId": "/aws/lambda/provider"}],
            }
        )


def test_a_nested_stacks_resources_are_the_live_stacks() -> None:
    from mlcluster.cli.orphans import _physical_ids

    ids, existing = _physical_ids(_NestedCfn(), ["team-Cluster"])
    assert "/aws/lambda/provider" in ids
    assert "arn:aws:cloudformation:us-east-2:123456789012:stack/team-Cluster-Provider-1/abc" in ids
    # Both stacks answered, so both exist (the nested one by the id its parent gives).
    assert existing == {
        "team-Cluster",
        "arn:aws:cloudformation:us-east-2:123456789012:stack/team-Cluster-Provider-1/abc",
    }


def file_system(physical: str) -> dict[str, Any]:
    """A stack's file system as ``ListStackResources`` sums it up."""
    return {
        "LogicalResourceId": "Lustre",
        "PhysicalResourceId": physical,
        "ResourceType": "AWS::FSx::FileSystem",
        "LastUpdatedTimestamp": "2026-11-20T09:00:00Z",
        "ResourceStatus": "CREATE_COMPLETE",
    }


def test_backups_and_volumes_of_a_live_file_system_are_not_orphans(aws: Aws, tmp_path: Path) -> None:
    """FSx copies the file system's tags onto its backups and volumes; no stack lists them.

    The automatic backups and the volumes of the live file system (the storage stack's) are its own; a
    user-initiated backup of it outlives it and bills (listed), and so does everything of a file system gone.
    moto's FSx backups carry no ``Type``: DescribeBackups answers with moto's own backups, typed as FSx would.
    """
    envs = folder(tmp_path)
    fsx = aws_client("fsx", REGION)
    subnet = ["subnet-0123456789abcdef0"]
    live = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=subnet)["FileSystem"]
    gone = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=subnet)["FileSystem"]
    live_backup = fsx.create_backup(FileSystemId=live["FileSystemId"], Tags=TAG)["Backup"]["ResourceARN"]
    manual_backup = fsx.create_backup(FileSystemId=live["FileSystemId"], Tags=TAG)["Backup"]["ResourceARN"]
    gone_backup = fsx.create_backup(FileSystemId=gone["FileSystemId"], Tags=TAG)["Backup"]["ResourceARN"]
    fsx.delete_file_system(FileSystemId=gone["FileSystemId"])
    prefix = f"arn:aws:fsx:{REGION}:123456789012"
    live_volume = f"{prefix}:volume/{live['FileSystemId']}/fsvol-0123456789abcdef0"
    gone_volume = f"{prefix}:volume/{gone['FileSystemId']}/fsvol-0fedcba987654321f"
    tagged = [live["ResourceARN"], live_backup, manual_backup, gone_backup, live_volume, gone_volume]
    moto_fsx = fsx  # the name ``fsx`` is the recorded client below

    def typed(params: dict[str, Any]) -> dict[str, Any]:
        """moto's answer to the same filters, each backup with the Type and FileSystem FSx gives it (moto omits them)."""
        (system,) = params["Filters"][0]["Values"]
        backups = moto_fsx.describe_backups(Filters=params["Filters"])["Backups"]
        kinds = {live_backup: "AUTOMATIC", manual_backup: "USER_INITIATED"}
        return {
            "Backups": [{**b, "Type": kinds[b["ResourceARN"]], "FileSystem": {"FileSystemId": system}} for b in backups]
        }

    aws.answer("fsx", "DescribeBackups", always=typed)
    aws.answer(
        "resourcegroupstaggingapi",
        "GetResources",
        always={"ResourceTagMappingList": [{"ResourceARN": arn, "Tags": TAG} for arn in tagged]},
    )

    def listed(params: dict[str, Any]) -> dict[str, Any]:
        if params["StackName"] != "team-Storage":
            return error("ValidationError", f"Stack with id {params['StackName']} does not exist")
        return {"StackResourceSummaries": [file_system(live["FileSystemId"])]}

    aws.answer("cloudformation", "ListStackResources", always=listed)
    aws.answer("fsx", "DescribeDataRepositoryAssociations", always={"Associations": []})
    aws.answer("fsx", "DescribeDataRepositoryTasks", always={"DataRepositoryTasks": []})
    from mlcluster.cli.orphans import orphan_resources

    env = diff_module.load_one(envs, "team")
    cfn, tagging, fsx = recorded_clients(aws, "cloudformation", "resourcegroupstaggingapi", "fsx")
    found = [o["resource"] for o in orphan_resources(cfn, tagging, fsx, env)]
    assert found == [manual_backup, gone_backup, gone_volume]
    assert aws.params("DescribeBackups") == [
        {"Filters": [{"Name": "file-system-id", "Values": [live["FileSystemId"]]}]}
    ]


def test_a_failed_backup_lookup_is_reported(aws: Aws, tmp_path: Path) -> None:
    envs = folder(tmp_path)
    arn = f"arn:aws:fsx:{REGION}:123456789012:backup/backup-0123456789abcdef0"
    aws.answer(
        "resourcegroupstaggingapi",
        "GetResources",
        always={"ResourceTagMappingList": [{"ResourceARN": arn, "Tags": TAG}]},
    )
    aws.answer("cloudformation", "ListStackResources", always={"StackResourceSummaries": [file_system("fs-1")]})
    aws.answer("fsx", "DescribeBackups", always=error("AccessDenied", "no fsx:DescribeBackups", 403))
    from mlcluster.cli.orphans import orphan_resources

    env = diff_module.load_one(envs, "team")
    clients = recorded_clients(aws, "cloudformation", "resourcegroupstaggingapi", "fsx")
    with pytest.raises(CliError) as raised:
        orphan_resources(*clients, env)
    assert raised.value.exit_code == EXIT_AWS
    assert "DescribeBackups (the backups of the environment's live file systems) failed: AccessDenied" in (
        raised.value.message
    )


@pytest.mark.parametrize(
    ("existing", "told"),
    [
        ({"format": 1, "stacks": {}}, "is format 1 (written before 0.2.0"),
        (None, "declares that nothing is deployed ('--new')"),
    ],
)
def test_from_templates_never_overwrites_a_format_1_or_new_lock(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: dict[str, Any] | None, told: str
) -> None:
    """Review finding 1: only no lock, or a lock the templates wrote, may be rewritten from the templates."""
    from mlcluster.replacement import stack_state

    envs = folder(tmp_path)
    if existing is None:
        assert lock(envs, "--new").exception is None
    else:
        (envs / "team.lock.json").write_text(json.dumps(existing), encoding="utf-8")
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    storage = {"team-Storage": stack_state(template(policy="Delete"), {}, termination_protection=False)}
    monkeypatch.setattr(diff_module, "synthesize", lambda folder, name, out: out)
    monkeypatch.setattr(diff_module, "snapshot_from_assembly", lambda assembly, name: storage)
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_FAILED
    assert told in result.exception.message
    assert "Run 'mlcluster lock team' with credentials" in result.exception.message
    assert "--accept" in result.exception.message
    assert "is replaced; changes since it are not checked" not in result.output
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    # The edges: no lock at all is a first lock from the templates, and a templates lock is rewritten.
    (envs / "team.lock.json").unlink()
    result = lock(envs, "--from-templates")
    assert result.exception is None, result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["source"] == "templates"
    result = lock(envs, "--from-templates")
    assert result.exception is None, result.output


def test_termination_protection_switched_off_outside_the_app_is_recorded_only_when_named(
    aws: Aws, tmp_path: Path
) -> None:
    """Review finding 5: protection off on a stack whose log group is not retained needs --accept or an allowance."""
    envs = folder(tmp_path)
    deploy("team-Storage", template(policy="Delete"), protect=True)
    assert lock(envs).exception is None
    # moto has no UpdateTerminationProtection: the same stack made again without it reads the same.
    aws_client("cloudformation", REGION).delete_stack(StackName="team-Storage")
    deploy("team-Storage", template(policy="Delete"), protect=False)
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_FAILED
    assert "team-Storage: termination protection off, so a stack deletion deletes Storage/Lustre/LogGroup/Resource" in (
        result.exception.message
    )
    assert "(--accept termination-protection:team-Storage)" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    # Another stack's name accepts nothing.
    assert isinstance(lock(envs, "--accept", "termination-protection:team-Network").exception, CliError)
    # The edges: named by --accept, or allowed by the file resource by resource (the guard's rule), it is recorded.
    result = lock(envs, "--accept", "termination-protection:team-Storage")
    assert result.exception is None, result.output
    data = json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))
    assert data["stacks"]["team-Storage"]["termination_protection"] is False
    assert data["accepted"] == ["team-Storage termination protection off (exposes Storage/Lustre/LogGroup/Resource)"]
    (envs / "team.lock.json").write_text(before, encoding="utf-8")
    envs = folder(tmp_path, allow_replacement=["Storage/Lustre/LogGroup"])
    result = lock(envs)
    assert result.exception is None, result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["allowances_used"] == [
        "Storage/Lustre/LogGroup"
    ]


def test_lock_ends_the_synths_record_and_keeps_a_used_allowance_while_it_is_in_the_file(
    aws: Aws, tmp_path: Path
) -> None:
    """Review finding 4: the lock, read from what is deployed, replaces the synths' record of allowances."""
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    aws_client("cloudformation", REGION).update_stack(
        StackName="team-Storage", TemplateBody=json.dumps(template(days=90))
    )
    envs = folder(tmp_path, allow_replacement=["Storage/Lustre/LogGroup"])
    record = envs / "team.allowances.json"
    record.write_text('{"lock": "x", "allowances": {}}', encoding="utf-8")
    assert lock(envs).exception is None
    assert not record.exists()
    # Locked again with the allowance still in the file: still used (forgotten, it would allow the next change).
    result = lock(envs)
    assert result.exception is None, result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["allowances_used"] == [
        "Storage/Lustre/LogGroup"
    ]
    # The edge: removed from the file, the next lock forgets it.
    envs = folder(tmp_path)
    assert lock(envs).exception is None
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["allowances_used"] == []


# -- review r3: no lock records the working tree over deployed stacks; a used allowance allows nothing more ---------


def templates_of(monkeypatch: pytest.MonkeyPatch, snapshot: Any) -> None:
    """The synth of ``lock --from-templates`` answers ``snapshot`` (no CDK run)."""
    monkeypatch.setattr(diff_module, "synthesize", lambda folder, name, out: out)
    monkeypatch.setattr(diff_module, "snapshot_from_assembly", lambda assembly, name: snapshot)


def test_a_first_lock_from_the_templates_is_refused_while_stacks_are_deployed(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r3 finding 1: removing the lock and writing it --from-templates would record on_delete destroy unseen."""
    from mlcluster.replacement import stack_state

    envs = folder(tmp_path)
    deploy("team-Storage", template(), protect=True)
    templates_of(
        monkeypatch, {"team-Storage": stack_state(template(policy="Delete"), {}, termination_protection=False)}
    )
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_FAILED
    assert (
        "a first lock --from-templates declares that nothing of team is deployed, but account 123456789012 in "
        "us-east-2 has team-Storage. Run 'mlcluster lock team' to record them"
    ) in result.exception.message
    assert not (envs / "team.lock.json").exists()
    # The edge: nothing deployed in the account, the first lock is written from the templates.
    aws_client("cloudformation", REGION).delete_stack(StackName="team-Storage")
    result = lock(envs, "--from-templates")
    assert result.exception is None, result.output
    assert json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["source"] == "templates"


def test_a_first_lock_from_the_templates_without_credentials_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing proves that nothing is deployed: no lock is written."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    envs = folder(tmp_path)
    templates_of(monkeypatch, {})
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_SETUP
    assert not (envs / "team.lock.json").exists()


def templates_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose team.lock.json is written from the templates of a termination-protected Storage stack."""
    from mlcluster.replacement import stack_state

    envs = folder(tmp_path)
    templates_of(monkeypatch, {"team-Storage": stack_state(template(), {}, termination_protection=True)})
    assert lock(envs, "--from-templates").exception is None
    return envs


def test_from_templates_is_refused_while_a_synth_recorded_allowances(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r3 finding 1: over a templates lock it would delete the record without reading what is deployed."""
    envs = templates_locked(tmp_path, monkeypatch)
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    record = envs / "team.allowances.json"
    record.write_text('{"lock": "x", "resources": {}}', encoding="utf-8")
    result = lock(envs, "--from-templates")
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_FAILED
    assert f"{record} records replacements a synth allowed since" in result.exception.message
    assert "Run 'mlcluster lock team' with credentials" in result.exception.message
    assert record.exists()
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    # The edge: without the record the templates lock is rewritten from the templates.
    record.unlink()
    assert lock(envs, "--from-templates").exception is None


def test_protect_refuses_a_templates_lock_while_stacks_are_deployed(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r3 finding 1: protect runs with credentials before every deploy; a templates lock never read the stacks."""
    envs = templates_locked(tmp_path, monkeypatch)
    deploy("team-Storage", template())

    def protect() -> Any:
        return CliRunner().invoke(cli, ["protect", "team", "--environments", str(envs)], standalone_mode=False)

    result = protect()
    assert isinstance(result.exception, CliError), result.output
    assert result.exception.exit_code == EXIT_FAILED
    assert "team.lock.json was written from the templates (--from-templates), but team-Storage are deployed" in (
        result.exception.message
    )
    assert "Run 'mlcluster lock team' with credentials" in result.exception.message
    # The policy is set all the same (it only protects).
    policy = aws_client("cloudformation", REGION).get_stack_policy(StackName="team-Storage")["StackPolicyBody"]
    assert "LogicalResourceId/DataCD34" in policy
    # The edge: a lock read from the deployed stacks passes.
    (envs / "team.lock.json").unlink()
    assert lock(envs, "--new").exception is not None  # stacks exist: --new refuses too
    assert lock(envs).exception is None
    result = protect()
    assert result.exception is None, result.output


def test_a_used_allowance_left_in_the_file_does_not_allow_a_later_change(aws: Aws, tmp_path: Path) -> None:
    """r3 finding 3: the lock counted an allowance it recorded as used again, for the next change of its resource."""
    envs = folder(tmp_path)
    deploy("team-Storage", template())
    assert lock(envs).exception is None
    cfn = aws_client("cloudformation", REGION)
    cfn.update_stack(StackName="team-Storage", TemplateBody=json.dumps(template(days=90)))
    envs = folder(tmp_path, allow_replacement=["Storage/Lustre/LogGroup"])
    assert lock(envs).exception is None
    # Deployed again from elsewhere, shorter still, with the used allowance still in the file.
    cfn.update_stack(StackName="team-Storage", TemplateBody=json.dumps(template(days=30)))
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError), result.output
    assert "not allowed by the environment file" in result.exception.message
    assert "RetentionInDays 90 -> 30" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    # The edge: named by --accept, the later change is recorded.
    result = lock(envs, "--accept", "Storage/Lustre/LogGroup")
    assert result.exception is None, result.output


def test_a_used_allowance_left_in_the_file_does_not_cover_termination_protection_going_off_again(
    aws: Aws, tmp_path: Path
) -> None:
    """r3 finding 3, termination protection: moto has no UpdateTerminationProtection, so the stack is made again."""
    cfn = aws_client("cloudformation", REGION)
    envs = folder(tmp_path)
    deploy("team-Storage", template(policy="Delete"), protect=True)
    assert lock(envs).exception is None
    cfn.delete_stack(StackName="team-Storage")
    deploy("team-Storage", template(policy="Delete"), protect=False)
    envs = folder(tmp_path, allow_replacement=["Storage/Lustre/LogGroup"])
    assert lock(envs).exception is None  # the allowance is used by that deploy
    cfn.delete_stack(StackName="team-Storage")
    deploy("team-Storage", template(policy="Delete"), protect=True)
    assert lock(envs).exception is None  # protection back on: nothing to explain
    cfn.delete_stack(StackName="team-Storage")
    deploy("team-Storage", template(policy="Delete"), protect=False)
    before = (envs / "team.lock.json").read_text(encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError), result.output
    assert "(--accept termination-protection:team-Storage)" in result.exception.message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == before
    # The edge: named by --accept, it is recorded.
    result = lock(envs, "--accept", "termination-protection:team-Storage")
    assert result.exception is None, result.output


@pytest.mark.parametrize(
    ("text", "why"), [("[]", "'list' object"), ('"x"', "'str' object"), ("{not json", "Expecting")]
)
def test_lock_does_not_overwrite_an_unreadable_lock_and_names_the_way(
    aws: Aws, tmp_path: Path, text: str, why: str
) -> None:
    """Review i30l finding 4: `mlcluster lock ENV` over an unreadable lock names git (the path from the project
    folder) and moving the file aside, never itself as the way; it writes nothing over the file."""
    (tmp_path / "cdk.json").write_text("{}", encoding="utf-8")  # the project's folder
    envs = folder(tmp_path)
    deploy("team-Storage", template(), protect=True)
    (envs / "team.lock.json").write_text(text, encoding="utf-8")
    result = lock(envs)
    assert isinstance(result.exception, CliError) and result.exception.exit_code == EXIT_FAILED, result.output
    message = result.exception.message
    assert message.startswith(f"{envs / 'team.lock.json'} cannot be read as a lock (") and why in message
    assert "'mlcluster lock team' does not overwrite it: it may be the only record of the deployed stacks" in message
    assert "Restore it from git (git log -- environments/team.lock.json)" in message
    assert "if there is no good copy, move the file aside (keep it) and run 'mlcluster lock team' again" in message
    assert "rewrite it with" not in message
    assert (envs / "team.lock.json").read_text(encoding="utf-8") == text
    # The way works: the file moved aside, the lock reads the deployed stacks.
    (envs / "team.lock.json").rename(tmp_path / "team.lock.json.unreadable")
    result = lock(envs)
    assert result.exception is None, result.output
    assert list(json.loads((envs / "team.lock.json").read_text(encoding="utf-8"))["stacks"]) == ["team-Storage"]


def test_nodes_parallelcluster_launched_are_orphans_only_once_the_clusters_stack_is_gone(
    aws: Aws, tmp_path: Path
) -> None:
    """A compute node, its root volume and a network interface tagged as ParallelCluster's launch templates tag them
    (moto's EC2, read back through moto's GetResources with their tags) belong to the cluster while its stack exists;
    the same tags naming another cluster are listed; after the cluster's stack is deleted, all are listed."""
    from mlcluster.cli.orphans import orphan_resources

    envs = folder(tmp_path)
    pcluster = {
        "backend": "pcluster",
        "pcluster": {"queues": [{"name": "q", "compute_resources": [{"name": "a", "instance_type": "p5.48xlarge"}]}]},
    }
    write_env(envs, "team", {"region": REGION, "network": {"availability_zone": "us-east-2a"}, "cluster": pcluster})
    env = diff_module.load_one(envs, "team")
    ec2 = aws_client("ec2", REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]

    def launch(cluster: str) -> list[str]:
        tags = [
            *TAG,
            {"Key": "parallelcluster:cluster-name", "Value": cluster},
            {"Key": "parallelcluster:node-type", "Value": "Compute"},
        ]
        specs = [{"ResourceType": kind, "Tags": tags} for kind in ("instance", "volume")]
        (node,) = ec2.run_instances(
            ImageId="ami-12345678", MinCount=1, MaxCount=1, SubnetId=subnet, TagSpecifications=specs
        )["Instances"]
        (volume,) = [m["Ebs"]["VolumeId"] for m in node["BlockDeviceMappings"]]
        eni = ec2.create_network_interface(
            SubnetId=subnet, TagSpecifications=[{"ResourceType": "network-interface", "Tags": tags}]
        )["NetworkInterface"]["NetworkInterfaceId"]
        prefix = f"arn:aws:ec2:{REGION}:123456789012"
        return [
            f"{prefix}:instance/{node['InstanceId']}",
            f"{prefix}:network-interface/{eni}",
            f"{prefix}:volume/{volume}",
        ]

    mine = launch(env.cluster_name)
    other = launch(f"{env.cluster_name}-2")
    deploy(env.cluster_name, {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})
    clients = recorded_clients(aws, "cloudformation", "resourcegroupstaggingapi", "fsx")
    assert sorted(o["resource"] for o in orphan_resources(*clients, env)) == sorted(other)
    aws_client("cloudformation", REGION).delete_stack(StackName=env.cluster_name)
    assert sorted(o["resource"] for o in orphan_resources(*clients, env)) == sorted(mine + other)
