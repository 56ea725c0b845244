"""``preflight`` check ``pcluster-validators``: ParallelCluster's own validators, live, on the deployed values.

The parent side runs against moto (the Network and Storage stacks with their
outputs, DescribeVpcs); the child is ParallelCluster 3.16's real schema and
validators in ``.venv-pcluster``, run by ``mlcluster/pcluster/live_validate.py``
against a moto world that holds what those outputs name
(tests/pcluster/live_world.py stands in for the operator's ParallelCluster Python).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from mlcluster.cli import pcluster_live, preflight
from mlcluster.cli.errors import CliError
from tests.cli.conftest import REPO, Aws, aws_client, error, invoke
from tests.cli.test_preflight import P5_REGION, RESERVATION, context, env_folder
from tests.pcluster.pcluster_support import PCLUSTER_PYTHON

needs_pcluster = pytest.mark.skipif(
    not PCLUSTER_PYTHON.exists(), reason=".venv-pcluster is not set up (make pytest does)"
)

ZONE = f"{P5_REGION}a"
S = {
    "vpc": "p5/Vpc",
    "public": "p5/PublicSubnet",
    "private": "p5/PrivateSubnet",
    "igw": "p5/Igw",
    "nat": "p5/Nat",
    "sg": "p5/NodeSecurityGroup",
    "lustre": "p5/Lustre",
}
#: The outputs the p5 Network and Storage stacks would carry, as symbols of the child's moto world.
NETWORK_OUTPUTS = {
    "VpcId": "@{p5/Vpc}",
    "PrivateSubnet1Id": "@{p5/PrivateSubnet}",
    "PublicSubnetId": "@{p5/PublicSubnet}",
    "SecurityGroupId": "@{p5/NodeSecurityGroup}",
}
STORAGE_OUTPUTS = {"LustreFileSystemId": "@{p5/Lustre}", "DataBucketName": "p5-data"}


def world(*, self_rules: bool = True) -> dict[str, Any]:
    """What the p5 Network and Storage stacks create, in tools/pcluster_validate.py's world format."""
    own = [{"protocol": "-1", "group": S["sg"]}] if self_rules else []
    return {
        "vpcs": [{"id": S["vpc"], "cidr": "10.0.0.0/16"}],
        "subnets": [
            {"id": S["public"], "vpc": S["vpc"], "cidr": "10.0.0.0/20", "az": ZONE, "map_public_ip": True},
            {"id": S["private"], "vpc": S["vpc"], "cidr": "10.0.64.0/18", "az": ZONE},
        ],
        "internet_gateways": [{"id": S["igw"], "vpc": S["vpc"]}],
        "nat_gateways": [{"id": S["nat"], "subnet": S["public"]}],
        "route_tables": [
            {
                "id": "p5/PublicRt",
                "vpc": S["vpc"],
                "subnets": [S["public"]],
                "routes": [{"cidr": "0.0.0.0/0", "gateway": S["igw"]}],
            },
            {
                "id": "p5/PrivateRt",
                "vpc": S["vpc"],
                "subnets": [S["private"]],
                "routes": [{"cidr": "0.0.0.0/0", "nat": S["nat"]}],
            },
        ],
        "security_groups": [
            {
                "id": S["sg"],
                "vpc": S["vpc"],
                "ingress": own,
                "egress": [*own, {"protocol": "-1", "cidr": "0.0.0.0/0"}],
            }
        ],
        "file_systems": [{"id": S["lustre"], "type": "LUSTRE", "subnet": S["private"], "security_groups": [S["sg"]]}],
        "capacity_reservations": [{"id": RESERVATION, "instance_type": "p5.48xlarge", "az": ZONE}],
    }


def deploy(suffix: str, outputs: dict[str, str], status_template: bool = True) -> None:
    """A stack ``p5-<suffix>`` with these outputs, in moto."""
    template = {
        "Resources": {"Handle": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    aws_client("cloudformation", P5_REGION).create_stack(
        StackName=f"p5-{suffix}",
        TemplateBody=json.dumps(template),
        Tags=[{"Key": "mlcluster:environment", "Value": "p5"}],
    )


def deployed(aws: Aws) -> None:
    deploy("Network", NETWORK_OUTPUTS)
    deploy("Storage", STORAGE_OUTPUTS)
    # The VPC id is a symbol of the child's world: its CIDR as DescribeVpcs gives it.
    aws.answer("ec2", "DescribeVpcs", always={"Vpcs": [{"VpcId": "vpc-0123456789abcdef0", "CidrBlock": "10.0.0.0/16"}]})


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]) -> None:
    """Point MLCLUSTER_PCLUSTER_PYTHON at the moto-world stand-in for the operator's ParallelCluster Python."""
    world_file = tmp_path / "world.json"
    world_file.write_text(json.dumps(spec))
    script = tmp_path / "pcluster-python"
    script.write_text(
        f'#!/bin/sh\nexec "{PCLUSTER_PYTHON}" "{REPO}/tests/pcluster/live_world.py" "{world_file}" "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, str(script))


def p5(aws: Aws, tmp_path: Path) -> preflight.Context:
    return context(aws, env_folder(tmp_path, "p5", P5_REGION), "p5", P5_REGION)


def run(ctx: preflight.Context) -> list[preflight.Result]:
    """Only this check, through run_checks (AWS errors become rows there)."""
    return preflight.run_checks(ctx, [c for c in preflight.CHECKS if c != "pcluster-validators"])


def run_command(tmp_path: Path) -> tuple[int, list[preflight.Result]]:
    """``mlcluster preflight p5 --json`` with every other check skipped: the operator's path, credentials included."""
    others = [arg for c in preflight.CHECKS if c != "pcluster-validators" for arg in ("--skip", c)]
    result = invoke("preflight", "p5", "--environments", str(env_folder(tmp_path, "p5", P5_REGION)), *others, "--json")
    assert "Traceback" not in result.output
    data = json.loads(result.stdout)
    return result.exit_code, [preflight.Result(**r) for r in data["results"]]


def test_skipped_until_the_network_and_storage_stacks_are_deployed(aws: Aws, tmp_path: Path) -> None:
    (row,) = run(p5(aws, tmp_path))
    assert (row.status, row.level, row.key) == ("skipped", "WARNING", "cluster.pcluster")
    assert row.message == "skipped: needs the Network and Storage stacks deployed; run after deploying them"
    assert preflight.exit_code([row]) == 0
    deploy("Network", NETWORK_OUTPUTS)  # the Storage stack still missing
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "skipped" and "Network and Storage" in row.message
    assert aws.params("DescribeStacks")[-1] == {"StackName": "p5-Storage"}


def test_a_stack_without_an_output_says_to_deploy_it_again(aws: Aws, tmp_path: Path) -> None:
    deploy("Network", {k: v for k, v in NETWORK_OUTPUTS.items() if k != "SecurityGroupId"})
    deploy("Storage", STORAGE_OUTPUTS)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "skipped"
    assert row.message.startswith("outputs SecurityGroupId missing from the Network/Storage stacks")


def test_describe_stacks_refused_is_an_error_row(aws: Aws, tmp_path: Path) -> None:
    aws.sticky[("cloudformation", "DescribeStacks")] = error("AccessDenied", "not allowed", 403)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "error" and "AccessDenied: not allowed" in row.message
    assert preflight.exit_code([row]) == preflight.EXIT_AWS


def test_without_parallelcluster_it_says_how_to_get_it(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_checkout: None
) -> None:
    deployed(aws)
    monkeypatch.setenv("PATH", str(tmp_path))  # no pcluster command
    (row,) = run(p5(aws, tmp_path))
    assert (row.status, row.level) == ("skipped", "WARNING")
    assert "no aws-parallelcluster found" in row.message
    assert "pipx install aws-parallelcluster==3.16.1" in row.message and "MLCLUSTER_PCLUSTER_PYTHON" in row.message
    # A Python without the package (this one) says the same.
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, sys.executable)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "skipped" and f"{sys.executable} has no aws-parallelcluster package" in row.message
    # A variable naming no program is an error row.
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, str(tmp_path / "nothing"))
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "error" and "is not an executable file" in row.message


def program(path: Path, text: str | bytes, mode: int = 0o755) -> Path:
    """An executable file at ``path`` (its folders made) with this content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    path.chmod(mode)
    return path


#: What a real interpreter starts with (not a script): a sibling ``python`` that is one counts.
BINARY = b"\x7fELF\x02\x01\x01\x00"
#: A runner stand-in that answers "no findings" without running anything: what a planted file would print.
FAKE_PASS = """#!/bin/sh\ncat >/dev/null; echo '{"version": "3.16.1", "schema": [], "failures": []}'\n"""
#: One validator WARNING, in the runner's answer format.
FAILURES = '"failures": [{"level": "WARNING", "validator": "KeyPairValidator", "message": "no key pair"}]'


def pip_launcher(python: Path) -> str:
    """pip's launcher for an interpreter path with spaces or too long for ``#!``."""
    return f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\nimport sys\n"


@pytest.fixture
def no_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable and no checkout ``.venv-pcluster``: only what a test adds is found."""
    monkeypatch.delenv(pcluster_live.PYTHON_VARIABLE, raising=False)
    monkeypatch.setattr(pcluster_live, "CHECKOUT_PYTHON", tmp_path / "no-checkout" / "python", raising=False)


def test_a_pcluster_command_on_path_gives_its_interpreter(tmp_path: Path, no_checkout: None) -> None:
    python = program(tmp_path / "usr" / "bin" / "python3.11", BINARY)
    command = program(tmp_path / "bin" / "pcluster", f"#!{python}\nimport sys\n")
    assert pcluster_live.find_python({"PATH": str(command.parent)}) == python
    # pip's launcher: #!/bin/sh, then the interpreter on the second line.
    spaced = program(tmp_path / "my venv" / "bin" / "python3", BINARY)
    command.write_text(pip_launcher(spaced))
    assert pcluster_live.find_python({"PATH": str(command.parent)}) == spaced


def test_a_venv_or_pipx_pcluster_gives_the_python_beside_it(tmp_path: Path, no_checkout: None) -> None:
    """pipx links ~/.local/bin/pcluster to venvs/<name>/bin/pcluster: the python beside the resolved file."""
    venv = tmp_path / "pipx" / "venvs" / "aws-parallelcluster" / "bin"
    program(venv / "pcluster", pip_launcher(Path("/elsewhere/python")))
    python = program(venv / "python", BINARY)
    link = tmp_path / "local" / "bin" / "pcluster"
    link.parent.mkdir(parents=True)
    link.symlink_to(venv / "pcluster")
    assert pcluster_live.find_python({"PATH": str(link.parent)}) == python


@pytest.mark.parametrize(
    ("first", "sibling"),
    [
        ("#!/usr/bin/env bash\nexec pyenv exec pcluster\n", "#!/usr/bin/env bash\nexec pyenv exec python\n"),
        ("#!/usr/bin/env python\nimport sys\n", None),
        ('#!/bin/sh\nexec /opt/tool "$@"\n', None),
    ],
    ids=["pyenv-shim", "env-python", "plain-sh"],
)
def test_a_pcluster_whose_python_cannot_be_told_is_skipped_with_a_warning(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_checkout: None, first: str, sibling: str | None
) -> None:
    deployed(aws)
    shims = tmp_path / "shims"
    command = program(shims / "pcluster", first)
    if sibling is not None:
        program(shims / "python", sibling)  # a shim folder's python is a script too, not an interpreter
    monkeypatch.setenv("PATH", str(shims))
    (row,) = run(p5(aws, tmp_path))
    assert (row.status, row.level) == ("skipped", "WARNING")
    assert f"cannot tell which Python the pcluster command {command} runs" in row.message
    assert "set MLCLUSTER_PCLUSTER_PYTHON" in row.message


def test_a_planted_venv_in_the_current_folder_is_never_run(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_checkout: None
) -> None:
    """A .venv-pcluster/bin/python or ./pcluster in /tmp or a shared folder must not run with the operator's keys."""
    deployed(aws)
    planted = tmp_path / "shared"
    fake = program(planted / ".venv-pcluster" / "bin" / "python", FAKE_PASS)
    program(planted / "pcluster", f"#!{fake}\n")
    program(planted / "bin" / "pcluster", f"#!{fake}\n")
    monkeypatch.chdir(planted)
    for path in ("", ".", f"{os.pathsep}.", "bin"):  # empty and relative PATH entries name the current folder
        monkeypatch.setenv("PATH", path)
        assert pcluster_live.find_python() is None
        (row,) = run(p5(aws, tmp_path))
        assert row.status == "skipped" and "no aws-parallelcluster found" in row.message, row


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_candidate_others_can_write_is_refused(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_checkout: None, mode: int
) -> None:
    deployed(aws)
    # The variable naming a group- or other-writable program: an error row, nothing run.
    shared = program(tmp_path / "bin" / "python", FAKE_PASS, mode)
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, str(shared))
    (row,) = run(p5(aws, tmp_path))
    assert (row.status, row.level) == ("error", "ERROR")
    assert row.message == (
        f"MLCLUSTER_PCLUSTER_PYTHON={shared} is unsafe: {shared} is writable by group or others "
        f"(mode {stat.filemode(stat.S_IFREG | mode)}): point it at a Python of your own"
    )
    # A safe file in a folder others can write (anyone could swap it): refused too.
    shared.chmod(0o755)
    shared.parent.chmod(0o777)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "error" and f"is unsafe: {shared.parent} is writable by group or others" in row.message
    # The same file and folder, writable only by their owner: accepted (the edge).
    shared.parent.chmod(0o755)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "pass" and row.message.endswith(f"(run under {shared})")
    # A relative variable is refused: it would name a file in the current folder.
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, "bin/python")
    monkeypatch.chdir(tmp_path)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "error" and "bin/python is not an absolute path" in row.message
    # The Python of a pcluster command on PATH, or the checkout's, others can write: a skipped row naming it.
    monkeypatch.delenv(pcluster_live.PYTHON_VARIABLE)
    python = program(tmp_path / "venv" / "bin" / "python3", BINARY, mode)
    command = program(tmp_path / "venv" / "bin" / "pcluster", f"#!{python}\n")
    monkeypatch.setenv("PATH", str(command.parent))
    (row,) = run(p5(aws, tmp_path))
    assert (row.status, row.level) == ("skipped", "WARNING")
    assert row.message.startswith(f"skipped: {python}, the Python of the pcluster command {command}, is unsafe: ")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(pcluster_live, "CHECKOUT_PYTHON", python)
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "skipped" and row.message.startswith(f"skipped: {python} is unsafe: ")


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_candidate_another_user_owns_is_refused(tmp_path: Path, no_checkout: None) -> None:
    theirs = program(tmp_path / "bin" / "python", FAKE_PASS)
    os.chown(theirs, 12345, -1)
    with pytest.raises(CliError, match=f"is unsafe: {theirs} is owned by uid 12345, not by you or root"):
        pcluster_live.find_python({pcluster_live.PYTHON_VARIABLE: str(theirs)})
    os.chown(theirs, 0, -1)
    os.chown(theirs.parent, 12345, -1)  # their folder: they could swap the file
    with pytest.raises(CliError, match=f"is unsafe: {theirs.parent} is owned by uid 12345"):
        pcluster_live.find_python({pcluster_live.PYTHON_VARIABLE: str(theirs)})


def test_the_checkout_python_is_beside_mlcluster_not_the_current_folder() -> None:
    import mlcluster

    expected = Path(mlcluster.__file__).resolve().parents[1] / ".venv-pcluster" / "bin" / "python"
    assert getattr(pcluster_live, "CHECKOUT_PYTHON", None) == expected


def test_every_row_names_the_interpreter_and_stderr_says_it_runs(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(aws)
    python = program(tmp_path / "bin" / "python", FAKE_PASS.replace('"failures": []', FAILURES))
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, str(python))
    others = [arg for c in preflight.CHECKS if c != "pcluster-validators" for arg in ("--skip", c)]
    folder = str(env_folder(tmp_path, "p5", P5_REGION))
    result = invoke("preflight", "p5", "--environments", folder, *others, "--json")
    rows = json.loads(result.stdout)["results"]  # stdout is the JSON alone
    assert [r["status"] for r in rows] == ["fail", "pass"]
    assert all(r["message"].endswith(f" (run under {python})") for r in rows), rows
    assert result.stderr == f"running ParallelCluster's validators under {python}...\n"


def test_the_runner_crashing_is_an_error_row(aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deployed(aws)
    script = tmp_path / "broken"
    script.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv(pcluster_live.PYTHON_VARIABLE, str(script))
    (row,) = run(p5(aws, tmp_path))
    assert row.status == "error" and "(exit 1): Traceback: boom" in row.message


def test_the_configuration_carries_the_deployed_values(aws: Aws, tmp_path: Path) -> None:
    deployed(aws)
    made = pcluster_live.deployed_config(p5(aws, tmp_path))
    assert not isinstance(made, str)
    config, left_out = made
    assert config["HeadNode"]["Networking"]["SubnetId"] == "@{p5/PrivateSubnet}"
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["Networking"]["SubnetIds"] == ["@{p5/PrivateSubnet}"]
    assert queue["Networking"]["AdditionalSecurityGroups"] == ["@{p5/NodeSecurityGroup}"]
    assert config["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] == "@{p5/Lustre}"
    # What the Cluster stack makes is left out, and named.
    assert pcluster_live.CLUSTER_OWNED not in json.dumps(config)
    assert "HeadNode.CustomActions.OnNodeConfigured.Sequence" in left_out
    assert "HeadNode.Iam.S3Access" in left_out


def test_without_cluster_owned_drops_whole_entries() -> None:
    owned = pcluster_live.CLUSTER_OWNED
    config = {
        "Iam": {
            "S3Access": [{"BucketName": owned, "KeyName": "pcluster/*"}, {"BucketName": "mine", "KeyName": "x"}],
            "AdditionalIamPolicies": [{"Policy": f"arn:aws:iam::{owned}"}],
            "PermissionsBoundary": f"arn:aws:iam::{owned}",
            "InstanceProfile": "kept",
        },
        "CustomActions": {"OnNodeConfigured": {"Sequence": [{"Script": f"s3://{owned}/a", "Args": ["x"]}]}},
        "Empty": {},
    }
    left_out: list[str] = []
    assert pcluster_live.without_cluster_owned(config, "", left_out) == {
        "Iam": {"S3Access": [{"BucketName": "mine", "KeyName": "x"}], "InstanceProfile": "kept"},
        "Empty": {},
    }
    assert left_out == [
        "Iam.S3Access",
        "Iam.AdditionalIamPolicies",
        "Iam.PermissionsBoundary",
        "CustomActions.OnNodeConfigured.Sequence",
    ]


#: An interpreter path the rows name.
PY = Path("/opt/pcluster/bin/python")


def test_findings_keep_their_level_and_message() -> None:
    answer = {
        "version": "3.15.0",
        "schema": [["Scheduling.SlurmQueues[0].Name", "Must match pattern"]],
        "failures": [
            {"level": "ERROR", "validator": "SubnetsValidator", "message": "subnet-1 does not exist"},
            {"level": "WARNING", "validator": "KeyPairValidator", "message": "no key pair"},
            {"level": "INFO", "validator": "InstanceTypeValidator", "message": "fyi"},
        ],
    }
    rows = [(r.status, r.level, r.key, r.message) for r in pcluster_live.results_of(answer, "3.16.1", [], PY)]
    assert rows[0][:3] == ("fail", "WARNING", "cluster.pcluster.version")
    assert "3.15.0's validators, the cluster uses 3.16.1" in rows[0][3]
    under = f" (run under {PY})"
    assert rows[1:] == [
        (
            "fail",
            "ERROR",
            "cluster.pcluster",
            "ParallelCluster schema: Scheduling.SlurmQueues[0].Name: Must match pattern" + under,
        ),
        ("fail", "ERROR", "cluster.pcluster", "SubnetsValidator: subnet-1 does not exist" + under),
        ("fail", "WARNING", "cluster.pcluster", "KeyPairValidator: no key pair" + under),
        ("pass", "WARNING", "cluster.pcluster", "INFO: InstanceTypeValidator: fyi" + under),
    ]
    (passed,) = pcluster_live.results_of({"version": "3.16.1", "schema": [], "failures": []}, "3.16.1", ["A.B"], PY)
    assert passed.status == "pass"
    assert passed.message.endswith(f"not checked (the Cluster stack creates them): A.B{under}")


@needs_pcluster
def test_parallelclusters_validators_pass_on_the_deployed_p5(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(aws)
    stand_in(tmp_path, monkeypatch, world())
    code, results = run_command(tmp_path)
    assert code == 0, results
    assert [r for r in results if r.status in ("error", "skipped") or (r.level == "ERROR" and r.status == "fail")] == []
    passed = [r for r in results if r.status == "pass"]
    assert passed[-1].message.startswith("ParallelCluster 3.16.1 validators: no errors; not checked")
    assert preflight.exit_code(results) == 0


@needs_pcluster
def test_a_failing_validator_is_an_error_row_with_its_message(
    aws: Aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(aws)
    # The deployed security group lost its self-referencing rules: the nodes cannot reach FSx for Lustre.
    stand_in(tmp_path, monkeypatch, world(self_rules=False))
    code, results = run_command(tmp_path)
    assert code == preflight.EXIT_FAILED, results
    errors = [r for r in results if r.status == "fail" and r.level == "ERROR"]
    assert errors, results
    (fsx,) = [r for r in errors if r.message.startswith("ExistingFsxNetworkingValidator: ")]
    assert "Missing ports: [988]" in fsx.message
    assert all(r.key == "cluster.pcluster" for r in errors)
    assert preflight.exit_code(results) == preflight.EXIT_FAILED


def test_the_check_imports_no_constructs() -> None:
    """The renderer and pre-deploy helpers it loads lazily keep the CLI free of aws_cdk and jsii (fast start)."""
    import subprocess

    code = (
        "import sys, mlcluster.cli.pcluster_live, mlcluster.pcluster.render, mlcluster.pcluster.checks, "
        "mlcluster.config.observability; print(sorted(m for m in ('aws_cdk', 'jsii') if m in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
