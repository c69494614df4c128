"""Provides strict building of typed dataclasses from decoded JSON: every field checked against its annotation.

Standard library only (the in-process agent and every viewer decode events).
A record line whose `sample` event lacked a process's fields ended
`pitstop view --summary` in `TypeError: Proc.__init__() missing 3 required
positional arguments`, and a step whose `wall` was a string failed later,
deep in the analysis. Here a missing field, a value of the wrong
type or a malformed nested object is a `ShapeError` naming where it is
("procs[0]: missing 'pid'"), which the event decoder turns into its one-line
error. Unknown fields are ignored, so an older reader reads a newer minor addition.

Checks are compiled once per class into exact-type sets: decoding a step
costs a dict look-up and a set membership per field (bool is not accepted
as a number; an integer is accepted where a float is expected, as JSON
writes 2.0 as 2 in other producers).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

_NONE = type(None)
# Exact JSON types a simple annotation accepts; bool is its own type, never a number.
_SIMPLE: dict[Any, frozenset[type]] = {
    int: frozenset({int}),
    float: frozenset({int, float}),
    str: frozenset({str}),
    bool: frozenset({bool}),
}
_JSON_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               list: "a list", dict: "an object", _NONE: "null"}


class ShapeError(ValueError):
    """A decoded JSON value does not have the shape a dataclass field declares."""


Convert = Callable[[Any, str], Any]  # (value, where) -> the value to store; raises ShapeError


@dataclasses.dataclass(frozen=True)
class _Spec:
    fields: dict[str, tuple[frozenset[type] | None, Convert | None]]  # name -> (exact types | None: any, converter)
    required: frozenset[str]


_SPECS: dict[type, _Spec] = {}


def build(cls: type, data: Any, where: str = "") -> Any:
    """An instance of dataclass `cls` from a decoded JSON object; ShapeError says what is wrong, and where."""
    spec = _SPECS.get(cls) or _compile(cls)
    if type(data) is not dict:
        raise ShapeError(f"{where or 'the event'} is {_json_name(data)}, not an object")
    missing = spec.required.difference(data)
    if missing:
        names = ", ".join(repr(name) for name in sorted(missing))
        raise ShapeError(f"{where + ': ' if where else ''}missing {names}")
    values = {}
    fields = spec.fields
    for name, value in data.items():
        check = fields.get(name)
        if check is None:
            continue
        exact, convert = check
        if convert is not None:
            value = convert(value, f"{where}.{name}" if where else name)
        elif exact is not None and type(value) not in exact:
            raise ShapeError(_wrong(f"{where}.{name}" if where else name, value, exact))
        values[name] = value
    return cls(**values)


def field_checks(cls: type) -> dict[str, tuple[frozenset[type] | None, Convert | None]]:
    """Per field of dataclass `cls`: (exact JSON types | None, converter | None), as `build` checks them."""
    return (_SPECS.get(cls) or _compile(cls)).fields


def _compile(cls: type) -> _Spec:
    hints = typing.get_type_hints(cls)
    fields: dict[str, tuple[frozenset[type] | None, Convert | None]] = {}
    required = set()
    for f in dataclasses.fields(cls):
        fields[f.name] = _check_for(hints[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.add(f.name)
    spec = _Spec(fields, frozenset(required))
    _SPECS[cls] = spec
    return spec


def _check_for(tp: Any) -> tuple[frozenset[type] | None, Convert | None]:
    """(exact types, None) for a simple annotation, (None, converter) for containers and nested dataclasses."""
    if tp is Any:
        return None, None
    if tp in _SIMPLE:
        return _SIMPLE[tp], None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not _NONE]
        parts = [_check_for(a) for a in rest]
        if len(rest) == len(args) - 1 and all(convert is None and exact is not None for exact, convert in parts):
            return frozenset({_NONE}).union(*(exact for exact, _ in parts if exact is not None)), None
        if len(rest) == 1 and len(args) == 2:  # an optional container or nested dataclass
            inner = _converter(rest[0])
            return None, lambda value, where: None if value is None else inner(value, where)
        raise TypeError(f"jsonshape: unsupported annotation {tp!r}")
    return None, _converter(tp)


def _converter(tp: Any) -> Convert:
    """The converter of a container or nested dataclass annotation."""
    origin = typing.get_origin(tp)
    if origin is list:
        item = _check_for(typing.get_args(tp)[0])
        return lambda value, where: _list(value, where, item)
    if origin is dict:
        item = _check_for(typing.get_args(tp)[1])
        return lambda value, where: _dict(value, where, item)
    if dataclasses.is_dataclass(tp):
        return lambda value, where: build(tp, value, where)
    raise TypeError(f"jsonshape: unsupported annotation {tp!r}")


def _one(value: Any, where: str, check: tuple[frozenset[type] | None, Convert | None]) -> Any:
    exact, convert = check
    if convert is not None:
        return convert(value, where)
    if exact is not None and type(value) not in exact:
        raise ShapeError(_wrong(where, value, exact))
    return value


def _list(value: Any, where: str, item: tuple[frozenset[type] | None, Convert | None]) -> list[Any]:
    if type(value) is not list:
        raise ShapeError(f"{where} is {_json_name(value)}, not a list")
    exact, convert = item
    if convert is None and (exact is None or all(type(v) in exact for v in value)):
        return value  # the common case: a list of plain values, checked in one pass
    return [_one(v, f"{where}[{i}]", item) for i, v in enumerate(value)]


def _dict(value: Any, where: str, item: tuple[frozenset[type] | None, Convert | None]) -> dict[str, Any]:
    if type(value) is not dict:
        raise ShapeError(f"{where} is {_json_name(value)}, not an object")
    exact, convert = item
    if convert is None and (exact is None or all(type(v) in exact for v in value.values())):
        return value
    return {k: _one(v, f"{where}[{k!r}]", item) for k, v in value.items()}


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _wrong(where: str, value: Any, exact: frozenset[type]) -> str:
    wanted = " or ".join(sorted({_JSON_NAMES[t] for t in exact if t is not _NONE and not (t is int and float in exact)}))
    if _NONE in exact:
        wanted += " or null"
    return f"{where} is {_json_name(value)}, not {wanted}"
