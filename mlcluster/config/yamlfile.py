"""Reading an environment file as YAML that means what it says.

``yaml.safe_load`` alone lets a file lie: a key written twice keeps its last
value silently, anchors and aliases can expand a few lines into millions of
nodes, deep nesting ends in a ``RecursionError``, and unquoted values turn
into something else (``012345670123`` an octal number, ``no`` false, ``3.10``
the number 3.1, ``7:06:00`` a base-60 number). :func:`read_yaml` refuses the
first three with one error naming the file, and records where each unquoted
scalar became a non-string so that the config loader can say how to quote it
when a string was expected.

Limits: files up to :data:`MAX_BYTES`, nesting up to :data:`MAX_DEPTH`, and
at most :data:`MAX_NODES` values once aliases are expanded. The sizes are
checked on the event stream before any node is built, so the time and memory
spent on a hostile file stay proportional to its size.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlcluster.config.schema import NOT_A_VALUE, ConfigError, Problem

#: An environment file is a few kilobytes; anything this large is not one.
MAX_BYTES = 256 * 1024
#: Nesting deeper than this is not a configuration (the deepest key path of the schema is 7).
MAX_DEPTH = 32
#: Values after alias expansion; the largest sensible environment has a few hundred.
MAX_NODES = 100_000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: libyaml's own refusal of deep nesting (MAX_NESTING_LEVEL, 1000 levels, in libyaml 0.2.6, which
#: PyYAML 6.0.4's wheels bundle; older ones had no limit). Its scanner reads flow collections ahead of the events
#: :func:`_check_shape` counts, so a file of 1000 open brackets meets this first: it is reported
#: as the same nesting refusal, whichever libyaml the venv has.
LIBYAML_NESTING_PROBLEM = "exceeded maximum nesting depth"

#: Tags a plain YAML document may carry; anything else (``!!python/object``, ``!Ref``, ``!!binary``) is refused.
_ALLOWED_TAGS = frozenset(
    "tag:yaml.org,2002:" + name
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge", "value")
)
_MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Document:
    """A parsed environment file: its data and, by key path, how unquoted scalars were read."""

    data: Any
    #: ``key path -> advice`` for every unquoted scalar YAML read as something other than a string.
    hints: Mapping[str, str]


def _fail(source: str, where: str, message: str) -> ConfigError:
    return ConfigError(source, [Problem(where, NOT_A_VALUE, message)])


def _line(mark: Any) -> str:
    return f"line {mark.line + 1}" if mark is not None else "(file)"


def read_yaml(path: Path) -> Document:
    """Read ``path`` as one YAML document of plain values; raise ``ConfigError`` naming the file on any hazard."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(source, [Problem("(file)", str(path), f"cannot be read: {exc.strerror}")]) from None
    if len(raw) > MAX_BYTES:
        raise _fail(
            source,
            "(file)",
            f"the file has {len(raw)} bytes; an environment file has at most {MAX_BYTES // 1024} KiB "
            "(settings, not data)",
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise _fail(
            source,
            f"line {line}",
            f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8",
        ) from None
    try:
        _check_shape(source, text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return Document(None, {})
            builder = _Builder(source, loader)
            data = builder.document(node)
        finally:
            loader.dispose()
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise _fail(
            source, f"line {line}", f"cannot be parsed: {exc.reason} (character #x{exc.character:04x})"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if getattr(exc, "problem", None) == LIBYAML_NESTING_PROBLEM:
            raise _fail(source, _line(mark), f"nesting deeper than {MAX_DEPTH} levels") from None
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        reason = getattr(exc, "problem", None) or str(exc)
        tab = _tab_near(text, mark, str(reason))
        if tab is not None:
            raise _fail(
                source,
                f"line {tab[0]}, column {tab[1]}",
                f"a tab character: YAML indents with spaces only (the parser says: {reason}); "
                "replace the tab with spaces",
            ) from None
        raise ConfigError(source, [Problem(where, "YAML", f"cannot be parsed: {reason}")]) from None
    return Document(data, builder.hints)


def _tab_near(text: str, mark: Any, reason: str) -> tuple[int, int] | None:
    """(line, column), 1-based, of the tab that caused a parse error, or ``None``.

    PyYAML reports a tab where a token starts as "found character '\\t' that
    cannot start any token" (the mark is on the tab), and a tab in the
    indentation of a line often as a mapping error on that line or the next:
    both are named as the tab they are.
    """
    if mark is None:
        return None
    if "'\\t'" in reason:
        return mark.line + 1, mark.column + 1
    lines = text.splitlines()
    for number in (mark.line, mark.line - 1):
        if 0 <= number < len(lines):
            indent = lines[number][: len(lines[number]) - len(lines[number].lstrip(" \t"))]
            if "\t" in indent:
                return number + 1, indent.index("\t") + 1
    return None


def _check_shape(source: str, text: str) -> None:
    """Refuse deep nesting and alias bombs from the event stream, before any node is built.

    Each open collection counts its values (aliases count as the full size
    and height of what they point to); an anchored collection's totals are
    kept for later aliases. Linear in the number of events.
    """
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, height)
    stack: list[list[Any]] = []  # [anchor, values, height] of each open collection
    total = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            count, height = sizes.get(event.anchor or "", (1, 0))
            total += count
            if stack:
                stack[-1][1] += count
                stack[-1][2] = max(stack[-1][2], height + 1)
            if len(stack) + height > MAX_DEPTH:
                raise _fail(
                    source, _line(event.start_mark), f"nesting deeper than {MAX_DEPTH} levels (through an alias)"
                )
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise _fail(source, _line(event.start_mark), f"nesting deeper than {MAX_DEPTH} levels")
            stack.append([event.anchor, 1, 1])
            total += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, count, height = stack.pop()
            if anchor is not None:
                sizes[anchor] = (count, height)
            if stack:
                stack[-1][1] += count
                stack[-1][2] = max(stack[-1][2], height + 1)
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            if event.anchor is not None:
                sizes[event.anchor] = (1, 0)
            if stack:
                stack[-1][1] += 1
        if total > MAX_NODES:
            why = (
                " (anchors and aliases repeat whole structures); write the settings out or use fewer aliases"
                if sizes
                else "; an environment file holds settings, not data"
            )
            raise _fail(source, _line(event.start_mark), f"expands to more than {MAX_NODES} values{why}")


_OCTAL = re.compile(r"[-+]?0[0-7_]+")
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")


def _advice(text: str, value: Any) -> str:
    """How to write ``text`` so that YAML keeps it a string, and what it became instead."""
    quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        became = f"the boolean {str(value).lower()}"
    elif value is None:
        became = "null (no value)"
    elif isinstance(value, int) and _OCTAL.fullmatch(text):
        became = f"the octal number {value}"
    elif isinstance(value, (int, float)) and _SEXAGESIMAL.fullmatch(text):
        became = f"the base-60 number {value}"
    elif isinstance(value, (int, float)):
        became = f"the number {value}"
    elif isinstance(value, (datetime.date, datetime.datetime)):
        became = f"a date ({value.isoformat()})"
    else:
        became = f"a {type(value).__name__}"
    return f"YAML read the unquoted {text} as {became}; quote it: {quoted}"


class _Builder:
    """Turns the composed node graph into plain data, refusing duplicate keys and object tags.

    A node reached again through an alias is built once and shared, as PyYAML does.
    """

    def __init__(self, source: str, loader: yaml.SafeLoader) -> None:
        self.source = source
        self.loader = loader
        self.hints: dict[str, str] = {}
        self.duplicates: list[Problem] = []
        self._built: dict[int, Any] = {}
        self._building: set[int] = set()

    def _tag(self, node: yaml.Node) -> None:
        if node.tag not in _ALLOWED_TAGS:
            raise _fail(
                self.source,
                _line(node.start_mark),
                f"the tag {node.tag} is not allowed; environment files hold plain strings, numbers, "
                "booleans, lists and mappings",
            )

    def document(self, node: yaml.Node) -> Any:
        data = self.build(node, "")
        if self.duplicates:
            raise ConfigError(self.source, self.duplicates)
        return data

    def build(self, node: yaml.Node, path: str) -> Any:
        self._tag(node)
        if isinstance(node, yaml.ScalarNode):
            scalar = self.loader.construct_object(node, deep=True)
            if not node.style and node.value and not isinstance(scalar, str):
                self.hints[path] = _advice(node.value, scalar)
            return scalar
        if id(node) in self._built:
            return self._built[id(node)]
        if id(node) in self._building:
            raise _fail(self.source, _line(node.start_mark), "an alias refers to the structure that contains it")
        self._building.add(id(node))
        value: Any
        if isinstance(node, yaml.MappingNode):
            value = self._mapping(node, path)
        else:
            value = [self.build(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        self._building.discard(id(node))
        self._built[id(node)] = value
        return value

    def _key(self, node: yaml.Node) -> Any:
        self._tag(node)
        if not isinstance(node, yaml.ScalarNode):
            raise _fail(
                self.source, _line(node.start_mark), "a mapping key must be a plain value, not a list or mapping"
            )
        return self.loader.construct_object(node, deep=True)

    def _mapping(self, node: yaml.MappingNode, path: str) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self._key(key_node)
            first = seen.get(key)
            if first is not None:
                self.duplicates.append(
                    Problem(
                        f"{path}.{key}" if path else str(key),
                        key,
                        f"written twice in one mapping ({_line(first.start_mark)} and "
                        f"{_line(key_node.start_mark)}); keep one",
                    )
                )
            else:
                seen[key] = key_node
        # Merge keys (<<: *defaults) are resolved by PyYAML; keys written here win over merged ones.
        self.loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node)
            out[key] = self.build(value_node, f"{path}.{key}" if path else str(key))
        return out
