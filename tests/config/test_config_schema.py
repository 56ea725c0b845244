"""One source of truth: the JSON Schema and the environment file reference page are generated from the typed config and kept fresh."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path

import jsonschema
import pytest
import yaml

from mlcluster.config import awsdata
from mlcluster.config.docs import (
    GENERATED_FROM,
    REFERENCE_BEGIN,
    REFERENCE_END,
    REFERENCE_PAGE,
    SCHEMA_PATH,
    json_schema,
    reference_markdown,
)
from mlcluster.config.environment import EnvironmentConfig
from mlcluster.config.network import NetworkConfig
from mlcluster.config.storage import StorageConfig
from mlcluster.pcluster.instance_types import INSTANCE_TYPES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "environments").glob("*.yaml"))
MODELINE = "# yaml-language-server: $schema=../schema/environment.schema.json\n"


def schema_botocore(schema: dict[str, typing.Any]) -> str:
    """The botocore release a schema's ``$comment`` says its value lists come from."""
    comment = schema.get("$comment", "")
    assert comment.startswith(GENERATED_FROM + " "), f"the schema's $comment does not name its botocore: {comment!r}"
    return str(comment[len(GENERATED_FROM) + 1 :].split(":", 1)[0])


def test_checked_in_schema_names_the_botocore_this_venv_has() -> None:
    """The instance-type and region lists are botocore's data: a new botocore is named, not a vague diff."""
    recorded = schema_botocore(json.loads((ROOT / SCHEMA_PATH).read_text(encoding="utf-8")))
    installed = awsdata.botocore_version()
    assert recorded == installed, (
        f"{SCHEMA_PATH} holds botocore {recorded}'s value lists, this venv has botocore {installed}: "
        "install the lock (requirements/main.txt) or, after `make lock`, run `make config-docs` and commit the schema"
    )


def test_schema_botocore_reader_edges() -> None:
    assert schema_botocore({"$comment": f"{GENERATED_FROM} 1.44.8: `make config-docs` writes this file"}) == "1.44.8"
    with pytest.raises(AssertionError, match="does not name its botocore"):
        schema_botocore({"$comment": "hand-written"})


def test_checked_in_schema_is_fresh() -> None:
    checked_in = json.loads((ROOT / SCHEMA_PATH).read_text(encoding="utf-8"))
    assert checked_in == json_schema(), "run `make config-docs` and commit schema/environment.schema.json"


def test_reference_page_is_fresh() -> None:
    page = (ROOT / REFERENCE_PAGE).read_text(encoding="utf-8")
    start, end = page.index(REFERENCE_BEGIN), page.index(REFERENCE_END) + len(REFERENCE_END) + 1
    assert page[start:end] == reference_markdown(), f"run `make config-docs` and commit {REFERENCE_PAGE}"


def test_generator_check_mode_reports_nothing_stale() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_config_docs.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert (result.returncode, result.stdout) == (0, "")


def test_schema_is_a_valid_draft_7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(json_schema())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_validates_and_points_at_the_schema(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith(MODELINE)
    assert (path.parent / MODELINE.split("=", 1)[1].strip()).resolve() == ROOT / SCHEMA_PATH
    errors = [e.message for e in jsonschema.Draft7Validator(json_schema()).iter_errors(yaml.safe_load(text))]
    assert errors == []


def _property(schema: dict[str, typing.Any], *path: str) -> dict[str, typing.Any]:
    node = schema
    for key in path:
        node = node["properties"][key] if "properties" in node else node["anyOf"][0]["properties"][key]
    return node


def test_editor_sees_allowed_values_and_descriptions() -> None:
    schema = json_schema()
    on_delete = _property(schema, "retention", "on_delete")
    assert on_delete["enum"] == ["retain", "destroy"]
    assert on_delete["default"] == "retain"
    assert "throw-away" in on_delete["description"]
    instance = _property(schema, "cluster", "pcluster", "head_node", "instance_type")
    assert instance["allOf"] == [{"$ref": "#/definitions/Ec2InstanceType"}]
    assert "p5.48xlarge" in schema["definitions"]["Ec2InstanceType"]["enum"]
    assert "ml.p5.48xlarge" in schema["definitions"]["HyperPodInstanceType"]["enum"]
    assert "us-east-1" in schema["definitions"]["Region"]["enum"]


def _fields(cls: type) -> typing.Iterator[tuple[str, dataclasses.Field[typing.Any]]]:
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        yield f"{cls.__name__}.{field.name}", field


@pytest.mark.parametrize("cls", [EnvironmentConfig, NetworkConfig, StorageConfig])
def test_every_key_of_these_sections_is_described(cls: type) -> None:
    seen: set[type] = set()
    missing: list[str] = []

    def walk(section: type) -> None:
        if section in seen:
            return
        seen.add(section)
        hints = typing.get_type_hints(section)
        for name, field in _fields(section):
            tp = hints[field.name]
            inner = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
            target = inner[0]
            if typing.get_origin(target) is tuple:
                target = typing.get_args(target)[0]
            if dataclasses.is_dataclass(target):
                walk(target)  # type: ignore[arg-type]
                continue
            if not (field.metadata.get("doc") or field.metadata.get("allowed")):
                missing.append(name)

    walk(cls)
    walked = {c for c in seen if c.__module__.endswith((".environment", ".network", ".storage"))}
    assert walked
    assert [m for m in missing if m.split(".")[0] in {c.__name__ for c in walked}] == []


def test_instance_type_table_is_a_subset_of_botocores_list() -> None:
    names = set(json_schema()["definitions"]["Ec2InstanceType"]["enum"])
    assert set(INSTANCE_TYPES) <= names
