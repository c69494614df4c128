"""Provides the writer thread's side of the step queue: queued steps made into the record's columns and events."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from pitstop.events import End, Event, Loss, Step
from pitstop.profiling._losses import LossBatch, Tail
from pitstop.profiling._plainsteps import PlainRun
from pitstop.stepcolumns import VECTOR_MIN, encode_arrays, imported_numpy

_SPANS = itemgetter(3)  # a step's phases: (forward, backward, optimizer, its CUDA spans or None)



class StepEvents:
    """What the training thread queued, as the events of the record, in order (writer thread).

    A step is queued as the tuple `Agent._on_step` builds, (index, now, wall,
    wait, samples, source, mem, rss, mark, eval_s, loader, phases, loss, passes): `now`
    is a perf_counter stamp, `phases` the step clock's, `loss` a float where it
    was read on the CPU (gathered here into `Loss` events) and else ignored.
    Building the `Step` on the training thread had cost ~11 us of ~38 a step.
    """

    def __init__(self, phases: Any) -> None:
        self.phases = phases  # the agent's PhaseClock: a step's CUDA phase events, timed here
        self.losses = LossBatch()

    def step(self, item: tuple[Any, ...], offset: float, final: bool = False) -> Step:
        """The `Step` event of a queued tuple; `offset` turns perf_counter stamps into wall time."""
        index, now, wall, wait, samples, source, mem, rss, mark, eval_s, loader, phases, _, passes = item
        alloc, reserved, peak = mem if mem is not None else (None, None, None)
        fig = self.phases.figures(phases, wall, wait, block=final)
        forward, backward, optimizer, other, clock = fig if fig is not None else (None,) * 5
        return Step(t=offset + now, step=index, wall=wall, data_wait=wait, samples=samples, source=source,
                    mem_allocated=alloc, mem_reserved=reserved, mem_peak=peak, host_rss=rss, mark=mark,
                    eval_s=eval_s, loader=loader if isinstance(loader, int) else None, forward_s=forward,
                    backward_s=backward, optimizer_s=optimizer, other_s=other, phase_clock=clock,
                    passes=passes if mark is not None and passes else None)

    def events(self, item: Event | tuple[Any, ...], offset: float, final: bool = False) -> list[Event]:
        """The events of one queued item: a step, then the `Loss` event its loss completed; an event
        as it is, `End` after the losses still held."""
        if type(item) is tuple:
            step = self.step(item, offset, final)
            loss = self.losses.add(item[0], item[12], item[1]) if type(item[12]) is float else None
            return [step] if loss is None else [step, loss]
        if type(item) is Tail:
            loss = self.losses.add(item.step, item.value, item.now)
            return [] if loss is None else [loss]
        if type(item) is End:
            loss = self.losses.take()
            if loss is not None:
                return [loss, item]
        return [item]  # type: ignore[list-item]

    def columns(self, rows: list[tuple[Any, ...]], offset: float, final: bool = False) -> dict[str, list[Any]]:
        """Every `Step` field of these queued steps, a list a field: the values `step` gives each.

        A column a field, built with `zip` and comprehensions: a `Step` built a step and its
        fields read back for the line (`encode_steps`) cost the writer thread ~15 us a step of
        ~1 ms steps (cProfile over 20,000 held steps, 2-core VM). The times and the other
        seconds are sums over each step's figures: with numpy, where the process imported it
        (`stepcolumns.imported_numpy`), one array operation a column: the columns of 500 steps
        took ~1.2 us a step with the loop's sums, ~0.8 so (thread CPU, 2-core VM)."""
        index, now, wall, wait, samples, source, mem, rss, mark, eval_s, loader, phases, _, passes = zip(*rows)
        n = len(rows)
        if mem.count(None) == n:
            alloc = reserved = peak = (None,) * n
        else:
            alloc, reserved, peak = zip(*(m if m is not None else (None, None, None) for m in mem))
        np = imported_numpy() if n >= VECTOR_MIN else None
        if None not in phases and not any(map(_SPANS, phases)):  # every step timed by the host's stamps
            forward, backward, optimizer, _ = zip(*phases)
            if np is not None:  # (the same IEEE sums and comparisons as the loop: the same floats)
                f64 = np.float64
                other = np.maximum(0.0, np.array(wall, dtype=f64) - np.array(wait, dtype=f64)
                                   - np.array(forward, dtype=f64) - np.array(backward, dtype=f64)
                                   - np.array(optimizer, dtype=f64)).tolist()
            else:
                other = [max(0.0, w - d - f - b - o)
                         for w, d, f, b, o in zip(wall, wait, forward, backward, optimizer)]
            clock = ["host"] * n
            forward, backward, optimizer = list(forward), list(backward), list(optimizer)
        else:
            forward, backward, optimizer, other, clock = self._figures(phases, wall, wait, final)
        first = loader[0]
        if loader.count(first) == n and isinstance(first, int) and len(set(map(type, loader))) == 1:
            loaders = list(loader)
        else:
            loaders = [v if isinstance(v, int) else None for v in loader]
        times = (np.array(now, dtype=np.float64) + offset).tolist() if np is not None else [offset + t for t in now]
        return {"step": list(index), "t": times, "wall": list(wall), "data_wait": list(wait),
                "samples": list(samples), "source": list(source), "mem_allocated": list(alloc),
                "mem_reserved": list(reserved), "mem_peak": list(peak), "host_rss": list(rss), "mark": list(mark),
                "eval_s": list(eval_s), "loader": loaders, "forward_s": forward, "backward_s": backward,
                "optimizer_s": optimizer, "other_s": other, "phase_clock": clock,
                "passes": [None] * n if mark.count(None) == n else
                [p if m is not None and p else None for m, p in zip(mark, passes)]}

    def run_columns(self, rows: list[Any], offset: float, final: bool = False,
                    seconds: dict[str, Any] | None = None) -> dict[str, list[Any]]:
        """`columns` of a run of queued tuples and `PlainRun`s, in order: a `PlainRun`'s from its own
        figures (`plain_columns`), the tuples' as `columns` builds them, joined field by field. Where
        numpy computed a `PlainRun`'s seconds, `seconds` gets each timing column whole as one float64
        array (`encode_columns` takes them): a writer's pass is mostly one run and a step or two its
        take cut one call at a time (the one in flight at the pass before)."""
        if seconds is not None and len(rows) == 1:
            return plain_columns(rows[0], offset, seconds)
        parts: list[dict[str, list[Any]]] = []
        arrays: list[dict[str, Any] | None] = []  # each part's seconds, None for the tuples' parts
        tuples: list[tuple[Any, ...]] = []
        for item in rows:
            if type(item) is PlainRun:
                if tuples:
                    parts.append(self.columns(tuples, offset, final))
                    arrays.append(None)
                    tuples = []
                arrays.append({} if seconds is not None else None)
                parts.append(plain_columns(item, offset, arrays[-1]))
            else:
                tuples.append(item)
        if tuples:
            parts.append(self.columns(tuples, offset, final))
            arrays.append(None)
        if seconds is not None and any(arrays):
            _join_seconds(parts, arrays, seconds)
        joined = parts[0]
        for part in parts[1:]:
            for name, values in joined.items():
                values.extend(part[name])
        return joined

    def _figures(self, phases: tuple[Any, ...], wall: tuple[float, ...], wait: tuple[float, ...],
                 final: bool) -> tuple[list[Any], ...]:
        """Each step's forward, backward, optimizer, other and clock (`phases.figures`), a list each."""
        figure = self.phases.figures
        forward: list[Any] = []
        backward: list[Any] = []
        optimizer: list[Any] = []
        other: list[Any] = []
        clock: list[Any] = []
        for p, w, d in zip(phases, wall, wait):
            if p is None:
                f = b = o = r = c = None
            elif not p[3]:  # the host's stamps (`phases.figures` without spans)
                f, b, o, _ = p
                r, c = max(0.0, w - d - f - b - o), "host"
            else:
                f, b, o, r, c = figure(p, w, d, block=final)  # type: ignore[misc]
            forward.append(f)
            backward.append(b)
            optimizer.append(o)
            other.append(r)
            clock.append(c)
        return forward, backward, optimizer, other, clock

    def losses_of(self, rows: list[tuple[Any, ...]]) -> list[Loss]:
        """The `Loss` events the CPU losses of these queued steps complete, in order."""
        out = []
        add = self.losses.add
        for row in rows:
            if type(row[12]) is float:
                loss = add(row[0], row[12], row[1])
                if loss is not None:
                    out.append(loss)
        return out


def _join_seconds(parts: list[dict[str, list[Any]]], arrays: list[dict[str, Any] | None],
                  seconds: dict[str, Any]) -> None:
    """Each timing column of the joined parts as one float64 array, where every part has it as numpy
    computed it or as floats (a tuples' column holding None is left to `encode_columns`' own loop)."""
    np = imported_numpy()
    if np is None:
        return
    for name in _SECONDS:
        pieces = []
        for part, given in zip(parts, arrays):
            if given is not None and name in given:
                pieces.append(given[name])
            else:
                values = part[name]
                if None in values:
                    break
                pieces.append(np.array(values, dtype=np.float64))
        else:
            seconds[name] = np.concatenate(pieces)


_SECONDS = ("t", "wall", "data_wait", "forward_s", "backward_s", "optimizer_s", "other_s")


def plain_columns(run: PlainRun, offset: float, seconds: dict[str, Any] | None = None) -> dict[str, list[Any]]:
    """Every `Step` field of a `PlainRun`'s steps, a list a field: what `StepEvents.columns` makes of
    the run's tuples (`PlainRun.tuples`), the same floats: the same IEEE differences and sums of the
    stamps, with numpy a column at a time (no float object a step for each duration); the fields the
    run's steps share are one value repeated. `seconds` gets the float64 arrays numpy computed, by field."""
    rows = run.rows
    n = len(rows)
    np = imported_numpy() if n >= VECTOR_MIN else None
    if np is None:
        _, end, wall, wait, samples, _, _, _, _, _, _, phases, _, _ = zip(*run.tuples())
        forward, backward, optimizer, _ = zip(*phases)
        other = [max(0.0, w - d - f - b - o) for w, d, f, b, o in zip(wall, wait, forward, backward, optimizer)]
        times = [offset + t for t in end]
        wall, forward, backward, optimizer = list(wall), list(forward), list(backward), list(optimizer)
    else:
        ends, started, waited, samples, b_start, b_end, o_start, _ = zip(*rows)
        f64 = np.float64
        end = np.array(ends, dtype=f64)
        before = np.empty(n, dtype=f64)
        before[0] = run.start
        before[1:] = end[:-1]
        walls = end - before
        waits = np.array(waited, dtype=f64)
        mark = np.array(started, dtype=f64) + waits  # (as `started + waited`)
        b_s = np.array(b_start, dtype=f64)
        fwd = np.where(b_s > mark, b_s - mark, 0.0)  # as `fwd` a step at a time: 0.0 where backward began first
        bwd = np.array(b_end, dtype=f64) - b_s
        opt = end - np.array(o_start, dtype=f64)
        others = np.maximum(0.0, walls - waits - fwd - bwd - opt)
        at = end + offset
        if seconds is not None:
            seconds.update(t=at, wall=walls, data_wait=waits, forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                           other_s=others)
        other, times = others.tolist(), at.tolist()
        wall, wait, forward, backward, optimizer = walls.tolist(), waited, fwd.tolist(), bwd.tolist(), opt.tolist()
    train = run.train
    none = [None] * n
    return {"step": list(range(run.first, run.first + n)), "t": times, "wall": wall, "data_wait": list(wait),
            "samples": list(samples), "source": ["optimizer"] * n, "mem_allocated": none,
            "mem_reserved": none[:], "mem_peak": none[:], "host_rss": [run.rss] * n, "mark": none[:],
            "eval_s": [0.0] * n, "loader": [train if isinstance(train, int) else None] * n, "forward_s": forward,
            "backward_s": backward, "optimizer_s": optimizer, "other_s": other,
            "phase_clock": ["host"] * n, "passes": none[:]}


def plain_lines(run: PlainRun, seconds: dict[str, Any]) -> list[str] | None:
    """The `steps` lines of a `PlainRun`'s steps from the arrays `plain_columns` put in `seconds`: its
    columns' lines (`encode_columns`) byte for byte, the fields its steps share given once
    (`stepcolumns.encode_arrays`); None where that cannot take them."""
    np = imported_numpy()
    if np is None or "t" not in seconds:
        return None
    train = run.train
    rows = run.rows
    samples = [row[3] for row in rows]
    fields = {"samples": samples, "source": "optimizer", "mem_allocated": None, "mem_reserved": None,
              "mem_peak": None, "host_rss": run.rss, "mark": None, "loader": train if isinstance(train, int) else None,
              "phase_clock": "host", "passes": None, "eval_s": 0.0}
    return encode_arrays(run.first, seconds, fields, np)


def steps_of(columns: dict[str, list[Any]]) -> list[Step]:
    """The `Step` events of columns (`StepEvents.columns`), for the writer's taps: built as the record
    reader builds them (`stepcolumns.decode_steps`), without the frozen class's per-field `__init__`."""
    names = list(columns)
    new = object.__new__
    steps = []
    for row in zip(*columns.values()):
        step = new(Step)
        step.__dict__.update(zip(names, row))
        steps.append(step)
    return steps
