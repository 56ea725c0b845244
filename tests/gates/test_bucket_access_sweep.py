"""Bucket access (mlcluster/analysis/bucket_access.py): the bucket policy as read, and each decision at its edge.

The gate proves denials (a worker cannot read the backups, nobody but the writer can put a script), so every
condition operator is tested on both sides of its edge, with the decision compared whole.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.bucket_access import S3_FULL_ACCESS, ResourceStatement, _condition_holds, bucket_policy, decide
from mlcluster.analysis.iam_calls import Statement

ME = "arn:aws:iam::111122223333:role/me"
OBJECT = "arn:aws:s3:::b/k"
CONTEXT = {"aws:PrincipalArn": ME, "aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}


def test_the_bucket_policy_is_every_statement_attached_to_the_bucket_in_any_environment() -> None:
    """Each ``AWS::S3::BucketPolicy`` whose Bucket names it (by Ref, in any environment), statement by statement:
    Effect defaulting to Allow, principals (``*`` for anyone, the AWS names otherwise, none for a service),
    actions and resources as tuples, conditions and Sid as written; another bucket's policy is not read."""
    document = {
        "Statement": [
            {
                "Sid": "Tls",
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "s3:*",
                "Resource": ["r1", "r2"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
            {"Principal": {"AWS": ["a", "b"]}, "Action": ["s3:GetObject"], "Resource": "r3"},
            {"Principal": "*"},
            {"Principal": {"Service": "logging.s3.amazonaws.com"}, "Action": "s3:PutObject"},
        ]
    }
    templates = {
        "env/Storage": {
            "Resources": {
                "Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
                "Policy": {
                    "Type": "AWS::S3::BucketPolicy",
                    "Properties": {"Bucket": {"Ref": "Bucket"}, "PolicyDocument": document},
                },
                "OtherPolicy": {
                    "Type": "AWS::S3::BucketPolicy",
                    "Properties": {"Bucket": "other", "PolicyDocument": {"Statement": [{"Sid": "X"}]}},
                },
            }
        },
        "zed/Other": {
            "Resources": {
                "Late": {
                    "Type": "AWS::S3::BucketPolicy",
                    "Properties": {
                        "Bucket": "${env/Storage|Bucket}",
                        "PolicyDocument": {"Statement": [{"Sid": "Late", "Effect": "Deny"}]},
                    },
                }
            }
        },
    }
    assembly = Assembly(templates)
    bucket = assembly.resource("${env/Storage|Bucket}")
    assert bucket is not None
    assert bucket_policy(assembly, bucket) == [
        ResourceStatement("Deny", ("*",), ("s3:*",), ("r1", "r2"), {"Bool": {"aws:SecureTransport": "false"}}, "Tls"),
        ResourceStatement("Allow", ("a", "b"), ("s3:GetObject",), ("r3",), {}, ""),
        ResourceStatement("Allow", ("*",), (), (), {}, ""),
        ResourceStatement("Allow", (), ("s3:PutObject",), (), {}, ""),
        ResourceStatement("Deny", (), (), (), {}, "Late"),
    ]


@pytest.mark.parametrize(
    ("conditions", "holds"),
    [
        ({}, True),
        ({"StringEquals": {"aws:PrincipalArn": ME}}, True),
        ({"StringEquals": {"aws:PrincipalArn": [ME.upper(), ME]}}, True),
        ({"StringEquals": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/*"}}, False),
        ({"StringNotEquals": {"aws:PrincipalArn": ME}}, False),
        ({"StringNotEquals": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/*"}}, True),
        ({"StringLike": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/*"}}, True),
        ({"StringLike": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/m?e"}}, False),
        ({"StringNotLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/me"}}, False),
        ({"StringNotLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/you"}}, True),
        ({"ArnEquals": {"aws:PrincipalArn": "arn:${AWS::Partition}:iam::111122223333:role/me"}}, True),
        ({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/you"}}, False),
        ({"ArnNotEquals": {"aws:PrincipalArn": "arn:aws:iam::*:role/me"}}, False),
        ({"ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/you"}}, True),
        ({"StringEquals": {"aws:SourceVpce": "vpce-1"}}, False),
        ({"StringNotEquals": {"aws:SourceVpce": "vpce-1"}}, True),
        ({"ArnNotLike": {"aws:SourceArn": "x"}, "StringEquals": {"aws:PrincipalArn": ME}}, True),
        ({"StringEquals": {"aws:PrincipalArn": ME, "s3:TlsVersion": "1.2"}}, False),
        ({"Bool": {"aws:SecureTransport": "false"}}, False),
        ({"Bool": {"aws:SecureTransport": ["false", True]}}, True),
        ({"Bool": {"aws:ViaAWSService": "true"}}, False),
        ({"NumericLessThan": {"s3:TlsVersion": "1.2"}}, False),
        ({"NumericLessThan": {"s3:TlsVersion": "1.3"}}, False),
        # Several values: any one holding is enough (IAM ORs them), in either order.
        ({"NumericLessThan": {"s3:TlsVersion": ["1.4", "1.0"]}}, True),
        ({"NumericLessThan": {"s3:TlsVersion": ["1.0", "1.4"]}}, True),
        ({"NumericLessThan": {"s3:TlsVersion": ["1.0", "1.3"]}}, False),
        ({"NumericLessThan": {"s3:signatureAge": "1"}}, False),
        ({"NumericLessThan": {"s3:TlsVersion": "1.4"}, "Bool": {"aws:SecureTransport": "false"}}, False),
        ({"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}, None),
        ({"StringEquals": {"aws:PrincipalArn": ME}, "IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, None),
        ({"StringEquals": {"aws:PrincipalArn": "x"}, "IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, False),
    ],
)
def test_each_condition_in_a_tls_request_from_inside_the_account(
    conditions: dict[str, Any], holds: bool | None
) -> None:
    """The context of a TLS 1.3 caller inside the account: every operator on both sides of its edge (TLS 1.3 is
    not below 1.3; several values of NumericLessThan are ORed), a key the request lacks fails a positive
    operator and passes a negated one, and an operator the module does not know makes the answer unknown
    (``None``), unless a condition before it already failed."""
    assert _condition_holds(conditions, CONTEXT) is holds


GET = Statement("Allow", ("s3:GetObject",), ("arn:aws:s3:::b/*",))


def _deny(
    principals: tuple[str, ...], conditions: dict[str, Any] | None = None, resource: str = "arn:aws:s3:::b/*"
) -> ResourceStatement:
    return ResourceStatement("Deny", principals, ("s3:GetObject",), (resource,), conditions or {}, "")


@pytest.mark.parametrize(
    ("identity", "policy", "decision"),
    [
        ([GET], [], "allow"),
        ([], [], "implicit deny"),
        ([Statement("Allow", ("S3:get*",), ("arn:${AWS::Partition}:s3:::b/*",))], [], "allow"),
        ([Statement("Allow", ("s3:GetObject",), ("arn:aws:s3:::B/*",))], [], "implicit deny"),
        ([GET, Statement("Deny", ("s3:*",), ("*",))], [], "explicit deny"),
        ([GET, Statement("Deny", ("s3:PutObject",), ("*",))], [], "allow"),
        ([GET, Statement("Deny", ("s3:*",), ("arn:aws:s3:::c/*",))], [], "allow"),
        ([GET], [_deny(("*",))], "explicit deny"),
        ([GET], [_deny((ME,))], "explicit deny"),
        ([GET], [_deny(("arn:${AWS::Partition}:iam::111122223333:role/me",))], "explicit deny"),
        ([GET], [_deny(("arn:aws:iam::111122223333:role/other",))], "allow"),
        ([GET], [_deny(("*",), resource="arn:aws:s3:::c/*")], "allow"),
        ([GET], [_deny(("*",), {"StringNotEquals": {"aws:PrincipalArn": ME}})], "allow"),
        ([GET], [_deny(("*",), {"DateGreaterThan": {"aws:CurrentTime": "2020"}})], "allow"),
        ([], [ResourceStatement("Allow", (ME,), ("s3:GetObject",), ("arn:aws:s3:::b/k",), {}, "")], "allow"),
        (
            [],
            [
                ResourceStatement(
                    "Allow", ("*",), ("s3:GetObject",), ("arn:aws:s3:::b/k",), {"DateGreaterThan": {"k": "v"}}, ""
                )
            ],
            "allow",
        ),
        (
            [],
            [
                ResourceStatement(
                    "Allow", ("*",), ("s3:GetObject",), ("*",), {"StringEquals": {"aws:PrincipalArn": "x"}}, ""
                )
            ],
            "implicit deny",
        ),
        ([], [ResourceStatement("Allow", ("x",), ("s3:GetObject",), ("*",), {}, "")], "implicit deny"),
        ([], [ResourceStatement("Allow", ("*",), ("s3:PutObject",), ("*",), {}, "")], "implicit deny"),
        (
            list(S3_FULL_ACCESS),
            [_deny(("*",), {"StringNotLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/writer"}})],
            "explicit deny",
        ),
        (list(S3_FULL_ACCESS), [], "allow"),
    ],
)
def test_decide_explicit_deny_anywhere_then_an_allow_in_either_policy(
    identity: list[Statement], policy: list[ResourceStatement], decision: str
) -> None:
    """IAM's order within one account: a matching Deny (identity or bucket policy, reaching the principal, its
    conditions holding) wins; an Allow in either policy allows (a bucket Allow whose condition is unknown counts,
    a Deny whose condition is unknown does not); otherwise the implicit deny."""
    assert decide(identity, policy, ME, "s3:GetObject", OBJECT) == decision


def test_the_requests_own_keys_join_the_context() -> None:
    """An upload's encryption header is a key of the request; without it the key is absent."""
    require = _deny(("*",), {"StringNotEquals": {"s3:x-amz-server-side-encryption": "aws:kms"}})
    put = ResourceStatement("Deny", ("*",), ("s3:PutObject",), ("*",), require.conditions, "")
    grant = [Statement("Allow", ("s3:PutObject",), ("*",))]
    assert decide(grant, [put], ME, "s3:PutObject", OBJECT) == "explicit deny"
    assert decide(grant, [put], ME, "s3:PutObject", OBJECT, {"s3:x-amz-server-side-encryption": "aws:kms"}) == "allow"
    assert (
        decide(grant, [put], ME, "s3:PutObject", OBJECT, {"s3:x-amz-server-side-encryption": "AES256"})
        == "explicit deny"
    )
    tls = ResourceStatement("Deny", ("*",), ("s3:PutObject",), ("*",), {"Bool": {"aws:SecureTransport": "false"}}, "")
    assert decide(grant, [tls], ME, "s3:PutObject", OBJECT, {"aws:SecureTransport": "false"}) == "explicit deny"
