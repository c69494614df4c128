"""Provides what the Trials view reads: trial rows from the tuner's journal, and facts from its log."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pitstop.tuning.results import TrialResult

# The tuner's progress line: "[3/14] workers=2 pin=on  412.3 samples/s (x1.62 ±2.1%)  ok  [data, 30 steps]"
# ("[1/?]" before the baseline tells how many trials the tune will take).
_PROGRESS = re.compile(r"^\[(\d+)/(\d+|\?)\] ")
# Its first line: "pitstop tune: python train.py (budget 10m, 30 steps/trial); journal ...".
_START = re.compile(r"^pitstop tune: (.+?) \(budget ([^,)]+)")
# The report's title: "pitstop tune: python train.py — 9 trials (0 from the journal) in 41 s".
_TITLE = re.compile(r"^pitstop tune: .+ — \d+ trials")
_WROTE = re.compile(r"^Wrote (.+?)(?: \(not confirmed\))?\. Train with it:")
_WINNER = re.compile(r"^(?:Winner|Best found \(not confirmed\)): (.+)$")
_NOTHING = re.compile(r"^Nothing beat the script's own settings")


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
                                 r.throughput, r.spread, r.unit, r.peak_mem, r.mem_kind, r.measured_steps))
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
    nothing: bool = False  # the report says nothing beat the script's own settings (no config written)


def parse_log(lines: list[str], finished: bool) -> LogFacts:
    """Facts from the tuner's output lines; the report only once the tuner has exited."""
    target = budget = None
    done = planned = None
    title_at = None
    config = winner = None
    nothing = False
    for i, line in enumerate(lines):
        if target is None and (m := _START.match(line)):
            target, budget = m.group(1), m.group(2)
        elif m := _PROGRESS.match(line):
            done = int(m.group(1))
            planned = int(m.group(2)) if m.group(2) != "?" else planned
        elif _NOTHING.match(line):
            nothing = True
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
    return LogFacts(target, budget, done, planned, report, config, winner, nothing)


@dataclass(frozen=True)
class TrialProgress:
    """The running trial and the tune as a whole, from the tuner's progress file (rewritten twice a second)."""

    at: float  # time.time() when the tuner wrote it
    label: str | None = None  # the running trial (None between trials)
    stage: str = ""
    index: int = 0
    steps_done: int = 0
    steps_planned: int = 0
    elapsed: float = 0.0
    limit: float = 0.0
    first_step_limit: float | None = None
    done: int = 0  # trials finished
    planned: int | None = None
    budget_left: str = ""
    eta: float | None = None
    budget_trials: int | None = None
    budget_seconds: float | None = None
    used_trials: int = 0
    used_seconds: float = 0.0

    @property
    def budget_fraction(self) -> float | None:
        """How much of the budget is spent, 0..1."""
        if self.budget_trials:
            return min(1.0, self.used_trials / self.budget_trials)
        if self.budget_seconds:
            return min(1.0, self.used_seconds / self.budget_seconds)
        return None


def read_progress(path: Path) -> TrialProgress | None:
    """The tuner's progress file, or None when it has not written one (or it is not readable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tune = data.get("tune") or {}
        trial = data.get("trial") or {}
        return TrialProgress(
            at=float(data.get("t") or 0.0), label=trial.get("label") if not trial.get("done") else None,
            stage=str(trial.get("stage") or ""), index=int(trial.get("index") or 0),
            steps_done=int(trial.get("steps_done") or 0), steps_planned=int(trial.get("steps_planned") or 0),
            elapsed=float(trial.get("elapsed") or 0.0), limit=float(trial.get("limit") or 0.0),
            first_step_limit=trial.get("first_step_limit"),
            done=int(tune.get("done") or 0), planned=tune.get("planned"), budget_left=str(tune.get("budget_left") or ""),
            eta=tune.get("eta"), budget_trials=tune.get("budget_trials"), budget_seconds=tune.get("budget_seconds"),
            used_trials=int(tune.get("used_trials") or 0), used_seconds=float(tune.get("used_seconds") or 0.0),
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None
