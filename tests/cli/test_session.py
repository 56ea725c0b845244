"""The one AWS session factory, the botocore error table, exit codes, --json and progress (issue 26)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore import exceptions

from mlcluster.cli.context import open_session
from mlcluster.cli.diff import Verdict, report
from mlcluster.cli.errors import (
    BOTOCORE_ERRORS,
    EXIT_AWS,
    EXIT_CODES,
    EXIT_REPLACEMENT,
    EXIT_SETUP,
    EXIT_USAGE,
    CliError,
    aws_errors,
)
from mlcluster.cli.progress import progress
from mlcluster.config import load_environment
from tests.cli.conftest import Aws, invoke

AMBIENT = ("--region", "AWS_REGION", "AWS_DEFAULT_REGION", "profile")


@pytest.fixture
def clean_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Credentials in the environment, no region anywhere, an AWS config file with profile ``ops`` in eu-north-1."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = tmp_path / "aws-config"
    config.write_text(
        "[profile ops]\nregion = eu-north-1\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return config


def _env(tmp_path: Path, **top: Any) -> Path:
    path = tmp_path / "qa.yaml"
    path.write_text(yaml.safe_dump({"network": {"availability_zone_id": "apse2-az1"}, **top}))
    return path


AMBIENT_VALUES = {"--region": "us-west-2", "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "ca-central-1"}
AMBIENT_VALUES["profile"] = "eu-north-1"


def _open_with(first: int, config: Any, monkeypatch: pytest.MonkeyPatch, value: str | None = None) -> Any:
    """open_session with the ambient sources from AMBIENT[first] on set (the first one to ``value`` if given)."""
    present = AMBIENT[first:]
    values = {**AMBIENT_VALUES, **({present[0]: value} if value else {})}
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if name in present:
            monkeypatch.setenv(name, values[name])
    if "profile" in present and value and present[0] == "profile":
        pytest.skip("the profile's region is fixed by the config file")
    return open_session(
        values["--region"] if "--region" in present else None, "ops" if "profile" in present else None, config
    )


@pytest.mark.parametrize("first", range(len(AMBIENT)), ids=AMBIENT)
def test_ambient_region_order_without_an_environment(
    first: int, clean_aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No environment file pins a region: --region, AWS_REGION, AWS_DEFAULT_REGION, the profile, in that order."""
    opened = _open_with(first, None, monkeypatch)
    assert opened.region == AMBIENT_VALUES[AMBIENT[first]] == opened.session.region_name
    assert opened.region_source == {"profile": "profile ops in the AWS config file"}.get(AMBIENT[first], AMBIENT[first])


@pytest.mark.parametrize("first", range(len(AMBIENT)), ids=AMBIENT)
def test_the_zone_pins_the_region_and_a_different_ambient_one_is_refused(
    first: int, tmp_path: Path, clean_aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the review's fix AWS_REGION (etc.) beat the zone: `diff`, `protect`, `lock` ran in the wrong region."""
    config = load_environment(_env(tmp_path)).config  # zone apse2-az1: ap-southeast-2, no `region:`
    with pytest.raises(CliError) as caught:
        _open_with(first, config, monkeypatch)
    source = {"profile": "profile ops in the AWS config file"}.get(AMBIENT[first], AMBIENT[first])
    assert caught.value.exit_code == EXIT_SETUP
    assert caught.value.message.splitlines()[0] == (
        f"two regions: the availability zone in the environment file says ap-southeast-2, "
        f"{source} says {AMBIENT_VALUES[AMBIENT[first]]}; the environment file decides"
    )


@pytest.mark.parametrize("first", range(len(AMBIENT) - 1), ids=AMBIENT[:-1])
def test_an_ambient_region_that_agrees_is_accepted(
    first: int, tmp_path: Path, clean_aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge: the same region from --region or the environment is fine; the file stays the source named."""
    config = load_environment(_env(tmp_path)).config
    opened = _open_with(first, config, monkeypatch, "ap-southeast-2")
    assert (opened.region, opened.region_source) == ("ap-southeast-2", "the availability zone in the environment file")
    pinned = load_environment(_env(tmp_path, region="ap-southeast-2")).config
    opened = _open_with(first, pinned, monkeypatch, "ap-southeast-2")
    assert (opened.region, opened.region_source) == ("ap-southeast-2", "`region:` in the environment file")


def test_the_file_region_beats_the_profile(tmp_path: Path, clean_aws: Path) -> None:
    """A profile in another region than `region:` is refused, naming both sources."""
    pinned = load_environment(_env(tmp_path, region="ap-southeast-2")).config
    with pytest.raises(CliError) as caught:
        open_session(None, "ops", pinned)
    assert caught.value.exit_code == EXIT_SETUP
    assert "`region:` in the environment file says ap-southeast-2" in caught.value.message
    assert "profile ops in the AWS config file says eu-north-1" in caught.value.message


def test_status_refuses_aws_region_other_than_the_zones(
    tmp_path: Path, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS_REGION eu-west-1 with zone us-east-1a: exit 4 before any call; AWS_REGION us-east-1 is used."""
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    refused = invoke("status", "qa", "--environments", str(folder), "--json")
    assert refused.exit_code == EXIT_SETUP and "AWS_REGION says eu-west-1" in refused.stderr
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    result = invoke("status", "qa", "--environments", str(folder), "--json")
    data = json.loads(result.stdout)
    assert data["region"] == "us-east-1", result.output
    assert data["region_source"] == f"the availability zone in {folder / 'qa.yaml'}"


def test_unknown_profile_is_a_setup_error(tmp_path: Path, clean_aws: Path) -> None:
    with pytest.raises(CliError) as caught:
        open_session(None, "nope", None)
    assert caught.value.exit_code == EXIT_SETUP
    assert caught.value.message.splitlines()[0] == (
        "opening the AWS session with profile nope failed: The config profile (nope) could not be found"
    )


def test_no_region_at_all_is_a_setup_error(clean_aws: Path) -> None:
    with pytest.raises(CliError) as caught:
        open_session(None, None, None)
    assert caught.value.exit_code == EXIT_SETUP
    assert caught.value.message.startswith(
        "no AWS region: none of `region:` in the environment file, its availability zone, --region"
    )


def test_the_table_names_botocore_classes() -> None:
    for name, code, advice in BOTOCORE_ERRORS:
        assert issubclass(getattr(exceptions, name), exceptions.BotoCoreError), name
        assert code in (EXIT_SETUP, EXIT_AWS) and advice


@pytest.mark.parametrize(
    ("error", "code", "first_line"),
    [
        (exceptions.NoCredentialsError(), EXIT_SETUP, "X failed: no AWS credentials found"),
        (exceptions.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), EXIT_SETUP, None),
        (
            exceptions.ProfileNotFound(profile="ops"),
            EXIT_SETUP,
            "X failed: The config profile (ops) could not be found",
        ),
        (exceptions.SSOTokenLoadError(error_msg="expired"), EXIT_SETUP, None),
        (exceptions.UnauthorizedSSOTokenError(), EXIT_SETUP, None),
        (exceptions.TokenRetrievalError(provider="sso", error_msg="m"), EXIT_SETUP, None),
        (exceptions.CredentialRetrievalError(provider="process", error_msg="m"), EXIT_SETUP, None),
        (exceptions.NoRegionError(), EXIT_SETUP, "X failed: You must specify a region."),
        (exceptions.EndpointConnectionError(endpoint_url="https://x"), EXIT_AWS, None),
        (exceptions.ConnectTimeoutError(endpoint_url="https://x"), EXIT_AWS, None),
        (exceptions.ReadTimeoutError(endpoint_url="https://x"), EXIT_AWS, None),
        (
            exceptions.ParamValidationError(report="bad\nrequest"),
            EXIT_AWS,
            "X failed: Parameter validation failed: bad request",
        ),
        (
            exceptions.ClientError({"Error": {"Code": "Throttling", "Message": "slow"}}, "Op"),
            EXIT_AWS,
            "X failed: Throttling: slow",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_every_botocore_error_is_one_line_and_its_code(error: Exception, code: int, first_line: str | None) -> None:
    with pytest.raises(CliError) as caught, aws_errors("X"):
        raise error
    lines = caught.value.message.splitlines()
    assert caught.value.exit_code == code
    assert len(lines) == 2 and lines[1].startswith("  what to do: ")
    assert lines[0].startswith("X failed: ")
    if first_line is not None:
        assert lines[0] == first_line


def test_a_botocore_error_no_verb_wrapped_is_still_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The group's last resort: an unwrapped botocore error becomes its code, never a traceback."""
    from mlcluster.cli import validate as validate_module

    def broken(*_: Any, **__: Any) -> None:
        raise exceptions.EndpointConnectionError(endpoint_url="https://sts.amazonaws.com")

    monkeypatch.setattr("mlcluster.config.project.check_environments", broken)
    (tmp_path / "environments").mkdir()
    result = invoke("validate", "--environments", str(tmp_path / "environments"))
    assert validate_module.validate is not None
    assert result.exit_code == EXIT_AWS
    assert result.stderr.startswith("mlcluster: AWS call failed: Could not connect to the endpoint URL")
    assert "Traceback" not in result.output


def test_exit_codes_are_distinct_and_documented() -> None:
    assert sorted(EXIT_CODES) == [*range(7), 130]  # 130: Ctrl-C, documented since the review of issue 26
    assert EXIT_REPLACEMENT != EXIT_USAGE == 2  # click's usage code is not a diff verdict (issue 26)
    result = invoke("--help")
    for code, meaning in EXIT_CODES.items():
        assert f"  {code}  {meaning}" in result.stdout
    assert "_MLCLUSTER_COMPLETE=bash_source mlcluster" in result.stdout


def _verdict(replacement: str, kind: str = "AWS::FSx::FileSystem", path: str = "Storage/Lustre/Resource") -> Verdict:
    return Verdict("qa-Storage", "Lustre", kind, path, "Modify", replacement)


def test_diff_replacement_exits_6_and_json_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CliError) as caught:
        report([_verdict("True")], stacks={"qa-Storage": "changes"}, region="us-east-1", as_json=True)
    assert caught.value.exit_code == EXIT_REPLACEMENT == 6
    data = json.loads(capsys.readouterr().out)
    assert (data["safe"], data["region"], data["stacks"]) == (False, "us-east-1", {"qa-Storage": "changes"})
    assert data["data_bearing"][0]["logical_id"] == "Lustre" and data["other"] == []
    report([_verdict("False")], as_json=True)  # a safe change: no error
    assert json.loads(capsys.readouterr().out)["safe"] is True


def test_usage_error_stays_2() -> None:
    assert invoke("diff").exit_code == EXIT_USAGE
    assert invoke("status", "qa", "--no-such-option").exit_code == EXIT_USAGE


def test_protect_json_without_deployed_stacks(aws: Aws, tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    result = invoke("protect", "qa", "--environments", str(folder), "--json")
    assert result.exit_code == 1, result.output  # protecting nothing is not a success (review of issue 26)
    assert json.loads(result.stdout) == {"protected": {}}
    assert "protect: nothing protected: no stack of qa is deployed in us-east-1" in result.stderr


def test_validate_json(tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    good = invoke("validate", "--environments", str(folder), "--json")
    assert good.exit_code == 0
    assert json.loads(good.stdout) == {"valid": True, "environments": ["qa"], "warnings": [], "errors": []}
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-9a}\n")
    bad = invoke("validate", "--environments", str(folder), "--json")
    assert bad.exit_code == 1
    (error,) = json.loads(bad.stdout)["errors"]
    assert (error["file"], error["key"]) == (str(folder / "qa.yaml"), "network.availability_zone")


def test_progress_is_silent_off_a_terminal_and_shown_on_one() -> None:
    from rich.console import Console

    pipe = io.StringIO()
    with progress("synthesizing qa", Console(file=pipe)):
        pass
    assert pipe.getvalue() == ""
    tty = io.StringIO()
    with progress("synthesizing qa", Console(file=tty, force_terminal=True)):
        pass
    assert "synthesizing qa" in tty.getvalue()


def test_cost_offline_needs_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cost --offline` makes no AWS call, so the session factory does not demand credentials for it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    result = invoke("cost", "qa", "--environments", str(folder), "--offline")
    assert result.exit_code == 1
    assert "no price cache" in result.stderr and "credentials" not in result.stderr
    assert invoke("cost", "qa", "--environments", str(folder)).exit_code == EXIT_SETUP


@pytest.fixture
def html_proxy() -> Iterator[str]:
    """A server on 127.0.0.1 answering every request with a proxy's HTML 403 page (no XML, no JSON)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Forbidden(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<html><head><title>403 Forbidden</title></head><body><h1>Blocked by proxy</h1>" + b"x" * 500
            self.send_response(403)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_html_answer_is_exit_3_not_a_traceback(
    html_proxy: str, tmp_path: Path, clean_aws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore's ResponseParserError derives from Exception, not BotoCoreError: before the review it escaped."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", html_proxy)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    result = invoke("status", "qa", "--environments", str(folder))
    assert result.exit_code == EXIT_AWS, result.output
    assert "Traceback" not in result.output
    first, advice = result.stderr.strip().splitlines()[-2:]
    assert "Unable to parse response" in first and len(first) < 400
    assert advice == (
        "  what to do: the endpoint or a proxy answered with something other than AWS; "
        "check HTTPS_PROXY / AWS_ENDPOINT_URL"
    )


def test_the_group_maps_an_unwrapped_response_parser_error() -> None:
    """The last-resort handler: a ResponseParserError no verb wrapped is still exit 3 with the advice."""
    from botocore.parsers import ResponseParserError

    from mlcluster.cli.main import as_cli_error

    converted = as_cli_error(ResponseParserError("Unable to parse response, invalid XML received: b'<html>'"))
    assert isinstance(converted, CliError) and converted.exit_code == EXIT_AWS
    assert "HTTPS_PROXY / AWS_ENDPOINT_URL" in converted.message


def test_cost_offline_reads_no_profile(tmp_path: Path, clean_aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown profile (AWS_PROFILE or --profile) cannot stop `cost --offline`, which makes no AWS call."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_PROFILE", "nope")
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    for extra in ((), ("--profile", "gone")):
        result = invoke("cost", "qa", "--environments", str(folder), "--offline", *extra)
        assert result.exit_code == 1, result.output
        assert "no price cache" in result.stderr and "profile" not in result.stderr
    online = invoke("cost", "qa", "--environments", str(folder))
    assert online.exit_code == EXIT_SETUP and "The config profile (nope) could not be found" in online.stderr


def test_validate_takes_a_bare_environment_name(tmp_path: Path) -> None:
    """`mlcluster validate qa` checks <environments>/qa.yaml like every verb's ENV; a path stays a path."""
    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / "qa.yaml").write_text("network: {availability_zone: us-east-1a}\n")
    (folder / "lab.yml").write_text("network: {availability_zone: us-east-1b}\n")
    result = invoke("validate", "qa", "lab", "--environments", str(folder), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["environments"] == ["qa", "lab"]
    missing = invoke("validate", "nope", "--environments", str(folder))
    assert missing.exit_code == 1 and str(folder / "nope.yaml") in missing.stderr


@pytest.mark.parametrize("network", ["network:", "network: {}"])
def test_an_empty_network_says_no_value(tmp_path: Path, network: str) -> None:
    """Before the review of issue 26 the message quoted a Python dict with two None values."""
    path = tmp_path / "qa.yaml"
    path.write_text(network + "\n")
    result = invoke("validate", str(path))
    assert result.exit_code == 1
    assert f"{path}: network.availability_zone: no value (empty or missing); give exactly one of" in result.stderr
    assert "None" not in result.stderr
