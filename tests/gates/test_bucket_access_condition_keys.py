"""Bucket-policy conditions name context keys in any case, as IAM reads them (mlcluster/analysis/bucket_access.py).

"Context key names are not case-sensitive. For example, including the aws:SourceIP context key is
equivalent to testing for AWS:SourceIp" (IAM JSON policy elements: Condition). A gate that matched
the key's spelling would read ``AWS:PrincipalArn`` as a key absent from the request: an Allow for
the principal it names would not hold, and the gate would "prove" a denial AWS does not make.
"""

from __future__ import annotations

import pytest

from mlcluster.analysis.bucket_access import S3_FULL_ACCESS, ResourceStatement, decide

OBJECT = "arn:aws:s3:::bucket/key"
READER = "arn:aws:iam::111111111111:role/reader"
OTHER = "arn:aws:iam::111111111111:role/other"


@pytest.mark.parametrize("key", ["aws:PrincipalArn", "AWS:PrincipalArn", "aws:principalarn"])
@pytest.mark.parametrize(("principal", "expected"), [(READER, "allow"), (OTHER, "implicit deny")])
def test_an_allow_for_a_named_principal_holds_whatever_the_keys_case(key: str, principal: str, expected: str) -> None:
    allow = ResourceStatement(
        "Allow", ("*",), ("s3:GetObject",), ("arn:aws:s3:::bucket/*",), {"ArnEquals": {key: READER}}, "Reader"
    )
    assert decide([], [allow], principal, "s3:GetObject", OBJECT) == expected


@pytest.mark.parametrize("key", ["aws:SecureTransport", "AWS:SECURETRANSPORT"])
def test_a_tls_only_deny_spares_a_tls_request_whatever_the_keys_case(key: str) -> None:
    """``Bool`` on the transport: the gate's request is over TLS, so only a request without it is denied."""
    deny = ResourceStatement("Deny", ("*",), ("s3:*",), ("arn:aws:s3:::bucket/*",), {"Bool": {key: "false"}}, "Tls")
    assert decide(S3_FULL_ACCESS, [deny], READER, "s3:GetObject", OBJECT) == "allow"
    assert decide(S3_FULL_ACCESS, [deny], READER, "s3:GetObject", OBJECT, {"aws:SecureTransport": "false"}) == (
        "explicit deny"
    )


# Values, unlike key names, keep their case: "Case-sensitivity of context key values depends on the condition
# operator" (the same page); StringEquals, StringLike, ArnEquals and ArnLike compare them as written, and
# IAM matches a statement's Resource ARN as written. The gate's wildcard ignored case on any pattern with a
# ":" and no "/" (an account root ARN, a bucket ARN): it "proved" a Deny AWS would not apply.
ROOT = "arn:aws:iam::111111111111:root"


@pytest.mark.parametrize("operator", ["StringEquals", "StringLike", "ArnEquals", "ArnLike"])
def test_a_deny_naming_the_principal_in_another_case_does_not_apply(operator: str) -> None:
    deny = ResourceStatement(
        "Deny",
        ("*",),
        ("s3:*",),
        ("arn:aws:s3:::bucket/*",),
        {operator: {"aws:PrincipalArn": ROOT.replace("root", "ROOT")}},
        "No",
    )
    assert decide(S3_FULL_ACCESS, [deny], ROOT, "s3:GetObject", OBJECT) == "allow"
    exact = ResourceStatement(
        "Deny", ("*",), ("s3:*",), ("arn:aws:s3:::bucket/*",), {operator: {"aws:PrincipalArn": ROOT}}, "No"
    )
    assert decide(S3_FULL_ACCESS, [exact], ROOT, "s3:GetObject", OBJECT) == "explicit deny"


def test_a_resource_arn_is_matched_as_written_and_an_action_whatever_its_case() -> None:
    grant = ResourceStatement("Allow", (READER,), ("S3:GETOBJECT",), ("arn:aws:s3:::Bucket",), {}, "Grant")
    assert decide([], [grant], READER, "s3:GetObject", "arn:aws:s3:::Bucket") == "allow"
    assert decide([], [grant], READER, "s3:GetObject", "arn:aws:s3:::bucket") == "implicit deny"


@pytest.mark.parametrize("value", [True, "true", "TRUE", "True"])
def test_a_bool_condition_holds_for_a_json_boolean_or_a_string_of_any_case(value: object) -> None:
    allow = ResourceStatement(
        "Allow",
        (READER,),
        ("s3:GetObject",),
        ("arn:aws:s3:::bucket/*",),
        {"Bool": {"aws:SecureTransport": value}},
        "Tls",
    )
    assert decide([], [allow], READER, "s3:GetObject", OBJECT) == "allow"
    assert decide([], [allow], READER, "s3:GetObject", OBJECT, {"aws:SecureTransport": "false"}) == "implicit deny"


# "StringEquals: exact matching, case sensitive" and StringLike "can include a multi-character match wildcard
# (*) or a single-character match wildcard (?)" (IAM JSON policy elements: Condition operators): a "*" in a
# StringEquals value is the character. The gate read it as a wildcard: a StringNotEquals Deny exempting
# "role/admin-*" spared every admin role, though AWS denies them all (no ARN has that star in it).
ADMIN = "arn:aws:iam::111111111111:role/admin-x"


@pytest.mark.parametrize(
    ("operator", "expected"),
    [("StringNotEquals", "explicit deny"), ("StringNotLike", "allow"), ("ArnNotLike", "allow")],
)
def test_only_the_like_and_arn_operators_read_a_star_as_a_wildcard(operator: str, expected: str) -> None:
    deny = ResourceStatement(
        "Deny",
        ("*",),
        ("s3:*",),
        ("arn:aws:s3:::bucket/*",),
        {operator: {"aws:PrincipalArn": "arn:aws:iam::111111111111:role/admin-*"}},
        "OnlyAdmins",
    )
    assert decide(S3_FULL_ACCESS, [deny], ADMIN, "s3:GetObject", OBJECT) == expected


@pytest.mark.parametrize(
    ("pattern", "expected"), [("arn:aws:iam::111111111111:role/admin-*", "implicit deny"), (ADMIN, "allow")]
)
def test_a_string_equals_allow_grants_the_value_written_and_no_other(pattern: str, expected: str) -> None:
    allow = ResourceStatement(
        "Allow",
        ("*",),
        ("s3:GetObject",),
        ("arn:aws:s3:::bucket/*",),
        {"StringEquals": {"aws:PrincipalArn": pattern}},
        "A",
    )
    assert decide([], [allow], ADMIN, "s3:GetObject", OBJECT) == expected


@pytest.mark.parametrize("operator", ["StringEquals", "StringLike", "ArnEquals", "ArnLike"])
def test_a_condition_on_a_key_the_request_lacks_does_not_hold(operator: str) -> None:
    """IAM: a condition key absent from the request makes a non-negated operator false (bucket_access
    ``_condition_holds`` mutant 41 of the seed-4 sample): an Allow only for requests through an endpoint does
    not allow one that came another way, and does when the key is there."""
    allow = ResourceStatement(
        "Allow",
        (READER,),
        ("s3:GetObject",),
        ("arn:aws:s3:::bucket/*",),
        {operator: {"aws:SourceVpce": "vpce-1"}},
        "Vpce",
    )
    assert decide([], [allow], READER, "s3:GetObject", OBJECT) == "implicit deny"
    assert decide([], [allow], READER, "s3:GetObject", OBJECT, {"aws:SourceVpce": "vpce-1"}) == "allow"


# "Each of the six colon-delimited components of the ARN is checked separately and each can include
# multi-character match wildcards (*) or single-character match wildcards (?)" (IAM user guide, "Amazon
# Resource Name (ARN) condition operators"). Matched over the whole string, a "*" for the region ran on into
# the account and the resource, so a Deny "from account 2222 only" applied to a principal of account 1111.
SOURCE = "arn:aws:sns:us-east-1:111111111111:alerts:222222222222:x"


@pytest.mark.parametrize("operator", ["ArnLike", "ArnEquals"])
def test_an_arn_wildcard_matches_within_one_part_of_the_arn(operator: str) -> None:
    other_account = ResourceStatement(
        "Deny",
        ("*",),
        ("s3:*",),
        ("arn:aws:s3:::bucket/*",),
        {operator: {"aws:SourceArn": "arn:aws:sns:*:222222222222:*"}},
        "OtherAccount",
    )
    assert decide(S3_FULL_ACCESS, [other_account], READER, "s3:GetObject", OBJECT, {"aws:SourceArn": SOURCE}) == (
        "allow"
    )
    # The edge: the same pattern, the account in its own part, applies.
    this_account = SOURCE.replace("111111111111", "222222222222", 1)
    assert decide(S3_FULL_ACCESS, [other_account], READER, "s3:GetObject", OBJECT, {"aws:SourceArn": this_account}) == (
        "explicit deny"
    )


def test_a_string_like_wildcard_still_spans_the_whole_value() -> None:
    """StringLike has no ARN parts: its "*" matches across colons, as IAM's does."""
    deny = ResourceStatement(
        "Deny",
        ("*",),
        ("s3:*",),
        ("arn:aws:s3:::bucket/*",),
        {"StringLike": {"aws:SourceArn": "arn:aws:sns:*:222222222222:*"}},
        "Like",
    )
    assert decide(S3_FULL_ACCESS, [deny], READER, "s3:GetObject", OBJECT, {"aws:SourceArn": SOURCE}) == (
        "explicit deny"
    )
