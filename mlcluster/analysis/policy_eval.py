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
- Conditions: ``String*``, ``Arn*`` (part by part), ``Numeric*``, ``Bool`` and ``Null``
  operators, their ``Not`` and ``IfExists`` forms; key names in any case. A key missing from the request fails a
  positive operator, passes a negated one, and passes any ``IfExists``
  operator (AWS's rules). An operator this module does not know raises, and so does a condition value it
  cannot read: a policy variable (``${aws:username}``, resolved per request by IAM) or a ``Numeric*`` value
  that is no number. A proof must never rest on a condition it could not read.
- Partitions: ``${AWS::Partition}`` stands for any partition, and ``${AWS::URLSuffix}`` is read as
  ``amazonaws.com``, which holds in the commercial (``aws``) and GovCloud partitions but not in China
  (``amazonaws.com.cn``) or the isolated regions. The gate proves the commercial partition: a literal ARN
  or service name of another partition raises :class:`UnsupportedPartitionError` instead of being compared
  as if it were commercial.
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
    """A condition operator, or a condition value, the evaluator cannot judge."""


class UnsupportedPartitionError(ValueError):
    """A literal ARN or service name of a partition other than the commercial one (``aws``)."""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM's ``*`` and ``?`` globbing (``Like`` operators, actions, resources).

    A deploy-time value (``${p5/Storage|Bucket}``) is one name: a ``/`` inside it is no path separator, so
    ``arn:...:s3:::*/*`` (objects) does not match a bucket's ARN because its stack's name has a slash.
    """
    pattern, value = (_TOKEN.sub(lambda m: m.group(0).replace("/", "\x00"), text) for text in (pattern, value))
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case else re.IGNORECASE) is not None


#: The URL suffixes of the partitions whose suffix is not ``amazonaws.com`` (China, the isolated regions).
_OTHER_SUFFIXES = (".amazonaws.com.cn", ".c2s.ic.gov", ".sc2s.sgov.gov", ".cloud.adc-e.uk", ".csp.hci.ic.gov")


def _partition(value: str) -> str:
    """``arn:aws:...`` as ``arn:${AWS::Partition}:...``; an ARN of another partition raises."""
    other = re.match(r"arn:(aws-[a-z-]+):", value)
    if other is not None:
        raise UnsupportedPartitionError(f"{value}: partition {other.group(1)} (the gate proves the aws partition)")
    return re.sub(r"^arn:aws:", "arn:${AWS::Partition}:", value)


def _service(name: str) -> str:
    """A service principal in one spelling (``logs.${AWS::Region}.${AWS::URLSuffix}``: ``...amazonaws.com``).

    A service name of a partition whose URL suffix is not ``amazonaws.com`` raises.
    """
    if name.endswith(_OTHER_SUFFIXES):
        raise UnsupportedPartitionError(f"{name}: a service name outside the aws partition")
    return name.replace("${AWS::URLSuffix}", "amazonaws.com")


#: A policy variable (``${aws:username}``, ``${aws:PrincipalTag/team}``, ``${*}``), as opposed to the
#: assembly's deploy-time values (``${AWS::Region}``, ``${p5/Storage|Bucket}``).
_POLICY_VARIABLE = re.compile(r"\$\{(?:[*?$]|(?!AWS::)[A-Za-z0-9-]+:(?!:)[^}]*)\}")


def _principal_matches(principal: Any, request: Request, *, exact: bool = False, delegate: bool = True) -> bool:
    """Whether ``principal`` names the request's principal.

    ``{"AWS": "*"}`` is ``"*"`` (IAM user guide, "AWS JSON policy elements:
    Principal"). The account root in ``Principal`` stands for every
    principal of the account (``delegate``); ``exact`` (a ``NotPrincipal``) takes names as
    they are: a NotPrincipal of the root exempts the root only.
    """
    if principal is None:
        return True  # identity policies name no principal: the role they are attached to makes the request
    if principal == "*" or (isinstance(principal, dict) and "*" in [str(p) for p in _list(principal.get("AWS", []))]):
        return True
    kind, name = request.principal
    named = [str(p) for p in _list(principal.get(kind, []))] if isinstance(principal, dict) else []
    if kind == "AWS" and isinstance(principal, dict) and not exact and delegate:
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


#: A deploy-time value of the assembly (``${AWS::Partition}``, ``${p5/Observability|Topic}``): colons inside do
#: not separate ARN parts.
_TOKEN = re.compile(r"\$\{[^}]*\}")


def _arn_parts(arn: str) -> list[str] | None:
    """The six colon-separated parts of ``arn`` (the last keeps its colons), or None when it has fewer."""
    hidden = _TOKEN.sub(lambda m: m.group(0).replace(":", "\x00"), _partition(arn))
    parts = hidden.split(":", 5)
    if len(parts) != 6:
        return None
    return [part.replace("\x00", ":") for part in parts]


def _arn_like(pattern: str, value: str) -> bool:
    """``ArnLike``: part by part, wildcards within a part (IAM user guide, "Amazon Resource Name (ARN) condition
    operators"). Two equal deploy-time values are the same ARN; one that is not an ARN matches nothing else."""
    if _partition(pattern) == _partition(value):
        return True
    pattern_parts, value_parts = _arn_parts(pattern), _arn_parts(value)
    if pattern_parts is None or value_parts is None:
        return False
    return all(wildcard(p, v) for p, v in zip(pattern_parts, value_parts, strict=True))


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    """A ``Numeric*`` operator: the request's value compared with the policy's (``value < policy`` for LessThan)."""

    def holds(pattern: str, value: str) -> bool:
        try:
            wanted = float(pattern)
        except ValueError:
            raise UnknownConditionError(f"numeric condition value {pattern!r} is no number") from None
        try:
            return compare(float(value), wanted)
        except ValueError:
            return False  # IAM: a request value that is no number does not match

    return holds


_BASE_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "NumericEquals": _numeric(lambda v, p: v == p),
    "NumericLessThan": _numeric(lambda v, p: v < p),
    "NumericLessThanEquals": _numeric(lambda v, p: v <= p),
    "NumericGreaterThan": _numeric(lambda v, p: v > p),
    "NumericGreaterThanEquals": _numeric(lambda v, p: v >= p),
    "StringEquals": _string_equals,
    "StringEqualsIgnoreCase": _string_equals_ignore_case,
    "StringLike": _string_like,
    # The IAM user guide: ArnEquals and ArnLike behave alike; both take wildcards within a part.
    "ArnEquals": _arn_like,
    "ArnLike": _arn_like,
    "Bool": _string_equals_ignore_case,
}
_NEGATIONS = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}


def condition_holds(operator: str, key: str, values: Any, context: Mapping[str, str]) -> bool:
    """Whether one ``{operator: {key: values}}`` entry holds for ``context``.

    Condition key names are not case-sensitive (IAM user guide, "IAM JSON
    policy elements: Condition"): ``aws:SourceAccount`` finds ``aws:sourceaccount``.
    """
    if_exists = operator.endswith("IfExists")
    base = operator.removesuffix("IfExists")
    for value in _list(values):
        if _POLICY_VARIABLE.search(str(value)):
            raise UnknownConditionError(
                f"condition {operator} {key}: {value} is a policy variable, resolved per request"
            )
    by_key = {name.lower(): value for name, value in context.items()}
    present = key.lower() in by_key
    if base == "Null":
        wanted = str(_list(values)[0]).lower() == "true"
        return (not present) == wanted
    negated = base in _NEGATIONS
    compare = _BASE_OPERATORS.get(_NEGATIONS.get(base, base))
    if compare is None:
        raise UnknownConditionError(f"condition operator {operator} (key {key}) is not one this evaluator judges")
    if not present:
        return if_exists or negated
    # A service name in a value (``kms:ViaService``) in one spelling, as for principals.
    actual = _service(str(by_key[key.lower()]))
    matched = any(compare(_service(str(value)), actual) for value in _list(values))
    return not matched if negated else matched


def _conditions_hold(statement: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    for operator, entries in (statement.get("Condition") or {}).items():
        for key, values in entries.items():
            if not condition_holds(operator, key, values, context):
                return False
    return True


def statement_matches(statement: Mapping[str, Any], request: Request, *, root_delegates: bool = True) -> bool:
    """Whether ``statement`` applies to ``request`` (principal, action, resource and conditions).

    ``root_delegates=False``: the account root in ``Principal`` admits the root only, not the account's other
    principals (see :func:`evaluate`).
    """
    if "NotPrincipal" in statement:
        if _principal_matches(statement["NotPrincipal"], request, exact=True):
            return False
    elif not _principal_matches(statement.get("Principal"), request, delegate=root_delegates):
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


def evaluate(statements: Sequence[Mapping[str, Any]], request: Request, *, root_delegates: bool = True) -> Decision:
    """Explicit deny, then allow, then the implicit deny: AWS's order within one policy set.

    A resource policy naming the account root lets the account's IAM policies grant access (``root_delegates``,
    AWS's behaviour). Pass False for a principal whose own IAM policy grants nothing on the resource (a
    service-linked role with AWS's policy): then only a statement naming the principal itself can allow, whatever
    form the root takes in the policy (``arn:...:root``, a bare account id, a one-item list).
    """
    allows = []
    for index, statement in enumerate(statements):
        if not statement_matches(statement, request, root_delegates=root_delegates):
            continue
        name = str(statement.get("Sid") or f"statement {index}")
        if statement.get("Effect") == "Deny":
            return Decision(False, f"denied by {name}")
        allows.append(name)
    if allows:
        return Decision(True, f"allowed by {allows[0]}")
    return Decision(False, "no statement allows it (implicit deny)")


__all__ = [
    "ACCOUNT_ROOT",
    "Decision",
    "Request",
    "UnknownConditionError",
    "UnsupportedPartitionError",
    "condition_holds",
    "evaluate",
    "wildcard",
]
