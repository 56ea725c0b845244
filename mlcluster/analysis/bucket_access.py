"""Who may do what on a bucket: identity policies and the bucket's own policy, evaluated together.

``iam_calls.allowed`` answers "does this role allow this call" from Action and
Resource alone. A bucket whose protection is a Deny in its own policy needs
more: the statement's Principal and Condition decide whom the Deny reaches.
:func:`decide` evaluates one request the way IAM does within one account
(an explicit Deny anywhere wins; otherwise an Allow in the identity policy or
in the bucket policy for that principal allows), for the condition operators
mlcluster's bucket policies use. It is made to prove denials, so it errs
towards access: an Allow whose condition it cannot evaluate counts as
matching, a Deny whose condition it cannot evaluate does not.

The request context is that of a caller inside the account over TLS 1.3:
``aws:PrincipalArn`` is the caller, ``aws:SecureTransport`` is true.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mlcluster.analysis.assembly import Assembly, Resource
from mlcluster.analysis.iam_calls import Statement, _partition, _wildcard
from mlcluster.analysis.policy_eval import _arn_like

Decision = Literal["allow", "explicit deny", "implicit deny"]

#: The AWS managed policy AmazonS3FullAccess (version 2): what a "may do anything in S3" principal holds.
S3_FULL_ACCESS = (Statement("Allow", ("s3:*", "s3-object-lambda:*"), ("*",)),)


@dataclass(frozen=True)
class ResourceStatement:
    """A statement of a resource policy: whom (``principals``, ``*`` for anyone) and under which conditions."""

    effect: str
    principals: tuple[str, ...]
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: Mapping[str, Mapping[str, Any]]
    sid: str


def _as_tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _principals(value: Any) -> tuple[str, ...]:
    if value == "*" or (isinstance(value, dict) and value.get("AWS") == "*"):
        return ("*",)
    if isinstance(value, dict):
        return _as_tuple(value.get("AWS"))
    return ()


def bucket_policy(assembly: Assembly, bucket: Resource) -> list[ResourceStatement]:
    """The statements of every ``AWS::S3::BucketPolicy`` of the assembly attached to ``bucket``."""
    out = []
    for environment in assembly.environments:
        for policy in assembly.resources(environment, "AWS::S3::BucketPolicy"):
            if assembly.identity(assembly.text(policy.stack, policy.properties.get("Bucket"))) != bucket.name:
                continue
            document = assembly.render(policy.stack, policy.properties.get("PolicyDocument", {}))
            for raw in document.get("Statement", []):
                out.append(
                    ResourceStatement(
                        raw.get("Effect", "Allow"),
                        _principals(raw.get("Principal")),
                        _as_tuple(raw.get("Action")),
                        _as_tuple(raw.get("Resource")),
                        raw.get("Condition", {}),
                        str(raw.get("Sid", "")),
                    )
                )
    return out


def _condition_holds(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool | None:
    """Whether every condition holds in ``context``; ``None`` when an operator is not understood.

    Context key names are not case-sensitive in IAM ("IAM JSON policy elements: Condition": ``aws:SourceIP`` is
    ``AWS:SourceIp``), so a key is looked up whatever its spelling.
    """
    keys = {key.lower(): value for key, value in context.items()}
    for operator, tests in conditions.items():
        negated = operator.startswith(("ArnNot", "StringNot"))
        if operator in ("ArnEquals", "ArnLike", "StringEquals", "StringLike", "ArnNotEquals", "ArnNotLike",
                        "StringNotEquals", "StringNotLike"):  # fmt: skip
            for key, expected in tests.items():
                value = keys.get(key.lower())
                if value is None:
                    if not negated:
                        return False
                    continue
                # StringEquals compares characters: a "*" in its value is a star, not a wildcard; the Like
                # operators read it as one over the whole value, the Arn ones within each of the six ARN parts
                # (a "*" for the region does not run on into the account).
                hit = any(_compare(operator, str(e), value) for e in _as_tuple(expected))
                if hit == negated:
                    return False
        elif operator == "Bool":
            # A Bool value may be a JSON boolean or a string of either case: "true" and True are one value.
            for key, expected in tests.items():
                value = keys.get(key.lower())
                if value is None or value.lower() not in {str(e).lower() for e in _as_tuple(expected)}:
                    return False
        elif operator == "NumericLessThan":
            for key, expected in tests.items():
                value = keys.get(key.lower())
                # Several values are ORed, as for every operator (IAM user guide, "Creating a condition with
                # multiple context keys or values").
                if value is None or not any(float(value) < float(e) for e in _as_tuple(expected)):
                    return False
        else:
            return None
    return True


def _compare(operator: str, expected: str, value: str) -> bool:
    """One value of a string or ARN condition against the request's value (partition spellings alike)."""
    if operator in ("StringEquals", "StringNotEquals"):
        return _partition(expected) == _partition(value)
    if operator.startswith("Arn"):
        return _arn_like(expected, value)
    return _wildcard(_partition(expected), _partition(value))


def _matches(actions: Iterable[str], resources: Iterable[str], action: str, resource: str) -> bool:
    return any(_wildcard(a.lower(), action.lower()) for a in actions) and any(
        _wildcard(_partition(r), _partition(resource)) for r in resources
    )


def decide(
    identity: Sequence[Statement],
    policy: Sequence[ResourceStatement],
    principal_arn: str,
    action: str,
    resource: str,
    request: Mapping[str, str] | None = None,
) -> Decision:
    """IAM's answer for ``principal_arn`` (holding ``identity``) calling ``action`` on ``resource``.

    ``request`` adds the request's own condition keys, e.g. ``s3:x-amz-server-side-encryption`` for
    an upload that sends that header; a key not given is absent from the request.
    """
    context = {"aws:PrincipalArn": principal_arn, "aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}
    context.update(request or {})
    allowed = any(s.effect == "Allow" and _matches(s.actions, s.resources, action, resource) for s in identity)
    if any(s.effect == "Deny" and _matches(s.actions, s.resources, action, resource) for s in identity):
        return "explicit deny"
    for statement in policy:
        reaches = "*" in statement.principals or any(
            _partition(p) == _partition(principal_arn) for p in statement.principals
        )
        if not reaches or not _matches(statement.actions, statement.resources, action, resource):
            continue
        holds = _condition_holds(statement.conditions, context)
        if statement.effect == "Deny" and holds is True:
            return "explicit deny"
        if statement.effect == "Allow" and holds is not False:
            allowed = True
    return "allow" if allowed else "implicit deny"


__all__ = ["S3_FULL_ACCESS", "Decision", "ResourceStatement", "bucket_policy", "decide"]
