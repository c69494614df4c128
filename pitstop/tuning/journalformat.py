"""Provides the tune journal's record format: a version, one typed record per kind, and their JSON.

The tuner writes these records and the Trials view reads them and nothing
else: it used to read the tuner's human output with regexes, and a reworded
report line silently emptied its "written to". docs/tuning.md
("Journal and resume") documents every kind and field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from pitstop.events import Progress
from pitstop.jsonshape import build
from pitstop.tuning.results import TrialResult

# 1: a header, then one "trial" line per finished trial.
# 2: adds "start", "trial_start", "trial_progress" and "outcome" lines; its
# "header" and "trial" lines are version 1's, so --resume reads a version-1 journal as is.
JOURNAL_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class Totals:
    """The tune as a whole at one moment: trials done of planned, the budget spent and left, the ETA."""

    done: int = 0
    planned: int | None = None  # None until the baseline tells the plan (a time budget)
    budget_left: str = ""  # as a person reads it: "3 of 10 trials", "4m10s of 10m00s"
    eta: float | None = None  # seconds until the tune ends, at `at` of the record that carries it
    budget_trials: int | None = None
    budget_seconds: float | None = None
    used_trials: int = 0
    used_seconds: float = 0.0

    @property
    def budget_fraction(self) -> float | None:
        """How much of the budget is spent, 0..1 (None for a budget of neither kind)."""
        if self.budget_trials:
            return min(1.0, self.used_trials / self.budget_trials)
        if self.budget_seconds:
            return min(1.0, self.used_seconds / self.budget_seconds)
        return None


@dataclass(frozen=True)
class Start:
    """A tuner run began: a fresh tune, or a --resume of this journal (then `resumed` trials are in it)."""

    KIND: ClassVar[str] = "start"
    at: float  # time.time()
    budget: str  # as given: "10m", "20"
    resumed: int
    pid: int
    totals: Totals


@dataclass(frozen=True)
class TrialStart:
    """A trial's process was started."""

    KIND: ClassVar[str] = "trial_start"
    at: float
    index: int  # its number in the tune, 1-based (trials replayed from the journal count)
    label: str  # "baseline", "workers=2 pin=on"
    stage: str
    steps_planned: int  # warm-up + measured
    limit: float  # seconds it may take in all
    first_step_limit: float | None  # seconds to its first training step (until the baseline has run)
    totals: Totals


@dataclass(frozen=True)
class TrialProgress:
    """A running trial's steps so far (at most once a second while they move)."""

    KIND: ClassVar[str] = "trial_progress"
    at: float
    index: int
    steps_done: int
    steps_planned: int
    elapsed: float
    progress: Progress | None = None  # before its first step: what its process is doing (the agent's `progress`)


@dataclass(frozen=True)
class TrialEnd:
    """A finished trial and its result; the line --resume replays (its shape is version 1's)."""

    KIND: ClassVar[str] = "trial"
    key: str  # the candidate's key
    steps: int
    occurrence: int  # the n-th run of this (candidate, steps) pair: confirmation rounds repeat one
    result: TrialResult


@dataclass(frozen=True)
class TuneEnd:
    """How the tuner run ended: its winner, the config it wrote or why none, and the report it printed."""

    KIND: ClassVar[str] = "outcome"
    at: float
    status: str  # "finished", "failed" (nothing measured, --confirm not confirmed, an error) or "interrupted"
    exit_code: int
    message: str = ""
    winner: str | None = None  # the winner's label
    settings: dict[str, Any] | None = None  # the winner's knobs
    improves: bool = False  # it beat the script's own settings by more than the noise
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    confirmed: bool = False
    config: str | None = None  # the config file written
    no_config: str = ""  # why none was written, when none was
    confirm_command: str | None = None
    report: tuple[str, ...] = ()  # the report's lines as the tuner printed them
    totals: Totals | None = None


Record = Union[Start, TrialStart, TrialProgress, TrialEnd, TuneEnd]
KINDS: dict[str, type[Record]] = {cls.KIND: cls for cls in (Start, TrialStart, TrialProgress, TrialEnd, TuneEnd)}


def encode(record: Record) -> dict[str, Any]:
    """The record as one JSON object (what the journal writes on one line)."""
    if isinstance(record, TrialEnd):
        data: dict[str, Any] = {"key": record.key, "steps": record.steps, "occurrence": record.occurrence,
                                "result": finite(record.result.to_dict())}
    else:
        data = finite(dataclasses.asdict(record))
    return {"kind": record.KIND, **data}


def decode(data: dict[str, Any]) -> Record | None:
    """The record of a decoded line; None for a kind this version does not know (a header, a newer line).

    Raises ValueError, TypeError or KeyError for a line of a known kind that is malformed.
    """
    cls = KINDS.get(str(data.get("kind")))
    if cls is None:
        return None
    if cls is TrialEnd:
        return TrialEnd(str(data["key"]), int(data["steps"]), int(data["occurrence"]),
                        TrialResult.from_dict(data["result"]))
    known = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in data.items() if k in known}  # a field a newer pitstop adds is ignored
    if isinstance(values.get("totals"), dict):
        values["totals"] = _totals(values["totals"])
    if values.get("progress") is not None:
        values["progress"] = build(Progress, values["progress"], "progress")
    if values.get("interval") is not None:
        lo, hi = values["interval"]
        values["interval"] = (float(lo), float(hi))
    if "report" in values:
        values["report"] = tuple(str(line) for line in values["report"])
    return cls(**values)


def _totals(data: dict[str, Any]) -> Totals:
    known = {f.name for f in dataclasses.fields(Totals)}
    return Totals(**{k: v for k, v in data.items() if k in known})


def finite(value: Any) -> Any:
    """JSON has no NaN nor infinity: a measurement that is not a finite number is written as null."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
