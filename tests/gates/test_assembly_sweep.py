"""The cloud assembly as plain data (mlcluster/analysis/assembly.py): every intrinsic rendered, every lookup.

Every gate reads the templates through this rendering, so a value rendered differently (a reference named
by another stack, a join, a select out of range) would make a proof compare the wrong names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlcluster.analysis.assembly import Assembly, Resource, load_assembly

TEMPLATES: dict[str, Any] = {
    "dev/Network": {
        "Resources": {
            "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
            "Subnet": {"Type": "AWS::EC2::Subnet", "Properties": {}},
            "Bucket": {"Type": "AWS::S3::Bucket"},
            "Untyped": {"Properties": {"X": 1}},
        },
        "Outputs": {
            "VpcOut": {"Value": {"Ref": "Vpc"}, "Export": {"Name": "dev-vpc"}},
            "Plain": {"Value": "v-plain"},
            "Computed": {"Value": "x", "Export": {"Name": {"Fn::Sub": "computed"}}},
        },
    },
    "dev/Cluster": {"Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": {"Path": "/"}}}},
    "prod/Network": {"Resources": {}},
}


@pytest.fixture
def assembly() -> Assembly:
    return Assembly(TEMPLATES, stack_names={"custom-name": "dev/Network"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"Ref": "Vpc"}, "${dev/Cluster|Vpc}"),
        ({"Ref": "AWS::Region"}, "${AWS::Region}"),
        ({"Fn::GetAtt": ["Role", "Arn"]}, "${dev/Cluster|Role.Arn}"),
        ({"Fn::GetAtt": "Role.Arn"}, "${dev/Cluster|Role.Arn}"),
        ({"Fn::GetAtt": "Role.Endpoint.Port"}, "${dev/Cluster|Role.Endpoint.Port}"),
        ({"Fn::GetAtt": ["Role", {"Ref": "AWS::Region"}]}, "${dev/Cluster|Role.${AWS::Region}}"),
        ({"Fn::ImportValue": "dev-vpc"}, "${dev/Network|Vpc}"),
        ({"Fn::ImportValue": {"Fn::Join": ["-", ["dev", "vpc"]]}}, "${dev/Network|Vpc}"),
        ({"Fn::ImportValue": "nope"}, "${import:nope}"),
        ({"Fn::GetStackOutput": {"StackName": "dev-Network", "OutputName": "VpcOut"}}, "${dev/Network|Vpc}"),
        ({"Fn::GetStackOutput": {"StackName": "custom-name", "OutputName": "Plain"}}, "v-plain"),
        (
            {"Fn::GetStackOutput": {"StackName": "dev-Network", "OutputName": "Missing"}},
            '${output:{"OutputName": "Missing", "StackName": "dev-Network"}}',
        ),
        (
            {"Fn::GetStackOutput": {"StackName": "elsewhere", "OutputName": "VpcOut"}},
            '${output:{"OutputName": "VpcOut", "StackName": "elsewhere"}}',
        ),
        ({"Fn::Join": [":", ["a", {"Ref": "Role"}, 3, {"k": "v"}]]}, 'a:${dev/Cluster|Role}:3:{"k": "v"}'),
        ({"Fn::Join": [",", {"Ref": "List"}]}, '${join:"${dev/Cluster|List}"}'),
        ({"Fn::Join": ["", []]}, ""),
        (
            {"Fn::Sub": "${AWS::Region}-${Role.Arn}-${Role}-${!Literal}"},
            "${AWS::Region}-${dev/Cluster|Role.Arn}-${dev/Cluster|Role}-${!Literal}",
        ),
        ({"Fn::Sub": ["${Name}/${Other}", {"Name": {"Ref": "Role"}, "Other": 5}]}, "${dev/Cluster|Role}/5"),
        ({"Fn::Select": [1, ["a", "b"]]}, "b"),
        ({"Fn::Select": ["0", ["a", "b"]]}, "a"),
        ({"Fn::Select": [2, ["a", "b"]]}, '${select:[2, ["a", "b"]]}'),
        ({"Fn::Select": [-1, ["a", "b"]]}, '${select:[-1, ["a", "b"]]}'),
        ({"Fn::Select": [0, {"Ref": "L"}]}, '${select:[0, "${dev/Cluster|L}"]}'),
        ({"Fn::If": ["C", {"Ref": "Role"}, "b"]}, '${Fn::If:["C", "${dev/Cluster|Role}", "b"]}'),
        ({"Condition": "IsProd"}, '${Condition:"IsProd"}'),
        ({"Key": {"Ref": "Role"}}, {"Key": "${dev/Cluster|Role}"}),
        (
            {"A": {"Ref": "Role"}, "B": [1, {"Ref": "AWS::NoValue"}]},
            {"A": "${dev/Cluster|Role}", "B": [1, "${AWS::NoValue}"]},
        ),
        ([{"Ref": "Role"}, "x"], ["${dev/Cluster|Role}", "x"]),
        ("plain", "plain"),
        (7, 7),
        ({}, {}),
    ],
)
def test_every_intrinsic_renders_to_one_canonical_form(assembly: Assembly, value: Any, expected: Any) -> None:
    """Ref, GetAtt (list or dotted, attribute with dots or itself a function), ImportValue of a known or unknown
    export, GetStackOutput by stack name (the default dashed name or a given one) or kept whole, Join, Sub
    (pseudo parameters, attributes, its own variables, ``${!...}`` left), Select in and out of range, other
    functions kept whole as sorted JSON; plain maps and lists rendered inside, scalars as they are."""
    assert assembly.render("dev/Cluster", value) == expected


def test_a_buckets_arn_is_one_string_whichever_way_it_is_written(assembly: Assembly) -> None:
    """GetAtt Arn of a bucket renders as the ARN built from its Ref; of any other resource, as an attribute."""
    assert (
        assembly.render("dev/Network", {"Fn::GetAtt": ["Bucket", "Arn"]})
        == "arn:${AWS::Partition}:s3:::${dev/Network|Bucket}"
    )
    assert (
        assembly.render("dev/Network", {"Fn::GetAtt": ["Bucket", "DomainName"]}) == "${dev/Network|Bucket.DomainName}"
    )
    assert assembly.render("dev/Network", {"Fn::GetAtt": ["Vpc", "Arn"]}) == "${dev/Network|Vpc.Arn}"


def test_text_renders_lists_and_maps_as_sorted_json(assembly: Assembly) -> None:
    """A string stays itself; anything else becomes JSON with sorted keys."""
    assert assembly.text("dev/Cluster", {"Ref": "Role"}) == "${dev/Cluster|Role}"
    assert assembly.text("dev/Cluster", {"b": 1, "a": [{"Ref": "Role"}]}) == '{"a": ["${dev/Cluster|Role}"], "b": 1}'
    assert assembly.text("dev/Cluster", None) == "null"


def test_environments_stacks_and_resources(assembly: Assembly) -> None:
    """Environments are the stacks' first path parts; an environment's stacks sorted; resources by type (every
    type when none is given), an untyped resource with an empty type and properties defaulting to empty."""
    assert assembly.environments == ["dev", "prod"]
    assert assembly.stacks("dev") == ["dev/Cluster", "dev/Network"]
    assert assembly.stacks("de") == []
    assert [r.name for r in assembly.resources("dev")] == [
        "${dev/Cluster|Role}",
        "${dev/Network|Vpc}",
        "${dev/Network|Subnet}",
        "${dev/Network|Bucket}",
        "${dev/Network|Untyped}",
    ]
    assert list(assembly.resources("dev", "AWS::EC2::Subnet", "AWS::S3::Bucket")) == [
        Resource("dev/Network", "Subnet", "AWS::EC2::Subnet", {}),
        Resource("dev/Network", "Bucket", "AWS::S3::Bucket", {}),
    ]
    assert list(assembly.resources("prod")) == []


@pytest.mark.parametrize(
    ("canonical", "found"),
    [
        ("${dev/Network|Vpc}", Resource("dev/Network", "Vpc", "AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"})),
        ("${dev/Network|Vpc.Arn}", Resource("dev/Network", "Vpc", "AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"})),
        (
            "${dev/Network|Vpc.Endpoint.Port}",
            Resource("dev/Network", "Vpc", "AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"}),
        ),
        ("${dev/Network|Untyped}", Resource("dev/Network", "Untyped", "", {"X": 1})),
        ("${dev/Network|Missing}", None),
        ("${nope/Network|Vpc}", None),
        ("x${dev/Network|Vpc}", None),
        ("${dev/Network|Vpc}x", None),
        ("${AWS::Region}", None),
        ("${dev/Network|Vpc-1}", None),
    ],
)
def test_a_canonical_reference_names_its_resource(assembly: Assembly, canonical: str, found: Resource | None) -> None:
    """The whole string must be one reference, with or without an attribute, to a resource that exists."""
    assert assembly.resource(canonical) == found
    assert assembly.identity(canonical) == (found.name if found is not None else canonical)


def test_stack_names_default_to_the_dashed_display_name_and_can_be_added(assembly: Assembly) -> None:
    """``dev/Network`` is ``dev-Network`` by default; given names are added, not replacing the defaults."""
    assert assembly.stack_names == {
        "dev-Network": "dev/Network",
        "dev-Cluster": "dev/Cluster",
        "prod-Network": "prod/Network",
        "custom-name": "dev/Network",
    }
    assert Assembly(TEMPLATES).stack_names["dev-Cluster"] == "dev/Cluster"


def test_an_asset_folder_needs_an_assembly_folder_and_a_directory(tmp_path: Path) -> None:
    """``<hash>.zip`` is the folder ``asset.<hash>``; a file of that name or no assembly folder is none."""
    (tmp_path / "asset.abc").mkdir()
    (tmp_path / "asset.file").write_text("")
    assembly = Assembly({}, assets=tmp_path)
    assert assembly.asset_folder("abc.zip") == tmp_path / "asset.abc"
    assert assembly.asset_folder("abc") == tmp_path / "asset.abc"
    assert assembly.asset_folder("file.zip") is None
    assert assembly.asset_folder("zip.abc") is None
    assert Assembly({}).asset_folder("abc.zip") is None


def test_load_assembly_reads_every_stack_of_every_stage(tmp_path: Path) -> None:
    """The top manifest and each stage's ``assembly-*`` manifest: stack artifacts only, named by display name (the
    template's stem without one), mapped from their CloudFormation stack name; the assets are the folder."""

    def write(folder: Path, artifacts: dict[str, Any], templates: dict[str, Any]) -> None:
        folder.mkdir(exist_ok=True)
        (folder / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
        for name, body in templates.items():
            (folder / name).write_text(json.dumps(body))

    write(
        tmp_path,
        {
            "Top": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "Top.template.json"}},
            "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
            "Stage": {"type": "cdk:cloud-assembly", "properties": {"directoryName": "assembly-dev"}},
        },
        {"Top.template.json": {"Resources": {"A": {"Type": "T"}}}},
    )
    write(
        tmp_path / "assembly-dev",
        {
            "devNetwork": {
                "type": "aws:cloudformation:stack",
                "displayName": "dev/Network",
                "properties": {"templateFile": "devNetwork.template.json", "stackName": "dev-network-stack"},
            }
        },
        {"devNetwork.template.json": {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC"}}}},
    )
    (tmp_path / "assembly-empty").mkdir()
    loaded = load_assembly(tmp_path)
    assert loaded.templates == {
        "Top.template": {"Resources": {"A": {"Type": "T"}}},
        "dev/Network": {"Resources": {"Vpc": {"Type": "AWS::EC2::VPC"}}},
    }
    assert loaded.stack_names["dev-network-stack"] == "dev/Network"
    assert loaded.stack_names["Top.template"] == "Top.template"
    assert loaded.assets == tmp_path
    assert load_assembly(tmp_path / "assembly-empty").templates == {}
