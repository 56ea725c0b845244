"""The policy evaluator's rules that an outside review found too lenient (issue 25 review, finding 5).

Each rule as the IAM user guide states it, with the bad case refused and the
good case at the edge accepted.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlcluster.analysis.policy_eval import (
    ACCOUNT_ROOT,
    Request,
    UnknownConditionError,
    UnsupportedPartitionError,
    condition_holds,
    evaluate,
)

ALARM = "arn:aws:cloudwatch:us-east-1:111111111111:alarm:gpu-nodes"


@pytest.mark.parametrize("operator", ["ArnLike", "ArnEquals"])
@pytest.mark.parametrize(
    ("pattern", "value", "holds"),
    [
        # wildcards within a part
        ("arn:aws:cloudwatch:us-east-1:111111111111:alarm:*", ALARM, True),
        ("arn:aws:cloudwatch:*:111111111111:alarm:gpu-*", ALARM, True),
        ("arn:aws:cloudwatch:us-east-?:111111111111:alarm:gpu-nodes", ALARM, True),
        # the partition is compared in one spelling
        (
            "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*",
            ALARM.replace("us-east-1", "${AWS::Region}").replace("111111111111", "${AWS::AccountId}"),
            True,
        ),
        # a wildcard never spans a colon between parts: the account cannot be skipped or shifted
        ("arn:aws:cloudwatch:us-east-1*:alarm:gpu-nodes", ALARM, False),
        ("arn:aws:cloudwatch:*:alarm:*", ALARM, False),
        ("arn:aws:*:111111111111:alarm:*", ALARM, False),
        ("arn:aws:cloudwatch:us-east-1:222222222222:alarm:*", ALARM, False),
        # the resource part keeps its colons, and a wildcard there may span them
        (
            "arn:aws:logs:us-east-1:111111111111:log-group:/aws/x:*",
            "arn:aws:logs:us-east-1:111111111111:log-group:/aws/x:log-stream:y",
            True,
        ),
        # fewer than six parts is no ARN: it matches nothing but itself
        ("arn:aws:cloudwatch:*", ALARM, False),
        ("*", ALARM, False),
        ("arn:aws:cloudwatch:us-east-1:111111111111:alarm:*", "111111111111", False),
        ("${p5/Observability|Topic}", "${p5/Observability|Topic}", True),
        ("${p5/Observability|Topic}", "${p5/Observability|Other}", False),
        # case-sensitive, as every ARN part is
        ("arn:aws:cloudwatch:us-east-1:111111111111:alarm:GPU-*", ALARM, False),
    ],
)
def test_arn_operators_match_part_by_part(operator: str, pattern: str, value: str, holds: bool) -> None:
    """ArnLike and ArnEquals: six colon-separated parts, each matched on its own; both take wildcards."""
    assert condition_holds(operator, "aws:SourceArn", pattern, {"aws:SourceArn": value}) is holds
    negated = operator.replace("Arn", "ArnNot", 1)
    assert condition_holds(negated, "aws:SourceArn", pattern, {"aws:SourceArn": value}) is not holds


@pytest.mark.parametrize("key", ["aws:SourceAccount", "AWS:sourceaccount", "aws:SOURCEACCOUNT"])
def test_condition_key_names_are_compared_without_case(key: str) -> None:
    context = {"aws:SourceAccount": "111111111111"}
    assert condition_holds("StringEquals", key, "111111111111", context) is True
    assert condition_holds("StringEquals", key, "222222222222", context) is False
    assert condition_holds("Null", key, "true", context) is False
    assert condition_holds("StringNotEquals", key, "111111111111", context) is False


def test_condition_values_keep_their_case() -> None:
    """Only the key's name is case-insensitive; StringEquals still compares the value exactly."""
    assert condition_holds("StringEquals", "aws:PrincipalTag/team", "ML", {"aws:principaltag/team": "ml"}) is False


def _publish(principal: tuple[str, str]) -> Request:
    return Request(principal, "sns:Publish", "topic", {})


@pytest.mark.parametrize(
    "principal",
    [("Service", "cloudwatch.amazonaws.com"), ("AWS", "arn:aws:iam::222222222222:role/other"), ("AWS", "*")],
)
@pytest.mark.parametrize("star", ["*", {"AWS": "*"}, {"AWS": ["*"]}])
def test_aws_star_is_everyone(star: Any, principal: tuple[str, str]) -> None:
    """``Principal: {"AWS": "*"}`` is ``Principal: "*"``: a Deny on it reaches every principal, services too."""
    allow = {"Effect": "Allow", "Principal": "*", "Action": "sns:Publish", "Resource": "*"}
    deny = {"Effect": "Deny", "Principal": star, "Action": "sns:Publish", "Resource": "*"}
    assert evaluate([allow, deny], _publish(principal)).allowed is False
    assert evaluate([{**deny, "Effect": "Allow"}], _publish(principal)).allowed is True


def test_a_named_aws_principal_is_not_everyone() -> None:
    allow = {
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::111111111111:role/a"},
        "Action": "*",
        "Resource": "*",
    }
    assert evaluate([allow], _publish(("AWS", "arn:aws:iam::111111111111:role/b"))).allowed is False
    assert evaluate([allow], _publish(("Service", "cloudwatch.amazonaws.com"))).allowed is False


ROLE = "arn:aws:iam::${AWS::AccountId}:role/ours"


def _deny_all_but(not_principal: Any) -> list[dict[str, Any]]:
    return [
        {"Effect": "Allow", "Principal": "*", "Action": "sns:Publish", "Resource": "*"},
        {"Effect": "Deny", "NotPrincipal": not_principal, "Action": "sns:Publish", "Resource": "*"},
    ]


def test_not_principal_of_the_root_exempts_only_the_root() -> None:
    """In ``Principal`` the root stands for the account's principals; in ``NotPrincipal`` it is the root alone."""
    statements = _deny_all_but({"AWS": ACCOUNT_ROOT})
    assert evaluate(statements, _publish(("AWS", ACCOUNT_ROOT))).allowed is True
    assert evaluate(statements, _publish(("AWS", "arn:aws:iam::${AWS::AccountId}:root"))).allowed is True
    assert evaluate(statements, _publish(("AWS", ROLE))).allowed is False
    assert evaluate(statements, _publish(("AWS", "${p5/Cluster|Role.Arn}"))).allowed is False
    assert evaluate(statements, _publish(("Service", "cloudwatch.amazonaws.com"))).allowed is False


def test_the_root_in_principal_still_admits_the_accounts_roles() -> None:
    allow = [{"Effect": "Allow", "Principal": {"AWS": ACCOUNT_ROOT}, "Action": "sns:Publish", "Resource": "*"}]
    assert evaluate(allow, _publish(("AWS", ROLE))).allowed is True
    assert evaluate(allow, _publish(("AWS", "arn:aws:iam::222222222222:role/other"))).allowed is False


def test_not_principal_naming_a_role_exempts_that_role() -> None:
    statements = _deny_all_but({"AWS": ROLE})
    assert evaluate(statements, _publish(("AWS", ROLE))).allowed is True
    assert evaluate(statements, _publish(("AWS", "arn:aws:iam::${AWS::AccountId}:role/other"))).allowed is False


FSX_ROLE = "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/x.amazonaws.com/AWSServiceRoleForX"


@pytest.mark.parametrize(
    "root",
    [
        ACCOUNT_ROOT,
        [ACCOUNT_ROOT],
        "${AWS::AccountId}",
        ["${AWS::AccountId}"],
        "arn:aws:iam::${AWS::AccountId}:root",
    ],
)
def test_root_delegation_can_be_turned_off_whatever_the_roots_spelling(root: Any) -> None:
    """For a principal whose own policy grants nothing on the resource, the root's statement must not count
    (outside review: a one-item list or a bare account id slipped past a filter on the statement's shape)."""
    key = [{"Effect": "Allow", "Principal": {"AWS": root}, "Action": "kms:*", "Resource": "*"}]
    request = Request(("AWS", FSX_ROLE), "kms:Decrypt", "*")
    assert evaluate(key, request).allowed is True
    assert evaluate(key, request, root_delegates=False).allowed is False
    # at the edge: a statement naming the principal itself still allows, and the root itself is still the root
    named = [*key, {"Effect": "Allow", "Principal": {"AWS": FSX_ROLE}, "Action": "kms:Decrypt", "Resource": "*"}]
    assert evaluate(named, request, root_delegates=False).allowed is True
    if root in (ACCOUNT_ROOT, [ACCOUNT_ROOT]):
        assert evaluate(key, Request(("AWS", ACCOUNT_ROOT), "kms:Decrypt", "*"), root_delegates=False).allowed


@pytest.mark.parametrize(
    ("operator", "value"),
    [
        ("StringEquals", "${aws:username}"),
        ("StringLike", "home/${aws:username}/*"),
        ("ArnLike", "arn:aws:iam::${aws:PrincipalAccount}:role/*"),
        ("StringEquals", "${aws:PrincipalTag/team}"),
        ("StringLike", "${*}"),
    ],
)
def test_a_policy_variable_in_a_condition_is_never_guessed(operator: str, value: str) -> None:
    with pytest.raises(UnknownConditionError, match="policy variable"):
        condition_holds(operator, "aws:SourceArn", [value], {"aws:SourceArn": "x"})


def test_deploy_time_values_are_no_policy_variables() -> None:
    """At the edge: the assembly's ``${AWS::AccountId}`` and ``${stack|Output}`` are read, not refused."""
    context = {"aws:SourceAccount": "${AWS::AccountId}"}
    assert condition_holds("StringEquals", "aws:SourceAccount", "${AWS::AccountId}", context) is True
    topic = {"aws:SourceArn": "${p5/Observability|Topic}"}
    assert condition_holds("ArnEquals", "aws:SourceArn", "${p5/Observability|Topic}", topic) is True


@pytest.mark.parametrize("value", ["one", "", "1.2.3", "${AWS::AccountId}"])
def test_a_numeric_condition_value_that_is_no_number_is_never_guessed(value: str) -> None:
    with pytest.raises(UnknownConditionError, match="no number"):
        condition_holds("NumericLessThan", "s3:TlsVersion", value, {"s3:TlsVersion": "1.2"})
    assert condition_holds("NumericLessThan", "s3:TlsVersion", "1.3", {"s3:TlsVersion": "1.2"}) is True


@pytest.mark.parametrize(
    "statement",
    [
        {"Effect": "Allow", "Principal": "*", "Action": "sns:Publish", "Resource": "arn:aws-cn:sns:cn-north-1:1:t"},
        {"Effect": "Allow", "Principal": {"Service": "cloudwatch.amazonaws.com.cn"}, "Action": "*", "Resource": "*"},
        {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "*",
            "Resource": "*",
            "Condition": {"StringEquals": {"kms:ViaService": "s3.cn-north-1.amazonaws.com.cn"}},
        },
        {"Effect": "Allow", "Principal": "*", "Action": "*", "Resource": "arn:aws-us-gov:sns:us-gov-west-1:1:t"},
    ],
)
def test_another_partition_is_refused_not_read_as_commercial(statement: dict[str, Any]) -> None:
    request = Request(
        ("Service", "cloudwatch.${AWS::URLSuffix}"),
        "sns:Publish",
        "arn:aws:sns:us-east-1:1:t",
        {"kms:ViaService": "s3.us-east-1.amazonaws.com"},
    )
    with pytest.raises(UnsupportedPartitionError):
        evaluate([statement], request)


@pytest.mark.parametrize(
    ("action", "allowed"),
    [("sns:Publish", True), ("SNS:Subscribe", False), ("sns:subscribe", False), ("s3:GetObject", True)],
)
def test_not_action_allows_every_action_but_the_ones_it_names(action: str, allowed: bool) -> None:
    """``_action_matches`` mutants 5 and 13 of the analysis seed-4 sample: NotAction matches each action it does
    not name (action names compared whatever their case, as IAM does)."""
    statement = {"Effect": "Allow", "Principal": {"AWS": "*"}, "NotAction": ["sns:Subscribe"], "Resource": "*"}
    assert evaluate([statement], Request(("AWS", "arn:aws:iam::111111111111:role/r"), action, "topic")).allowed is (
        allowed
    )
