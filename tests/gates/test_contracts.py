"""Gate: every service contract of the table holds in every example, conditions included.

Each contract (mlcluster/analysis/contracts.py) builds the request its
service principal makes for every instance in the examples and evaluates it
against the synthesized policy. The tests then take each grant away, or
spoil a condition, in a copy of the templates and expect the proof to fail,
so no contract is proven by a gate that cannot fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlcluster.analysis import contracts
from mlcluster.analysis.assembly import Assembly
from mlcluster.analysis.contracts import CONTRACTS, Proof, prove_all, render_table
from mlcluster.analysis.policy_eval import Request, UnknownConditionError, condition_holds, evaluate
from tests.gates.gate_support import Templates, resources
from tests.support import ROOT

Broken = Callable[[Callable[[Templates], object]], Assembly]


def failures(assembly: Assembly, contract: str) -> list[Proof]:
    return [p for p in prove_all(assembly) if p.contract == contract and not p.ok]


def test_every_contract_holds_in_every_example(examples: Assembly) -> None:
    proofs = prove_all(examples)
    assert [str(p) for p in proofs if not p.ok] == []
    # A row that meets no instance in any example proves nothing.
    assert {c.name for c in CONTRACTS} == {p.contract for p in proofs}


def _drop_statements(templates: Templates, kind: str, key: str, keep: Callable[[dict[str, object]], bool]) -> int:
    dropped = 0
    for stack in templates:
        for resource in resources(templates, stack, kind).values():
            document = resource["Properties"][key]
            before = len(document["Statement"])
            document["Statement"] = [s for s in document["Statement"] if keep(s)]
            dropped += before - len(document["Statement"])
    return dropped


def test_finding_1_reverted_fails_the_gate(broken: Broken) -> None:
    """Without the topic policy's CloudWatch allow, every alarm's notification would be refused."""
    counted: list[int] = []

    def revert(templates: Templates) -> None:
        cloudwatch = {"Service": "cloudwatch.amazonaws.com"}
        keep = lambda s: s.get("Principal") != cloudwatch  # noqa: E731
        counted.append(_drop_statements(templates, "AWS::SNS::TopicPolicy", "PolicyDocument", keep))

    found = failures(broken(revert), contracts.CLOUDWATCH_SNS)
    assert counted[0] >= 5 and found
    assert all("no statement allows it (implicit deny)" in p.detail for p in found)
    assert any("LustreFreeCapacityLow" in p.subject for p in found)


def test_a_condition_for_another_account_fails_the_gate(broken: Broken) -> None:
    """Conditions are evaluated: an allow scoped to another account admits nobody of ours."""

    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::SNS::TopicPolicy").values():
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    if statement.get("Sid") == "CloudWatchAlarms":
                        statement["Condition"]["StringEquals"]["aws:SourceAccount"] = "111122223333"

    assert failures(broken(spoil), contracts.CLOUDWATCH_SNS)


def test_the_topic_key_must_admit_cloudwatch(broken: Broken) -> None:
    def revert(templates: Templates) -> None:
        _drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: s.get("Sid") != "AlarmPublishers")

    found = failures(broken(revert), contracts.CLOUDWATCH_KMS)
    assert found and all("kms:" in p.detail for p in found)


def test_finding_2_reverted_fails_the_gate(broken: Broken) -> None:
    """Without the Identity Center reads, UpdatePermissions of the AWS_SSO workspace (p5) fails."""

    def revert(templates: Templates) -> None:
        _drop_statements(
            templates, "AWS::IAM::ManagedPolicy", "PolicyDocument", lambda s: s.get("Sid") != "ReadIdentityCenter"
        )

    found = failures(broken(revert), contracts.GRAFANA_SSO)
    assert {p.detail.split(" ")[1] for p in found} == set(contracts.IDENTITY_CENTER_NEEDS)
    assert all(p.subject.startswith("p5/Observability/") for p in found)


def test_the_amp_grant_must_name_the_workspace(broken: Broken) -> None:
    def spoil(templates: Templates) -> None:
        for stack in templates:
            for policy in resources(templates, stack, "AWS::SNS::TopicPolicy").values():
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    if statement.get("Sid") == "PrometheusAlertManager":
                        statement["Condition"]["ArnEquals"]["aws:SourceArn"] = "arn:aws:aps:us-east-1:1:workspace/x"

    assert failures(broken(spoil), contracts.AMP_SNS)


def test_log_group_keys_need_the_encryption_context_grant(broken: Broken) -> None:
    def revert(templates: Templates) -> None:
        for stack in templates:
            for key in resources(templates, stack, "AWS::KMS::Key").values():
                for statement in key["Properties"]["KeyPolicy"]["Statement"]:
                    if "kms:EncryptionContext:aws:logs:arn" in str(statement.get("Condition")):
                        statement["Condition"] = {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:x"}}

    assert failures(broken(revert), contracts.LOGS_KMS)


def test_event_rules_need_the_topic_and_key_grants(broken: Broken) -> None:
    def revert_topic(templates: Templates) -> None:
        _drop_statements(
            templates, "AWS::SNS::TopicPolicy", "PolicyDocument", lambda s: s.get("Sid") != "EventBridgeRules"
        )

    found = failures(broken(revert_topic), contracts.EVENTBRIDGE_SNS)
    assert found and all("sns:Publish" in p.detail for p in found)

    def revert_key(templates: Templates) -> None:
        _drop_statements(templates, "AWS::KMS::Key", "KeyPolicy", lambda s: s.get("Sid") != "EventBridgeRules")

    found = failures(broken(revert_key), contracts.EVENTBRIDGE_SNS)
    assert found and all("kms:" in p.detail for p in found)


def test_docs_table_is_generated_from_the_contracts() -> None:
    page = (ROOT / "docs/reference/security.md").read_text(encoding="utf-8")
    assert render_table() in page, "docs/reference/security.md contract table is stale; expected:\n" + render_table()


# -- the evaluator -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "value", "context", "holds"),
    [
        ("StringEquals", "1", {"k": "1"}, True),
        ("StringEquals", "1", {"k": "2"}, False),
        ("StringEquals", "1", {}, False),  # a missing key fails a positive operator
        ("StringEqualsIfExists", "1", {}, True),
        ("StringNotEquals", "1", {}, True),  # and passes a negated one
        ("StringNotEquals", "1", {"k": "1"}, False),
        ("StringLike", "a*", {"k": "abc"}, True),
        ("ArnLike", "arn:aws:cloudwatch:r:1:alarm:*", {"k": "arn:aws-cn:cloudwatch:r:1:alarm:x"}, True),
        ("ArnEquals", "arn:aws:x:r:1:y", {"k": "arn:aws:x:r:1:z"}, False),
        ("Bool", "false", {"k": "true"}, False),
        ("Bool", "false", {}, False),
        ("Null", "true", {}, True),
        ("Null", "true", {"k": "x"}, False),
    ],
)
def test_condition_operators(operator: str, value: str, context: dict[str, str], holds: bool) -> None:
    assert condition_holds(operator, "k", value, context) is holds


def test_an_unknown_operator_is_never_guessed() -> None:
    with pytest.raises(UnknownConditionError, match="NumericLessThan"):
        condition_holds("NumericLessThan", "k", "1", {"k": "0"})


def test_explicit_deny_wins() -> None:
    request = Request(("Service", "cloudwatch.amazonaws.com"), "sns:Publish", "topic", {"aws:SecureTransport": "false"})
    allow = {
        "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"},
        "Action": "sns:*",
        "Resource": "*",
    }
    deny = {"Effect": "Deny", "Principal": "*", "Action": "sns:*", "Resource": "*"}
    deny["Condition"] = {"Bool": {"aws:SecureTransport": "false"}}
    assert evaluate([allow, deny], request).allowed is False
    assert evaluate([allow, deny], Request(request.principal, request.action, "topic", {})).allowed is True
