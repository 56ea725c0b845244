"""Failures every verb shares: no credentials, no environment, a bad file, a stack that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlcluster.cli.errors import CliError, aws_errors
from tests.cli.conftest import Aws, World, aws_client, invoke


@pytest.mark.parametrize("verb", ["ssh", "ssh-config", "status", "smoke", "patch", "diff", "protect"])
def test_no_credentials(verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every verb that calls AWS says so in one line and exits 4 before any synthesis or call.

    ``diff`` and ``protect`` ended in a NoCredentialsError traceback (issue 26) before the one session factory.
    """
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    folder = tmp_path / "environments"
    folder.mkdir()
    data = yaml.safe_load((Path(__file__).parents[2] / "environments" / "hyperpod.yaml").read_text())
    (folder / "hyperpod.yaml").write_text(yaml.safe_dump({**data, "region": "us-west-2"}))
    result = invoke(verb, "hyperpod", "--environments", str(folder), *(["--yes"] if verb == "patch" else []))
    assert result.exit_code == 4, result.output
    assert result.stderr.startswith("mlcluster: no AWS credentials found\n")
    assert "configure credentials" in result.stderr
    assert "Traceback" not in result.output


def test_unknown_environment_lists_the_files(tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "dev.yaml").write_text("network: {}\n")
    result = invoke("status", "qa", "--environments", str(folder))
    assert result.exit_code == 1
    assert f"no environment 'qa': {folder}/qa.yaml does not exist (environments in {folder}: dev)" in result.stderr


def test_invalid_environment_file(tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\nregion: mars-1\n")
    result = invoke("status", "qa", "--environments", str(folder))
    assert result.exit_code == 1
    assert "configuration error" in result.stderr
    assert "qa.yaml: region: 'mars-1' is not valid" in result.stderr


def test_no_region_setting_uses_the_zones_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws: Aws) -> None:
    """No --region, `region:`, AWS_REGION, AWS_DEFAULT_REGION or profile region: the zone names the region."""
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-2b}\n")
    result = invoke("status", "qa", "--environments", str(folder), "--json")
    assert '"region": "us-east-2"' in result.stdout, result.output
    assert result.exit_code == 1  # nothing deployed: needs attention


def test_stack_that_does_not_exist(aws: Aws, hyperpod: World) -> None:
    aws_client("cloudformation", "us-west-2").delete_stack(StackName="hyperpod-Cluster")
    result = hyperpod.run("ssh", "hyperpod", "--print", "--region", "us-west-2")
    assert result.exit_code == 3
    assert "stack hyperpod-Cluster does not exist in us-west-2" in result.stderr
    assert "npx cdk deploy 'hyperpod/*'" in result.stderr


def test_a_region_other_than_the_files_is_refused(aws: Aws, hyperpod: World) -> None:
    """hyperpod's zone usw2-az4 pins us-west-2: an explicit --region eu-west-1 is an error, not an empty answer."""
    result = hyperpod.run("ssh", "hyperpod", "--print", "--region", "eu-west-1")
    assert result.exit_code == 4
    assert "says us-west-2, --region says eu-west-1" in result.stderr


def test_aws_errors_maps_botocore_failures() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    with pytest.raises(CliError) as denied, aws_errors("ListClusterNodes for c"):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "ListClusterNodes")
    assert (denied.value.exit_code, denied.value.message.splitlines()[0]) == (
        3,
        "ListClusterNodes for c failed: AccessDeniedException: no",
    )
    with pytest.raises(CliError) as offline, aws_errors("DescribeStacks for x"):
        raise EndpointConnectionError(endpoint_url="https://cloudformation.us-west-2.amazonaws.com")
    assert offline.value.exit_code == 3
    assert "check the network" in offline.value.message


def test_the_harness_validates_requests_and_recorded_responses(aws: Aws, hyperpod: World) -> None:
    """Requests that break botocore's model fail the test; so do recorded answers that break the output shape."""
    from botocore.exceptions import ParamValidationError

    from mlcluster.cli.context import Target

    target = Target.load("hyperpod", hyperpod.environments, None, None)
    with pytest.raises(ParamValidationError):
        target.client("sagemaker").list_cluster_nodes(ClusterName=hyperpod.cluster, MaxResults=0)
    aws.answer("fsx", "DescribeDataRepositoryTasks", {"DataRepositoryTasks": [{"TaskId": 7}]})
    with pytest.raises(ParamValidationError):
        target.client("fsx").describe_data_repository_tasks()
