"""Provides the staged search: baseline, the knob the evidence points to, compute knobs, batch size, data knobs, then an A/B confirmation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pitstop.analysis import median_and_spread
from pitstop.errors import UsageError
from pitstop.tuning.results import Candidate, TrialResult, judge_losses
from pitstop.tuning.space import Space, usable_cpus
from pitstop.tuning.verdict import (
    NOISE_FLOOR,
    Budget,
    Contest,
    Outcome,
    load_noise,
    paired_ratios,
    pooled_spread,
    ratio_spread,
)

__all__ = ["Budget", "Outcome", "Search", "NOISE_FLOOR"]

Evaluator = Callable[[Candidate, int, str], TrialResult]
Progress = Callable[[TrialResult, int, "int | None"], None]

# A batch size next to an OOM is only kept when its measured peak memory is at
# most 85% of the device: allocator fragmentation and a longer sequence in
# production take the rest.
BATCH_MEMORY_MARGIN = 0.85
# Confirmation rounds: each contestant runs this many times, in alternating order.
CONFIRM_ROUNDS = 2
# The smallest confirmation: one round of the challenger and the baseline.
MIN_CONFIRM_TRIALS = 2
# How long a rung-1 trial costs relative to the baseline trial (start-up dominates short trials).
LONG_TRIAL_COST = 1.6
# Share of step time the baseline spends waiting for data above which the loader
# is the bottleneck (the same 20% the data-wait finding uses).
LOADER_BOUND_SHARE = 0.20


class _OutOfBudget(Exception):
    """Exploration must stop to leave the confirmation its share of the budget."""


def _measured(r: TrialResult) -> bool:
    """An unstable run still measured a figure (its windows disagreed more than 25%)."""
    return r.status == "unstable" and r.throughput is not None


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
        if explore:
            # The reserve keeps a confirmation possible for a challenger: before there is
            # one, exploring is the only way to find something worth confirming.
            trials, seconds = self._reserve() if reserve and self.best_measured() else (0, 0.0)
            cost = self._long_cost() if steps == self.long else self._base_duration
            if not self.budget.allows(1 + trials, cost + seconds):
                raise _OutOfBudget
        result = self.evaluate(candidate, self._steps_for(candidate, steps), stage)
        self.budget.charge(result)
        self.results.append(result)
        self._limit_steps(result)
        if explore:
            self.cache[key] = result
        if self.planned is not None:
            self.planned = max(self.planned, len(self.results))
        if self.on_result:
            self.on_result(result, len(self.results), self.planned)
        return result

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
        if not (b.ok or _measured(b)):
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
        runs = [r for r in self.results if (r.ok or _measured(r)) and r.candidate == Candidate()]
        runs.sort(key=lambda r: not r.ok)  # stable runs first
        same = [r for r in runs if r.steps == steps]
        return (same or runs or [None])[0]

    def ratio(self, r: TrialResult) -> float | None:
        """r's throughput over the baseline's (at its step count when measured there)."""
        base = self._baseline_at(r.steps)
        if not (r.ok and base is not None and base.throughput):
            return None
        return (r.throughput or 0.0) / base.throughput

    # -- the stages ----------------------------------------------------------
    def run(self) -> Outcome:
        base = self._run(Candidate(), self.steps, "baseline")
        self._base_duration = base.duration
        # An unstable baseline still ran: it is the reference, measured again
        # below; every other failure of the script's own settings ends the tune.
        if not (base.ok or (base.status == "unstable" and base.throughput)):
            return Outcome(baseline=base, results=self.results,
                           message=f"the baseline run (the script's own settings) failed: "
                                   f"{base.status}: {base.reason}")
        self.space = self.space_for(base)
        if base.facts is not None and base.facts.usable_cpus:
            self._cpus = base.facts.usable_cpus
        if self._fit_steps(base) and base.ok:
            # The same configuration measured over fewer steps: it stands for the new
            # length too (a second baseline only to change the count cost 1 of 4 trials).
            self.cache[(Candidate(), self.steps)] = base
        if not base.ok:
            again = self._run(Candidate(), self.steps, "baseline")
            if again.throughput is None:
                return Outcome(baseline=again, results=self.results,
                               message=f"the baseline run (the script's own settings) failed: "
                                       f"{again.status}: {again.reason}")
            self.cache[(Candidate(), self.steps)] = again
        self._estimate()
        stopped = ""
        try:
            # Compute-side stages rank by compute throughput (step time minus data
            # wait): the data stage that follows makes the loader keep up, so a
            # loader-bound baseline must not hide a faster model or batch.
            wait = _data_wait_share(base)
            bound = wait is not None and wait > LOADER_BOUND_SHARE and bool(self.space.workers)
            if bound:
                assert wait is not None
                self._evidence(wait)
                self._ladder("num_workers", self.space.workers, "workers")
            before = dict(self.inc.as_dict())
            self._greedy(self.space.compute, "compute", "compute")
            self._ladder("batch_size", self.space.batch, "batch", "compute")
            if not bound or dict(self.inc.as_dict()) != before:
                self._ladder("num_workers", self.space.workers, "workers")
            workers = self.inc.get("num_workers", self.space.own.get("num_workers") or 0)
            data = {k: v for k, v in self.space.data.items()
                    if workers > 0 or k == "pin_memory"}  # persistent/prefetch need workers
            self._greedy(data, "data")
        except _OutOfBudget:
            stopped = "budget"
            self.notes.append("exploration stopped by --budget before every stage finished")
        return self._confirm(base, stopped)

    def _evidence(self, wait: float) -> None:
        """The knob the baseline points to, at the value it suggests, measured before anything else.

        With the loader waiting `wait` of each step, k workers keep up when
        k >= wait / (1 - wait) (loading takes that many compute steps' time);
        this trial comes before the confirmation's reserve, so a budget of 4 still
        measures workers=2 on a 95%-waiting 2-core run instead of only workers=1.
        """
        own = int(self.space.own.get("num_workers") or 0)
        above = [v for v in self.space.workers if v > own]
        if not above:
            return
        need = math.ceil(wait / max(1e-6, 1.0 - wait))
        value = next((v for v in above if v >= need), above[-1])
        self.notes.append(f"the baseline waits for data {wait:.0%} of the time: DataLoader workers tried "
                          f"first, at {value} (the loader needs ~{need}x its speed)")
        self._run(self.inc.with_("num_workers", value, self.space.own), self.steps, "workers", reserve=False)

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

    def _fit_steps(self, base: TrialResult) -> bool:
        """Short trials measure at least `min_seconds`: windows of a few milliseconds measure the scheduler."""
        if not (self.min_seconds and base.measured_seconds and base.measured_steps):
            return False
        per_step = base.measured_seconds / base.measured_steps
        wanted = min(self.max_steps, math.ceil(self.min_seconds / per_step))
        if wanted > self.steps:
            self.notes.append(f"steps per trial raised from {self.steps} to {wanted}: the baseline's "
                              f"{base.measured_steps} steps took {base.measured_seconds:.2f} s "
                              f"(trials measure at least {self.min_seconds:g} s)")
            self.steps, self.long = wanted, min(self.max_steps, 2 * wanted)
            return True
        return False

    def _estimate(self) -> None:
        s = self.space
        n = 1 + sum(map(len, s.compute.values())) + len(s.batch) + len(s.workers)
        n += sum(map(len, s.data.values())) + 6 + 3 * self.confirm_rounds
        if self.budget.trials is not None:
            n = min(n, self.budget.trials)
        if self.budget.seconds is not None and self._base_duration:
            n = min(n, len(self.results) + int(max(0.0, self.budget.seconds - self.budget.used_seconds)
                                               / self._base_duration))
        self.planned = max(self.planned or 0, n, len(self.results))

    def eta(self) -> float | None:
        """Seconds the rest of the tune should take (the plan left, at the pace so far, within the budget)."""
        done = [r.duration for r in self.results if r.duration]
        if not done or self.planned is None:
            return None
        pace = sum(done[-6:]) / len(done[-6:])
        rest = max(0, self.planned - len(self.results)) * pace
        if self.budget.seconds is not None:
            rest = min(rest, max(0.0, self.budget.seconds - self.budget.used_seconds))
        return rest

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
        singles.sort(key=lambda item: -self._figure(item[0], metric))
        keep = singles[: max(1, math.ceil(len(singles) / 2))]
        inc_long = self._run(self.inc, self.long, stage)
        longs = [self._run(res.candidate, self.long, stage) for res, _, _ in keep]
        best = self._simplest_best([inc_long, *longs], metric)
        if best is None or best.candidate == self.inc or not self._better(best, inc_long, metric):
            return
        self.inc = best.candidate
        for res, knob, value in singles:
            if knob in self.inc.as_dict():
                continue
            cand = self.inc.with_(knob, value, own)
            current = self._run(self.inc, self.long, stage)
            trial = self._run(cand, self.long, stage)
            if self._better(trial, current, metric):
                self.inc = cand

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
                        key=lambda r: -self._figure(r, metric))
        if not ranked or not self._better(ranked[0], inc_short, metric):
            return
        # Finalists: the fastest, and the simplest within the noise of it (or the second fastest).
        # A second finalist only when it could still win: within twice the noise.
        simplest = self._simplest_best(ranked, metric)
        top_value = self._figure(ranked[0], metric)
        second = simplest if simplest is not None and simplest is not ranked[0] else (
            ranked[1] if len(ranked) > 1 else ranked[0])
        if self._figure(second, metric) * (1.0 + 2.0 * self.noise(metric=metric)) < top_value:
            second = ranked[0]
        ranked = list({r.candidate: r for r in (ranked[0], second)}.values())
        inc_long = self._run(self.inc, self.long, stage)
        longs = [self._run(r.candidate, self.long, stage) for r in ranked]
        pick = self._simplest_best([inc_long, *longs], metric)
        if pick is not None and pick.candidate != self.inc and self._better(pick, inc_long, metric):
            self.inc = pick.candidate

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
    def best_measured(self) -> TrialResult | None:
        """The successful trial with the highest ratio to the baseline, among those that may win."""
        ok = [r for r in self.results if r.ok and r.candidate != Candidate()
              and r.candidate not in self.excluded and self.ratio(r) is not None]
        return max(ok, key=lambda r: self.ratio(r) or 0.0) if ok else None

    def _confirm(self, base: TrialResult, stopped: str) -> Outcome:
        out = Outcome(baseline=base, results=self.results, space=self.space, stopped=stopped,
                      notes=self.notes)
        # The incumbent and the best other measured configuration (the two best measured when
        # exploration adopted nothing): the fullest contest the budget allows uses its reserve.
        ranked: list[Candidate] = []
        for r in sorted((r for r in self.results if r.ok and r.candidate not in (Candidate(), self.inc)
                         and r.candidate not in self.excluded and (self.ratio(r) or 0.0) > 1.0),
                        key=lambda r: -(self.ratio(r) or 0.0)):
            if r.candidate not in ranked:
                ranked.append(r.candidate)
        contestants = ([self.inc] if self.inc != Candidate() else []) + ranked
        contestants = contestants[:2]
        if not contestants:
            others = [r for r in self.results if r.candidate != Candidate()]
            why = ("only the script's own settings were measured" + (" before --budget ran out" if stopped else "")
                   if not others else "every other configuration failed" if not any(r.ok for r in others)
                   else "")
            return self._no_gain(out, why)
        contestants.append(Candidate())
        return self.contest(out, contestants)

    def confirm_only(self, candidate: Candidate) -> Outcome:
        """`--confirm`: the candidate against the script's own settings, alternating fresh runs, nothing else."""
        if not self.budget.allows(MIN_CONFIRM_TRIALS, 0.0):
            raise UsageError(f"--budget allows no confirmation round: it needs at least {MIN_CONFIRM_TRIALS} trials")
        self.planned = MIN_CONFIRM_TRIALS * self.confirm_rounds
        out = self.contest(Outcome(baseline=None, results=self.results, notes=self.notes),
                           [candidate, Candidate()])
        out.baseline = next((r for r in self.results if r.ok and r.candidate == Candidate()), None)
        return out

    def contest(self, out: Outcome, contestants: list[Candidate]) -> Outcome:
        """Alternating fresh runs of `contestants` (the baseline last), as many as the budget allows."""
        cost = self._long_cost() or LONG_TRIAL_COST * self._base_duration
        pair = [contestants[0], Candidate()]
        shape: tuple[list[Candidate], int] | None = None
        # The fullest contest the budget allows: all contestants in every round,
        # then the first against the baseline alone, then a single round.
        for names, n in ((contestants, self.confirm_rounds), (pair, self.confirm_rounds), (pair, 1)):
            if self.budget.allows(n * len(names), n * len(names) * cost):
                shape = (names, n)
                break
        if shape is None:
            return self._unconfirmed(out, MIN_CONFIRM_TRIALS * self.confirm_rounds, cost)
        names, rounds = shape
        contests = {c: Contest(c) for c in names}
        for i in range(rounds):
            # A B C, then C B A: a drift of the machine during the contest hits everyone alike.
            for cand in names if i % 2 == 0 else list(reversed(names)):
                contest = contests[cand]
                if contest.failure:
                    continue
                res = self._run(cand, self.long, "confirm", explore=False)
                if res.ok or (res.status == "unstable" and res.throughput is not None):
                    # An unstable confirmation run (a neighbour's burst) counts with its
                    # figure: the rounds' own disagreement then widens the noise.
                    contest.runs.append(res)
                    if not res.ok:
                        self.notes.append(f"{cand.label()}: unstable in one confirmation run ({res.reason}); "
                                          "counted, and the rounds' spread widens the noise")
                else:
                    contest.failure = f"{res.status} in confirmation: {res.reason}"
        out.contests = list(contests.values())
        out.confirmed, out.rounds = True, rounds
        self._judge_amp(out.contests)
        return self._decide(out, contests, rounds)

    def _judge_amp(self, contests: list[Contest]) -> None:
        """AMP's losses, now that the script's own settings ran more than once (the confirmation's rounds)."""
        refs = [r.losses for r in self.results if r.ok and r.candidate == Candidate() and r.losses]
        for c in contests:
            if c.failure or c.candidate.get("amp") in (None, "off") or c.candidate.get("batch_size"):
                continue
            for run in c.runs:
                verdict, why = judge_losses(run.losses, refs)
                if verdict == "diverged":
                    c.failure = f"diverged in confirmation: {why}"
                    break
                if verdict == "unjudged" and why not in self.notes:
                    self.notes.append(f"{c.candidate.label()}: {why}")

    def _decide(self, out: Outcome, contests: dict[Candidate, Contest], rounds: int) -> Outcome:
        """The verdict of the rounds, on paired ratios: each contestant over the baseline of the same round.

        A machine whose load drifts between rounds moves both sides of a pair
        alike; the pairs' disagreement is the noise (and the load, and the floor).
        """
        base_c = contests[Candidate()]
        alive = [c for c in contests.values() if not c.failure and c.runs and c is not base_c]
        runs = [r for c in contests.values() for r in c.runs]
        ratios = {c.candidate: paired_ratios(c, base_c) for c in alive}
        spreads = [s for r in ratios.values() if (s := ratio_spread(r)) is not None]
        if spreads:
            noise = max([self.noise_floor, load_noise(runs, self._cpus), *spreads])
        else:
            noise = self.noise(*runs)
            if rounds < 2:
                self.notes.append("one confirmation round: the noise is the exploration trials' "
                                  f"(±{noise:.1%}), not measured by repeated rounds")
        out.noise = out.spread = noise
        if base_c.failure or not base_c.runs:
            out.message = (f"the script's own settings failed in confirmation ({base_c.failure}): "
                           "nothing can be compared with them; keeping them")
            out.winner = Candidate()
            return out
        out.baseline_throughput = base_c.median
        # A pick beats the baseline by more than the noise, and no round measured it slower.
        score = {c: median_and_spread(r)[0] or 0.0 for c, r in ratios.items() if r}
        beaters = [c for c in alive if score.get(c.candidate, 0.0) > 1.0 + noise
                   and min(ratios[c.candidate]) > 1.0]
        if not beaters:
            out.winner, out.throughput, out.speedup = Candidate(), base_c.median, 1.0
            shown = ", ".join(f"{c.candidate.label()} x{score[c.candidate]:.2f}" for c in alive if c.candidate in score)
            out.message = ("nothing beat the script's own settings by more than the noise "
                           f"(±{noise:.1%})" + (f": {shown} in the rounds" if shown else ""))
            if rounds < 2 and any(v > 1.0 for v in score.values()):
                out.message += ("; one round cannot separate that from the noise: a larger --budget "
                                "runs two rounds")
            return out
        top = max(beaters, key=lambda c: score[c.candidate])
        close = [c for c in beaters if score[c.candidate] * (1.0 + noise) >= score[top.candidate]]
        win = min(close, key=lambda c: c.candidate.cost())
        mine = ratios[win.candidate]
        out.winner = win.candidate
        out.throughput = win.median
        out.interval = (min(mine), max(mine))
        out.speedup = min(mine)  # the conservative figure: every round measured at least this
        if top is not win:
            out.message = (f"{win.candidate.label()} chosen over {top.candidate.label()}: "
                           f"within the noise (±{noise:.1%}) and simpler")
        return out

    def _no_gain(self, out: Outcome, why: str) -> Outcome:
        base = self._baseline_at(self.steps) or out.baseline
        out.winner = Candidate()
        out.throughput = out.baseline_throughput = base.throughput if base else None
        out.speedup = 1.0
        out.noise = out.spread = self.noise()
        out.message = why or "nothing beat the script's own settings by more than the noise"
        return out

    def _unconfirmed(self, out: Outcome, trials: int, cost: float) -> Outcome:
        """No budget for a confirmation: keep a clear measured win, marked unconfirmed, with what confirming costs."""
        noise = self.noise()
        pick: TrialResult | None = None
        if self.inc != Candidate():
            same = [r for r in self.results if r.ok and r.candidate == self.inc]
            pick = max(same, key=lambda r: r.steps) if same else None
        best = self.best_measured()
        if pick is None and best is not None and (self.ratio(best) or 0.0) > (1.0 + noise) ** 2:
            pick = best  # a clear win: beyond twice the noise
        if pick is not None and pick.loss_check == "pending":
            self.notes.append(f"{pick.candidate.label()} not chosen: its losses differ from the one run of the "
                              "script's own settings, and no budget was left to tell whether they repeat")
            pick = None
        if pick is None:
            return self._no_gain(out, "")
        ratio = self.ratio(pick) or 1.0
        base = self._baseline_at(pick.steps)
        out.winner = pick.candidate
        out.throughput = pick.throughput
        out.baseline_throughput = base.throughput if base else None
        out.speedup = ratio
        out.interval = (ratio / (1.0 + noise), ratio * (1.0 + noise))
        out.noise = out.spread = noise
        out.confirm_trials = trials
        out.confirm_seconds = trials * cost
        out.message = ("not confirmed: the budget ran out before the alternating A/B rounds; the figure is "
                       "from the exploration runs")
        return out
