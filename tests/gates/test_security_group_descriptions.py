"""Gate: every security group and rule description in every example is one EC2 accepts.

EC2 refuses a group or rule whose description has a character outside a small set (an apostrophe, for
one: cfn-lint#173), and CloudFormation only learns it at deploy time. The limits are read from botocore's
EC2 model, the service's own documentation of its API:

| Field (CreateSecurityGroup / rule)              | Length | Characters beyond a-z A-Z 0-9 and space |
|-------------------------------------------------|--------|------------------------------------------|
| GroupDescription                                | 255    | ``._-:/()#,@[]+=&;{}!$*``                |
| rule to or from a CIDR (IpRange, Ipv6Range)     | 255    | ``._-:/()#,@[]+=&;{}!$*``                |
| rule to or from a group or prefix list          | 255    | ``._-:/()#,@[]+=;{}!$*`` (no ``&``)      |
"""

from __future__ import annotations

import gzip
import html
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import botocore
import pytest

from mlcluster.analysis.assembly import Assembly

#: Rule keys that make a rule reference a group or prefix list (UserIdGroupPair / PrefixListId in the model).
_PEER_KEYS = (
    "SourceSecurityGroupId",
    "SourceSecurityGroupName",
    "SourcePrefixListId",
    "DestinationSecurityGroupId",
    "DestinationPrefixListId",
)


@cache
def _limits() -> dict[str, tuple[int, str]]:
    """(maximum length, the punctuation allowed besides letters, digits and space) per shape, from the model."""
    model = Path(botocore.__file__).parent / "data" / "ec2" / "2016-11-15" / "service-2.json.gz"
    shapes = json.loads(gzip.decompress(model.read_bytes()))["shapes"]
    fields = {
        "group": shapes["CreateSecurityGroupRequest"]["members"]["Description"],
        "cidr": shapes["IpRange"]["members"]["Description"],
        "peer": shapes["UserIdGroupPair"]["members"]["Description"],
    }
    found: dict[str, tuple[int, str]] = {}
    for name, member in fields.items():
        text = html.unescape(re.sub(r"<[^>]+>", "", member["documentation"]))
        length = re.search(r"Up to (\d+) characters", text)
        chars = re.search(r"(?:Valid|Allowed) characters(?: are|:) a-z, A-Z, 0-9, spaces, and (\S+)", text)
        assert length and chars, f"EC2 model's {name} description constraints changed: {text!r}"
        found[name] = (int(length.group(1)), chars.group(1).rstrip("."))
    return found


def _literal(value: Any) -> tuple[str, bool] | None:
    """The text of a description and whether it is whole (an Fn::Join's literal parts are checked for characters)."""
    if isinstance(value, str):
        return value, True
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(p for p in parts if isinstance(p, str)), False
    return None


def _descriptions(templates: Any) -> Iterator[tuple[str, str, Any]]:
    """(where, kind, value) of every security group and rule description in the templates."""
    for stack, template in templates.items():
        for name, resource in template.get("Resources", {}).items():
            kind, props = resource.get("Type"), resource.get("Properties", {})
            rules: list[tuple[str, dict[str, Any]]] = []
            if kind == "AWS::EC2::SecurityGroup":
                yield f"{stack}/{name}.GroupDescription", "group", props.get("GroupDescription")
                for key in ("SecurityGroupIngress", "SecurityGroupEgress"):
                    rules += [(f"{stack}/{name}.{key}[{i}]", r) for i, r in enumerate(props.get(key, []))]
            elif kind in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"):
                rules.append((f"{stack}/{name}", props))
            for where, rule in rules:
                if "Description" in rule:
                    peer = any(key in rule for key in _PEER_KEYS)
                    yield f"{where}.Description", "peer" if peer else "cidr", rule["Description"]


def problems(templates: Any) -> list[str]:
    """Each description EC2 would refuse, naming where it is, the value and what is allowed."""
    found: list[str] = []
    for where, kind, value in _descriptions(templates):
        literal = _literal(value)
        if literal is None:
            continue
        text, whole = literal
        length, punctuation = _limits()[kind]
        bad = sorted(set(re.sub(f"[a-zA-Z0-9 {re.escape(punctuation)}]", "", text)))
        if bad:
            found.append(f"{where}: {text!r} has {''.join(bad)!r}; EC2 allows a-z, A-Z, 0-9, space and {punctuation}")
        if whole and len(text) > length:
            found.append(f"{where}: {len(text)} characters; EC2 allows up to {length}")
    return found


def test_every_description_in_every_example_is_accepted_by_ec2(examples: Assembly) -> None:
    assert problems(examples.templates) == []
    # The walk meets the groups and rules of every example (a gate that sees nothing proves nothing).
    kinds = {kind for _, kind, _ in _descriptions(examples.templates)}
    assert kinds == {"group", "cidr", "peer"}


def _template(kind: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"s/Stack": {"Resources": {"R": {"Type": kind, "Properties": props}}}}


@pytest.mark.parametrize(
    ("kind", "props", "message"),
    [
        ("AWS::EC2::SecurityGroup", {"GroupDescription": "slurmdbd's node"}, 'GroupDescription: "slurmdbd\'s node"'),
        ("AWS::EC2::SecurityGroup", {"GroupDescription": "a" * 256}, "256 characters; EC2 allows up to 255"),
        (
            "AWS::EC2::SecurityGroupIngress",
            {"SourceSecurityGroupId": "sg-1", "Description": "MySQL & more"},
            "R.Description: 'MySQL & more' has '&'",
        ),
        (
            "AWS::EC2::SecurityGroup",
            {
                "GroupDescription": "g",
                "SecurityGroupEgress": [{"CidrIp": "0.0.0.0/0", "Description": "the API\u2019s"}],
            },
            "SecurityGroupEgress[0].Description",
        ),
        (
            "AWS::EC2::SecurityGroupEgress",
            {"CidrIp": "0.0.0.0/0", "Description": {"Fn::Join": ["", ["node's ", {"Ref": "X"}]]}},
            'has "\'"',
        ),
    ],
)
def test_a_description_ec2_refuses_is_found(kind: str, props: dict[str, Any], message: str) -> None:
    (problem,) = problems(_template(kind, props))
    assert message in problem


def test_descriptions_at_the_edge_are_accepted() -> None:
    edge = "a Z9" + "a" * 230 + "._-:/()#,@[]+=&;{}!$*"
    assert len(edge) == 255
    group = {
        "GroupDescription": edge,
        "SecurityGroupIngress": [{"CidrIp": "10.0.0.0/8", "Description": "A&B;{}!$* 0-9"}],
        "SecurityGroupEgress": [{"DestinationSecurityGroupId": "sg-1", "Description": "A;B{}!$*"}],
    }
    assert problems(_template("AWS::EC2::SecurityGroup", group)) == []
