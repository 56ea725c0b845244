"""The environment file's JSON Schema and reference page, generated from the typed configuration.

The dataclasses in :mod:`mlcluster.config` are the one source of truth:
their field types give the JSON types and enumerations (``Literal``), their
``setting()`` metadata the patterns, ranges, long value lists (botocore's
instance types and regions) and descriptions, their docstrings the section
descriptions. ``tools/gen_config_docs.py`` (``make config-docs``) writes
``schema/environment.schema.json`` and the docs site's environment file
reference (``docs/reference/environment-file.md``) from here; tests fail when either is stale.

The schema carries what JSON Schema can say about one key; rules across
keys (a ``check()`` method) and across files are left to the loader.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from mlcluster.config import awsdata
from mlcluster.config.environment import EnvironmentConfig
from mlcluster.config.schema import Choices

SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"
#: Where the checked-in schema lives, relative to the repository root.
SCHEMA_PATH = "schema/environment.schema.json"
#: The docs page holding the generated reference between the markers below.
REFERENCE_PAGE = "docs/reference/environment-file.md"
REFERENCE_BEGIN = "<!-- BEGIN generated configuration reference: edit mlcluster/config, run `make config-docs` -->"
REFERENCE_END = "<!-- END generated configuration reference -->"


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "")


def _plain(value: Any) -> Any:
    """A default as JSON: tuples as lists, read-only mappings as objects, sections left out."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _default(field: dataclasses.Field[Any]) -> tuple[bool, Any]:
    """``(has a JSON default, the default)``; section defaults are described by their own keys."""
    if field.default is not dataclasses.MISSING:
        return True, _plain(field.default)
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if dataclasses.is_dataclass(value):
            return False, None
        return True, _plain(value)
    return False, None


def _split_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], len(args) != len(get_args(tp))
    return tp, False


class _SchemaBuilder:
    def __init__(self) -> None:
        self.definitions: dict[str, Any] = {}

    def choices(self, choices: Choices) -> dict[str, Any]:
        if choices.name not in self.definitions:
            self.definitions[choices.name] = {
                "description": f"{choices.what} ({choices.source()})",
                "type": "string",
                "enum": sorted(choices.values()),
            }
        return {"$ref": f"#/definitions/{choices.name}"}

    def section(self, cls: type) -> dict[str, Any]:
        props: dict[str, Any] = {}
        required: list[str] = []
        hints = _hints(cls)
        for field in dataclasses.fields(cls):
            props[field.name] = self.field(hints[field.name], field)
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                required.append(field.name)
        out: dict[str, Any] = {
            "type": "object",
            "description": _doc(cls),
            "additionalProperties": False,
            "properties": props,
        }
        if required:
            out["required"] = required
        # Rules across keys of one section that JSON Schema can say (``SCHEMA_RULES`` on the class).
        out.update(getattr(cls, "SCHEMA_RULES", {}))
        return out

    def field(self, tp: Any, field: dataclasses.Field[Any]) -> dict[str, Any]:
        meta = field.metadata
        schema = self.value(tp, meta)
        text = [t for t in (meta.get("doc"), meta.get("allowed")) if t]
        if text:
            schema = (
                {"description": "; ".join(text), **schema}
                if "$ref" not in schema
                else {
                    "description": "; ".join(text),
                    "allOf": [schema],
                }
            )
        has_default, default = _default(field)
        preset = _section_default(field)
        if has_default and default is not None:
            schema["default"] = default
        elif preset is not None:
            schema["default"] = _plain(preset)
        return schema

    def value(self, tp: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
        inner, optional = _split_optional(tp)
        schema = self._value(inner, meta)
        if optional:
            schema = _or_null(schema)
        return schema

    def _value(self, tp: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
        origin = get_origin(tp)
        if origin is Literal:
            return {"type": "string", "enum": list(get_args(tp))}
        if origin is tuple:
            item_tp = get_args(tp)[0]
            return {"type": "array", "items": self.value(item_tp, meta)}
        if origin is dict:
            _key, val = get_args(tp)
            return {"type": "object", "additionalProperties": self.value(val, {})}
        if dataclasses.is_dataclass(tp):
            # An empty section (``storage:`` with nothing under it) reads as its defaults.
            return _or_null(self.section(tp))  # type: ignore[arg-type]
        if tp is bool:
            return {"type": "boolean"}
        if tp in (int, float):
            out: dict[str, Any] = {"type": "integer" if tp is int else "number"}
            if meta.get("one_of") is not None:
                out["enum"] = list(meta["one_of"])
            if meta.get("minimum") is not None:
                out["minimum"] = meta["minimum"]
            if meta.get("maximum") is not None:
                out["maximum"] = meta["maximum"]
            return out
        if tp is str:
            choices: Choices | None = meta.get("choices")
            if choices is not None:
                return self.choices(choices)
            out = {"type": "string"}
            if meta.get("pattern") is not None:
                out["pattern"] = f"^(?:{meta['pattern']})$"
            if meta.get("one_of") is not None:
                out["enum"] = list(meta["one_of"])
            return out
        raise TypeError(f"no JSON Schema for {tp!r}")  # pragma: no cover


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return schema
    if "type" in schema and "enum" not in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        return {**schema, "type": [*kinds, "null"]}
    if "enum" in schema:
        return {**schema, "type": [schema["type"], "null"], "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


#: How the schema's ``$comment`` names the botocore release its value lists come from (read back by the tests).
GENERATED_FROM = "value lists from botocore"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 7) of an environment file."""
    builder = _SchemaBuilder()
    root = builder.section(EnvironmentConfig)
    return {
        "$schema": SCHEMA_DIALECT,
        "$comment": f"{GENERATED_FROM} {awsdata.botocore_version()}: `make config-docs` writes this file",
        "title": "mlcluster environment file (environments/<name>.yaml)",
        **root,
        "definitions": dict(sorted(builder.definitions.items())),
    }


def schema_text() -> str:
    """The schema as the checked-in file holds it."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


# --- The docs site's reference page --------------------------------------


@dataclasses.dataclass(frozen=True)
class _Row:
    path: str
    kind: str
    default: str
    description: str


def _kind(tp: Any, meta: Mapping[str, Any]) -> str:
    inner, _optional = _split_optional(tp)
    origin = get_origin(inner)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(inner))
    if origin is tuple:
        return "list of " + _kind(get_args(inner)[0], meta)
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(inner):
        return "section"
    if inner is bool:
        return "boolean"
    if inner is int:
        if meta.get("one_of") is not None:
            return "integer: " + ", ".join(str(v) for v in meta["one_of"])
        lo, hi = meta.get("minimum"), meta.get("maximum")
        if lo is not None and hi is not None:
            return f"integer {lo:g}-{hi:g}"
        return "integer"
    if inner is float:
        lo, hi = meta.get("minimum"), meta.get("maximum")
        return f"number {lo:g}-{hi:g}" if lo is not None and hi is not None else "number"
    choices: Choices | None = meta.get("choices")
    if choices is not None:
        return choices.what.removeprefix("an ").removeprefix("a ")
    return "string"


def _section_default(field: dataclasses.Field[Any]) -> Any:
    """The section a field defaults to, when that default fills keys the section itself requires."""
    if field.default_factory is dataclasses.MISSING:
        return None
    value = field.default_factory()
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return None
    fields = dataclasses.fields(value)
    if all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in fields):
        return None
    return value


def _rows(cls: type, prefix: str, preset: Any = None) -> Iterator[_Row]:
    """Rows for ``cls``'s keys; ``preset`` is the section's own default when it fills required keys."""
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        path = f"{prefix}{field.name}"
        tp = hints[field.name]
        meta = field.metadata
        inner, _optional = _split_optional(tp)
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        has_default, default = _default(field)
        if required and preset is not None:
            shown = f"`{getattr(preset, field.name)}`; **required** when the section is written"
        elif required:
            shown = "**required**"
        elif has_default and isinstance(default, list) and default and isinstance(default[0], dict):
            shown = f"{len(default)} with the defaults below"
        elif has_default and default is not None:
            shown = f"`{json.dumps(default)}`" if not isinstance(default, str) or not default else f"`{default}`"
        elif has_default or _optional:
            shown = "unset"
        else:
            shown = "defaults"
        description = meta.get("doc") or (meta.get("allowed") or "").removeprefix("allowed: ")
        item = get_args(inner)[0] if get_origin(inner) is tuple else None
        section_cls: Any = (
            inner if dataclasses.is_dataclass(inner) else item if dataclasses.is_dataclass(item) else None
        )
        if section_cls is not None:
            description = description or _doc(section_cls).split("\n\n")[0].replace("\n", " ")
        if section_cls is None or get_origin(inner) is tuple or _optional or required or meta.get("doc"):
            yield _Row(path, _kind(tp, meta), shown, description.replace("|", "\\|"))
        if section_cls is not None:
            yield from _rows(section_cls, f"{path}[]." if item is not None else f"{path}.", _section_default(field))


#: Reference tables: (title, key path prefix); the docstring of the section at that prefix introduces each.
_GROUPS = (
    ("Top level", ""),
    ("`network:`", "network."),
    ("`storage:`", "storage."),
    ("`cluster:`", "cluster."),
    ("`cluster.hyperpod:`", "cluster.hyperpod."),
    ("`cluster.pcluster:`", "cluster.pcluster."),
)


def _group_of(path: str) -> str:
    best = ""
    for _title, prefix in _GROUPS:
        if path.startswith(prefix) and len(prefix) > len(best) and path != prefix.rstrip("."):
            best = prefix
    return best


def _section_doc(prefix: str) -> str:
    cls: Any = EnvironmentConfig
    for part in prefix.strip(".").split(".") if prefix else []:
        cls = _split_optional(_hints(cls)[part])[0]
    return _doc(cls).replace("``", "`")


def reference_markdown() -> str:
    """The environment file reference page's tables: one per section, every key with type, default and meaning."""
    rows = list(_rows(EnvironmentConfig, ""))
    parts = [
        REFERENCE_BEGIN,
        "",
        f"Generated from `mlcluster/config` (also as the JSON Schema `{SCHEMA_PATH}`, which editors with the "
        "YAML language server use to complete and check the files). Every key is optional unless marked.",
    ]
    for title, prefix in _GROUPS:
        mine = [r for r in rows if _group_of(r.path) == prefix]
        parts += [
            "",
            f"## {title}",
            "",
            _section_doc(prefix),
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
        ]
        parts += [f"| `{r.path}` | {r.kind} | {r.default} | {r.description} |" for r in mine]
    parts += ["", REFERENCE_END]
    return "\n".join(parts) + "\n"


def replace_reference(page: str) -> str:
    """``page`` with the text between the markers replaced by :func:`reference_markdown`."""
    start = page.index(REFERENCE_BEGIN)
    end = page.index(REFERENCE_END) + len(REFERENCE_END) + 1
    return page[:start] + reference_markdown() + page[end:]
