"""Provides whether a rank's extra time persists over the run: spans of steps (or profiler windows) judged one by one.

A median over the last 50 steps follows a rank that just became slow, and
also one that was slow for a while and has just recovered: at load 7.6-9.2 on
2 cores, the balanced 2-rank DDP job had rank 1's optimizer p50 in 25-step
spans at 24.6 ... 57.0 54.4 53.9 51.5 12.5 ms, and the last 50 steps called it
"a straggler (compute)" in 1 run of 9. So each span of the run is judged on the
same basis that named the rank (the leave-one-out test of `_job.stragglers`),
and the rank is named as a straggler of the run only when it is slower in at
least half of them; slower in fewer, but in the latest, its excess is recent
(and said so); slower in neither, it was a passing slowdown, now over.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pitstop.analysis._rankphases import rank_phases
from pitstop.analysis._stats import percentile
from pitstop.events import Step

# 25 steps: a span's median ignores a GC pause or a checkpoint (as the 50-step window does) and a
# run of 400 steps still has 16 spans to vote.
SPAN_STEPS = 25
# At most this many spans (longer spans on a long run): job_summary runs on every refresh of a live front.
MAX_SPANS = 32
# A span where a rank has fewer measured steps than this is not judged (as _job.MIN_STEPS).
MIN_SPAN_STEPS = 10
# Slower in at least this fraction of the judged spans: a straggler of the run.
PERSIST_FRACTION = 0.5

# (rank's time, median of the others', the job's step) -> whether that counts as slower
Holds = Callable[[float, float, float], bool]


@dataclass(frozen=True)
class Persistence:
    """In how many spans of the run a rank was slower on one basis, and whether in the latest."""

    spans: int  # spans judged
    held: int  # spans where the rank was slower
    span_steps: int  # steps per span; 0 when the spans are profiler windows
    latest: bool  # slower in the latest judged span

    @property
    def persistent(self) -> bool:
        """Slower in most of the run (or too short a run to tell: fewer than 2 spans)."""
        return self.spans < 2 or self.held >= PERSIST_FRACTION * self.spans

    @property
    def text(self) -> str:
        """"slower in 14 of the run's 16 spans of 25 steps", "slower in 4 of the run's 5 profiler windows"."""
        unit = f"spans of {self.span_steps} steps" if self.span_steps else "profiler windows"
        return f"slower in {self.held} of the run's {self.spans} {unit}"


def _span_bounds(ranks: Sequence[Sequence[Step]]) -> tuple[list[tuple[int, int]], int]:
    """[(first step, end step)] of the spans every rank covers, the latest last, aligned on the latest step."""
    if not ranks or any(not steps for steps in ranks):
        return [], SPAN_STEPS
    lo = max(steps[0].step for steps in ranks)
    hi = min(steps[-1].step for steps in ranks) + 1
    if hi - lo < MIN_SPAN_STEPS:
        return [], SPAN_STEPS
    size = max(SPAN_STEPS, math.ceil((hi - lo) / MAX_SPANS))
    bounds = []
    end = hi
    while end - lo >= MIN_SPAN_STEPS:
        bounds.append((max(lo, end - size), end))
        end -= size
    return bounds[::-1], size


def _figure(steps: Sequence[Step], basis: str, phase: str | None) -> float | None:
    if basis == "wall":
        return percentile((s.wall for s in steps), 50)
    if basis == "data-wait":
        return percentile((s.data_wait for s in steps), 50)
    if basis == "phase" and phase is not None:
        return rank_phases([s for s in steps if s.mark is None]).get(phase)
    return None


def step_persistence(ranks: Sequence[Sequence[Step]], index: int, basis: str, phase: str | None,
                     holds: Holds) -> Persistence | None:
    """Rank `index`'s persistence on a step basis ("wall", "data-wait", "phase" with `phase`), over spans of
    the steps every rank measured (`ranks`: each rank's measured steps, in step order); None when no span
    could be judged."""
    bounds, size = _span_bounds(ranks)
    numbers = [[s.step for s in steps] for steps in ranks]  # in step order: a span is a slice (bisect)
    verdicts = []
    for lo, hi in bounds:
        parts = [steps[bisect.bisect_left(n, lo):bisect.bisect_left(n, hi)] for steps, n in zip(ranks, numbers)]
        if any(len(p) < MIN_SPAN_STEPS for p in parts):
            continue
        figures = [_figure(p, basis, phase) for p in parts]
        mine = figures[index]
        others = [f for j, f in enumerate(figures) if j != index]
        if mine is None or any(f is None for f in others):
            continue
        job_step = percentile((percentile((s.wall for s in p), 50) for p in parts), 50)
        verdicts.append(holds(mine, percentile((f for f in others if f is not None), 50), job_step))
    if not verdicts:
        return None
    return Persistence(spans=len(verdicts), held=sum(verdicts), span_steps=size, latest=verdicts[-1])


def window_persistence(windows: Sequence[dict[int, tuple[float, float]]], index: int,
                       holds: Holds) -> Persistence | None:
    """Rank `index`'s persistence over every profiler window all ranks have (`windows`: each rank's
    {window start: (outside-collective seconds per step, wall per step)}); None when there are none."""
    common = sorted(set.intersection(*(set(w) for w in windows))) if windows else []
    verdicts = []
    for start in common:
        outside = [w[start][0] for w in windows]
        job_step = percentile((w[start][1] for w in windows), 50)
        ref = percentile((x for j, x in enumerate(outside) if j != index), 50)
        verdicts.append(holds(outside[index], ref, job_step))
    if not verdicts:
        return None
    return Persistence(spans=len(verdicts), held=sum(verdicts), span_steps=0, latest=verdicts[-1])


__all__ = ["PERSIST_FRACTION", "SPAN_STEPS", "Persistence", "step_persistence", "window_persistence"]
