"""Provides what the search's two halves share: trials run within the budget, the noise they must beat, ratios.

Exploration (`strategy.Search`) and confirmation (`confirm.Confirming`) both
run trials through `Trials._run`, compare them by `Trials.noise` and read
them as ratios to the script's own settings; each builds on this class.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.space import Space, usable_cpus
from pitstop.tuning.verdict import NOISE_FLOOR, Budget, load_noise, pooled_spread

Evaluator = Callable[[Candidate, int, str], TrialResult]
Progress = Callable[[TrialResult, int, "int | None"], None]

# Confirmation rounds: each contestant runs this many times, in alternating order (more while undecided).
CONFIRM_ROUNDS = 2
# With a budget in seconds, a trial starts while at least this share of its expected time is
# left: nanoGPT with --budget 2m ran one 67 s trial and stopped with 53 s unused, its answer open.
# A tune may so end up to half a trial past --budget, never a whole trial short of it.
START_SHARE = 0.5
# How long a rung-1 trial costs relative to the baseline trial (start-up dominates short trials).
LONG_TRIAL_COST = 1.6
# The smallest confirmation: one round of the challenger and the baseline.
MIN_CONFIRM_TRIALS = 2


class OutOfBudget(Exception):
    """Exploration must stop to leave the confirmation its share of the budget."""


def has_figure(r: TrialResult) -> bool:
    """An unstable run still measured a figure (its windows disagreed more than 25%)."""
    return r.status == "unstable" and r.throughput is not None


class Trials:
    """The trials of one tune: run (or reused) within the budget, each measured against the baseline."""

    def __init__(self, evaluate: Evaluator, space_for: Callable[[TrialResult], Space],
                 budget: Budget, steps: int, on_result: Progress | None = None,
                 noise_floor: float = NOISE_FLOOR, confirm_rounds: int = CONFIRM_ROUNDS,
                 min_seconds: float = 0.0, max_steps: int = 2000, min_steps: int = 10) -> None:
        self.evaluate = evaluate
        self.space_for = space_for
        self.budget = budget
        self.steps = steps
        self.long = 2 * steps  # successive halving: survivors run twice as long
        self.on_result = on_result
        self.noise_floor = noise_floor
        self.confirm_rounds = confirm_rounds
        self.min_seconds = min_seconds
        self.max_steps = max_steps
        self.min_steps = min_steps  # five windows of two steps
        self.results: list[TrialResult] = []
        self.cache: dict[tuple[Candidate, int], TrialResult] = {}
        self.inc = Candidate()
        self.space = Space()
        self.planned: int | None = budget.trials if budget.trials is not None else None
        self.notes: list[str] = []
        self.excluded: set[Candidate] = set()  # ran ok, but must not win (the OOM margin)
        self._base_duration = 0.0
        self._kept = False  # the confirmation's reserve held budget back when exploration stopped
        self._closing = False  # exploration is over: the rest of the budget confirms
        # Runs of discarded confirmation rounds (they measured the neighbours' load): never a reference.
        # A tune once reported x3.42 over such a baseline run, against x2.08 over its own baseline.
        self.set_aside: set[int] = set()
        self._cpus: int | None = usable_cpus()  # the baseline's own count replaces it

    # -- noise -----------------------------------------------------------------
    def noise(self, *results: TrialResult, metric: str = "throughput") -> float:
        """What exploration's comparisons must beat: the floor, the trials' typical spread, the machine's load.

        Never one trial's own spread: a baseline measured during a neighbour's
        burst (±102% seen) set the bar for every comparison and hid a 1.85x win.
        """
        return max(self.noise_floor, pooled_spread(self.results, metric),
                   load_noise(list(results) or self.results, self._cpus))

    # -- running -------------------------------------------------------------
    def _reserve(self) -> tuple[int, float]:
        """What exploration leaves for the confirmation: a full one, but at most 40% of the budget.

        Never less than one round of challenger and baseline (2 trials): a reserve
        of int(0.4 * 4) = 1 trial was never used, and the challenger never confirmed.
        """
        full = 3 * self.confirm_rounds
        trials, seconds = full, full * self._long_cost()
        if self.budget.trials is not None:
            # A baseline, one challenger and a pair round need 4 trials; below that, explore.
            trials = 0 if self.budget.trials < 2 + MIN_CONFIRM_TRIALS else max(
                MIN_CONFIRM_TRIALS, min(full, int(0.4 * self.budget.trials)))
        if self.budget.seconds is not None:
            pair = MIN_CONFIRM_TRIALS * self._long_cost()
            if self.budget.seconds < self._base_duration * 2 + pair:
                seconds = 0.0
            else:
                seconds = max(pair, min(seconds, 0.4 * self.budget.seconds))
        return trials, seconds

    def _long_cost(self) -> float:
        longs = [r.duration for r in self.results if r.steps == self.long and r.duration]
        return max(longs) if longs else LONG_TRIAL_COST * self._base_duration

    def _run(self, candidate: Candidate, steps: int, stage: str, explore: bool = True,
             reserve: bool = True) -> TrialResult:
        """Run (or reuse) one trial; exploration stops where the confirmation's reserve begins."""
        steps = min(steps, self.max_steps)
        key = (candidate, steps)
        if explore and key in self.cache:
            return self.cache[key]
        if explore and self._closing:
            raise OutOfBudget
        if explore:
            # The reserve keeps a confirmation possible for a challenger: before there is
            # one, exploring is the only way to find something worth confirming.
            trials, seconds = self._reserve() if reserve and self.challengers() else (0, 0.0)
            if not self.budget.allows(trials, seconds):
                trials, seconds = 0, 0.0  # too late for a confirmation: a reserve would only go unused
            cost = self._long_cost() if steps == self.long else self._base_duration
            if not self.budget.allows(1 + trials, START_SHARE * cost + seconds):
                self._kept = bool(trials or seconds)
                raise OutOfBudget
        result = self.evaluate(candidate, self._steps_for(candidate, steps), stage)
        self.budget.charge(result)
        self.results.append(result)
        self._limit_steps(result)
        if explore:
            self.cache[key] = result
        longer = self._too_short(result, steps)
        if explore and longer:
            # Unstable over less than --min-time: the windows measured the scheduler, not the
            # configuration (workers=2 at x3.66 over 0.57 s, ±70%, was dropped and the tune kept
            # the baseline with 2 trials unused). Measured again, long enough; it stands for both.
            again = f"under --min-time: measured again over {longer} steps"
            self.notes.append(f"{candidate.label()}: unstable over {result.measured_seconds:.2f} s of steps, {again}")
            if self.on_result:  # its own progress line, before the one that stands for it
                self.on_result(result.replace(notes=[*result.notes, again]), len(self.results), self.planned)
            result = self._run(candidate, longer, stage, explore, reserve)
            self.cache[key] = result
            return result
        if self.planned is not None:
            self.planned = max(self.planned, len(self.results))
        if self.on_result:
            self.on_result(result, len(self.results), self.planned)
        return result

    def _too_short(self, result: TrialResult, steps: int) -> int:
        """The step count that measures --min-time, for an unstable trial that measured less; else 0."""
        if not (result.status == "unstable" and self.min_seconds and result.measured_seconds
                and result.measured_seconds < self.min_seconds and result.throughput is not None):
            return 0
        longer = min(self.max_steps, math.ceil(steps * self.min_seconds / result.measured_seconds))
        return longer if longer > steps else 0

    @staticmethod
    def _figure(r: TrialResult, metric: str) -> float:
        """The value of a result by `metric`: "throughput" or "compute"."""
        if metric == "compute" and r.compute_throughput is not None:
            return r.compute_throughput
        return r.throughput or 0.0

    def _steps_for(self, candidate: Candidate, steps: int) -> int:
        """A larger batch runs fewer steps: trials measure the same samples, not the same steps
        (a 64x batch at a fixed step count made one trial 30x longer than the baseline)."""
        own = self.space.own.get("batch_size")
        batch = candidate.get("batch_size")
        if not (own and batch and batch > own):
            return steps
        return max(self.min_steps, math.ceil(steps * own / batch))

    def _better(self, a: TrialResult, b: TrialResult, metric: str = "throughput") -> bool:
        """a beats b by more than the noise."""
        if not a.ok:
            return False
        if not (b.ok or has_figure(b)):
            return True  # anything that ran beats a failure
        # An unstable reference (its windows disagreed) still has a figure: a win over it is
        # measured like any other, not granted because the other side failed to be stable.
        return self._figure(a, metric) > self._figure(b, metric) * (1.0 + self.noise(a, b, metric=metric))

    def _simplest_best(self, results: list[TrialResult], metric: str = "throughput") -> TrialResult | None:
        """The best ok result, or a simpler one within the noise of it."""
        ok = [r for r in results if r.ok]
        if not ok:
            return None
        top = max(ok, key=lambda r: self._figure(r, metric))
        value = self._figure(top, metric)
        noise = self.noise(*ok, metric=metric)
        close = [r for r in ok if self._figure(r, metric) * (1.0 + noise) >= value]
        return min(close, key=lambda r: (r.candidate.cost(), -self._figure(r, metric)))

    def _baseline_at(self, steps: int) -> TrialResult | None:
        """A successful run of the script's own settings, at `steps` if there is one."""
        runs = [r for r in self.results if (r.ok or has_figure(r)) and r.candidate == Candidate()
                and id(r) not in self.set_aside]
        runs.sort(key=lambda r: not r.ok)  # stable runs first
        same = [r for r in runs if r.steps == steps]
        return (same or runs or [None])[0]

    def ratio(self, r: TrialResult) -> float | None:
        """r's throughput over the baseline's (at its step count when measured there)."""
        base = self._baseline_at(r.steps)
        if not (r.ok and base is not None and base.throughput):
            return None
        return (r.throughput or 0.0) / base.throughput

    def _limit_steps(self, result: TrialResult) -> None:
        """A script that ended by itself sets how many steps a trial can measure: never plan more.

        (A test script that ran 111 steps in all was planned 1883 per trial after
        --min-time raised the count, and every table row said 1883.)
        """
        if not (result.script_ended and self.min_steps <= result.measured_steps < self.max_steps):
            return
        self.max_steps = result.measured_steps
        self.steps = min(self.steps, self.max_steps)
        self.long = min(self.long, self.max_steps)
        self.cache.setdefault((result.candidate, self.max_steps), result)  # it measured all there is
        self.notes.append(f"the script ends by itself after {result.steps_seen} steps: trials measure at "
                          f"most {self.max_steps}")

    def challengers(self) -> list[TrialResult]:
        """Trials worth confirming: ok, not the baseline, allowed to win, measured faster than it."""
        return [r for r in self.results if r.ok and r.candidate != Candidate()
                and r.candidate not in self.excluded and (self.ratio(r) or 0.0) > 1.0]

    def best_measured(self) -> TrialResult | None:
        """The successful trial with the highest ratio to the baseline, among those that may win."""
        ok = [r for r in self.results if r.ok and r.candidate != Candidate()
              and r.candidate not in self.excluded and self.ratio(r) is not None]
        return max(ok, key=lambda r: self.ratio(r) or 0.0) if ok else None
