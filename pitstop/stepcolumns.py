"""Provides the `steps` line: consecutive Steps of a record written as one JSON object, column by column.

A record is mostly steps: at 10 ms a step, 8.6 M lines a day. One JSON object a
step repeated every field name and wrote each duration with 17 digits: ~414
bytes a step, 3.6 GB a process-day, and gzip took that only to ~82 bytes a step
(the digits are noise past the microsecond). Written as columns, a field's name
comes once per batch, a value shared by the whole batch once, durations as
integer microseconds (the resolution of `time.time()` stamps), and a step's
time as its distance from the one before: measured on a real 10 ms loop, a
batch of 32 steps is ~40 bytes a step before compression, ~10 after (zlib level 6).

The batch decodes to the Step events it was made from, up to the microsecond;
docs/events.md documents the line for readers of their own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Iterable
from typing import Any

from pitstop.errors import SchemaError
from pitstop.events import Loss, Step
from pitstop.jsonshape import field_checks

KIND = "steps"
MAX_STEPS = 512  # steps in one line (a reader's position holds a step's place in its line in 9 bits)
# Durations in seconds, written as integer microseconds under NAME_us. `other_s` is what the step's
# compute leaves after its phases (pitstop/profiling/phases.py), so it is written as its difference from
# that (`other_s_rest_us`, mostly 0): with the step's time as its distance from the previous step's
# time plus its wall (mostly 0 too), a 10 ms step of a real loop went from 29 to ~22 bytes compressed.
SECONDS = ("wall", "data_wait", "eval_s", "forward_s", "backward_s", "optimizer_s")
_PHASES = ("forward_s", "backward_s", "optimizer_s")
_FIELDS = tuple(f.name for f in dataclasses.fields(Step))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Step) if f.default is not dataclasses.MISSING}
_PLAIN = tuple(name for name in _FIELDS if name not in SECONDS and name not in ("t", "step", "other_s"))
_US = 1_000_000


def _us(value: float | None) -> int | None:
    return None if value is None else round(value * _US)


def _column(values: list[Any]) -> Any:
    """One value when the batch shares it, else the list (values are ints, strings or None: no NaN)."""
    first = values[0]
    if values.count(first) != len(values) or len(set(map(type, values))) != 1:
        return values
    return first


_LINE_PREFIX = f'{{"kind":"{KIND}","n":'


def steps_in(line: str) -> int:
    """The events a record line holds: a `steps` line its steps (read from its prefix), any other 1."""
    if line.startswith(_LINE_PREFIX):
        start = len(_LINE_PREFIX)
        try:
            return int(line[start:line.index(",", start)])
        except ValueError:
            return 1
    return 1


def encode_steps(steps: list[Step]) -> str:
    """The `steps` line of consecutive steps (1 to MAX_STEPS), without its newline."""
    return encode_columns({name: [getattr(s, name) for s in steps] for name in _FIELDS})


def encode_columns(columns: dict[str, list[Any]], seconds: dict[str, Any] | None = None) -> str:
    """The `steps` line of consecutive steps given field by field (every Step field, one value a step).

    Fields every step leaves at their default are left out; a field the batch
    shares is written once; `t` is the first step's time and `t_us` each next
    step's distance from the one before, in microseconds. The agent's writer
    passes the columns it built from its queue (`_stepevents.py`): no `Step` a step, and
    `seconds`, float64 arrays of some of the timing columns' very values where it computed
    them with numpy (a list of 500 floats made into an array again was ~0.03 us a step a column).
    """
    n = len(columns["step"])
    np = imported_numpy() if n >= VECTOR_MIN else None
    if np is not None:
        t_us, deltas, micros, others = _timing_vector(columns, n, np, seconds or {})
    else:
        t_us, deltas, micros, others = _timing(columns, n)
    out: dict[str, Any] = {"kind": KIND, "n": n, "t": t_us[0] / _US}
    if n > 1:
        out["t_us"] = _column(deltas)
    indexes = columns["step"]
    first = indexes[0]
    out["step"] = first if indexes == list(range(first, first + n)) else indexes
    # (A column is left out only where its first value is the default: `list.count(None)` over ints
    # compares each int with None the slow way, ~0.3 us a step of the writer's ~7 over five such columns.)
    for name in SECONDS:
        values = micros[name]
        default = _us(_DEFAULTS.get(name))  # type: ignore[arg-type]
        if name in _DEFAULTS and values[0] == default and values.count(default) == n:
            continue
        out[f"{name}_us"] = _column(values)
    if others is not None:
        out[others[0]] = _column(others[1])
    for name in _PLAIN:
        values = columns[name]
        default = _DEFAULTS[name]
        kind = type(default)
        if values[0] == default and values.count(default) == n \
                and (default is None or set(map(type, values)) == {kind}):
            continue
        out[name] = _column(values)
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


# The timing columns: each step's time, its distance from the one before, the durations in
# microseconds and its other's rest. Rounded a value at a time in Python they were ~4.8 us of the
# writer thread's ~10.8 us a step (`benchmarks/writer_pass.py`, 2-core VM): seven `round` calls
# and three sums a step. With numpy, which torch has imported by the time steps are written, a
# column is one array operation (the same IEEE products and ties-to-even rounding: the same
# integers). numpy is never imported here: a script that sets OMP_NUM_THREADS before its own
# import of numpy must find it unloaded.
VECTOR_MIN = 16  # steps in a line below which the arrays cost more than the loop


def imported_numpy() -> Any:
    """numpy where the process has imported it (and finished importing it), else None."""
    np = sys.modules.get("numpy")
    if np is None or getattr(getattr(np, "__spec__", None), "_initializing", False) or not hasattr(np, "rint"):
        return None
    return np


_Timing = tuple[list[int], list[int], dict[str, list[Any]], "tuple[str, list[Any]] | None"]


def _timing(columns: dict[str, list[Any]], n: int) -> _Timing:
    """Times, distances, durations in microseconds and the other's entry, a value at a time."""
    t_us = [round(t * _US) for t in columns["t"]]
    micros = {name: _micros(columns[name], n) for name in SECONDS}
    walls = micros["wall"]
    deltas = [b - a - wall for a, b, wall in zip(t_us, t_us[1:], walls[1:])]
    return t_us, deltas, micros, _others(_micros(columns["other_s"], n), micros, n)


def _others(others: list[int | None], micros: dict[str, list[Any]], n: int) -> tuple[str, list[Any]] | None:
    """The other's entry: its rest over what the phases leave, or the values whole where a phase is missing."""
    if others.count(None) == n:
        return None
    derived = _derived_other(micros)
    rest = [None if v is None or d is None else v - d for v, d in zip(others, derived)]
    if any(v is not None and r is None for v, r in zip(others, rest)):
        return "other_s_us", others  # an other without its phases: written whole
    return "other_s_rest_us", rest


def _timing_vector(columns: dict[str, list[Any]], n: int, np: Any, seconds: dict[str, Any]) -> _Timing:
    """As `_timing`, a column at a time with numpy; a column holding None goes a value at a time."""
    arrays: dict[str, Any] = {}
    micros: dict[str, list[Any]] = {}
    for name in SECONDS:
        values = columns[name]
        array = _scaled(values, np, seconds.get(name))
        if array is None:
            micros[name] = _micros(values, n)
        elif not array.any():  # (0.0 a step: each rounds to 0)
            micros[name] = [0] * n
        else:
            arrays[name] = array = np.rint(array).astype(np.int64)
            micros[name] = array.tolist()
    t_array = _scaled(columns["t"], np, seconds.get("t"))
    if t_array is None:
        raise ValueError("a step's time is not finite")
    t_array = np.rint(t_array).astype(np.int64)
    t_us = t_array.tolist()
    wall = arrays.get("wall")
    if wall is None:
        walls = micros["wall"]
        deltas = [b - a - w for a, b, w in zip(t_us, t_us[1:], walls[1:])]
    else:
        deltas = (t_array[1:] - t_array[:-1] - wall[1:]).tolist()
    values = columns["other_s"]
    others = _scaled(values, np, seconds.get("other_s"))
    if others is None or any(name not in arrays and None in micros[name] for name in _DERIVED_FROM):
        return t_us, deltas, micros, _others(_micros(values, n), micros, n)
    w, d, f, b, o = (arrays[name] if name in arrays else np.array(micros[name], dtype=np.int64)
                     for name in _DERIVED_FROM)
    derived = np.maximum(w - d - f - b - o, 0)  # as `_derived_other`
    return t_us, deltas, micros, ("other_s_rest_us", (np.rint(others).astype(np.int64) - derived).tolist())


def _scaled(values: list[Any], np: Any, given: Any = None) -> Any:
    """Seconds times a million, a float64 array (the products `round(v * _US)` rounds); None where a
    value is None or not finite (numpy reads None as NaN): the loop then takes the column, and
    raises on a value that is not finite as it always did (the writer then writes the run
    event by event and drops that step)."""
    array = (np.array(values, dtype=np.float64) if given is None else given) * _US
    return array if np.isfinite(array).all() else None


_DERIVED_FROM = ("wall", "data_wait", *_PHASES)


# The rows of `encode_arrays`' matrix: every timing column a float64 array, and the rest of the other.
_MATRIX = ("t", "wall", "data_wait", *_PHASES, "other_s")
_ROW = {name: row for row, name in enumerate(_MATRIX)}


def encode_arrays(first: int, seconds: dict[str, Any], fields: dict[str, Any], np: Any) -> list[str] | None:
    """The `steps` lines (MAX_STEPS a line) of consecutive steps from `first`, each byte for byte
    `encode_columns`' line of the same steps, from their timing columns as float64 arrays (`seconds`:
    every name of `_MATRIX`) and their other fields (`fields`: each `_PLAIN` name, a list of values
    or the one value every step has, and `eval_s`, one float for every step). None where a time is
    not finite or a line would hold fewer than VECTOR_MIN steps: `encode_columns` then takes them.

    The agent's writer hands its runs of plain steps here: the seven timing columns are scaled,
    checked, rounded and tested for a value the line shares as one matrix, ~12 numpy calls a line
    where `encode_columns` makes ~40 and tests each column as a list, and the fields the steps share
    are tested once, not a list each: 412 us against 521 for a line of 200 steps (thread CPU in a
    loop, 2-core VM at load 5), of which `json.dumps` of its ~1,400 integers is ~230 either way."""
    n = len(seconds["t"])
    if n < VECTOR_MIN or (n % MAX_STEPS and n % MAX_STEPS < VECTOR_MIN):
        return None
    scaled = np.stack([seconds[name] for name in _MATRIX]) * _US  # (the products `round(v * _US)` rounds)
    if not np.isfinite(scaled).all():
        return None
    micros = np.rint(scaled).astype(np.int64)
    _, wall, wait, forward, backward, optimizer, other = micros
    # (as `_derived_other`: the other's rest over what the phases leave, replacing its row)
    micros[6] = other - np.maximum(wall - wait - forward - backward - optimizer, 0)
    eval_s = fields["eval_s"]  # type: ignore[index]
    lines = []
    for at in range(0, n, MAX_STEPS):
        part = micros[:, at:at + MAX_STEPS]
        m = part.shape[1]
        t = part[0]
        out: dict[str, Any] = {"kind": KIND, "n": m, "t": int(t[0]) / _US}
        if m > 1:
            deltas = t[1:] - t[:-1] - part[1, 1:]
            out["t_us"] = int(deltas[0]) if (deltas == deltas[0]).all() else deltas.tolist()
        out["step"] = first + at
        same = (part == part[:, :1]).all(axis=1).tolist()  # (each row: one value the line shares?)
        rows = part.tolist()
        values: list[Any] | None
        for name in SECONDS:
            if name == "eval_s":
                values, shared = None, _us(eval_s)
            else:
                row = _ROW[name]
                values = rows[row]
                shared = values[0] if same[row] else None
            if shared is not None and name in _DEFAULTS and shared == _us(_DEFAULTS[name]):
                continue
            out[f"{name}_us"] = values if shared is None else shared
        out["other_s_rest_us"] = rows[6][0] if same[6] else rows[6]
        for name in _PLAIN:
            value = fields[name]
            default = _DEFAULTS[name]
            if type(value) is list:
                values = value[at:at + m]
                if values[0] == default and values.count(default) == m \
                        and (default is None or set(map(type, values)) == {type(default)}):
                    continue
                out[name] = _column(values)
            elif value != default or (default is not None and type(value) is not type(default)):
                out[name] = value
        lines.append(json.dumps(out, separators=(",", ":"), allow_nan=False))
    return lines


def _micros(values: list[float | None], n: int) -> list[int | None]:
    """Seconds as integer microseconds; a column of None or of 0.0 (a default) without a round a value."""
    if values.count(None) == n:
        return [None] * n
    if values.count(0.0) == n:  # (0.0 == 0 == False: each rounds to 0 as well)
        return [0] * n
    return [None if v is None else round(v * _US) for v in values]


def _derived_other(micros: dict[str, list[Any]]) -> list[int | None]:
    """Each step's other, in microseconds, as the phase clock derives it from the figures written."""
    phases = [micros[name] for name in _PHASES]
    if any(column.count(None) for column in phases) or None in micros["data_wait"]:
        return [None if forward is None or backward is None or optimizer is None or wait is None
                else max(0, wall - wait - forward - backward - optimizer)
                for wall, wait, forward, backward, optimizer in zip(micros["wall"], micros["data_wait"], *phases)]
    return [max(0, wall - wait - forward - backward - optimizer)
            for wall, wait, forward, backward, optimizer in zip(micros["wall"], micros["data_wait"], *phases)]


def encode_loss(loss: Loss) -> str:
    """A `loss` line as a record holds it: values to 9 significant digits, consecutive steps as `step0`.

    9 digits keep every float32 loss exactly; the 17 digits of a float32 widened to a
    double are noise, and they and the step lists made a third of a compressed record.
    """
    values = [None if v is None else float(f"{v:.9g}") for v in loss.values]
    out: dict[str, Any] = {"kind": Loss.kind, "t": round(loss.t, 6)}
    steps = loss.steps
    if steps and steps == list(range(steps[0], steps[0] + len(steps))) and len(steps) == len(values):
        out["step0"] = steps[0]
    else:
        out["steps"] = steps
    out["values"] = values
    if loss.nonfinite:
        out["nonfinite"] = loss.nonfinite
    if loss.optimizer != 1:  # a second optimizer's (a GAN's G): left out, its losses read as the step's
        out["optimizer"] = loss.optimizer
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


def expand_loss(data: dict[str, Any]) -> None:
    """A decoded `loss` object written with `step0`, given its `steps` list (in place)."""
    first, values = data.pop("step0"), data.get("values")
    if type(first) is not int or type(values) is not list:
        raise SchemaError("malformed 'loss' event: 'step0' needs an integer and a list of 'values'")
    data["steps"] = list(range(first, first + len(values)))


def batches(steps: list[Step]) -> Iterable[list[Step]]:
    """`steps` cut into lines of at most MAX_STEPS."""
    for i in range(0, len(steps), MAX_STEPS):
        yield steps[i:i + MAX_STEPS]


_CHECKS = field_checks(Step)
_INT_OR_NONE = frozenset({int, type(None)})


def decode_steps(data: dict[str, Any]) -> list[Step]:
    """The Steps of a decoded `steps` object (its "kind" popped); SchemaError names what is malformed."""
    n = data.get("n")
    if type(n) is not int or not 0 < n <= MAX_STEPS:
        raise SchemaError(f"malformed 'steps' event: 'n' must be an integer from 1 to {MAX_STEPS}")
    columns: dict[str, list[Any]] = {}
    micros: dict[str, list[Any]] = {}
    t0 = data.get("t")
    if type(t0) not in (int, float) or not math.isfinite(t0):
        raise SchemaError("malformed 'steps' event: 't' must be a number")
    index = data.get("step")
    if type(index) is int:
        columns["step"] = list(range(index, index + n))
    else:
        columns["step"] = _values(index, n, "step", frozenset({int}))
    for name in SECONDS:
        key = f"{name}_us"
        if key not in data:
            if name not in _DEFAULTS:
                raise SchemaError(f"malformed 'steps' event: missing {key!r}")
            micros[name] = [_us(_DEFAULTS[name])] * n
            continue
        exact = _CHECKS[name][0]
        micros[name] = _values(data[key], n, key, frozenset({int}) | (exact & {type(None)} if exact else frozenset()))
        columns[name] = [None if v is None else v / _US for v in micros[name]]
    walls = micros["wall"]
    rests = _values(data.get("t_us", 0), n - 1, "t_us", frozenset({int})) if n > 1 else []
    now = round(t0 * _US)
    times = [now / _US]
    for wall, rest in zip(walls[1:], rests):
        now += wall + rest
        times.append(now / _US)
    columns["t"] = times
    if "other_s_us" in data:
        columns["other_s"] = [None if v is None else v / _US
                              for v in _values(data["other_s_us"], n, "other_s_us", _INT_OR_NONE)]
    elif "other_s_rest_us" in data:
        rest = _values(data["other_s_rest_us"], n, "other_s_rest_us", _INT_OR_NONE)
        derived = _derived_other({name: micros.get(name, [0] * n) for name in SECONDS})
        columns["other_s"] = [None if r is None or d is None else (d + r) / _US for d, r in zip(derived, rest)]
    for name in _PLAIN:
        if name in data:
            exact = _CHECKS[name][0]
            columns[name] = _values(data[name], n, name, exact)
    # Built as the record reader builds a Step (pitstop/profiling/_linedecode.py), a row at a time
    # (a 1-hour rank's steps: 2.0 us a step decoded field by field, 1.8 with the rows zipped).
    names = list(columns)
    new, defaults = object.__new__, _DEFAULTS
    steps = []
    for row in zip(*columns.values()):
        step = new(Step)
        values = step.__dict__
        values.update(defaults)
        values.update(zip(names, row))
        steps.append(step)
    return steps


def _values(value: Any, n: int, name: str, exact: frozenset[type] | None) -> list[Any]:
    """A column's n values: the list as written, or the one value for every step; types checked."""
    values = value if type(value) is list else [value] * n
    if len(values) != n:
        raise SchemaError(f"malformed 'steps' event: {name!r} has {len(values)} values for {n} steps")
    if exact is not None and not exact.issuperset(map(type, values)):
        bad = next(v for v in values if type(v) not in exact)
        raise SchemaError(f"malformed 'steps' event: {name!r} holds {type(bad).__name__} {bad!r}")
    return values
