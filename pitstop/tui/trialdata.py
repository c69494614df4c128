"""Provides what the Trials view reads: the tuner's journal records, followed as it grows, folded into one state.

Records only (pitstop.tuning.journalformat): the view once read the tuner's
human output with regexes, and rewording the report emptied it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pitstop.tuning.journalformat import Start, Totals, TrialEnd, TrialProgress, TrialStart, TuneEnd, decode


@dataclass(frozen=True)
class TrialRow:
    """One finished trial as the table shows it."""

    index: int  # 1-based, in the order trials finished
    label: str  # "baseline", "workers=2 pin=on"
    stage: str
    steps: int
    status: str  # "ok" or the rejection ("oom", "crash", ...)
    reason: str
    throughput: float | None
    spread: float | None
    unit: str
    peak_mem: int | None
    mem_kind: str
    measured_steps: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.throughput is not None

    @property
    def steps_text(self) -> str:
        """`60 steps`, or `41 of 60 steps` when the script ended sooner."""
        if self.measured_steps and self.measured_steps < self.steps:
            return f"{self.measured_steps} of {self.steps} steps"
        return f"{self.steps} steps"


@dataclass(frozen=True)
class TuneState:
    """The tune as its journal tells it: the trials, the running one, the totals, and how the tuner run ended."""

    header: dict[str, Any] | None = None  # what is tuned: target, knobs, steps... (docs/tuning.md)
    start: Start | None = None  # the latest tuner run (a --resume adds one): budget, start time
    rows: tuple[TrialRow, ...] = ()
    running: TrialStart | None = None  # None between trials and once the run ended
    steps: TrialProgress | None = None  # the running trial's latest steps
    totals: Totals | None = None
    totals_at: float = 0.0  # time.time() when `totals` was written (its ETA counts from there)
    end: TuneEnd | None = None  # None while the latest run goes on
    unreadable: int = 0  # lines skipped: torn, or malformed

    @property
    def done(self) -> int:
        return max(len(self.rows), self.totals.done if self.totals else 0)

    @property
    def planned(self) -> int | None:
        """Trials the tune will take, as last planned (never fewer than it ran); None before the plan."""
        planned = self.totals.planned if self.totals else None
        return max(planned, self.done) if planned else None


def fold(state: TuneState, data: dict[str, Any]) -> TuneState:
    """The state after one more journal line (raises ValueError, TypeError or KeyError for a malformed one)."""
    if data.get("kind") == "header":
        return dataclasses.replace(state, header=data)
    rec = decode(data)
    if isinstance(rec, Start):
        # A new tuner run: what an interrupted earlier one left running or said at its end is over.
        return dataclasses.replace(state, start=rec, running=None, steps=None, end=None, totals=rec.totals,
                                   totals_at=rec.at)
    if isinstance(rec, TrialStart):
        return dataclasses.replace(state, running=rec, steps=None, totals=rec.totals, totals_at=rec.at)
    if isinstance(rec, TrialProgress):
        if state.running is None or rec.index != state.running.index:
            return state
        return dataclasses.replace(state, steps=rec)
    if isinstance(rec, TrialEnd):
        r = rec.result
        row = TrialRow(len(state.rows) + 1, r.candidate.label(), r.stage, r.steps, r.status, r.reason,
                       r.throughput, r.spread, r.unit, r.peak_mem, r.mem_kind, r.measured_steps)
        return dataclasses.replace(state, rows=(*state.rows, row), running=None, steps=None)
    if isinstance(rec, TuneEnd):
        totals = rec.totals or state.totals
        return dataclasses.replace(state, end=rec, running=None, steps=None, totals=totals, totals_at=rec.at)
    return state  # a kind a newer pitstop writes: nothing this view shows


class JournalFollower:
    """Reads a journal as the tuner appends to it: each whole line once, from the start again when it is replaced.

    The tuner replaces the file (a new inode) when it starts afresh or resumes,
    and appends otherwise; a line not yet ended by a newline is read next time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ident: tuple[int, int] | None = None
        self.offset = 0
        self.state = TuneState()

    def poll(self) -> TuneState | None:
        """The state when the journal changed since the last poll, else None (also while it does not exist)."""
        try:
            with open(self.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                fresh = (st.st_dev, st.st_ino) != self.ident or st.st_size < self.offset
                if fresh:
                    self.ident, self.offset, self.state = (st.st_dev, st.st_ino), 0, TuneState()
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return None
        end = chunk.rfind(b"\n")
        if end < 0:
            return self.state if fresh else None
        state = self.state
        for line in chunk[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                state = fold(state, data) if isinstance(data, dict) else state
            except (ValueError, TypeError, KeyError):
                state = dataclasses.replace(state, unreadable=state.unreadable + 1)
        self.offset += end + 1
        self.state = state
        return state


def read_journal(path: Path) -> TuneState:
    """The whole journal at once (a missing one reads as an empty tune)."""
    return JournalFollower(path).poll() or TuneState()


def baseline_of(rows: tuple[TrialRow, ...]) -> TrialRow | None:
    """The first successful baseline trial: what every ratio is taken against."""
    return next((r for r in rows if r.stage == "baseline" and r.ok), None)


def best_of(rows: tuple[TrialRow, ...]) -> TrialRow | None:
    """The fastest successful trial so far (the tuner's final pick also weighs noise and simplicity)."""
    ok = [r for r in rows if r.ok]
    return max(ok, key=lambda r: r.throughput or 0.0) if ok else None


def ratio(row: TrialRow, base: TrialRow | None) -> float | None:
    """The row's figure over the baseline's: for every row that measured one (an unstable one too)."""
    if row.throughput is None or base is None or not base.throughput:
        return None
    return (row.throughput or 0.0) / base.throughput
