"""A small typed loader: YAML mappings into frozen dataclasses.

Each config section is a frozen, keyword-only dataclass. Field types drive
the structural checks (unknown keys, wrong types, enumerations via
``Literal``); field metadata adds value checks (patterns, ranges); a
section's ``check()`` method adds cross-field rules. All problems of a file
are gathered in one pass and reported together, each naming the file, the
key path, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


class ConfigError(Exception):
    """One or more problems in environment files.

    ``entries`` holds ``(source file, Problem)`` pairs; ``str(error)`` is one
    line per problem: ``<file>: <key path>: <value> is not valid; <allowed>``.
    """

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.entries = [(source, p) for p in problems]
        super().__init__(self.render())

    @classmethod
    def combine(cls, errors: list[ConfigError]) -> ConfigError:
        merged = cls("", [])
        merged.entries = [entry for err in errors for entry in err.entries]
        merged.args = (merged.render(),)
        return merged

    @property
    def problems(self) -> list[Problem]:
        return [p for _, p in self.entries]

    def render(self) -> str:
        return "\n".join(f"{source}: {p.render()}" for source, p in self.entries)


@dataclasses.dataclass(frozen=True)
class Problem:
    """A single configuration problem at ``path``."""

    path: str
    value: Any
    allowed: str

    def render(self) -> str:
        where = self.path or "(top level)"
        if self.value is NOT_A_VALUE:
            return f"{where}: {self.allowed}"
        if self.value is None:  # an empty or missing key: "None is not valid" would name Python, not the file
            return f"{where}: no value (empty or missing); {self.allowed}"
        return f"{where}: {self.value!r} is not valid; {self.allowed}"


#: ``Problem.value`` for a problem whose message already quotes the values involved.
NOT_A_VALUE: Any = object()


_MISSING = object()


class Issues:
    """Collects problems while one section is checked."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: str, value: Any, allowed: str) -> None:
        self.items.append(Problem(path, value, allowed))

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


@dataclasses.dataclass(frozen=True)
class Choices:
    """A long list of allowed strings, loaded on first use (e.g. from botocore's service models).

    ``what`` names a member (``"an EC2 instance type"``); ``source`` says where
    the list comes from; ``name`` is the JSON Schema definition it becomes.
    """

    name: str
    what: str
    source: Callable[[], str]
    values: Callable[[], Collection[str]]

    def problem(self, value: str) -> str | None:
        """None if ``value`` is allowed, else what is allowed with the closest names."""
        values = self.values()
        if value in values:
            return None
        close = difflib.get_close_matches(value, sorted(values), n=3, cutoff=0.6)
        hint = "; closest: " + ", ".join(repr(c) for c in close) if close else ""
        return f"allowed: {self.what} ({self.source()}){hint}"


def setting(
    *,
    default: Any = _MISSING,
    pattern: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    allowed: str | None = None,
    one_of: tuple[Any, ...] | None = None,
    choices: Choices | None = None,
    doc: str | None = None,
) -> Any:
    """Declare a config field with value checks.

    ``default`` is keyword-only so that type checkers see it (PEP 681 field
    specifiers); without it the field is required.

    ``pattern`` is a full-match regular expression for strings (and for each
    item of a tuple of strings); ``minimum``/``maximum`` bound numbers (and
    tuple lengths are not affected); ``one_of`` lists allowed values when a
    ``Literal`` type is not practical (numbers); ``allowed`` is the text
    shown to the user when a value check fails; ``choices`` is a long list
    of allowed strings checked after ``pattern`` (a typo gets the closest
    names); ``doc`` says what the key does (the JSON Schema's and the
    reference page's description).
    """
    meta = {
        "pattern": pattern,
        "minimum": minimum,
        "maximum": maximum,
        "allowed": allowed,
        "one_of": one_of,
        "choices": choices,
        "doc": doc,
    }
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, set)):
        raise TypeError("use a tuple for list defaults")
    if isinstance(default, dict):
        frozen = types.MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata=meta)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return dataclasses.field(default_factory=lambda: default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@typing.dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field, setting))
def section(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen keyword-only dataclass config section."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "a whole number"
    if tp is float:
        return "a number"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner)
    if origin is tuple:
        return "a list"
    if origin in (dict, Mapping):
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


class _Loader:
    def __init__(self, yaml_hints: Mapping[str, str] | None = None) -> None:
        self.issues = Issues()
        self._hints: dict[type, dict[str, Any]] = {}
        #: ``key path -> advice`` for unquoted YAML scalars read as non-strings (see ``yamlfile``).
        self.yaml_hints: Mapping[str, str] = yaml_hints or {}

    def _quote_hint(self, path: str) -> str:
        hint = self.yaml_hints.get(path)
        return f"; {hint}" if hint else ""

    def hints(self, cls: type) -> dict[str, Any]:
        if cls not in self._hints:
            self._hints[cls] = typing.get_type_hints(cls, include_extras=False)
        return self._hints[cls]

    def build(self, cls: type[T], data: Any, path: str) -> T | None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            self.issues.add(path, data, "expected a mapping of settings")
            return None
        hints = self.hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        ok = True
        # A section may name keys users ask for that it refuses on purpose, with the reason.
        refused: Mapping[str, str] = getattr(cls, "REFUSED_KEYS", {})
        for key in data:
            if key in refused:
                self.issues.add(_join(path, str(key)), data[key], refused[key])
                ok = False
            elif key not in fields:
                known = ", ".join(sorted(fields))
                close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.6)
                guess = f"did you mean {close[0]!r}? " if close else ""
                self.issues.add(_join(path, str(key)), key, f"unknown key; {guess}allowed keys here: {known}")
                ok = False
        values: dict[str, Any] = {}
        for name, fld in fields.items():
            sub = _join(path, name)
            if name not in data:
                if fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                    self.issues.add(sub, NOT_A_VALUE, f"missing; this key is required ({_type_name(hints[name])})")
                    ok = False
                continue
            converted, good = self.value(hints[name], data[name], sub, fld.metadata)
            ok = ok and good
            values[name] = converted
        if not ok:
            return None
        try:
            obj = cls(**values)
        except (TypeError, ValueError) as exc:  # pragma: no cover - defensive
            self.issues.add(path, data, str(exc))
            return None
        check = getattr(obj, "check", None)
        if check is not None:
            before = len(self.issues.items)
            local = Issues()
            check(local)
            for p in local:
                self.issues.add(_join(path, p.path) if p.path else path, p.value, p.allowed)
            if len(self.issues.items) > before:
                return None
        return obj

    def value(self, tp: Any, raw: Any, path: str, meta: Mapping[str, Any]) -> tuple[Any, bool]:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            args = get_args(tp)
            if raw is None and type(None) in args:
                return None, True
            inner = [a for a in args if a is not type(None)]
            if len(inner) == 1:
                return self.value(inner[0], raw, path, meta)
            raise TypeError(f"unsupported union {tp}")  # pragma: no cover
        if origin is Literal:
            choices = get_args(tp)
            if raw not in choices or type(raw) is not type(choices[0]):
                note = f"; {meta['allowed']}" if meta.get("allowed") else ""
                self.issues.add(
                    path, raw, "allowed: " + ", ".join(repr(c) for c in choices) + note + self._quote_hint(path)
                )
                return None, False
            return raw, True
        if origin is tuple:
            (item_tp, _ellipsis) = get_args(tp)
            if not isinstance(raw, list):
                self.issues.add(path, raw, "expected a list")
                return None, False
            items = []
            ok = True
            for i, item in enumerate(raw):
                v, good = self.value(item_tp, item, _join(path, i), meta)
                ok = ok and good
                items.append(v)
            return tuple(items), ok
        if origin is dict:
            key_tp, val_tp = get_args(tp)
            if not isinstance(raw, Mapping):
                self.issues.add(path, raw, "expected a mapping")
                return None, False
            out = {}
            ok = True
            for k, v in raw.items():
                kk, good_k = self.value(key_tp, k, _join(path, str(k)), {})
                vv, good_v = self.value(val_tp, v, _join(path, str(k)), {})
                ok = ok and good_k and good_v
                out[kk] = vv
            return types.MappingProxyType(out), ok
        if dataclasses.is_dataclass(tp):
            obj = self.build(tp, raw, path)  # type: ignore[arg-type]
            return obj, obj is not None
        return self.scalar(tp, raw, path, meta)

    def scalar(self, tp: Any, raw: Any, path: str, meta: Mapping[str, Any]) -> tuple[Any, bool]:
        allowed = meta.get("allowed")
        if tp is bool:
            if not isinstance(raw, bool):
                self.issues.add(path, raw, "expected true or false (unquoted)")
                return None, False
            return raw, True
        if tp in (int, float):
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (tp is int and not isinstance(raw, int)):
                self.issues.add(path, raw, f"expected {_type_name(tp)}" + (f"; {allowed}" if allowed else ""))
                return None, False
            lo, hi, one_of = meta.get("minimum"), meta.get("maximum"), meta.get("one_of")
            if one_of is not None and raw not in one_of:
                self.issues.add(path, raw, allowed or ("allowed: " + ", ".join(str(o) for o in one_of)))
                return None, False
            if (lo is not None and raw < lo) or (hi is not None and raw > hi):
                rng = f"from {lo if lo is not None else '-inf'} to {hi if hi is not None else 'inf'}"
                self.issues.add(path, raw, allowed or f"allowed: a number {rng}")
                return None, False
            return tp(raw), True
        if tp is str:
            if not isinstance(raw, str):
                # YAML turns 123456789012 into an int and no into false; say how to quote it.
                hint = self._quote_hint(path) or " (quote it in YAML)"
                self.issues.add(path, raw, "expected a string" + (f"; {allowed}" if allowed else "") + hint)
                return None, False
            pattern = meta.get("pattern")
            choices: Choices | None = meta.get("choices")
            if pattern is not None and not re.fullmatch(pattern, raw):
                self.issues.add(
                    path, raw, (choices.problem(raw) if choices else None) or allowed or f"must match {pattern}"
                )
                return None, False
            if choices is not None:
                problem = choices.problem(raw)
                if problem is not None:
                    self.issues.add(path, raw, problem)
                    return None, False
            one_of = meta.get("one_of")
            if one_of is not None and raw not in one_of:
                self.issues.add(path, raw, allowed or ("allowed: " + ", ".join(one_of)))
                return None, False
            return raw, True
        raise TypeError(f"unsupported config type {tp!r} at {path}")  # pragma: no cover


def load_section(cls: type[T], data: Any, source: str, yaml_hints: Mapping[str, str] | None = None) -> T:
    """Build ``cls`` from ``data`` or raise one ``ConfigError`` listing every problem.

    ``yaml_hints`` (from :func:`mlcluster.config.yamlfile.read_yaml`) turn
    "expected a string" into advice on quoting the value.
    """
    loader = _Loader(yaml_hints)
    obj = loader.build(cls, data, "")
    if loader.issues or obj is None:
        raise ConfigError(source, loader.issues.items)
    return obj
