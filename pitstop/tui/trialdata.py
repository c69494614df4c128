"""Provides what the Trials view reads: trial rows from the tuner's journal, and facts from its log."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pitstop.tuning.results import TrialResult

# The tuner's progress line: "[3/14] workers=2 pin=on  412.3 samples/s (x1.62 ±2.1%)  ok  [data, 30 steps]".
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] ")
# Its first line: "pitstop tune: python train.py (budget 10m, 30 steps/trial); journal ...".
_START = re.compile(r"^pitstop tune: (.+?) \(budget ([^,)]+)")
# The report's title: "pitstop tune: python train.py — 9 trials (0 from the journal) in 41 s".
_TITLE = re.compile(r"^pitstop tune: .+ — \d+ trials")
_WROTE = re.compile(r"^Wrote (.+?)\. Train with it:")
_WINNER = re.compile(r"^Winner: (.+)$")


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

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.throughput is not None


def read_journal(path: Path) -> tuple[dict[str, object] | None, list[TrialRow]]:
    """(header, trials) of a journal; a torn last line (a trial being written) is skipped."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None, []
    header: dict[str, object] | None = None
    rows: list[TrialRow] = []
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("kind") == "header":
            header = rec
        elif rec.get("kind") == "trial" and isinstance(rec.get("result"), dict):
            try:
                r = TrialResult.from_dict(rec["result"])
            except (TypeError, KeyError, ValueError):
                continue  # a line from another pitstop version: skip it rather than fail the view
            rows.append(TrialRow(len(rows) + 1, r.candidate.label(), r.stage, r.steps, r.status, r.reason,
                                 r.throughput, r.spread, r.unit, r.peak_mem, r.mem_kind))
    return header, rows


def baseline_of(rows: list[TrialRow]) -> TrialRow | None:
    """The first successful baseline trial: what every ratio is taken against."""
    return next((r for r in rows if r.stage == "baseline" and r.ok), None)


def best_of(rows: list[TrialRow]) -> TrialRow | None:
    """The fastest successful trial so far (the tuner's final pick also weighs noise and simplicity)."""
    ok = [r for r in rows if r.ok]
    return max(ok, key=lambda r: r.throughput or 0.0) if ok else None


def ratio(row: TrialRow, base: TrialRow | None) -> float | None:
    if not row.ok or base is None or not base.throughput:
        return None
    return (row.throughput or 0.0) / base.throughput


@dataclass(frozen=True)
class LogFacts:
    """What the tuner's output says: the target, the budget, trials planned, and its final report."""

    target: str | None = None
    budget: str | None = None
    done: int | None = None
    planned: int | None = None
    report: tuple[str, ...] = ()  # the report (or the last words of a tuner that stopped), once it exited
    config: str | None = None  # where pitstop.toml was written
    winner: str | None = None


def parse_log(lines: list[str], finished: bool) -> LogFacts:
    """Facts from the tuner's output lines; the report only once the tuner has exited."""
    target = budget = None
    done = planned = None
    title_at = None
    config = winner = None
    for i, line in enumerate(lines):
        if target is None and (m := _START.match(line)):
            target, budget = m.group(1), m.group(2)
        elif m := _PROGRESS.match(line):
            done, planned = int(m.group(1)), int(m.group(2))
        elif _TITLE.match(line):
            title_at = i
        elif m := _WROTE.match(line):
            config = m.group(1)
        elif m := _WINNER.match(line):
            winner = m.group(1).strip()
    report: tuple[str, ...] = ()
    if finished:
        if title_at is not None:
            report = tuple(lines[title_at:])
        else:
            # No report: it was interrupted or refused to start; its last words say why.
            last_progress = max((i for i, line in enumerate(lines) if _PROGRESS.match(line)), default=-1)
            report = tuple(line for line in lines[last_progress + 1:] if line.strip())[-12:]
    return LogFacts(target, budget, done, planned, report, config, winner)
