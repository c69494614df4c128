"""Provides the staged search: baseline, compute knobs, batch size, data knobs, then an A/B confirmation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pitstop.analysis import median_and_spread
from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.space import Space

Evaluator = Callable[[Candidate, int, str], TrialResult]
Progress = Callable[[TrialResult, int, int], None]

# Two fresh-process runs of one configuration on an idle machine differ by
# ~1-3% (measured on the 2-core CI box: baseline re-runs within 2.4%); a gain
# below 3% is never trusted, whatever the windows of one run say.
NOISE_FLOOR = 0.03
# A batch size next to an OOM is only kept when its measured peak memory is at
# most 85% of the device: allocator fragmentation and a longer sequence in
# production take the rest.
BATCH_MEMORY_MARGIN = 0.85
# Confirmation rounds: each contestant runs this many times, in alternating order.
CONFIRM_ROUNDS = 2
# How long a rung-1 trial costs relative to the baseline trial (start-up dominates short trials).
LONG_TRIAL_COST = 1.6


class _OutOfBudget(Exception):
    """Exploration must stop to leave the confirmation its share of the budget."""


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


@dataclass
class Contest:
    """One contestant of the final confirmation."""

    candidate: Candidate
    throughputs: list[float] = field(default_factory=list)
    failure: str = ""
    jitter: float = 0.0  # the widest window spread of an unstable confirmation run

    @property
    def median(self) -> float | None:
        return median_and_spread(self.throughputs)[0] if self.throughputs else None

    @property
    def spread(self) -> float:
        """Half the relative range of its rounds (with two rounds: the A/B difference)."""
        if len(self.throughputs) < 2:
            return self.jitter
        mid = self.median or 1.0
        return max(self.jitter, (max(self.throughputs) - min(self.throughputs)) / (2 * mid))


@dataclass
class Outcome:
    """What the search found, with everything the report needs."""

    baseline: TrialResult | None
    results: list[TrialResult]
    space: Space | None = None
    winner: Candidate | None = None
    throughput: float | None = None  # the winner's confirmed (or explored) median
    baseline_throughput: float | None = None
    speedup: float | None = None
    spread: float | None = None  # relative, of the winner's figure
    noise: float = NOISE_FLOOR
    confirmed: bool = False
    contests: list[Contest] = field(default_factory=list)
    stopped: str = ""  # why exploration ended early ("budget"), or ""
    message: str = ""  # why there is no winner, or what the winner means
    notes: list[str] = field(default_factory=list)


# Share of step time the baseline spends waiting for data above which the loader
# is the bottleneck (the same 20% the data-wait finding uses).
LOADER_BOUND_SHARE = 0.20


def _data_wait_share(result: TrialResult) -> float | None:
    """1 - throughput / compute-only throughput: how much of the step waits for data."""
    if not result.throughput or not result.compute_throughput:
        return None
    return max(0.0, 1.0 - result.throughput / result.compute_throughput)


class Search:
    """The staged search over one evaluator (real trials, or a simulated landscape in tests)."""

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
        self.noise = noise_floor
        self.noise_floor = noise_floor
        self.confirm_rounds = confirm_rounds
        self.min_seconds = min_seconds
        self.max_steps = max_steps
        self.min_steps = min_steps  # five windows of two steps
        self.results: list[TrialResult] = []
        self.cache: dict[tuple[Candidate, int], TrialResult] = {}
        self.inc = Candidate()
        self.space = Space()
        self.planned = 1
        self.notes: list[str] = []
        self.excluded: set[Candidate] = set()  # ran ok, but must not win (the OOM margin)
        self._base_duration = 0.0

    # -- running -------------------------------------------------------------
    def _reserve(self) -> tuple[int, float]:
        """What exploration leaves for the confirmation: a full one, but at most 40% of the budget."""
        trials = 3 * self.confirm_rounds
        seconds = trials * self._long_cost()
        if self.budget.trials is not None:
            trials = min(trials, int(0.4 * self.budget.trials))
        if self.budget.seconds is not None:
            seconds = min(seconds, 0.4 * self.budget.seconds)
        return trials, seconds

    def _long_cost(self) -> float:
        longs = [r.duration for r in self.results if r.steps == self.long]
        return max(longs) if longs else LONG_TRIAL_COST * self._base_duration

    def _run(self, candidate: Candidate, steps: int, stage: str, explore: bool = True) -> TrialResult:
        key = (candidate, steps)
        if explore and key in self.cache:
            return self.cache[key]
        if explore:
            trials, seconds = self._reserve()
            cost = self._long_cost() if steps == self.long else self._base_duration
            if not self.budget.allows(1 + trials, cost + seconds):
                raise _OutOfBudget
        result = self.evaluate(candidate, self._steps_for(candidate, steps), stage)
        self.budget.charge(result)
        self.results.append(result)
        if explore:
            self.cache[key] = result
        self.planned = max(self.planned, len(self.results))
        if self.on_result:
            self.on_result(result, len(self.results), self.planned)
        return result

    @staticmethod
    def _figure(r: TrialResult, metric: str) -> tuple[float, float]:
        """(value, relative spread) of a result by `metric`: "throughput" or "compute"."""
        if metric == "compute" and r.compute_throughput is not None:
            return r.compute_throughput, r.compute_spread or 0.0
        return r.throughput or 0.0, r.spread or 0.0

    def _steps_for(self, candidate: Candidate, steps: int) -> int:
        """A larger batch runs fewer steps: trials measure the same samples, not the same steps
        (a 64x batch at a fixed step count made one trial 30x longer than the baseline)."""
        own = self.space.own.get("batch_size")
        batch = candidate.get("batch_size")
        if not (own and batch and batch > own):
            return steps
        return max(self.min_steps, math.ceil(steps * own / batch))

    def _better(self, a: TrialResult, b: TrialResult, metric: str = "throughput") -> bool:
        """a beats b by more than the noise (the measured spread of either, or the floor)."""
        if not (a.ok and b.ok):
            return a.ok and not b.ok
        (va, sa), (vb, sb) = self._figure(a, metric), self._figure(b, metric)
        return va > vb * (1.0 + max(self.noise, sa, sb))

    def _simplest_best(self, results: list[TrialResult], metric: str = "throughput") -> TrialResult | None:
        """The best ok result, or a simpler one within the noise of it."""
        ok = [r for r in results if r.ok]
        if not ok:
            return None
        top = max(ok, key=lambda r: self._figure(r, metric)[0])
        value, spread = self._figure(top, metric)
        noise = max(self.noise, spread)
        close = [r for r in ok if self._figure(r, metric)[0] * (1.0 + noise) >= value]
        return min(close, key=lambda r: (r.candidate.cost(), -self._figure(r, metric)[0]))

    # -- the stages ----------------------------------------------------------
    def run(self) -> Outcome:
        base = self._run(Candidate(), self.steps, "baseline")
        self._base_duration = base.duration
        # An unstable baseline still ran: it is the reference, measured longer
        # below; every other failure of the script's own settings ends the tune.
        if not (base.ok or (base.status == "unstable" and base.throughput)):
            return Outcome(baseline=base, results=self.results,
                           message=f"the baseline run (the script's own settings) failed: "
                                   f"{base.status}: {base.reason}")
        self.space = self.space_for(base)
        self.noise = max(self.noise_floor, base.spread or 0.0)
        if self._fit_steps(base) or not base.ok:
            again = self._run(Candidate(), self.steps, "baseline")
            if again.throughput is None:
                return Outcome(baseline=again, results=self.results,
                               message=f"the baseline run (the script's own settings) failed: "
                                       f"{again.status}: {again.reason}")
            self.noise = max(self.noise_floor, again.spread or 0.0)
        self._estimate()
        stopped = ""
        try:
            # Compute-side stages rank by compute throughput (step time minus data
            # wait): the data stage that follows makes the loader keep up, so a
            # loader-bound baseline must not hide a faster model or batch.
            wait = _data_wait_share(base)
            if wait is not None and wait > LOADER_BOUND_SHARE:
                # The loader is the bottleneck now: the workers ladder goes first, so a
                # small --budget cannot spend itself on compute and batch trials and
                # never reach the knob most likely to pay (seen: a 2.5x workers win
                # missed with 12 trials). It is re-checked at the chosen batch below.
                self.notes.append(f"the baseline waits for data {wait:.0%} of the time: "
                                  "DataLoader workers tried first")
                self._ladder("num_workers", self.space.workers, "workers")
            before = dict(self.inc.as_dict())
            self._greedy(self.space.compute, "compute", "compute")
            self._ladder("batch_size", self.space.batch, "batch", "compute")
            if wait is None or wait <= LOADER_BOUND_SHARE or dict(self.inc.as_dict()) != before:
                self._ladder("num_workers", self.space.workers, "workers")
            workers = self.inc.get("num_workers", self.space.own.get("num_workers") or 0)
            data = {k: v for k, v in self.space.data.items()
                    if workers > 0 or k == "pin_memory"}  # persistent/prefetch need workers
            self._greedy(data, "data")
        except _OutOfBudget:
            stopped = "budget"
            self.notes.append("exploration stopped by --budget before every stage finished")
        return self._confirm(base, stopped)

    def _fit_steps(self, base: TrialResult) -> bool:
        """Short trials measure at least `min_seconds`: windows of a few milliseconds measure the scheduler."""
        if not (self.min_seconds and base.measured_seconds and base.measured_steps):
            return False
        per_step = base.measured_seconds / base.measured_steps
        wanted = min(self.max_steps, math.ceil(self.min_seconds / per_step))
        if wanted > self.steps:
            self.notes.append(f"steps per trial raised from {self.steps} to {wanted}: the baseline's "
                              f"{self.steps} steps took {base.measured_seconds:.2f} s "
                              f"(trials measure at least {self.min_seconds:g} s)")
            self.steps, self.long = wanted, 2 * wanted
            return True
        return False

    def _estimate(self) -> None:
        s = self.space
        n = 1 + sum(map(len, s.compute.values())) + len(s.batch) + len(s.workers)
        n += sum(map(len, s.data.values())) + 6 + 3 * self.confirm_rounds
        if self.budget.trials is not None:
            n = min(n, self.budget.trials)
        self.planned = max(self.planned, n)

    def _adopt(self, candidate: Candidate) -> None:
        self.inc = candidate

    def _greedy(self, options: dict[str, list[Any]], stage: str, metric: str = "throughput") -> None:
        """One knob at a time on the incumbent; survivors run twice as long; helpful knobs combine."""
        own = self.space.own
        inc_short = self._run(self.inc, self.steps, stage)
        singles: list[tuple[TrialResult, str, Any]] = []
        for knob, values in options.items():
            for value in values:
                cand = self.inc.with_(knob, value, own)
                if cand == self.inc:
                    continue
                res = self._run(cand, self.steps, stage)
                if self._better(res, inc_short, metric):
                    singles.append((res, knob, value))
        if not singles:
            return
        singles.sort(key=lambda item: -self._figure(item[0], metric)[0])
        keep = singles[: max(1, math.ceil(len(singles) / 2))]
        inc_long = self._run(self.inc, self.long, stage)
        longs = [self._run(res.candidate, self.long, stage) for res, _, _ in keep]
        best = self._simplest_best([inc_long, *longs], metric)
        if best is None or best.candidate == self.inc or not self._better(best, inc_long, metric):
            return
        self._adopt(best.candidate)
        for res, knob, value in singles:
            if knob in self.inc.as_dict():
                continue
            cand = self.inc.with_(knob, value, own)
            current = self._run(self.inc, self.long, stage)
            trial = self._run(cand, self.long, stage)
            if self._better(trial, current, metric):
                self._adopt(cand)

    def _ladder(self, knob: str, values: list[int], stage: str, metric: str = "throughput") -> None:
        """Ascending values; stop at a failure past the incumbent or after two steps without gain."""
        if not values:
            return
        own = self.space.own
        own_value = int(own.get(knob) or 0)
        start = int(self.inc.get(knob, own_value))
        inc_short = self._run(self.inc, self.steps, stage)
        best = inc_short
        tried: list[TrialResult] = [inc_short]
        flat = 0
        prev_ok = inc_short
        for value in values:
            cand = self.inc.with_(knob, value, own)
            res = self._run(cand, self.steps, stage)
            if res.candidate != self.inc:
                tried.append(res)
            if value <= start:
                continue
            if not res.ok and knob == "batch_size":
                if res.status == "oom" and prev_ok is not inc_short:
                    self._check_margin(prev_ok, res, tried)
                break  # a larger batch only fails harder
            if not res.ok:
                # A failed worker count is a result, not the end of the ladder
                # (a crash at 1 worker says nothing about 2); it counts as no gain.
                flat += 1
                if flat >= 2:
                    break
                continue
            prev_ok = res
            if self._better(res, best, metric):
                best, flat = res, 0
            else:
                flat += 1
                if flat >= 2:  # gains fell below the noise twice in a row
                    break
        ranked = sorted((r for r in tried if r.ok and r.candidate != self.inc),
                        key=lambda r: -self._figure(r, metric)[0])
        if not ranked or not self._better(ranked[0], inc_short, metric):
            return
        # Finalists: the fastest, and the simplest within the noise of it (or the second fastest).
        # A second finalist only when it could still win: within twice the noise.
        simplest = self._simplest_best(ranked, metric)
        top_value = self._figure(ranked[0], metric)[0]
        second = simplest if simplest is not None and simplest is not ranked[0] else (
            ranked[1] if len(ranked) > 1 else ranked[0])
        if self._figure(second, metric)[0] * (1.0 + 2.0 * self.noise) < top_value:
            second = ranked[0]
        ranked = list({r.candidate: r for r in (ranked[0], second)}.values())
        inc_long = self._run(self.inc, self.long, stage)
        longs = [self._run(r.candidate, self.long, stage) for r in ranked]
        pick = self._simplest_best([inc_long, *longs], metric)
        if pick is not None and pick.candidate != self.inc and self._better(pick, inc_long, metric):
            self._adopt(pick.candidate)

    def _check_margin(self, edge: TrialResult, oom: TrialResult, tried: list[TrialResult]) -> None:
        """The size below an OOM stays only with its peak memory under the margin of a known limit."""
        base = self.results[0]
        limit = base.facts.memory_limit if base.facts else None
        if edge.peak_mem and limit and edge.peak_mem <= BATCH_MEMORY_MARGIN * limit:
            return
        tried.remove(edge)
        self.excluded.add(edge.candidate)
        size = edge.candidate.get("batch_size")
        why = ("its peak memory is unknown" if not (edge.peak_mem and limit)
               else f"its peak memory is {edge.peak_mem / limit:.0%} of the device")
        self.notes.append(f"batch_size={size} not chosen: the next size ran out of memory and {why} "
                          f"(margin: {BATCH_MEMORY_MARGIN:.0%})")

    # -- confirmation --------------------------------------------------------
    def _confirm(self, base: TrialResult, stopped: str) -> Outcome:
        out = Outcome(baseline=base, results=self.results, space=self.space, stopped=stopped,
                      notes=self.notes)
        ok = [r for r in self.results if r.ok and r.candidate not in (self.inc, Candidate())
              and r.candidate not in self.excluded]
        runner_up = None
        if ok:  # trials of larger batches run fewer steps: compare figures, not step counts
            runner_up = max(ok, key=lambda r: r.throughput or 0.0).candidate
        contestants = [self.inc]
        if runner_up is not None:
            contestants.append(runner_up)
        if self.inc != Candidate():
            contestants.append(Candidate())
        cost = self._long_cost()
        rounds = 0
        # The fullest contest the budget allows: all contestants in every round,
        # then the winner against the baseline alone, then a single round.
        # The baseline is in every contest: the speedup is measured against it.
        pair = [c for c in contestants if c in (self.inc, Candidate())]
        if len(pair) < 2:  # the incumbent is the baseline: its challenger is the runner-up
            pair = contestants[:2]
        for names, n in ((contestants, self.confirm_rounds), (pair, self.confirm_rounds), (pair, 1)):
            if len(names) >= 2 and self.budget.allows(n * len(names), n * len(names) * cost):
                contestants, rounds = names, n
                break
        if len(contestants) < 2 or rounds == 0:
            return self._unconfirmed(out, "no confirmation: budget spent" if len(contestants) > 1 else "")
        contests = {c: Contest(c) for c in contestants}
        for i in range(rounds):
            # A B C, then C B A: a drift of the machine during the contest hits everyone alike.
            order = contestants if i % 2 == 0 else list(reversed(contestants))
            for cand in order:
                contest = contests[cand]
                if contest.failure:
                    continue
                res = self._run(cand, self.long, "confirm", explore=False)
                if res.ok:
                    contest.throughputs.append(res.throughput or 0.0)
                elif res.status == "unstable" and res.throughput is not None:
                    # It passed exploration stable; one jittery confirmation run
                    # (a neighbour's burst) counts with its figure and widens the
                    # noise instead of disqualifying it.
                    contest.throughputs.append(res.throughput)
                    contest.jitter = max(contest.jitter, res.spread or 0.0)
                    self.notes.append(f"{cand.label()}: unstable in one confirmation run "
                                      f"({res.reason}); counted, and the noise widened")
                else:
                    contest.failure = f"{res.status} in confirmation: {res.reason}"
        out.contests = list(contests.values())
        out.confirmed = True
        alive = [c for c in out.contests if not c.failure and c.throughputs]
        base_c = contests.get(Candidate())
        noise = max([self.noise, *(c.spread for c in alive)])
        out.noise = noise
        if not alive:
            out.message = "every contestant failed in confirmation; keeping the script's own settings"
            out.winner = Candidate()
            return out
        top = max(alive, key=lambda c: c.median or 0.0)
        close = [c for c in alive if (c.median or 0.0) * (1.0 + noise) >= (top.median or 0.0)]
        win = min(close, key=lambda c: c.candidate.cost())
        base_thr = base_c.median if base_c and base_c.throughputs else None
        out.winner = win.candidate
        out.throughput = win.median
        out.baseline_throughput = base_thr
        out.speedup = (win.median or 0.0) / base_thr if base_thr else None
        out.spread = noise  # the larger of the floor and every survivor's A/B difference
        if win.candidate == Candidate():
            out.message = "nothing beat the script's own settings by more than the noise"
        elif top.candidate != win.candidate:
            out.message = (f"{win.candidate.label()} chosen over {top.candidate.label()}: "
                           f"within the noise (±{noise:.1%}) and simpler")
        return out

    def _unconfirmed(self, out: Outcome, why: str) -> Outcome:
        base = self.results[0]
        same = [r for r in self.results if r.ok and r.candidate == self.inc]
        best = max(same, key=lambda r: r.steps) if same else base
        base_same = [r for r in self.results if r.ok and r.candidate == Candidate() and r.steps == best.steps]
        base_thr = (base_same[0] if base_same else base).throughput
        out.winner = self.inc
        out.throughput = best.throughput
        out.baseline_throughput = base_thr
        out.speedup = (best.throughput or 0.0) / base_thr if base_thr else None
        out.spread = max(self.noise, best.spread or 0.0)
        out.noise = self.noise
        if self.inc == Candidate():
            out.message = "nothing beat the script's own settings by more than the noise"
        if why:
            out.notes.append(why)
        return out
