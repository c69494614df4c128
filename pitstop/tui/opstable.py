"""Provides the Ops screen's tables as plain rows: ops or CUDA kernels of one profiler window, with
their share of the step, grouped by the phase they ran in.

The agent tags each op with the phase it ran in (`OpStat.phase`, from the
profiler's own ranges: the DataLoader's `__next__`, autograd's backward
functions, the optimizer's step), so the dataset's own ops with num_workers=0
(a blur in `__getitem__` was the demo's top op, 1615 calls) sit under "data
loading", apart from the model's. Records made before that carry no phase:
their ops are grouped by what their name says (`op_phase`), the rest in one
group that says it mixes forward, the loss and the dataset's ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.analysis import PHASE_LABELS, RunState, op_phase, op_step_share, window_phases, window_step_s
from pitstop.events import ProfileWindow

# Groups in step order; None holds the ops whose name does not say their phase.
GROUPS: tuple[str | None, ...] = ("data", "forward", None, "backward", "optimizer")
GROUP_TITLES = {
    "data": "data loading (main process)",
    "forward": "forward and loss",
    None: "forward/loss/dataset ops",
    "backward": "backward",
    "optimizer": "optimizer",
}
# In a record with phases, None is an op on another thread outside the marked ranges.
OTHER_THREADS_TITLE = "other threads"
# Which phase's share a group's title shows. The unnamed group has none: it is not the forward
# phase (on the demo its top op was the dataset's blur, 69% of the step, under "forward 4%").
GROUP_PHASE: dict[str | None, str | None] = {"data": "data", "forward": "forward", None: None,
                                             "backward": "backward", "optimizer": "optimizer"}
# Long record-function names, shortened to what a person reads in a narrow column.
ABBREVIATIONS = (
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.", "DataLoader (main) "),
    ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.", "DataLoader (workers) "),
    ("enumerate(DataLoader)#", "DataLoader "),
    ("autograd::engine::evaluate_function: ", "autograd: "),
)
# Phases under half a percent read "0%": left out of the one-line summaries.
MIN_PHASE_SHARE = 0.005


@dataclass(frozen=True)
class Column:
    """A table column: its title, its width in cells (0: the name, which takes the rest), numeric or not."""

    title: str
    width: int = 7  # "12.6 ms", "950 µs": times have three significant digits
    numeric: bool = True


NAME, SHARE = 0, 1
OP_COLUMNS = (Column("name", 0, False), Column("% step", 6), Column("calls", 6), Column("self"),
              Column("total"), Column("mean"))
DEVICE_COLUMN = Column("device")
KERNEL_COLUMNS = (Column("name", 0, False), Column("% step", 6), Column("calls", 6), Column("total"),
                  Column("mean"))


@dataclass(frozen=True)
class TableRow:
    """One row: values per column (floats in µs, the share as a fraction); `group` marks a group title."""

    values: tuple[str | float | None, ...]
    group: bool = False


def op_columns(window: ProfileWindow) -> tuple[Column, ...]:
    """The device column only on CUDA, where it is what ops are ranked by."""
    return (*OP_COLUMNS, DEVICE_COLUMN) if window.device == "cuda" else OP_COLUMNS


def short_name(name: str) -> str:
    for long, short in ABBREVIATIONS:
        if name.startswith(long):
            return short + name[len(long):]
    return name


def op_rows(window: ProfileWindow, run: RunState | None, sort: int, grouped: bool) -> list[TableRow]:
    """The window's ops, sorted by column `sort`, in phase groups (each under a title row) if `grouped`."""
    step_s = window_step_s(run, window)
    cuda = window.device == "cuda"
    rows: list[tuple[str | None, TableRow]] = []
    tagged = any(o.phase is not None for o in window.ops)
    for o in window.ops:
        values: tuple[str | float | None, ...] = (
            short_name(o.name), op_step_share(o, window, step_s), float(o.calls), o.self_us, o.total_us,
            o.total_us / o.calls if o.calls else 0.0)
        if cuda:
            values += (o.device_self_us,)
        rows.append((o.phase if tagged else op_phase(o.name), TableRow(values)))
    columns = op_columns(window)
    if not grouped:
        return _sorted([r for _, r in rows], columns, sort)
    phases = {p.name: p for p in window_phases(window)}
    out: list[TableRow] = []
    for group in GROUPS:
        members = [r for g, r in rows if g == group]
        if not members:
            continue
        name = GROUP_PHASE[group]
        phase = phases.get(name) if name is not None else None
        # A phase is host time: beside ops ranked by device time (CUDA) its share would mislead.
        share = phase.ms / 1000.0 / step_s if phase is not None and step_s and not cuda else None
        title = OTHER_THREADS_TITLE if group is None and tagged else GROUP_TITLES[group]
        out.append(TableRow((title, share) + (None,) * (len(columns) - 2), group=True))
        out.extend(_sorted(members, columns, sort))
    return out


def kernel_rows(window: ProfileWindow, run: RunState | None, sort: int) -> list[TableRow]:
    step_s = window_step_s(run, window)
    steps = max(1, window.step_end - window.step_start)
    rows = [TableRow((k.name, k.total_us / 1e6 / steps / step_s if step_s else None, float(k.calls),
                      k.total_us, k.mean_us)) for k in window.kernels]
    return _sorted(rows, KERNEL_COLUMNS, sort)


def _sorted(rows: list[TableRow], columns: tuple[Column, ...], sort: int) -> list[TableRow]:
    col = min(max(0, sort), len(columns) - 1)
    if columns[col].numeric:
        return sorted(rows, key=lambda r: -1.0 if r.values[col] is None else float(r.values[col]),  # type: ignore[arg-type]
                      reverse=True)
    return sorted(rows, key=lambda r: str(r.values[col]))


def phase_summary(window: ProfileWindow, run: RunState | None) -> list[tuple[str, float, float | None]]:
    """(label, ms per step, share of the step) of each phase the window split the step into."""
    step_s = window_step_s(run, window)
    return [(PHASE_LABELS.get(p.name, p.name), p.ms, p.ms / 1000.0 / step_s if step_s else None)
            for p in window_phases(window) if p.frac >= MIN_PHASE_SHARE]
