"""``preflight``'s ``pcluster-validators`` check, whole: the deployed values handed to the renderer, every
request, every row and every way running the validators can fail (issue 27, cli sweep).

The renderer is replaced by a recorder of the :class:`DeployInputs` it is given (the renderer has its own
tests); each test compares the complete inputs, the complete row list, or the complete error with ``==``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from mlcluster.cli import pcluster_live
from mlcluster.cli.errors import EXIT_AWS, CliError
from mlcluster.cli.preflight import Result
from mlcluster.config import Environment, load_environment
from mlcluster.pcluster.render import DeployInputs, ZoneSubnet
from tests.cli.conftest import REPO

OWNED = pcluster_live.CLUSTER_OWNED
CHECK, KEY = "pcluster-validators", "cluster.pcluster"


class Cfn:
    """DescribeStacks and DescribeVpcs stand-ins that record each request."""

    def __init__(self, stacks: dict[str, Any], vpcs: list[dict[str, Any]] | None = None) -> None:
        self.stacks, self.vpcs = stacks, vpcs if vpcs is not None else [{"CidrBlock": "10.0.0.0/16"}]
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def describe_stacks(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("describe_stacks", params))
        answer = self.stacks.get(params["StackName"])
        if answer is None:
            raise ClientError(
                {
                    "Error": {
                        "Code": "ValidationError",
                        "Message": f"Stack with id {params['StackName']} does not exist",
                    }
                },
                "DescribeStacks",
            )
        if isinstance(answer, Exception):
            raise answer
        return {"Stacks": answer}

    def describe_vpcs(self, **params: Any) -> dict[str, Any]:
        self.calls.append(("describe_vpcs", params))
        return {"Vpcs": self.vpcs}


def deployed(outputs: dict[str, str], status: str = "CREATE_COMPLETE") -> list[dict[str, Any]]:
    return [
        {"StackStatus": status, "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]},
    ]


NETWORK = {
    "PrivateSubnet1Id": "subnet-p1",
    "PrivateSubnet2Id": "subnet-p2",
    "PublicSubnetId": "subnet-pub",
    "SecurityGroupId": "sg-1",
    "VpcId": "vpc-1",
}
STORAGE = {"LustreFileSystemId": "fs-1", "OpenZfsRootVolumeId": "fsvol-1"}


def env(name: str) -> Environment:
    return load_environment(REPO / "environments" / f"{name}.yaml")


def ctx(environment: Environment, cfn: Cfn) -> Any:
    return SimpleNamespace(env=environment, region="us-east-2", client=lambda _service: cfn)


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[DeployInputs]:
    """The inputs each render is given; the render answers a configuration naming the Cluster stack's bucket."""
    seen: list[DeployInputs] = []

    def render(_cfg: Any, inputs: DeployInputs) -> dict[str, Any]:
        seen.append(inputs)
        return {"Region": inputs.region, "Iam": {"S3Access": [{"BucketName": inputs.node_script_bucket}]}}

    monkeypatch.setattr("mlcluster.pcluster.render.render_cluster_config", render)
    return seen


def inputs(**changes: Any) -> DeployInputs:
    """What p5 deployed with NETWORK and STORAGE gives, with ``changes``."""
    base: dict[str, Any] = {
        "region": "us-east-2",
        "private_subnets": (ZoneSubnet(zone="us-east-2a", subnet_id="subnet-p1"),),
        "public_subnet_id": "subnet-pub",
        "security_group_ids": ("sg-1",),
        "vpc_cidr": "10.0.0.0/16",
        "lustre_file_system_id": "fs-1",
        "openzfs_volume_id": None,
        "node_script_bucket": OWNED,
        "node_script_policy_arn": None,
        "session_manager_policy_arn": f"arn:aws:iam::{OWNED}",
        "collector_policy_arn": f"arn:aws:iam::{OWNED}",
        "permissions_boundary_arn": f"arn:aws:iam::{OWNED}",
        "reservation_group_arns": {},
        "log_retention_days": 365,
        "retain_logs": True,
        "retain_home": True,
        "tags": {"mlcluster:environment": "p5", "Project": "mlcluster", "Environment": "p5"},
        "exporters": True,
    }
    return DeployInputs(**{**base, **changes})


def test_the_deployed_values_reach_the_renderer_and_the_cluster_stacks_are_left_out(
    rendered: list[DeployInputs],
) -> None:
    cfn = Cfn({"p5-Network": deployed(NETWORK), "p5-Storage": deployed(STORAGE, "UPDATE_ROLLBACK_COMPLETE")})
    made = pcluster_live.deployed_config(ctx(env("p5"), cfn))
    assert made == ({"Region": "us-east-2"}, ["Iam.S3Access"])  # Iam left empty: dropped
    assert rendered == [inputs()]
    assert cfn.calls == [
        ("describe_stacks", {"StackName": "p5-Network"}),
        ("describe_stacks", {"StackName": "p5-Storage"}),
        ("describe_vpcs", {"VpcIds": ["vpc-1"]}),
    ]


def test_login_nodes_reservations_and_no_prometheus_change_their_inputs(rendered: list[DeployInputs]) -> None:
    network = {**NETWORK, "PublicSubnetId": ""}
    cfn = Cfn({"p4de-Network": deployed(network), "p4de-Storage": deployed(STORAGE, "IMPORT_COMPLETE")})
    pcluster_live.deployed_config(ctx(env("p4de"), cfn))
    assert rendered == [
        inputs(
            private_subnets=(ZoneSubnet(zone="us-west-2b", subnet_id="subnet-p1"),),
            public_subnet_id=None,
            node_script_policy_arn=f"arn:aws:iam::{OWNED}",
            collector_policy_arn=None,
            reservation_group_arns={"p4de-pool": f"arn:aws:resource-groups:{OWNED}"},
            tags={"mlcluster:environment": "p4de", "Project": "mlcluster", "Environment": "p4de"},
            exporters=False,
        )
    ]


def test_a_home_on_openzfs_needs_its_volume_output(rendered: list[DeployInputs]) -> None:
    cfn = Cfn({"trn1-Network": deployed(NETWORK), "trn1-Storage": deployed(STORAGE, "UPDATE_COMPLETE")})
    pcluster_live.deployed_config(ctx(env("trn1"), cfn))
    assert [(i.openzfs_volume_id, i.private_subnets) for i in rendered] == [
        ("fsvol-1", (ZoneSubnet(zone="us-east-1c", subnet_id="subnet-p1"),))
    ]
    cfn = Cfn({"trn1-Network": deployed(NETWORK), "trn1-Storage": deployed({"LustreFileSystemId": "fs-1"})})
    assert pcluster_live.deployed_config(ctx(env("trn1"), cfn)) == (
        "outputs OpenZfsRootVolumeId missing from the Network/Storage stacks: deploy them again (`cdk deploy`)"
    )


def test_every_zone_needs_its_private_subnet_output(rendered: list[DeployInputs]) -> None:
    two = env("pcluster-accounting")
    stacks = {"pcluster-accounting-Network": deployed(NETWORK), "pcluster-accounting-Storage": deployed(STORAGE)}
    pcluster_live.deployed_config(ctx(two, Cfn(stacks)))
    assert rendered[0].private_subnets == (
        ZoneSubnet(zone="us-east-2a", subnet_id="subnet-p1"),
        ZoneSubnet(zone="us-east-2b", subnet_id="subnet-p2"),
    )
    stacks["pcluster-accounting-Network"] = deployed({k: v for k, v in NETWORK.items() if k != "PrivateSubnet2Id"})
    assert pcluster_live.deployed_config(ctx(two, Cfn(stacks))) == (
        "pcluster-accounting-Network has no output PrivateSubnet2Id: deploy it again (`cdk deploy`)"
    )


def test_each_missing_output_is_named(rendered: list[DeployInputs]) -> None:
    cfn = Cfn({"p5-Network": deployed({"PrivateSubnet1Id": "subnet-p1"}), "p5-Storage": deployed({})})
    assert pcluster_live.deployed_config(ctx(env("p5"), cfn)) == (
        "outputs SecurityGroupId, VpcId, LustreFileSystemId missing from the Network/Storage stacks: "
        "deploy them again (`cdk deploy`)"
    )
    assert rendered == []


def test_a_vpc_that_is_gone_says_to_deploy_the_network_again(rendered: list[DeployInputs]) -> None:
    cfn = Cfn({"p5-Network": deployed(NETWORK), "p5-Storage": deployed(STORAGE)}, vpcs=[])
    assert pcluster_live.deployed_config(ctx(env("p5"), cfn)) == (
        "the VPC vpc-1 of p5-Network is gone: deploy the Network stack again"
    )


@pytest.mark.parametrize(
    "stacks",
    [
        {"p5-Storage": deployed(STORAGE)},  # no Network stack
        {"p5-Network": deployed(NETWORK)},  # no Storage stack
        {"p5-Network": deployed(NETWORK, "CREATE_IN_PROGRESS"), "p5-Storage": deployed(STORAGE)},
        {"p5-Network": deployed(NETWORK), "p5-Storage": deployed(STORAGE, "ROLLBACK_COMPLETE")},
        {"p5-Network": [], "p5-Storage": deployed(STORAGE)},
        {"p5-Network": [{"Outputs": []}], "p5-Storage": deployed(STORAGE)},  # no status
    ],
    ids=["no-network", "no-storage", "in-progress", "rolled-back", "empty-answer", "no-status"],
)
def test_until_both_stacks_are_deployed_the_check_is_skipped(
    rendered: list[DeployInputs], stacks: dict[str, Any]
) -> None:
    assert pcluster_live.deployed_config(ctx(env("p5"), Cfn(stacks))) == pcluster_live.SKIPPED_STACKS
    assert pcluster_live.SKIPPED_STACKS == (
        "skipped: needs the Network and Storage stacks deployed; run after deploying them"
    )


def test_outputs_of_a_deployed_stack_are_read_as_text() -> None:
    stack = [
        {"StackStatus": "UPDATE_COMPLETE", "Outputs": [{"OutputKey": "A", "OutputValue": "x"}, {"OutputKey": "B"}]}
    ]
    assert pcluster_live._stack_outputs(ctx(env("p5"), Cfn({"p5-Network": stack})), "Network") == {"A": "x", "B": ""}
    assert (
        pcluster_live._stack_outputs(
            ctx(env("p5"), Cfn({"p5-Network": [{"StackStatus": "CREATE_COMPLETE"}]})), "Network"
        )
        == {}
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [("AccessDenied", "not allowed"), ("ValidationError", "Template format error"), ("Throttling", "")],
)
def test_a_describe_stacks_failure_other_than_not_found_is_raised(code: str, message: str) -> None:
    refused = ClientError({"Error": {"Code": code, "Message": message}}, "DescribeStacks")
    with pytest.raises(ClientError) as caught:
        pcluster_live._stack_outputs(ctx(env("p5"), Cfn({"p5-Network": refused})), "Network")
    assert caught.value is refused


def test_not_found_is_read_from_the_message() -> None:
    gone = ClientError({"Error": {"Code": "ValidationError", "Message": "Stack with id x does not exist"}}, "Op")
    assert pcluster_live._stack_outputs(ctx(env("p5"), Cfn({"p5-Network": gone})), "Network") is None
    bare = ClientError({}, "Op")  # no Error at all: not "does not exist"
    with pytest.raises(ClientError):
        pcluster_live._stack_outputs(ctx(env("p5"), Cfn({"p5-Network": bare})), "Network")


def test_the_install_hint_is_whole() -> None:
    assert pcluster_live.install_hint("3.16.1") == (
        "install ParallelCluster in its own environment (it cannot share mlcluster's): "
        "`pipx install aws-parallelcluster==3.16.1`, or "
        "`python3 -m venv ~/.venv-pcluster && ~/.venv-pcluster/bin/pip install aws-parallelcluster==3.16.1` "
        "and set MLCLUSTER_PCLUSTER_PYTHON=~/.venv-pcluster/bin/python"
    )


# ---- running the validators ----


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_runner_gets_the_cluster_and_configuration_on_stdin_and_the_given_environment(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    python = script(tmp_path, f'cat > {seen}; echo "$1|$MARK" >> {seen}.args; echo \'{{"version": "3.16.1"}}\'')
    answer = pcluster_live.run_validators(python, "p5-train", {"Region": "us-east-2"}, {"MARK": "given"})
    assert answer == {"version": "3.16.1"}
    assert json.loads(seen.read_text()) == {"cluster_name": "p5-train", "config": {"Region": "us-east-2"}}
    assert (tmp_path / "seen.args").read_text() == f"{pcluster_live.RUNNER}|given\n"


def test_a_runner_without_parallelcluster_is_said_so(tmp_path: Path) -> None:
    python = script(tmp_path, "exit 3")
    with pytest.raises(CliError) as caught:
        pcluster_live.run_validators(python, "c", {}, {})
    assert (caught.value.exit_code, caught.value.message) == (EXIT_AWS, f"{python} has no aws-parallelcluster package")


def test_a_failed_runner_quotes_the_last_three_lines_of_its_errors(tmp_path: Path) -> None:
    python = script(tmp_path, "printf 'one\\ntwo\\nthree\\nfour\\n' >&2; exit 2")
    with pytest.raises(CliError) as caught:
        pcluster_live.run_validators(python, "c", {}, {})
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        f"ParallelCluster's validators failed under {python} (exit 2): two three four",
    )


def test_a_runner_that_prints_no_json_is_an_error(tmp_path: Path) -> None:
    python = script(tmp_path, "echo 'not json'; echo 'warned' >&2")
    with pytest.raises(CliError) as caught:
        pcluster_live.run_validators(python, "c", {}, {})
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        f"ParallelCluster's validators printed no JSON under {python}: warned",
    )


def test_a_runner_that_cannot_start_or_runs_too_long_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(CliError) as caught:
        pcluster_live.run_validators(missing, "c", {}, {})
    assert caught.value.exit_code == EXIT_AWS
    assert caught.value.message.startswith(f"cannot run {missing}: [Errno 2] No such file or directory")
    assert pcluster_live.TIMEOUT_SECONDS == 900
    monkeypatch.setattr(pcluster_live, "TIMEOUT_SECONDS", 0.5)
    slow = script(tmp_path, "sleep 5")
    with pytest.raises(CliError) as caught:
        pcluster_live.run_validators(slow, "c", {}, {})
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        "ParallelCluster's validators ran longer than 0.5 s; try again",
    )


# ---- the rows ----

PY = Path("/opt/pc/bin/python")
UNDER = f" (run under {PY})"


def test_a_clean_answer_of_the_right_version_is_one_pass_row() -> None:
    answer = {"version": "3.16.1", "schema": [], "failures": []}
    assert pcluster_live.results_of(answer, "3.16.1", [], PY) == [
        Result(CHECK, "pass", "ERROR", KEY, f"ParallelCluster 3.16.1 validators: no errors{UNDER}")
    ]
    assert pcluster_live.results_of(answer, "3.16.1", ["A.B", "C"], PY) == [
        Result(
            CHECK,
            "pass",
            "ERROR",
            KEY,
            f"ParallelCluster 3.16.1 validators: no errors; not checked (the Cluster stack creates them): A.B, C{UNDER}",
        )
    ]


def test_another_version_warns_and_warnings_keep_the_pass_row() -> None:
    answer = {"failures": [{"level": "WARNING", "validator": "V", "message": "m"}]}
    assert pcluster_live.results_of(answer, "3.16.1", [], PY) == [
        Result(
            CHECK,
            "fail",
            "WARNING",
            "cluster.pcluster.version",
            "these are ParallelCluster ?'s validators, the cluster uses 3.16.1: "
            + pcluster_live.install_hint("3.16.1")
            + UNDER,
        ),
        Result(CHECK, "fail", "WARNING", KEY, f"V: m{UNDER}"),
        Result(CHECK, "pass", "ERROR", KEY, f"ParallelCluster ? validators: no errors{UNDER}"),
    ]


def test_a_schema_error_or_an_error_failure_drops_the_pass_row() -> None:
    schema = {"version": "3.16.1", "schema": [["A", "bad"]]}
    assert pcluster_live.results_of(schema, "3.16.1", [], PY) == [
        Result(CHECK, "fail", "ERROR", KEY, f"ParallelCluster schema: A: bad{UNDER}")
    ]
    failure = {"version": "3.16.1", "failures": [{"level": "ERROR", "validator": "V", "message": "m"}, {}]}
    assert pcluster_live.results_of(failure, "3.16.1", [], PY) == [
        Result(CHECK, "fail", "ERROR", KEY, f"V: m{UNDER}"),
        Result(CHECK, "pass", "WARNING", KEY, f"None: None: None{UNDER}"),
    ]


def check(monkeypatch: pytest.MonkeyPatch, environment: Environment, python: Any, **answers: Any) -> list[Result]:
    monkeypatch.setattr(pcluster_live, "deployed_config", lambda _ctx: answers.get("made", ({"A": 1}, ["X.Y"])))
    monkeypatch.setattr(pcluster_live, "find_python", lambda: python)
    runs: list[tuple[Any, ...]] = answers.setdefault("runs", [])

    def run(*args: Any) -> dict[str, Any]:
        runs.append(args)
        if "error" in answers:
            raise answers["error"]
        return {"version": "3.16.1"}

    monkeypatch.setattr(pcluster_live, "run_validators", run)
    context = SimpleNamespace(env=environment, region="us-east-2", client=None)
    return pcluster_live.check_pcluster_validators(context, lambda: {"CHILD": "1"})  # type: ignore[arg-type]


def test_the_check_runs_the_found_python_on_the_deployed_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[tuple[Any, ...]] = []
    rows = check(monkeypatch, env("p5"), PY, runs=runs)
    assert rows == [
        Result(
            CHECK,
            "pass",
            "ERROR",
            KEY,
            f"ParallelCluster 3.16.1 validators: no errors; not checked (the Cluster stack creates them): X.Y{UNDER}",
        )
    ]
    assert runs == [(PY, "p5-train", {"A": 1}, {"CHILD": "1"})]
    assert capsys.readouterr().err == f"running ParallelCluster's validators under {PY}...\n"


def test_the_check_is_skipped_with_the_reason_and_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    hint = pcluster_live.install_hint("3.16.1")
    assert check(monkeypatch, env("p5"), PY, made="why") == [Result(CHECK, "skipped", "WARNING", KEY, "why")]
    assert check(monkeypatch, env("p5"), None) == [
        Result(CHECK, "skipped", "WARNING", KEY, f"skipped: no aws-parallelcluster found; {hint}")
    ]
    assert check(monkeypatch, env("p5"), "skipped: because") == [
        Result(CHECK, "skipped", "WARNING", KEY, f"skipped: because; {hint}")
    ]
    missing = CliError(f"{PY} has no aws-parallelcluster package", EXIT_AWS)
    assert check(monkeypatch, env("p5"), PY, error=missing) == [
        Result(CHECK, "skipped", "WARNING", KEY, f"skipped: {PY} has no aws-parallelcluster package; {hint}")
    ]
    crashed = CliError("ParallelCluster's validators failed", EXIT_AWS)
    with pytest.raises(CliError) as caught:
        check(monkeypatch, env("p5"), PY, error=crashed)
    assert caught.value is crashed


@pytest.mark.parametrize("name", ["dev", "hyperpod"])
def test_an_environment_without_parallelcluster_has_no_rows(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    runs: list[tuple[Any, ...]] = []
    assert check(monkeypatch, env(name), PY, runs=runs) == []
    assert runs == []


# ---- which Python ----


def program(path: Path, text: str | bytes, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.chmod(mode)
    return path


BINARY = b"\x7fELF\x02\x01\x01\x00"


def test_the_variable_wins_and_a_home_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    python = program(tmp_path / "venv" / "bin" / "python", BINARY)
    program(tmp_path / "bin" / "pcluster", f"#!{python}\n")
    found = pcluster_live.find_python({pcluster_live.PYTHON_VARIABLE: "~/venv/bin/python", "PATH": str(tmp_path)})
    assert found == python
    # An empty variable is no variable: the pcluster command on PATH decides.
    assert pcluster_live.find_python({pcluster_live.PYTHON_VARIABLE: "", "PATH": str(tmp_path / "bin")}) == python


def test_without_a_variable_or_a_command_the_checkout_python_is_used_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = program(tmp_path / "checkout" / "python", BINARY)
    monkeypatch.setattr(pcluster_live, "CHECKOUT_PYTHON", checkout)
    assert pcluster_live.find_python({"PATH": str(tmp_path / "empty")}) == checkout
    assert pcluster_live.find_python({}) == checkout
    monkeypatch.setattr(pcluster_live, "CHECKOUT_PYTHON", tmp_path / "none")
    assert pcluster_live.find_python({}) is None


def test_the_python_of_a_command_is_read_from_its_first_lines(tmp_path: Path) -> None:
    python = program(tmp_path / "py" / "python3.12", BINARY)
    cases = {
        f"#!{python} -E\nx\n": python,
        "#!python3\n": None,  # relative
        "#!/usr/bin/perl\n": None,  # not a python
        "#!\n": None,
        "no shebang\n": None,
        f"#!/bin/sh\n'''exec' '{python}' \"$0\"\n": python,
        "#!/bin/sh\n'''exec' \"unclosed\n": None,
        "#!/bin/sh\n'''exec'\n": None,  # nothing after exec
        f"#!/bin/sh -e\n'''exec' '{python}'\n": None,  # not pip's exact launcher line
        f"#!/bin/sh\n'''exec' run '{python}'\n": None,
        "#!/bin/sh": None,  # one line
    }
    for number, (text, expected) in enumerate(cases.items()):
        command = program(tmp_path / f"c{number}" / "pcluster", text)
        assert pcluster_live.command_python(command) == expected, text
    assert pcluster_live.command_python(tmp_path / "gone" / "pcluster") is None


def test_a_candidate_must_be_an_absolute_executable_file(tmp_path: Path) -> None:
    assert pcluster_live._unsafe(Path("python")) == "is not an absolute path"
    assert pcluster_live._unsafe(tmp_path) == "is not an executable file"
    plain = program(tmp_path / "plain", BINARY, 0o644)
    assert pcluster_live._unsafe(plain) == "is not an executable file"
    plain.chmod(0o700)
    assert pcluster_live._unsafe(plain) is None
    plain.chmod(0o750)
    assert pcluster_live._unsafe(plain) is None


def test_a_link_is_judged_by_its_target_and_the_targets_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    real = program(shared / "python", BINARY)
    link = tmp_path / "mine" / "python"
    link.parent.mkdir()
    link.symlink_to(real)
    assert pcluster_live._unsafe(link) is None
    shared.chmod(0o777)
    try:
        assert pcluster_live._unsafe(link) == (f"is unsafe: {shared} is writable by group or others (mode drwxrwxrwx)")
    finally:
        shared.chmod(0o755)
    real.chmod(0o757)
    assert pcluster_live._unsafe(link) == f"is unsafe: {real} is writable by group or others (mode -rwxr-xrwx)"


def test_a_command_whose_python_is_unsafe_or_unknown_is_a_message(tmp_path: Path) -> None:
    shim = program(tmp_path / "shims" / "pcluster", "#!/usr/bin/env python\n")
    assert pcluster_live.find_python({"PATH": f"{tmp_path / 'shims'}{os.pathsep}relative"}) == (
        f"skipped: cannot tell which Python the pcluster command {shim} runs "
        "(a shim, or an interpreter not named by an absolute python* path): set MLCLUSTER_PCLUSTER_PYTHON"
    )


def test_without_cluster_owned_keeps_everything_else() -> None:
    value = {
        "a": [1, "x", {"b": "y"}, [OWNED]],
        "c": {"d": {"e": OWNED}},
        "f": [],
        "g": {},
        "h": [{"i": OWNED, "j": 1}, {"k": 2}],
        "l": f"s3://{OWNED}/key",
    }
    left: list[str] = []
    assert pcluster_live.without_cluster_owned(value, "", left) == {
        "a": [1, "x", {"b": "y"}, []],
        "f": [],
        "g": {},
        "h": [{"k": 2}],
    }
    assert left == ["a", "c.d.e", "h", "l"]
    assert pcluster_live.without_cluster_owned(value, "", left) is not None
    assert left == ["a", "c.d.e", "h", "l"]  # each path once


def test_an_unsafe_variable_is_an_aws_setup_failure_naming_it(tmp_path: Path) -> None:
    given = str(tmp_path / "absent")
    with pytest.raises(CliError) as caught:
        pcluster_live.find_python({pcluster_live.PYTHON_VARIABLE: given})
    assert (caught.value.exit_code, caught.value.message) == (
        EXIT_AWS,
        f"MLCLUSTER_PCLUSTER_PYTHON={given} is not an executable file: point it at a Python of your own",
    )


def test_a_launcher_is_read_up_to_4096_bytes(tmp_path: Path) -> None:
    """Enough for pip's two-line launcher; a longer second line is cut, so its interpreter cannot be told."""
    head = "#!/bin/sh\n'''exec' '/"
    name = "python3"
    folder = "d" * (4096 - len(head) - len(name) - len("/'"))
    python = Path(f"/{folder}/{name}")
    fits = program(tmp_path / "fits" / "pcluster", f"{head}{folder}/{name}'")  # the closing quote is byte 4096
    assert fits.stat().st_size == 4096
    assert pcluster_live.command_python(fits) == python
    longer = program(tmp_path / "longer" / "pcluster", f"{head}{folder}x/{name}'")  # the quote is byte 4097
    assert pcluster_live.command_python(longer) is None


def test_a_launcher_without_a_final_newline_still_names_its_python(tmp_path: Path) -> None:
    python = program(tmp_path / "py" / "python3", BINARY)
    command = program(tmp_path / "bin" / "pcluster", f"#!/bin/sh\n'''exec' '{python}' \"$0\"")
    assert pcluster_live.command_python(command) == python
