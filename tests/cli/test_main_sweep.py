"""The console script's edges, whole: ``validate``'s output and exit, the top-level error handling, the error
text of every botocore failure, the NCCL pass mark and the spinner (issue 27, cli sweep).

Each test compares the complete stdout / stderr / JSON document and the exit code the operator or a script
sees, for a valid file, a file with a warning, an invalid file and each way the command can stop.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore import exceptions
from rich.console import Console

from mlcluster.cli import errors, expectations, main, progress, validate
from mlcluster.cli.errors import EXIT_AWS, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SETUP, EXIT_USAGE, CliError
from tests.cli.conftest import invoke

GOOD = "network: {availability_zone: us-east-1a}\n"
#: Legal, but outside the private address space: a warning.
PUBLIC = "network: {availability_zone: us-east-1b, cidr: 11.0.0.0/16}\n"
PUBLIC_WARNING = (
    "network.cidr: 11.0.0.0/16 is outside the private address space (10.0.0.0/8, 172.16.0.0/12, "
    "192.168.0.0/16); the VPC then hides the public addresses in it from every node"
)
BAD = "network: {availability_zone: us-east-9a}\n"


def folder(tmp_path: Path, **files: str) -> Path:
    made = tmp_path / "environments"
    made.mkdir(exist_ok=True)
    for name, text in files.items():
        (made / name.replace("_", ".")).write_text(text)
    return made


def test_validate_prints_the_environments_and_each_warning_once(tmp_path: Path) -> None:
    envs = folder(tmp_path, qa_yaml=GOOD, lab_yml=PUBLIC)
    result = invoke("validate", "--environments", str(envs))
    assert (result.exit_code, result.stdout) == (0, "mlcluster: 2 environment file(s) valid: lab, qa\n")
    assert result.stderr == f"mlcluster: warning: {envs / 'lab.yml'}: {PUBLIC_WARNING}\n"
    result = invoke("validate", "--environments", str(envs), "--json")
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout) == {
        "valid": True,
        "environments": ["lab", "qa"],
        "warnings": [f"{envs / 'lab.yml'}: {PUBLIC_WARNING}"],
        "errors": [],
    }


def test_validate_of_an_invalid_file_is_exit_1_with_one_json_document(tmp_path: Path) -> None:
    envs = folder(tmp_path, qa_yaml=BAD)
    result = invoke("validate", str(envs / "qa.yaml"), "--json")
    assert result.exit_code == EXIT_FAILED
    document = json.loads(result.stdout)
    (error,) = document.pop("errors")
    assert document == {"valid": False, "environments": [], "warnings": []}
    assert (error["file"], error["key"]) == (str(envs / "qa.yaml"), "network.availability_zone")
    assert error["message"].startswith("network.availability_zone: ")
    assert result.stderr.startswith(f"mlcluster: configuration error\n{envs / 'qa.yaml'}")
    plain = invoke("validate", str(envs / "qa.yaml"))
    assert (plain.exit_code, plain.stdout) == (EXIT_FAILED, "")
    assert plain.stderr == result.stderr


def test_a_bare_name_is_a_file_of_the_environments_folder_and_a_path_stays_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = folder(tmp_path, qa_yaml=GOOD, lab_yml=GOOD, both_yaml=GOOD, both_yml=GOOD)
    resolve = validate.resolve_files
    assert resolve((Path("qa"), Path("lab"), Path("both")), envs) == (
        envs / "qa.yaml",
        envs / "lab.yml",
        envs / "both.yaml",
    )
    # Not found under either suffix: the .yaml name, which the check reports as missing.
    assert resolve((Path("nope"),), envs) == (envs / "nope.yaml",)
    # A suffix, or a folder in the path: as given, even when no such file exists.
    assert resolve((Path("qa.yaml"), Path("sub/qa"), Path("x.txt")), envs) == (
        Path("qa.yaml"),
        Path("sub/qa"),
        Path("x.txt"),
    )
    # A bare name that is a file in the current folder: that file.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local").write_text(GOOD)
    assert resolve((Path("local"),), envs) == (Path("local"),)


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[Any, str, str]:
    """The console script as a shell runs it: its exit status (None: it returned), stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["mlcluster", *args])
    try:
        main.main()
        code: Any = None
    except SystemExit as done:
        code = done.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_console_script_exits_with_each_outcomes_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    envs = folder(tmp_path, qa_yaml=GOOD)
    assert run_main(monkeypatch, capsys, "validate", "--environments", str(envs)) == (
        None,
        "mlcluster: 1 environment file(s) valid: qa\n",
        "",
    )
    (envs / "qa.yaml").write_text(BAD)
    code, out, err = run_main(monkeypatch, capsys, "validate", "--environments", str(envs))
    assert (code, out) == (EXIT_FAILED, "")
    assert err.startswith(f"mlcluster: configuration error\n{envs / 'qa.yaml'}")
    code, out, err = run_main(monkeypatch, capsys, "validate", "--no-such-option")
    assert (code, out) == (EXIT_USAGE, "")
    # click names the program from how Python was started (``python -m pytest`` here): the usage line's rest.
    assert err.startswith("Usage: ") and " validate [OPTIONS] [FILES]...\nTry '" in err
    assert err.endswith(" validate --help' for help.\n\nError: No such option '--no-such-option'.\n")
    code, out, err = run_main(monkeypatch, capsys, "--version")
    assert (code, err) == (0, "")
    assert out.startswith("mlcluster, version ")


def test_ctrl_c_is_exit_130_and_says_aborted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("mlcluster.config.project.check_environments", interrupted)
    envs = folder(tmp_path, qa_yaml=GOOD)
    assert run_main(monkeypatch, capsys, "validate", "--environments", str(envs)) == (
        EXIT_INTERRUPTED,
        "",
        "\nmlcluster: aborted\n",
    )


def test_an_unwrapped_botocore_error_is_its_code_and_advice_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any) -> None:
        raise exceptions.NoRegionError()

    monkeypatch.setattr("mlcluster.config.project.check_environments", broken)
    envs = folder(tmp_path, qa_yaml=GOOD)
    expected = (
        "mlcluster: AWS call failed: You must specify a region.\n"
        "  what to do: pass --region, set `region:` in the environment file, or set AWS_REGION\n"
    )
    assert run_main(monkeypatch, capsys, "validate", "--environments", str(envs)) == (EXIT_SETUP, "", expected)
    # Through click's own entry (standalone, as CliRunner runs it): the same line and code.
    result = invoke("validate", "--environments", str(envs))
    assert (result.exit_code, result.stdout, result.stderr) == (EXIT_SETUP, "", expected)


def test_any_other_exception_is_not_turned_into_an_aws_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr("mlcluster.config.project.check_environments", broken)
    envs = folder(tmp_path, qa_yaml=GOOD)
    with pytest.raises(ValueError, match=r"^a bug$"):
        main.cli.main(["validate", "--environments", str(envs)], standalone_mode=False)
    error = ValueError("x")
    assert main.as_cli_error(error) is error


def test_without_standalone_mode_a_cli_error_reaches_the_caller(tmp_path: Path) -> None:
    envs = folder(tmp_path, qa_yaml=BAD)
    with pytest.raises(CliError) as caught:
        main.cli.main(["validate", "--environments", str(envs)], standalone_mode=False)
    assert caught.value.exit_code == EXIT_FAILED


def test_help_lists_every_exit_code_and_completion() -> None:
    result = invoke("-h")
    assert result.exit_code == 0
    text = result.stdout
    listing = "".join(f"    {code}  {meaning}\n" for code, meaning in errors.EXIT_CODES.items())
    assert text.endswith(
        f"\n\n  Exit codes:\n{listing}\n"
        "  Shell completion (bash; zsh and fish alike with zsh_source, fish_source):\n"
        '    eval "$(_MLCLUSTER_COMPLETE=bash_source mlcluster)"\n'
    )
    commands = text.split("Commands:\n", 1)[1].split("\n\n")[0]
    names = [line.split()[0] for line in commands.splitlines() if line.startswith("  ") and line.split()]
    assert names == [
        *("cost", "diff", "health", "lock", "patch", "preflight", "protect", "smoke", "ssh", "ssh-config"),
        *("status", "update", "validate"),
    ]


# ---- errors: every failure's one line ----


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (exceptions.NoCredentialsError(), EXIT_SETUP, "no AWS credentials found"),
        (
            exceptions.EndpointConnectionError(endpoint_url="https://x"),
            EXIT_AWS,
            'Could not connect to the endpoint URL: "https://x"',
        ),
        (
            exceptions.ClientError({"Error": {"Code": "Throttling", "Message": "Rate\n  exceeded"}}, "Op"),
            EXIT_AWS,
            "Throttling: Rate exceeded",
        ),
        (exceptions.ClientError({"Error": {}}, "Op"), EXIT_AWS, "Unknown:"),
        (exceptions.ClientError({}, "Op"), EXIT_AWS, "Unknown:"),
    ],
    ids=["no-credentials", "endpoint", "client", "no-code", "no-error"],
)
def test_aws_errors_gives_one_line_and_the_code(error: Exception, code: int, line: str) -> None:
    with pytest.raises(CliError) as caught, errors.aws_errors("ListThings for x"):
        raise error
    failure = errors.botocore_failure(error)
    assert failure is not None
    assert (caught.value.exit_code, caught.value.message) == (
        code,
        f"ListThings for x failed: {line}\n  what to do: {failure[1]}",
    )


def test_an_unknown_client_error_code_gets_the_general_advice() -> None:
    assert errors.botocore_failure(exceptions.ClientError({"Error": {"Code": "Conflict"}}, "Op")) == (
        EXIT_AWS,
        "see the message above; run again with the same arguments once it is fixed",
    )
    assert errors.botocore_failure(exceptions.ClientError({}, "Op")) == (
        EXIT_AWS,
        "see the message above; run again with the same arguments once it is fixed",
    )
    assert errors.botocore_failure(exceptions.WaiterError("w", "r", {})) == (
        EXIT_AWS,
        "see the message; run again with the same arguments once it is fixed",
    )
    assert errors.botocore_failure(ValueError("x")) is None


def test_a_subclass_gets_the_most_specific_entry() -> None:
    """ConnectTimeoutError is an EndpointConnectionError too: its own advice, not its parent's."""
    timeout = exceptions.ConnectTimeoutError(endpoint_url="https://x")
    assert errors.botocore_failure(timeout) == (
        EXIT_AWS,
        "check the network and proxy settings; then run the command again",
    )


def test_errors_that_are_not_botocores_pass_through() -> None:
    with pytest.raises(KeyError), errors.aws_errors("x"):
        raise KeyError("k")


def test_a_long_answer_is_cut_at_200_characters() -> None:
    limit = errors.QUOTED_ANSWER_CHARS
    assert limit == 200
    assert errors.one_line("a" * limit) == "a" * limit
    assert errors.one_line("a" * (limit + 1)) == "a" * limit + " ..."
    assert errors.one_line("  two\n\tlines  ") == "two lines"


def test_a_cli_error_defaults_to_a_failed_check() -> None:
    error = CliError("m")
    assert (error.message, error.exit_code, str(error)) == ("m", EXIT_FAILED, "m")


# ---- the NCCL pass mark ----


def test_the_pass_mark_is_half_the_line_rate_unless_given() -> None:
    assert expectations.expectation("p5.48xlarge") == expectations.Expectation("p5.48xlarge", 400.0, 200.0)
    assert expectations.expectation("ml.p5.48xlarge") == expectations.Expectation("p5.48xlarge", 400.0, 200.0)
    assert expectations.expectation("p5.48xlarge", 350.0) == expectations.Expectation("p5.48xlarge", 400.0, 350.0)
    assert expectations.expectation("p5.48xlarge", 0.0) == expectations.Expectation("p5.48xlarge", 400.0, 0.0)


def test_a_type_without_efa_or_not_in_the_table_has_no_expectation() -> None:
    assert expectations.expectation("m5.8xlarge") is None  # in the table, no EFA
    assert expectations.expectation("x9.unknown") is None


# ---- the spinner ----


def test_the_spinner_shows_on_a_terminal_only() -> None:
    pipe = io.StringIO()
    with progress.progress("synthesizing", Console(file=pipe, force_terminal=False)):
        pass
    assert pipe.getvalue() == ""
    tty = io.StringIO()
    with progress.progress("synthesizing", Console(file=tty, force_terminal=True)):
        pass
    assert "synthesizing" in tty.getvalue()


def test_the_spinner_defaults_to_stderr(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Console] = []
    real = Console

    def console(**kwargs: Any) -> Console:
        made.append(real(**kwargs, force_terminal=False))
        return made[-1]

    monkeypatch.setattr("rich.console.Console", console)
    ran = []
    with progress.progress("waiting"):
        ran.append(True)
    assert ran == [True]
    assert [c.stderr for c in made] == [True]
    assert capsys.readouterr() == ("", "")


#: Each local botocore failure the operator can meet, and the exact advice printed under it.
LOCAL_FAILURES = [
    (exceptions.NoCredentialsError(), EXIT_SETUP, "configure credentials (AWS_PROFILE, `aws configure sso`, or an instance role)"),
    (exceptions.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), EXIT_SETUP, "the credentials are incomplete; set both the key id and the secret"),
    (exceptions.ProfileNotFound(profile="p"), EXIT_SETUP, "name a profile from ~/.aws/config (`aws configure list-profiles`)"),
    (exceptions.SSOError(), EXIT_SETUP, "the SSO session is missing or expired; run `aws sso login`"),
    (exceptions.TokenRetrievalError(provider="sso", error_msg="m"), EXIT_SETUP, "the SSO token could not be refreshed; run `aws sso login`"),
    (exceptions.CredentialRetrievalError(provider="p", error_msg="m"), EXIT_SETUP, "the credential process or role failed; fix the profile's settings"),
    (exceptions.ConfigNotFound(path="/x"), EXIT_SETUP, "AWS_CONFIG_FILE names a missing file; fix the variable or create the file"),
    (exceptions.ConfigParseError(path="/x"), EXIT_SETUP, "fix the syntax of ~/.aws/config (or AWS_CONFIG_FILE)"),
    (exceptions.NoRegionError(), EXIT_SETUP, "pass --region, set `region:` in the environment file, or set AWS_REGION"),
    (exceptions.InvalidRegionError(region_name="x y"), EXIT_SETUP, "pass a region name such as us-east-1 (--region or AWS_REGION)"),
    (exceptions.InvalidConfigError(error_msg="m"), EXIT_SETUP, "fix the AWS configuration the message names"),
    (exceptions.EndpointConnectionError(endpoint_url="u"), EXIT_AWS, "check the network, proxy settings and the region"),
    (exceptions.ConnectTimeoutError(endpoint_url="u"), EXIT_AWS, "check the network and proxy settings; then run the command again"),
    (exceptions.ReadTimeoutError(endpoint_url="u"), EXIT_AWS, "AWS did not answer in time; run the command again"),
    (exceptions.SSLError(endpoint_url="u", error=OSError("e")), EXIT_AWS, "the TLS connection failed; check the proxy and AWS_CA_BUNDLE"),
    (exceptions.HTTPClientError(error=OSError("e")), EXIT_AWS, "the connection to AWS broke; run the command again"),
]  # fmt: skip


@pytest.mark.parametrize(("error", "code", "advice"), LOCAL_FAILURES, ids=[type(e[0]).__name__ for e in LOCAL_FAILURES])
def test_each_local_failure_gets_its_code_and_advice(error: Exception, code: int, advice: str) -> None:
    assert errors.botocore_failure(error) == (code, advice)


def test_shell_completion_answers_on_the_documented_variable_or_a_given_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for variable, given in (("_MLCLUSTER_COMPLETE", None), ("_OPS_COMPLETE", "_OPS_COMPLETE")):
        monkeypatch.setenv(variable, "bash_source")
        with pytest.raises(SystemExit) as done:
            main.cli.main([], prog_name="mlcluster", complete_var=given, standalone_mode=False)
        monkeypatch.delenv(variable)
        assert done.value.code == 0
        script = capsys.readouterr().out
        assert f"{variable}=bash_complete" in script and "complete -o nosort -F" in script
