"""IAM policy evaluation (mlcluster/analysis/policy_eval.py): each element and operator at its edges.

The evaluator decides whether a service or role may use a topic, key or role; a proof rests on each
operator being read as AWS reads it. Every operator is tested on a value that matches and one right
beside it, and every decision with the reason the gate prints.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlcluster.analysis.policy_eval import (
    ACCOUNT_ROOT,
    Decision,
    Request,
    UnknownConditionError,
    UnsupportedPartitionError,
    _arn_parts,
    _partition,
    _principal_matches,
    _service,
    condition_holds,
    evaluate,
    statement_matches,
    wildcard,
)

ROLE = "arn:aws:iam::${AWS::AccountId}:role/r"
OURS = "${env/S|Role.Arn}"


def test_a_request_is_described_with_its_context_keys_sorted() -> None:
    """The one-line form findings print: principal, action, resource, then the context keys by name."""
    request = Request(("Service", "sns.amazonaws.com"), "kms:Decrypt", "k", {"b": "2", "a": "1"})
    assert request.describe() == "sns.amazonaws.com kms:Decrypt on k (a=1, b=2)"
    assert Request(("AWS", ROLE), "s3:GetObject", "o").describe() == f"{ROLE} s3:GetObject on o"


@pytest.mark.parametrize(
    ("pattern", "value", "case", "match"),
    [
        ("a*c", "abbc", True, True),
        ("a?c", "abc", True, True),
        ("a?c", "ac", True, False),
        ("a?c", "abbc", True, False),
        ("A*", "abc", True, False),
        ("A*", "abc", False, True),
        ("a.c", "abc", True, False),
        ("arn:x:::*/*", "arn:x:::${p5/Storage|Bucket}", True, False),
        ("arn:x:::*", "arn:x:::${p5/Storage|Bucket}", True, True),
        ("arn:x:::*/*", "arn:x:::${p5/Storage|Bucket}/k", True, True),
        ("b", "ab", True, False),
        ("a", "ab", True, False),
    ],
)
def test_wildcard_globbing_is_whole_value_and_a_deploy_time_value_is_one_name(
    pattern: str, value: str, case: bool, match: bool
) -> None:
    """``*`` and ``?`` as IAM reads them, case-sensitive unless told; a ``/`` inside ``${...}`` is no separator."""
    assert wildcard(pattern, value, case=case) is match


def test_a_literal_partition_other_than_aws_raises_and_aws_is_spelled_as_the_template_does() -> None:
    """``arn:aws:`` becomes ``arn:${AWS::Partition}:``; ``arn:aws-cn:`` stops the proof with the value named."""
    assert _partition("arn:aws:s3:::b") == "arn:${AWS::Partition}:s3:::b"
    assert _partition("x arn:aws:s3") == "x arn:aws:s3"
    with pytest.raises(UnsupportedPartitionError) as raised:
        _partition("arn:aws-cn:s3:::b")
    assert str(raised.value) == "arn:aws-cn:s3:::b: partition aws-cn (the gate proves the aws partition)"


@pytest.mark.parametrize(
    "name",
    ["logs.cn-north-1.amazonaws.com.cn", "x.c2s.ic.gov", "x.sc2s.sgov.gov", "x.cloud.adc-e.uk", "x.csp.hci.ic.gov"],
)
def test_a_service_name_of_another_partition_raises(name: str) -> None:
    """The China and isolated partitions' URL suffixes are not read as ``amazonaws.com``."""
    with pytest.raises(UnsupportedPartitionError) as raised:
        _service(name)
    assert str(raised.value) == f"{name}: a service name outside the aws partition"


def test_the_url_suffix_token_is_read_as_amazonaws_com() -> None:
    """``logs.${AWS::Region}.${AWS::URLSuffix}`` is ``logs.${AWS::Region}.amazonaws.com``; others unchanged."""
    assert _service("logs.${AWS::Region}.${AWS::URLSuffix}") == "logs.${AWS::Region}.amazonaws.com"
    assert _service("sns.amazonaws.com") == "sns.amazonaws.com"


SERVICE = Request(("Service", "sns.amazonaws.com"), "kms:Decrypt", "k")
MINE = Request(("AWS", ROLE), "kms:Decrypt", "k")
ASSEMBLY_ROLE = Request(("AWS", OURS), "kms:Decrypt", "k")
FOREIGN = Request(("AWS", "arn:aws:iam::111122223333:role/r"), "kms:Decrypt", "k")


@pytest.mark.parametrize(
    ("principal", "request_", "kwargs", "match"),
    [
        (None, FOREIGN, {}, True),
        ("*", FOREIGN, {}, True),
        ({"AWS": "*"}, SERVICE, {}, True),
        ({"AWS": ["x", "*"]}, FOREIGN, {}, True),
        ({"Service": "sns.${AWS::URLSuffix}"}, SERVICE, {}, True),
        ({"Service": ["sqs.amazonaws.com"]}, SERVICE, {}, False),
        ({"AWS": ROLE}, SERVICE, {}, False),
        ({"AWS": "arn:aws:iam::${AWS::AccountId}:root"}, MINE, {}, True),
        ({"AWS": "${AWS::AccountId}"}, MINE, {}, True),
        ({"AWS": ACCOUNT_ROOT}, ASSEMBLY_ROLE, {}, True),
        ({"AWS": ACCOUNT_ROOT}, FOREIGN, {}, False),
        ({"AWS": ACCOUNT_ROOT}, Request(("AWS", "${import:role-arn}"), "a", "r"), {}, False),
        ({"AWS": ACCOUNT_ROOT}, MINE, {"delegate": False}, False),
        ({"AWS": ACCOUNT_ROOT}, MINE, {"exact": True}, False),
        ({"AWS": [ACCOUNT_ROOT]}, Request(("AWS", ACCOUNT_ROOT), "a", "r"), {"exact": True}, True),
        ({"AWS": "arn:aws:iam::${AWS::AccountId}:role/r"}, MINE, {"delegate": False}, True),
        ({"AWS": "arn:aws:iam::${AWS::AccountId}:role/other"}, MINE, {}, False),
        ({"Service": "sns.amazonaws.com"}, MINE, {}, False),
        ("someone", MINE, {}, False),
    ],
)
def test_principal_matching(principal: Any, request_: Request, kwargs: dict[str, bool], match: bool) -> None:
    """No principal (an identity policy) and ``*`` match anyone; services by name in one spelling; the account
    root admits the account's principals and the assembly's roles unless delegation is off or it is a
    NotPrincipal; otherwise the name itself, partition spelled either way."""
    assert _principal_matches(principal, request_, **kwargs) is match


@pytest.mark.parametrize(
    ("statement", "match"),
    [
        ({"Action": "KMS:decrypt*"}, True),
        ({"Action": ["s3:*", "kms:Decrypt"]}, True),
        ({"Action": "kms:Encrypt"}, False),
        ({"NotAction": "kms:Encrypt"}, True),
        ({"NotAction": ["kms:*"]}, False),
        ({}, False),
        ({"Action": "*", "Resource": "arn:aws:kms:r:1:key/*"}, True),
        ({"Action": "*", "Resource": "arn:aws:kms:r:1:key/K"}, False),
        ({"Action": "*", "NotResource": "arn:aws:kms:r:1:key/other"}, True),
        ({"Action": "*", "NotResource": ["arn:${AWS::Partition}:kms:r:1:key/*"]}, False),
    ],
)
def test_action_and_resource_elements(statement: dict[str, Any], match: bool) -> None:
    """Actions case-insensitive with wildcards, NotAction the complement, a missing Action matches nothing; a
    missing Resource is every resource (trust policies), resources case-sensitive, NotResource the complement."""
    request = Request(("AWS", ROLE), "kms:Decrypt", "arn:aws:kms:r:1:key/k")
    assert statement_matches({"Effect": "Allow", **statement}, request) is match


@pytest.mark.parametrize(
    ("operator", "values", "actual", "holds"),
    [
        ("StringEquals", "abc", "abc", True),
        ("StringEquals", "abc", "ABC", False),
        ("StringEquals", ["x", "abc"], "abc", True),
        ("StringNotEquals", "abc", "abc", False),
        ("StringNotEquals", "abc", "abd", True),
        ("StringEqualsIgnoreCase", "aBc", "AbC", True),
        ("StringEqualsIgnoreCase", "abc", "abd", False),
        ("StringNotEqualsIgnoreCase", "aBc", "AbC", False),
        ("StringLike", "a*", "abc", True),
        ("StringLike", "A*", "abc", False),
        ("StringNotLike", "a*", "abc", False),
        ("StringNotLike", "b*", "abc", True),
        ("ArnLike", "arn:aws:sns:*:*:t", "arn:aws:sns:r:1:t", True),
        ("ArnEquals", "arn:aws:sns:*:*:t", "arn:aws:sns:r:1:u", False),
        ("ArnNotLike", "arn:aws:sns:*:*:t", "arn:aws:sns:r:1:t", False),
        ("ArnNotEquals", "arn:aws:sns:*:*:t", "arn:aws:sns:r:1:u", True),
        ("ArnLike", "arn:aws:sns:*:*:*", "arn:aws:sns:r:1", False),
        ("ArnLike", "${env/S|Topic}", "${env/S|Topic}", True),
        ("ArnLike", "${env/S|Topic}", "${env/S|Other}", False),
        ("ArnLike", "arn:*:sns:r:1:t:x", "arn:aws:sns:r:1:t:x", True),
        ("ArnLike", "arn:aws:sns:r:1:t", "arn:${AWS::Partition}:sns:r:1:t", True),
        ("NumericEquals", "5", "5.0", True),
        ("NumericEquals", "5", "6", False),
        ("NumericNotEquals", "5", "6", True),
        ("NumericNotEquals", "5", "5", False),
        ("NumericLessThan", "5", "4", True),
        ("NumericLessThan", "5", "5", False),
        ("NumericLessThanEquals", "5", "5", True),
        ("NumericLessThanEquals", "5", "6", False),
        ("NumericGreaterThan", "5", "6", True),
        ("NumericGreaterThan", "5", "5", False),
        ("NumericGreaterThanEquals", "5", "5", True),
        ("NumericGreaterThanEquals", "5", "4", False),
        ("NumericEquals", "5", "five", False),
        ("Bool", "true", "True", True),
        ("Bool", "true", "false", False),
        ("StringEqualsIfExists", "abc", "abd", False),
        ("StringEqualsIfExists", "abc", "abc", True),
        ("StringEquals", "logs.${AWS::URLSuffix}", "logs.amazonaws.com", True),
    ],
)
def test_each_condition_operator_at_its_edge(operator: str, values: Any, actual: str, holds: bool) -> None:
    """Each operator on a value that matches and one just beside it (the request's value compared with the
    policy's: LessThan holds for a smaller request value)."""
    assert condition_holds(operator, "Key", values, {"key": actual}) is holds


@pytest.mark.parametrize(
    ("operator", "values", "holds"),
    [
        ("StringEquals", "x", False),
        ("StringNotEquals", "x", True),
        ("StringEqualsIfExists", "x", True),
        ("NumericLessThanIfExists", "1", True),
        ("ArnNotLike", "x", True),
        ("Null", "true", True),
        ("Null", "false", False),
        ("Null", ["TRUE"], True),
    ],
)
def test_a_key_missing_from_the_request(operator: str, values: Any, holds: bool) -> None:
    """A missing key fails a positive operator, passes a negated one and any IfExists; Null true holds."""
    assert condition_holds(operator, "aws:SourceArn", values, {"other": "v"}) is holds


def test_null_false_holds_when_the_key_is_present_in_any_case() -> None:
    """Key names are not case-sensitive."""
    assert condition_holds("Null", "aws:SourceArn", "false", {"AWS:sourcearn": "v"}) is True
    assert condition_holds("Null", "aws:SourceArn", "true", {"AWS:sourcearn": "v"}) is False


@pytest.mark.parametrize(
    ("operator", "values", "message"),
    [
        ("DateLessThan", "x", "condition operator DateLessThan (key k) is not one this evaluator judges"),
        (
            "StringEquals",
            ["ok", "${aws:username}"],
            "condition StringEquals k: ${aws:username} is a policy variable, resolved per request",
        ),
        (
            "StringLike",
            "a/${aws:PrincipalTag/team}",
            "condition StringLike k: a/${aws:PrincipalTag/team} is a policy variable, resolved per request",
        ),
        ("StringLike", "${*}", "condition StringLike k: ${*} is a policy variable, resolved per request"),
        ("NumericLessThan", "ten", "numeric condition value 'ten' is no number"),
    ],
)
def test_a_condition_the_evaluator_cannot_read_stops_the_proof(operator: str, values: Any, message: str) -> None:
    """An unknown operator, a policy variable or a non-numeric Numeric value raises with its own message."""
    with pytest.raises(UnknownConditionError) as raised:
        condition_holds(operator, "k", values, {"k": "5"})
    assert str(raised.value) == message


@pytest.mark.parametrize("value", ["${AWS::AccountId}", "${env/S|Topic.Arn}", "plain"])
def test_deploy_time_values_are_no_policy_variables(value: str) -> None:
    """``${AWS::...}`` and the assembly's canonical references are compared, not refused."""
    assert condition_holds("StringEquals", "k", value, {"k": value}) is True


def test_arn_parts_hide_colons_inside_deploy_time_values() -> None:
    """Six parts, the last keeping its colons; fewer than six is no ARN."""
    assert _arn_parts("arn:${AWS::Partition}:sns:${AWS::Region}:1:t:x") == [
        "arn",
        "${AWS::Partition}",
        "sns",
        "${AWS::Region}",
        "1",
        "t:x",
    ]
    assert _arn_parts("arn:aws:sns:r:1") is None


STATEMENTS: list[dict[str, Any]] = [
    {
        "Sid": "Topic",
        "Effect": "Allow",
        "Principal": {"Service": "sns.amazonaws.com"},
        "Action": "kms:*",
        "Resource": "*",
    },
    {"Effect": "Allow", "Principal": {"AWS": ACCOUNT_ROOT}, "Action": "kms:*", "Resource": "*"},
    {
        "Sid": "NoOthers",
        "Effect": "Deny",
        "NotPrincipal": {"AWS": [ROLE]},
        "Action": "kms:Decrypt",
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:SourceAccount": "1"}},
    },
]


@pytest.mark.parametrize(
    ("request_", "kwargs", "decision"),
    [
        (Request(("Service", "sns.amazonaws.com"), "kms:Encrypt", "k"), {}, Decision(True, "allowed by Topic")),
        (
            Request(("Service", "sns.amazonaws.com"), "kms:Decrypt", "k", {"aws:SourceAccount": "1"}),
            {},
            Decision(False, "denied by NoOthers"),
        ),
        (
            Request(("Service", "sns.amazonaws.com"), "kms:Decrypt", "k", {"aws:SourceAccount": "2"}),
            {},
            Decision(True, "allowed by Topic"),
        ),
        (
            Request(("AWS", ROLE), "kms:Decrypt", "k", {"aws:SourceAccount": "1"}),
            {},
            Decision(True, "allowed by statement 1"),
        ),
        (
            Request(("AWS", ROLE), "kms:Decrypt", "k"),
            {"root_delegates": False},
            Decision(False, "no statement allows it (implicit deny)"),
        ),
        (
            Request(("Service", "sqs.amazonaws.com"), "kms:Decrypt", "k"),
            {},
            Decision(False, "no statement allows it (implicit deny)"),
        ),
    ],
)
def test_evaluate_explicit_deny_then_first_allow_then_implicit_deny(
    request_: Request, kwargs: dict[str, bool], decision: Decision
) -> None:
    """The decision and the statement named in it (Sid, else its index): a matching Deny wins, else the first
    Allow, else the implicit deny; without root delegation the root statement admits nobody else."""
    assert evaluate(STATEMENTS, request_, **kwargs) == decision


def test_a_not_principal_deny_exempts_exactly_the_named_principal() -> None:
    """NotPrincipal of the root exempts the root only, not the account's roles."""
    deny = {"Effect": "Deny", "NotPrincipal": {"AWS": ACCOUNT_ROOT}, "Action": "*", "Resource": "*"}
    allow = {"Sid": "All", "Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "*"}
    assert evaluate([allow, deny], Request(("AWS", ROLE), "a:B", "r")) == Decision(False, "denied by statement 1")
    assert evaluate([allow, deny], Request(("AWS", ACCOUNT_ROOT), "a:B", "r")) == Decision(True, "allowed by All")


def test_a_numeric_operator_built_from_its_comparison_reads_both_numbers() -> None:
    """The operators are built once at import (``_numeric``): one built here compares the request's number with
    the policy's, and a request value that is no number does not match."""
    from mlcluster.analysis.policy_eval import _numeric

    less = _numeric(lambda value, policy: value < policy)
    assert (less("5", "4"), less("5", "5"), less("5", "x")) == (True, False, False)
