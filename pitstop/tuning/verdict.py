"""Provides the tuner's verdict: the budget, the noise a comparison must beat, the A/B contest and the outcome."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pitstop.analysis import median_and_spread
from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.space import Space

# Two fresh-process runs of one configuration on an idle machine differ by
# ~1-3% (measured on the 2-core CI box: baseline re-runs within 2.4%); a gain
# below 3% is never trusted, whatever the windows of one run say.
NOISE_FLOOR = 0.03
# Other processes' CPU use makes fresh-process runs disagree more: per fully
# busy machine (other processes' cores / usable cores = 1), ~10% more
# (benchmarks/tuner_quality.py, one CPU hog on the 2-core VM: A/A rounds of the
# baseline differed by 3-6%, the hog using half the machine).
LOAD_NOISE = 0.10
# The claimed interval holds 9 re-measures in 10 (two-sided normal quantile, on log ratios).
Z90 = 1.645
# A normal sample's interquartile range is 1.35 standard deviations: a run's window spread
# (IQR / median) over this is its figure's relative standard deviation.
IQR_PER_SD = 1.35


@dataclass
class Budget:
    """A limit in trials or in seconds of trial time (journaled trials count as they did)."""

    trials: int | None = None
    seconds: float | None = None
    used_trials: int = 0
    used_seconds: float = 0.0

    def charge(self, result: TrialResult) -> None:
        self.used_trials += 1
        self.used_seconds += result.duration

    def allows(self, trials: int, seconds: float) -> bool:
        if self.trials is not None and self.used_trials + trials > self.trials:
            return False
        if self.seconds is not None and self.used_seconds + seconds > self.seconds:
            return False
        return True

    def left(self) -> str:
        """What is left, as a person reads it: `3 of 10 trials`, `4m10s of 10m`."""
        if self.trials is not None:
            return f"{max(0, self.trials - self.used_trials)} of {self.trials} trials"
        if self.seconds is not None:
            return f"{clock(max(0.0, self.seconds - self.used_seconds))} of {clock(self.seconds)}"
        return "unlimited"


def clock(seconds: float) -> str:
    """`45s`, `4m10s`, `1h02m`."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def load_noise(results: list[TrialResult], cpus: int | None) -> float:
    """The noise other processes add, from the busiest of `results` (their own CPU left out)."""
    busy = [r.other_cpu for r in results if r.other_cpu is not None]
    if not busy or not cpus:
        return 0.0
    return LOAD_NOISE * min(1.0, max(busy) / cpus)


def pooled_spread(results: list[TrialResult], metric: str = "throughput") -> float:
    """The typical window spread of successful trials: the lower median, so one disturbed trial never sets it."""
    spreads = sorted((r.compute_spread if metric == "compute" and r.compute_spread is not None else r.spread) or 0.0
                     for r in results if r.ok)
    if not spreads:
        return 0.0
    return spreads[(len(spreads) - 1) // 2]


@dataclass
class Contest:
    """One contestant of the final confirmation: its runs, one per round, in round order."""

    candidate: Candidate
    runs: list[TrialResult] = field(default_factory=list)
    failure: str = ""

    @property
    def throughputs(self) -> list[float]:
        return [r.throughput or 0.0 for r in self.runs]

    @property
    def median(self) -> float | None:
        return median_and_spread(self.throughputs)[0] if self.runs else None

    @property
    def rounds_spread(self) -> float | None:
        """Half the relative range of its rounds: an A/A measurement of the machine, None with one round."""
        if len(self.runs) < 2:
            return None
        mid = self.median or 1.0
        return (max(self.throughputs) - min(self.throughputs)) / (2 * mid)


def paired_ratios(a: Contest, b: Contest) -> list[float]:
    """a / b round by round (the two ran back to back in each round, so a drift hits both)."""
    return [x.throughput / y.throughput for x, y in zip(a.runs, b.runs) if x.throughput and y.throughput]


def ratio_spread(ratios: list[float]) -> float | None:
    """The standard error of the rounds' mean ratio, relative to their median (None with one round).

    With two rounds this is half their relative range, the figure the verdict always used;
    with more it shrinks as 1/sqrt(rounds), so rounds spent on an open answer can decide it
    (half the range only grows with more rounds).
    """
    n = len(ratios)
    if n < 2:
        return None
    mid = median_and_spread(ratios)[0] or 1.0
    mean = sum(ratios) / n
    sd = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1))
    return sd / math.sqrt(n) / mid


def log_sd(values: list[float]) -> float | None:
    """The standard deviation of log(values): a relative spread that treats x2 and x0.5 alike (None below 2)."""
    logs = [math.log(v) for v in values if v > 0]
    n = len(logs)
    if n < 2:
        return None
    mean = sum(logs) / n
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))


def claim_interval(pairs: list[tuple[TrialResult, TrialResult]], floor: float,
                   between: float | None = None) -> tuple[float, float] | None:
    """Where a user's re-measure of challenger over baseline lands, 9 times in 10, from the rounds' runs.

    Never a point. One round's ratio moves by the noise of both its runs: each
    run's windows say how far (their IQR over the median, /1.35 for a standard
    deviation: the run_clm winner's baselines spread ±81-105%, and one round used
    to read [6.832, 6.832]); several rounds measure it directly (their ratios'
    spread). One round cannot: `between` (the A/A spread of each configuration's
    other runs, combined) stands for the rounds. The re-measure is one more pair,
    as noisy as these: the half-width is Z90 * sigma * sqrt(1 + 1/rounds), so a
    single round is wider. `floor` is the least sigma (the noise floor, the load).
    """
    usable = [(a, b) for a, b in pairs if a.throughput and b.throughput]
    if not usable:
        return None
    ratios = [(a.throughput or 0.0) / (b.throughput or 1.0) for a, b in usable]
    n = len(ratios)
    windows = math.sqrt(sum((a.spread or 0.0) ** 2 + (b.spread or 0.0) ** 2 for a, b in usable) / n) / IQR_PER_SD
    sigma = max(floor, windows, (log_sd(ratios) if n > 1 else between) or 0.0)
    centre = math.exp(sum(math.log(r) for r in ratios) / n)
    half = Z90 * sigma * math.sqrt(1.0 + 1.0 / n)
    return centre * math.exp(-half), centre * math.exp(half)


@dataclass
class Outcome:
    """What the search found, with everything the report needs."""

    baseline: TrialResult | None
    results: list[TrialResult]
    space: Space | None = None
    winner: Candidate | None = None  # None: nothing could be measured (the baseline failed)
    throughput: float | None = None  # the winner's confirmed (or explored) median
    baseline_throughput: float | None = None
    speedup: float | None = None  # the conservative figure: the lowest round's ratio when confirmed
    interval: tuple[float, float] | None = None  # where a re-measure should land (claim_interval): never a point
    spread: float | None = None  # relative noise of the figures
    noise: float = NOISE_FLOOR
    confirmed: bool = False
    rounds: int = 0
    contests: list[Contest] = field(default_factory=list)
    stopped: str = ""  # why exploration ended early ("budget"), or ""
    message: str = ""  # why there is no winner, or what the winner means
    notes: list[str] = field(default_factory=list)
    # When the budget ran out before a clear win could be confirmed: trials and seconds
    # a confirmation needs (the command names them), else 0.
    confirm_trials: int = 0
    confirm_seconds: float = 0.0
    # The machine during the confirmation: other processes' cores (lowest, highest) over its
    # runs, the usable CPUs, and the rounds discarded because that load moved within one.
    load: tuple[float, float] | None = None
    cpus: int | None = None
    discarded: int = 0

    @property
    def improves(self) -> bool:
        """The winner changes something: there is a config worth writing."""
        return self.winner is not None and self.winner != Candidate()
