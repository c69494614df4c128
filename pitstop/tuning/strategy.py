"""Provides the staged search: baseline, the knob the evidence points to, compute knobs, batch size, data knobs, then an A/B confirmation."""

from __future__ import annotations

import math
from typing import Any

from pitstop.tuning.confirm import Confirming
from pitstop.tuning.results import SHORT, Candidate, TrialResult
from pitstop.tuning.trials import MIN_CONFIRM_TRIALS, OutOfBudget
from pitstop.tuning.verdict import NOISE_FLOOR, Budget, Outcome

__all__ = ["Budget", "Outcome", "Search", "NOISE_FLOOR"]

# A batch size next to an OOM is only kept when its measured peak memory is at
# most 85% of the device: allocator fragmentation and a longer sequence in
# production take the rest.
BATCH_MEMORY_MARGIN = 0.85
# Share of step time the baseline spends waiting for data above which the loader
# is the bottleneck (the same 20% the data-wait finding uses).
LOADER_BOUND_SHARE = 0.20


# The stage a knob's first trial is counted in (progress lines and the Trials view).
_STAGE = {"num_workers": "workers", "batch_size": "batch", "pin_memory": "data", "persistent_workers": "data",
          "prefetch_factor": "data"}


def _data_wait_share(result: TrialResult) -> float | None:
    """1 - throughput / compute-only throughput: how much of the step waits for data."""
    if not result.throughput or not result.compute_throughput:
        return None
    return max(0.0, 1.0 - result.throughput / result.compute_throughput)


class Search(Confirming):
    """The staged search over one evaluator (real trials, or a simulated landscape in tests)."""

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
            bound = self._evidence(base) == "num_workers"
            if bound:
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
        except OutOfBudget:
            stopped = "budget"
            self.notes.append("exploration stopped by --budget before every stage finished"
                              + (": the rest is kept for the A/B confirmation" if self._kept else ""))
        return self._confirm(base, stopped)

    def _values(self, knob: str) -> list[Any]:
        """The space's values of one knob (empty when it is not searched)."""
        s = self.space
        return {"num_workers": s.workers, "batch_size": s.batch}.get(knob) or s.compute.get(knob) or s.data.get(knob) or []

    def _evidence(self, base: TrialResult) -> str:
        """The knob the baseline's evidence names, at the value it suggests, measured first (trial 2).

        The evidence is the run's own findings (the rules `pitstop run` shows, with the
        value their fix line suggests); without one naming a searched knob, a baseline
        waiting for data over 20% of the step (1 - throughput / compute-only throughput)
        names the workers: k workers keep up when k >= wait / (1 - wait). This trial comes
        before the confirmation's reserve, so a budget of 4 measures the knob and still
        confirms it. Returns the knob tried, or "".
        """
        own = self.space.own
        # Threads first: on a contended machine torch's spinning threads move every other
        # measurement (one hog: the baseline 52 samples/s, threads=1 342, workers measured
        # at 59 beside 345), so the knobs after them are measured on top of them.
        named = sorted(base.evidence.items(), key=lambda item: item[0] != "threads")
        for knob, value in named:
            values = self._values(knob)
            if not values:
                continue
            if knob in ("num_workers", "batch_size"):
                above = [v for v in values if v > int(own.get(knob) or 0)]
                if not above or value <= int(own.get(knob) or 0):
                    continue
                value = next((v for v in above if v >= value), above[-1])
            elif value not in values:
                continue
            cand = self.inc.with_(knob, value, own)
            if cand == self.inc:
                continue
            self.notes.append(f"the run's findings name {SHORT.get(knob, knob)}: tried first, at {value}")
            first = self._run(cand, self.steps, _STAGE.get(knob, "compute"), reserve=False)
            if knob == "num_workers":
                self._climb(base, first)
            elif knob != "batch_size":  # the ladders start from the incumbent
                self._adopt(first)
            return knob
        wait = _data_wait_share(base)
        own_workers = int(own.get("num_workers") or 0)
        above = [v for v in self.space.workers if v > own_workers]
        if wait is None or wait <= LOADER_BOUND_SHARE or not above:
            return ""
        need = math.ceil(wait / max(1e-6, 1.0 - wait))
        value = next((v for v in above if v >= need), above[-1])
        self.notes.append(f"the baseline waits for data {wait:.0%} of the time: DataLoader workers tried "
                          f"first, at {value} (the loader needs ~{need}x its speed)")
        first = self._run(self.inc.with_("num_workers", value, own), self.steps, "workers", reserve=False)
        self._climb(base, first)
        return "num_workers"

    def _climb(self, base: TrialResult, first: TrialResult) -> None:
        """One rung more when the first worker count left the loader the bottleneck, before any confirmation.

        A worker count's promise is that the data wait goes away: the step then
        runs at the baseline's compute-only speed. When the trial at that count
        still waits for data over 20% of its step and its gain falls short of
        that promise by more than the noise, the next count is measured at once,
        ahead of the confirmation's reserve: on 2 cores a per-sample transform in
        torch measured 27.2 ms a step with no worker, 26.9 ms with the finding's
        1 worker and 13.9 ms with 2, and a 4-trial tune confirmed the 1 worker
        twice and answered "nothing beat the script's own settings".
        """
        ratio, wait = self.ratio(first), _data_wait_share(first)
        if ratio is None or wait is None or wait <= LOADER_BOUND_SHARE or not base.compute_throughput:
            return
        promised = base.compute_throughput / (base.throughput or base.compute_throughput)
        if ratio * (1.0 + self.noise()) >= promised:
            return
        count = int(first.candidate.get("num_workers", 0))
        above = [v for v in self.space.workers if v > count]
        if not above:
            return
        self.notes.append(f"{first.candidate.label()} measured x{ratio:.2f} and still waits for data {wait:.0%} "
                          f"of its step (the loader's promise: up to x{promised:.2f}): workers={above[0]} "
                          "measured before confirming")
        self._run(first.candidate.with_("num_workers", above[0], self.space.own), self.steps, "workers",
                  reserve=False)
        if not self.budget.allows(1 + MIN_CONFIRM_TRIALS, self._base_duration + MIN_CONFIRM_TRIALS * self._long_cost()):
            # What is left confirms the rung just measured (its run can open the round): another
            # exploration trial would leave the win unconfirmed.
            self._closing = True

    def _adopt(self, result: TrialResult) -> None:
        """A first trial that wins beyond twice the noise becomes what the next trials build on.

        (threads=1 at x6.5 under one hog stayed a side trial: amp and the workers were
        then tried on the spinning baseline, and the best pair, workers=2 with one
        thread, was never measured.) The confirmation still compares it with the baseline.
        """
        ratio = self.ratio(result)
        if result.ok and ratio is not None and ratio > (1.0 + self.noise()) ** 2:
            self.inc = result.candidate
            self.notes.append(f"{result.candidate.label()} measured x{ratio:.2f}: the next trials build on it")

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
