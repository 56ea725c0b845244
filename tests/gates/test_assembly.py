"""Canonical rendering of intrinsic functions across the stacks of one environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly

TEMPLATES: dict[str, dict[str, Any]] = {
    "env/Network": {
        "Resources": {
            "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {"CidrBlock": "10.0.0.0/20"}},
            "Group": {"Type": "AWS::EC2::SecurityGroup", "Properties": {}},
        },
        "Outputs": {
            "Strong": {"Value": {"Ref": "Subnet"}, "Export": {"Name": "env-Network:Subnet"}},
            "Weak": {"Value": {"Fn::GetAtt": ["Group", "GroupId"]}},
        },
    },
    "env/Cluster": {
        "Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}}},
    },
}


@pytest.mark.parametrize(
    ("stack", "value", "expected"),
    [
        ("env/Network", {"Ref": "Subnet"}, "${env/Network|Subnet}"),
        ("env/Network", {"Ref": "AWS::Region"}, "${AWS::Region}"),
        ("env/Cluster", {"Fn::ImportValue": "env-Network:Subnet"}, "${env/Network|Subnet}"),
        (
            "env/Cluster",
            {"Fn::GetStackOutput": {"StackName": "env-Network", "OutputName": "Weak"}},
            "${env/Network|Group.GroupId}",
        ),
        ("env/Cluster", {"Fn::GetAtt": ["Bucket", "Arn"]}, "arn:${AWS::Partition}:s3:::${env/Cluster|Bucket}"),
        ("env/Cluster", {"Fn::Join": ["", ["s3://", {"Ref": "Bucket"}, "/p/"]]}, "s3://${env/Cluster|Bucket}/p/"),
        ("env/Cluster", {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}, "com.amazonaws.${AWS::Region}.s3"),
        ("env/Cluster", {"Fn::Sub": ["${B}/x", {"B": {"Ref": "Bucket"}}]}, "${env/Cluster|Bucket}/x"),
        ("env/Cluster", {"Fn::Select": [1, ["a", {"Ref": "Bucket"}]]}, "${env/Cluster|Bucket}"),
        ("env/Cluster", {"Fn::ImportValue": "missing"}, "${import:missing}"),
        # Fn::Sub's own references: a resource by its id, an attribute with its name (assembly _sub_var 14).
        ("env/Cluster", {"Fn::Sub": "s3://${Bucket}/p"}, "s3://${env/Cluster|Bucket}/p"),
        ("env/Network", {"Fn::Sub": "${Group.GroupId}"}, "${env/Network|Group.GroupId}"),
        # A function the gates do not evaluate is kept whole, as one opaque string (render 193), and so is a
        # condition; a one-key map that is no function is a map.
        ("env/Cluster", {"Fn::Base64": "x"}, '${Fn::Base64:"x"}'),
        ("env/Cluster", {"Condition": "IsProd"}, '${Condition:"IsProd"}'),
        ("env/Cluster", {"Other": {"Ref": "Bucket"}}, {"Other": "${env/Cluster|Bucket}"}),
    ],
)
def test_render(stack: str, value: Any, expected: Any) -> None:
    assert Assembly(TEMPLATES).render(stack, value) == expected


def test_identity_names_a_resource_by_any_of_its_references() -> None:
    assembly = Assembly(TEMPLATES)
    assert assembly.identity("${env/Network|Group.GroupId}") == "${env/Network|Group}"
    assert assembly.identity("sg-0123") == "sg-0123"
    subnet = assembly.resource("${env/Network|Subnet}")
    assert subnet is not None and subnet.type == "AWS::EC2::Subnet"
    assert assembly.environments == ["env"]
    assert [r.logical_id for r in assembly.resources("env", "AWS::EC2::SecurityGroup")] == ["Group"]


def test_an_asset_folder_is_found_by_its_zip_key_and_a_missing_one_is_none(tmp_path: Path) -> None:
    """The gates read a function's or a script's code from its asset folder; one not in the assembly is no code."""
    (tmp_path / "asset.abc123").mkdir()
    (tmp_path / "asset.file123.zip").write_text("a packed file asset, no folder")
    assembly = Assembly(TEMPLATES, assets=tmp_path)
    assert assembly.asset_folder("abc123.zip") == tmp_path / "asset.abc123"
    assert assembly.asset_folder("abc123") == tmp_path / "asset.abc123"
    assert assembly.asset_folder("missing.zip") is None
    assert assembly.asset_folder("file123.zip") is None  # asset.file123.zip is no asset.file123 folder
    assert Assembly(TEMPLATES).asset_folder("abc123.zip") is None  # no assembly folder
