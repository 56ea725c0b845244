"""Bucket-policy decisions, contract failures and the assembly's stack names, on small hand-built inputs.

Behaviour `make mutation` showed no test asserted: a ``StringLike`` Deny on the caller's ARN
(mlcluster/analysis/bucket_access.py), an Allow that holds only over TLS, the line a failed
contract prints (mlcluster/analysis/contracts.py), and a weak reference to a stack whose
CloudFormation name is not ``<env>-<Stack>`` (mlcluster/analysis/assembly.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlcluster.analysis.assembly import Assembly, load_assembly
from mlcluster.analysis.bucket_access import S3_FULL_ACCESS, ResourceStatement, decide
from mlcluster.analysis.contracts import SAGEMAKER, prove_hyperpod_roles

OBJECT = "arn:aws:s3:::bucket/key"
USER = "arn:aws:iam::111111111111:user/intruder"
ROLE = "arn:aws:iam::111111111111:role/reader"


@pytest.mark.parametrize(("principal", "expected"), [(USER, "explicit deny"), (ROLE, "allow")])
def test_a_string_like_deny_reaches_the_principals_its_pattern_matches(principal: str, expected: str) -> None:
    """``StringLike`` on ``aws:PrincipalArn`` with a wildcard: every user of the account is denied the delete,
    a role (outside the pattern) keeps what its identity policy gives."""
    deny = ResourceStatement(
        "Deny",
        ("*",),
        ("s3:DeleteObject",),
        ("arn:aws:s3:::bucket/*",),
        {"StringLike": {"aws:PrincipalArn": "arn:aws:iam::111111111111:user/*"}},
        "NoUserDeletes",
    )
    assert decide(S3_FULL_ACCESS, [deny], principal, "s3:DeleteObject", OBJECT) == expected


@pytest.mark.parametrize(("principal", "expected"), [(ROLE, "allow"), (USER, "implicit deny")])
def test_a_bucket_policy_allow_over_tls_holds_for_a_caller_inside_the_account(principal: str, expected: str) -> None:
    """The gate's request comes over TLS (``aws:SecureTransport`` true): the bucket policy's TLS-only Deny does not
    reach it and an Allow conditioned on TLS does, for the principal it names only."""
    policy = [
        ResourceStatement(
            "Deny", ("*",), ("s3:*",), ("arn:aws:s3:::bucket/*",), {"Bool": {"aws:SecureTransport": "false"}}, "Tls"
        ),
        ResourceStatement(
            "Allow",
            (ROLE,),
            ("s3:GetObject",),
            ("arn:aws:s3:::bucket/*",),
            {"Bool": {"aws:SecureTransport": "true"}},
            "Read",
        ),
    ]
    assert decide([], policy, principal, "s3:GetObject", OBJECT) == expected


def test_a_failed_contract_reads_fails_with_its_contract_subject_and_reason() -> None:
    """What the contract gate prints for each failure: ``FAILS: <contract>: <subject>: <why>``."""
    cluster = {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {
            "InstanceGroups": [{"InstanceGroupName": "workers", "ExecutionRole": "arn:aws:iam::111111111111:role/x"}]
        },
    }
    (proof,) = prove_hyperpod_roles(Assembly({"env/Cluster": {"Resources": {"Cluster": cluster}}}), "env")
    assert str(proof) == (
        f"FAILS: {SAGEMAKER}: env/Cluster group workers: the execution role is not a role of the assembly"
    )


def test_a_weak_reference_finds_a_stack_by_its_cloudformation_name(tmp_path: Path) -> None:
    """The manifest's ``stackName`` (an environment may name its stacks) is what ``Fn::GetStackOutput`` names."""
    network = {
        "Resources": {"Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {}}},
        "Outputs": {"SubnetOut": {"Value": {"Ref": "Subnet"}}},
    }
    weak = {"Fn::GetStackOutput": {"StackName": "team-a-network", "OutputName": "SubnetOut"}}
    cluster = {"Resources": {"Group": {"Type": "AWS::EC2::SecurityGroup", "Properties": {"VpcId": weak}}}}
    artifacts = {}
    for display, name, template in (("env/Network", "team-a-network", network), ("env/Cluster", None, cluster)):
        file = f"{display.replace('/', '-')}.template.json"
        (tmp_path / file).write_text(json.dumps(template))
        properties = {"templateFile": file, **({"stackName": name} if name else {})}
        artifacts[display] = {"type": "aws:cloudformation:stack", "displayName": display, "properties": properties}
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    assembly = load_assembly(tmp_path)
    assert assembly.render("env/Cluster", weak) == "${env/Network|Subnet}"
