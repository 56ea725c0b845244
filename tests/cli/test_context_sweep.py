"""What every verb stands on, whole: the environment it loads, the session's region, the stacks' outputs.

Each test compares the complete message the operator reads and its exit code, the exact
DescribeStacks request (botocore Stubber with ``expected_params``) and the exact client settings
(issue 27, cli sweep).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from mlcluster.cli import context
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_SETUP, CliError
from mlcluster.config import load_environment
from tests.cli.conftest import REPO


@pytest.fixture
def no_ambient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the environment, and no region or profile anywhere."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def folder_with(tmp_path: Path, **files: dict[str, Any]) -> Path:
    folder = tmp_path / "environments"
    folder.mkdir(exist_ok=True)
    for name, body in files.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return folder


QA = {"network": {"availability_zone": "eu-west-1b"}}


def test_a_missing_environment_lists_the_ones_in_the_folder(tmp_path: Path, no_ambient: None) -> None:
    folder = folder_with(tmp_path, qa=QA, beta=QA)
    (folder / "notes.txt").write_text("not an environment")
    with pytest.raises(CliError) as caught:
        context.Target.load("prod", folder, None, None)
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_FAILED,
        f"no environment 'prod': {folder / 'prod.yaml'} does not exist (environments in {folder}: beta, qa)\n"
        "  what to do: give the name of a file in that folder, or --environments DIR",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CliError, match=r"\(environments in .*empty: none\)"):
        context.Target.load("prod", empty, None, None)


def test_a_folder_named_like_an_environment_file_is_not_loaded(tmp_path: Path, no_ambient: None) -> None:
    folder = folder_with(tmp_path, qa=QA)
    (folder / "dir.yaml").mkdir()
    with pytest.raises(CliError, match=r"^no environment 'dir': .*\(environments in .*: dir, qa\)"):
        context.Target.load("dir", folder, None, None)


def test_an_invalid_environment_file_is_a_configuration_error(tmp_path: Path, no_ambient: None) -> None:
    folder = folder_with(tmp_path, qa={"network": {"availability_zone": "eu-west-1b"}, "colour": "blue"})
    with pytest.raises(CliError) as caught:
        context.Target.load("qa", folder, None, None)
    assert caught.value.exit_code == EXIT_FAILED
    assert caught.value.message.startswith("configuration error\n")
    assert "colour" in caught.value.message


def test_a_loaded_target_knows_its_environment_region_and_stacks(tmp_path: Path, no_ambient: None) -> None:
    folder = folder_with(tmp_path, qa=QA)
    target = context.Target.load("qa", folder, None, None)
    assert (target.name, target.backend, target.region, target.profile) == ("qa", "none", "eu-west-1", None)
    assert target.region_source == f"the availability zone in {folder / 'qa.yaml'}"
    assert target.stack_name("Storage") == "qa-Storage"
    assert target.default_user == "ubuntu"


def test_the_default_user_follows_the_backend_and_the_os(tmp_path: Path) -> None:
    p5 = load_environment(REPO / "environments" / "p5.yaml")
    trn1 = load_environment(REPO / "environments" / "trn1.yaml")
    hyperpod = load_environment(REPO / "environments" / "hyperpod.yaml")
    session = boto3.Session(region_name="us-east-1")
    users = [context.Target(environment=e, session=session).default_user for e in (p5, trn1, hyperpod)]
    assert users == [context.PCLUSTER_USERS[p5.config.cluster.pcluster.os], "ubuntu", "ubuntu"]  # type: ignore[union-attr]
    assert context.PCLUSTER_USERS[p5.config.cluster.pcluster.os] == "ec2-user"  # type: ignore[union-attr]


def test_require_backend_names_the_backend_and_what_the_command_needs() -> None:
    dev = context.Target(environment=load_environment(REPO / "environments" / "dev.yaml"), session=boto3.Session())
    dev.require_backend("none")
    with pytest.raises(CliError) as caught:
        dev.require_backend("pcluster", "hyperpod")
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_FAILED,
        "environment dev has cluster.backend 'none'; this command needs 'pcluster' or 'hyperpod'",
    )


def test_a_session_without_a_region_is_a_setup_error(no_ambient: None) -> None:
    target = context.Target(environment=load_environment(REPO / "environments" / "dev.yaml"), session=boto3.Session())
    with pytest.raises(CliError) as caught:
        _ = target.region
    assert caught.value.exit_code == EXIT_SETUP
    assert caught.value.message.startswith("choosing the region failed: You must specify a region.\n")


def test_clients_use_the_region_standard_retries_and_are_made_once() -> None:
    target = context.Target(
        environment=load_environment(REPO / "environments" / "dev.yaml"),
        session=boto3.Session(region_name="eu-west-1", aws_access_key_id="a", aws_secret_access_key="b"),
    )
    client = target.client("cloudformation")
    assert target.client("cloudformation") is client
    assert client.meta.region_name == "eu-west-1"
    # botocore counts the first try too: 5 retries are 6 attempts in all.
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    assert client.meta.config.user_agent_extra == "mlcluster-cli"


def stubbed(region: str = "eu-west-1") -> tuple[context.Target, Stubber]:
    target = context.Target(
        environment=load_environment(REPO / "environments" / "dev.yaml"),
        session=boto3.Session(region_name=region, aws_access_key_id="a", aws_secret_access_key="b"),
    )
    stubber = Stubber(target.client("cloudformation"))
    stubber.activate()
    return target, stubber


def described(outputs: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "Stacks": [
            {
                "StackName": "dev-Storage",
                "CreationTime": "2026-01-01T00:00:00Z",
                "StackStatus": "CREATE_COMPLETE",
                "Outputs": outputs,
            }
        ]
    }


def test_outputs_are_read_once_and_an_empty_one_is_missing() -> None:
    target, stubber = stubbed()
    stubber.add_response(
        "describe_stacks",
        described([{"OutputKey": "BucketName", "OutputValue": "dev-data"}, {"OutputKey": "Empty"}]),
        {"StackName": "dev-Storage"},
    )
    assert target.outputs("Storage") == {"BucketName": "dev-data", "Empty": ""}
    assert target.output("Storage", "BucketName") == "dev-data"  # no second call: the Stubber has none queued
    for key in ("Empty", "Absent"):
        with pytest.raises(CliError) as caught:
            target.output("Storage", key)
        assert (caught.value.exit_code, caught.value.message) == (
            EXIT_AWS,
            f"stack dev-Storage has no output {key}\n"
            "  what to do: deploy the current version of the stacks (`npx cdk deploy`)",
        )
    stubber.assert_no_pending_responses()


def test_a_stack_without_outputs_has_none_and_remembered_outputs_make_no_call() -> None:
    target, stubber = stubbed()
    stack = described([])["Stacks"][0]
    del stack["Outputs"]
    assert target.remember_outputs("Network", stack) == {}
    assert target.outputs("Network") == {}
    stubber.assert_no_pending_responses()


def test_a_stack_that_does_not_exist_says_to_deploy_it() -> None:
    target, stubber = stubbed()
    stubber.add_client_error(
        "describe_stacks",
        "ValidationError",
        "Stack with id dev-Cluster does not exist",
        expected_params={"StackName": "dev-Cluster"},
    )
    with pytest.raises(CliError) as caught:
        target.outputs("Cluster")
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        "stack dev-Cluster does not exist in eu-west-1\n"
        "  what to do: deploy it (`npx cdk deploy 'dev/*'`) or pass the right --region/--profile",
    )
    stubber.add_response("describe_stacks", {"Stacks": []}, {"StackName": "dev-Cluster"})
    assert target.describe_stack("Cluster") is None


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("ValidationError", "Template format error"),  # a ValidationError that is not "does not exist"
        ("AccessDenied", "Stack with id dev-Cluster does not exist"),  # the words, under another code
        ("Throttling", "Rate exceeded"),
    ],
)
def test_any_other_describe_stacks_failure_is_an_aws_error_naming_the_stack(code: str, message: str) -> None:
    target, stubber = stubbed()
    stubber.add_client_error("describe_stacks", code, message, expected_params={"StackName": "dev-Cluster"})
    with pytest.raises(CliError) as caught:
        target.describe_stack("Cluster")
    assert caught.value.exit_code == EXIT_AWS
    assert caught.value.message.splitlines()[0] == f"DescribeStacks for dev-Cluster failed: {code}: {message}"


def test_the_zone_or_its_id_gives_the_region(tmp_path: Path) -> None:
    def config(network: dict[str, Any]) -> Any:
        path = tmp_path / "z.yaml"
        path.write_text(yaml.safe_dump({"network": network}))
        return load_environment(path).config

    assert context.zone_region(config({"availability_zone": "eu-west-1b"})) == "eu-west-1"
    assert context.zone_region(config({"availability_zone_id": "use1-az4"})) == "us-east-1"
    assert context.zone_region(config({"availability_zone_id": "apse2-az1"})) == "ap-southeast-2"


def test_the_region_messages_are_whole(tmp_path: Path, no_ambient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CliError) as caught:
        context.open_session(None, None, None)
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_SETUP,
        "no AWS region: none of `region:` in the environment file, its availability zone, --region, "
        "AWS_REGION, AWS_DEFAULT_REGION or the profile's region gives one\n"
        "  what to do: pass --region REGION or set AWS_REGION",
    )
    path = tmp_path / "qa.yaml"
    path.write_text(yaml.safe_dump({"region": "eu-west-1", "network": {"availability_zone": "eu-west-1b"}}))
    config = load_environment(path).config
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    with pytest.raises(CliError) as caught:
        context.open_session(None, None, config, where="qa.yaml")
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_SETUP,
        "two regions: `region:` in qa.yaml says eu-west-1, AWS_DEFAULT_REGION says us-east-2; "
        "the environment file decides\n"
        "  what to do: drop AWS_DEFAULT_REGION or set it to eu-west-1 (the environment lives in eu-west-1)",
    )
    # A conflicting --region is told the same.
    with pytest.raises(CliError) as caught:
        context.open_session("us-east-2", None, config, where="qa.yaml")
    assert caught.value.message.endswith(
        "  what to do: drop --region or set it to eu-west-1 (the environment lives in eu-west-1)"
    )
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    opened = context.open_session(None, None, config, where="qa.yaml")
    assert (opened.region, opened.region_source) == ("eu-west-1", "`region:` in qa.yaml")


def test_no_credentials_is_a_setup_error_unless_offline(no_ambient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(CliError) as caught:
        context.open_session("eu-west-1", None, None)
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_SETUP,
        "no AWS credentials found\n"
        "  what to do: configure credentials (AWS_PROFILE, `aws configure sso`, or an instance role)",
    )
    opened = context.open_session("eu-west-1", None, None, offline=True)
    assert (opened.region, opened.region_source) == ("eu-west-1", "--region")


def test_json_is_indented_or_on_one_line_with_dates_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    import datetime as dt

    data = {"when": dt.date(2026, 1, 2), "n": [1]}
    context.echo_json(data)
    assert capsys.readouterr().out == '{\n  "when": "2026-01-02",\n  "n": [\n    1\n  ]\n}\n'
    context.echo_json(data, compact=True)
    assert capsys.readouterr().out == json.dumps({"when": "2026-01-02", "n": [1]}) + "\n"


def test_the_environments_folder_is_the_projects_and_relative_below_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cdk.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert context.environments_folder(None) == tmp_path / "environments"  # above the current folder: absolute
    monkeypatch.chdir(tmp_path)
    assert context.environments_folder(None) == Path("environments")
    assert context.environments_folder(Path("elsewhere")) == Path("elsewhere")


def test_the_group_s_project_is_the_one_every_verb_uses(tmp_path: Path) -> None:
    import click

    from mlcluster.appdir import Project

    chosen = Project(tmp_path / "app", None)
    with click.Context(click.Command("mlcluster"), obj=chosen):
        assert context.current_project() is chosen
        assert context.environments_folder(None) == tmp_path / "app" / "environments"
    with click.Context(click.Command("mlcluster"), obj="not a project"):
        assert context.current_project().root == Path.cwd().resolve()


def test_the_projects_feature_flags_and_the_packaged_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cdk.json").write_text('{"context": {"flag": true}}')
    assert context.project_context() == {"flag": True}
    assert capsys.readouterr().err == ""
    (tmp_path / "cdk.json").write_text("[]")
    with pytest.raises(CliError) as caught:
        context.project_context()
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_FAILED,
        f"{tmp_path / 'cdk.json'}: expected a JSON object whose `context` is an object\n"
        "  what to do: fix the file, or pass --app-dir DIR",
    )
    (tmp_path / "cdk.json").unlink()
    from mlcluster.appdir import find_project

    flags = context.project_context()
    assert flags == find_project().context() and flags
    notice = find_project().notice()
    assert capsys.readouterr().err == f"mlcluster: note: {notice}\n"


def test_the_default_profiles_region_is_named_as_such(
    tmp_path: Path, no_ambient: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = eu-north-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    opened = context.open_session(None, None, None)
    assert (opened.region, opened.region_source) == ("eu-north-1", "profile default in the AWS config file")
    assert opened.session.region_name == "eu-north-1"
    # Offline, the profile is not read: its region does not count.
    with pytest.raises(CliError, match=r"^no AWS region: "):
        context.open_session(None, None, None, offline=True)


def test_a_bad_ambient_profile_names_no_profile_in_the_message(
    no_ambient: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "gone")
    with pytest.raises(CliError) as caught:
        context.open_session("eu-west-1", None, None)
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_SETUP,
        "opening the AWS session failed: The config profile (gone) could not be found\n"
        "  what to do: name a profile from ~/.aws/config (`aws configure list-profiles`)",
    )


def test_a_client_without_a_region_says_the_region_is_missing(no_ambient: None) -> None:
    target = context.Target(
        environment=load_environment(REPO / "environments" / "dev.yaml"),
        session=boto3.Session(aws_access_key_id="a", aws_secret_access_key="b"),
    )
    with pytest.raises(CliError) as caught:
        target.client("cloudformation")
    assert caught.value.message.splitlines()[0] == "choosing the region failed: You must specify a region."
    assert target._clients == {}


def test_an_error_answer_without_its_error_element_is_still_an_aws_failure_naming_the_call() -> None:
    """A proxy's or an odd endpoint's error body can parse without ``Error``: not a traceback."""
    from botocore.exceptions import ClientError

    class Refusing:
        def describe_stacks(self, **_: Any) -> None:
            raise ClientError({}, "DescribeStacks")

    target = context.Target(environment=load_environment(REPO / "environments" / "dev.yaml"), session=boto3.Session())
    target._clients["cloudformation"] = Refusing()
    with pytest.raises(CliError) as caught:
        target.describe_stack("Cluster")
    assert (caught.value.exit_code, caught.value.message.splitlines()[0]) == (
        EXIT_AWS,
        "DescribeStacks for dev-Cluster failed: Unknown:",
    )


def test_a_loaded_target_keeps_the_profile_it_was_given(
    tmp_path: Path, no_ambient: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "aws-config"
    config.write_text("[profile ops]\naws_access_key_id = a\naws_secret_access_key = b\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    target = context.Target.load("qa", folder_with(tmp_path, qa=QA), None, "ops")
    assert (target.profile, target.region, target.session.profile_name) == ("ops", "eu-west-1", "ops")
