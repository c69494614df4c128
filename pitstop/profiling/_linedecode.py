"""Provides decode_line: `events.decode` with a shortcut for the kinds that are most of a record.

A replay reads every line of a record once and, at each seek, a window of up
to 20,000 steps and 3,600 samples again (pitstop/tui/replay.py). Most of a
decode is the frozen dataclass `__init__` (one `object.__setattr__` a field)
and the filtering of unknown fields: rebuilding a checked object as pickle
does (defaults, then the values) takes a Step from 8.5 to 4.6 us of CPU and a
Sample with a GPU and 5 processes from 23 to 16 us. Every value is checked
against its field's type as `jsonshape.build` checks it (a dict where a
number belongs reached the analysis and ended `view --summary` in
"unhashable type: 'dict'"). An object missing a field, with a field this
version does not know, with a value of the wrong type, or of any other kind
goes through `decode`, which says what is wrong or drops the field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pitstop.errors import SchemaError
from pitstop.events import Event, Gpu, Loss, Proc, Sample, Step, decode
from pitstop.jsonshape import ShapeError, field_checks
from pitstop.stepcolumns import KIND as STEPS_KIND
from pitstop.stepcolumns import decode_steps, expand_loss


class _Rebuild:
    """Builds one dataclass from a JSON object whose fields it checks, or says it cannot (None)."""

    def __init__(self, cls: type, nested: dict[str, _Rebuild] | None = None) -> None:
        self.cls = cls
        fields = dataclasses.fields(cls)
        self.names = frozenset(f.name for f in fields)
        self.required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                                  and f.default_factory is dataclasses.MISSING)
        self.defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        self.factories = {f.name: f.default_factory for f in fields if f.default_factory is not dataclasses.MISSING}
        self.nested = nested or {}  # field -> how to build each item of its list
        self.checks = field_checks(cls)

    def build(self, data: dict[str, Any]) -> Any | None:
        if not self.required <= data.keys() <= self.names:
            return None
        checks = self.checks
        for name, value in data.items():
            if name in self.nested:
                continue
            exact, convert = checks[name]
            if convert is not None:
                try:
                    data[name] = convert(value, name)
                except ShapeError:
                    return None
            elif exact is not None and type(value) not in exact:
                return None
        for name, item_rebuild in self.nested.items():
            items = data.get(name)
            if items is None:
                continue
            if not isinstance(items, list):
                return None
            built = [item_rebuild.build(item) if isinstance(item, dict) else None for item in items]
            if any(item is None for item in built):
                return None
            data[name] = built
        obj = object.__new__(self.cls)
        values = obj.__dict__
        values.update(self.defaults)
        for name, factory in self.factories.items():
            if name not in data:
                values[name] = factory()
        values.update(data)
        return obj


# One Step a step, one Loss every 32 steps, one Sample every 0.5-1 s.
_DENSE = {
    Step.kind: _Rebuild(Step),
    Loss.kind: _Rebuild(Loss),
    Sample.kind: _Rebuild(Sample, {"gpus": _Rebuild(Gpu), "procs": _Rebuild(Proc)}),
}
_PREFIXES = tuple(f'{{"kind":"{kind}"'.encode() for kind in _DENSE)


def decode_line(raw: bytes) -> Event | None:
    """What `decode(raw)` gives, faster for Step, Loss and Sample lines; a record's `loss` line with `step0` too."""
    if raw.startswith(_PREFIXES):
        try:
            data = json.loads(raw.decode())
        except ValueError:  # not JSON, not UTF-8: `decode` says what is wrong
            data = None
        if isinstance(data, dict):
            kind = data.pop("kind", None)
            compact = kind == Loss.kind and "step0" in data
            if compact:
                expand_loss(data)
            rebuild = _DENSE.get(kind)
            event = rebuild.build(data) if rebuild is not None else None
            if event is not None:
                return event  # type: ignore[no-any-return]
            if compact:  # the loss as written in full, for `decode` to say what is wrong with it
                return decode(json.dumps({"kind": kind, **data}).encode())
    return decode(raw)


_STEPS_PREFIX = f'{{"kind":"{STEPS_KIND}"'.encode()


def decode_events(raw: bytes) -> list[Event]:
    """The events of one record line: the steps of a `steps` line, else the one event (none for an unknown kind)."""
    if raw.startswith(_STEPS_PREFIX):
        try:
            data = json.loads(raw.decode())
        except ValueError as err:
            raise SchemaError(f"not JSON: {err}") from err
        if not isinstance(data, dict) or data.pop("kind", None) != STEPS_KIND:
            raise SchemaError("malformed 'steps' event")
        return decode_steps(data)  # type: ignore[return-value]
    event = decode_line(raw)
    return [] if event is None else [event]
