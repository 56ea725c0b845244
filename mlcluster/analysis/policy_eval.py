"""IAM policy evaluation over rendered templates: principals, actions, resources and conditions.

Enough of AWS's evaluation logic ("Policy evaluation logic" and "IAM JSON
policy elements: Condition operators" in the IAM user guide) to decide
whether a service principal's request is allowed by a resource policy
(topic, key, trust policy) or a role's identity policies, as the assembly
renders them (``mlcluster.analysis.assembly``: deploy-time values are
canonical strings such as ``${AWS::AccountId}`` or ``${p5/Observability|Topic}``).

- An explicit Deny that matches wins; otherwise an Allow must match.
- A statement matches when its principal, action (``Action``/``NotAction``),
  resource (``Resource``/``NotResource``) and every condition match.
- Conditions: ``String*``, ``Arn*``, ``Bool`` and ``Null`` operators, their
  ``Not`` and ``IfExists`` forms. A key missing from the request fails a
  positive operator, passes a negated one, and passes any ``IfExists``
  operator (AWS's rules). An operator this module does not know raises:
  a proof must never rest on a condition it could not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The root of the account: a key policy naming it lets IAM policies of the account grant use of the key.
ACCOUNT_ROOT = "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"


@dataclass(frozen=True)
class Request:
    """One request as AWS authorizes it: who, what, on which resource, with which context keys."""

    #: ``("Service", "cloudwatch.amazonaws.com")`` or ``("AWS", <role or account ARN>)``.
    principal: tuple[str, str]
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """The request in one line, for findings."""
        keys = ", ".join(f"{k}={v}" for k, v in sorted(self.context.items()))
        return f"{self.principal[1]} {self.action} on {self.resource}" + (f" ({keys})" if keys else "")


class UnknownConditionError(ValueError):
    """A condition operator the evaluator cannot judge."""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM's ``*`` and ``?`` globbing (``Like`` operators, actions, resources)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


def _partition(value: str) -> str:
    return re.sub(r"^arn:aws(-[a-z-]+)?:", "arn:${AWS::Partition}:", value)


def _service(name: str) -> str:
    """A service principal in one spelling (``logs.${AWS::Region}.${AWS::URLSuffix}``: ``...amazonaws.com``)."""
    return name.replace("${AWS::URLSuffix}", "amazonaws.com")


def _principal_matches(principal: Any, request: Request, not_principal: bool = False) -> bool:
    if principal is None:
        return True  # identity policies name no principal: the role they are attached to makes the request
    if principal == "*":
        return True
    kind, name = request.principal
    named = [str(p) for p in _list(principal.get(kind, []))] if isinstance(principal, dict) else []
    if kind == "AWS" and isinstance(principal, dict):
        root = [p for p in named if _partition(p) in (ACCOUNT_ROOT, "${AWS::AccountId}")]
        # The account's root lets any principal of the account in, subject to its own IAM policies; a role of
        # the assembly (a canonical ``${stack|Role.Arn}``) is one.
        ours = name.startswith("${") and "|" in name
        if root and (ours or _partition(name).startswith("arn:${AWS::Partition}:iam::${AWS::AccountId}:")):
            return True
    if kind == "Service":
        return any(_service(p) == _service(name) for p in named)
    return any(p == "*" or _partition(p) == _partition(name) for p in named)


def _action_matches(statement: Mapping[str, Any], action: str) -> bool:
    if "NotAction" in statement:
        return not any(wildcard(str(a), action, case=False) for a in _list(statement["NotAction"]))
    return any(wildcard(str(a), action, case=False) for a in _list(statement.get("Action", [])))


def _resource_matches(statement: Mapping[str, Any], resource: str) -> bool:
    if "NotResource" in statement:
        return not any(wildcard(_partition(str(r)), _partition(resource)) for r in _list(statement["NotResource"]))
    return any(wildcard(_partition(str(r)), _partition(resource)) for r in _list(statement.get("Resource", ["*"])))


def _string_equals(pattern: str, value: str) -> bool:
    return pattern == value


def _string_equals_ignore_case(pattern: str, value: str) -> bool:
    return pattern.lower() == value.lower()


def _string_like(pattern: str, value: str) -> bool:
    return wildcard(pattern, value)


def _arn_equals(pattern: str, value: str) -> bool:
    return _partition(pattern) == _partition(value)


def _arn_like(pattern: str, value: str) -> bool:
    return wildcard(_partition(pattern), _partition(value))


_BASE_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": _string_equals,
    "StringEqualsIgnoreCase": _string_equals_ignore_case,
    "StringLike": _string_like,
    "ArnEquals": _arn_equals,
    "ArnLike": _arn_like,
    "Bool": _string_equals_ignore_case,
}
_NEGATIONS = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


def condition_holds(operator: str, key: str, values: Any, context: Mapping[str, str]) -> bool:
    """Whether one ``{operator: {key: values}}`` entry holds for ``context``."""
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    present = key in context
    if base == "Null":
        wanted = str(_list(values)[0]).lower() == "true"
        return (not present) == wanted
    negated = base in _NEGATIONS
    compare = _BASE_OPERATORS.get(_NEGATIONS.get(base, base))
    if compare is None:
        raise UnknownConditionError(f"condition operator {operator} (key {key}) is not one this evaluator judges")
    if not present:
        return if_exists or negated
    matched = any(compare(str(value), str(context[key])) for value in _list(values))
    return not matched if negated else matched


def _conditions_hold(statement: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    for operator, entries in (statement.get("Condition") or {}).items():
        for key, values in entries.items():
            if not condition_holds(operator, key, values, context):
                return False
    return True


def statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    """Whether ``statement`` applies to ``request`` (principal, action, resource and conditions)."""
    if "NotPrincipal" in statement:
        if _principal_matches(statement["NotPrincipal"], request):
            return False
    elif not _principal_matches(statement.get("Principal"), request):
        return False
    return (
        _action_matches(statement, request.action)
        and _resource_matches(statement, request.resource)
        and _conditions_hold(statement, request.context)
    )


@dataclass(frozen=True)
class Decision:
    """The outcome of one evaluation, and the statement that decided it (Sid or index)."""

    allowed: bool
    reason: str


def evaluate(statements: Sequence[Mapping[str, Any]], request: Request) -> Decision:
    """Explicit deny, then allow, then the implicit deny: AWS's order within one policy set."""
    allows = []
    for index, statement in enumerate(statements):
        if not statement_matches(statement, request):
            continue
        name = str(statement.get("Sid") or f"statement {index}")
        if statement.get("Effect") == "Deny":
            return Decision(False, f"denied by {name}")
        allows.append(name)
    if allows:
        return Decision(True, f"allowed by {allows[0]}")
    return Decision(False, "no statement allows it (implicit deny)")


__all__ = ["ACCOUNT_ROOT", "Decision", "Request", "UnknownConditionError", "condition_holds", "evaluate", "wildcard"]
