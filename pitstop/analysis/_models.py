"""Provides the models a run trained one after another (a sweep's trials, layers trained in turn), with figures each.

An Optuna sweep in one process (6 trials, each a new model, SGD and a
DataLoader of batch 32, 64 or 128, 300 steps in all, 4 pruned) read as one
300-step run: its step-time p50 mixed batch sizes, its loss line mixed
trials. Each new optimizer that steps is in the record (a `Model` event whose
`optimizers` count grew, written as the step holding that optimizer's first
step ends): a model starts at the latest step that ended before it. A GAN's
optimizers both step within the first steps; a "model" of fewer than
MIN_MODEL_STEPS steps is joined to the next.

An optimizer built at the address of one freed before is a new one: the
agent knows optimizers by a number never reused (profiling/_optkeys.py), where
by `id()` an Optuna sweep of 6 trials read as 5 models.
"""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.analysis._stats import percentile
from pitstop.analysis._state import RunState

# Fewer steps than this before the next optimizer's first step: the same training (a GAN's generator and
# discriminator, built together, step in steps 0 and 1), not a model of its own.
MIN_MODEL_STEPS = 3


@dataclass(frozen=True)
class ModelSpan:
    """One model of a run that trained several in turn: its steps and its figures."""

    index: int  # 1-based, in training order
    first_step: int
    last_step: int
    measured: int  # steps in the figures: past the run's warm-up, not marked (eval, profiled)
    step_p50_s: float | None
    samples_per_s: float | None  # None when a measured step did not report its batch size
    last_loss: float | None  # its last finite loss read
    nonfinite: int  # its steps with a non-finite loss (of those read)

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step + 1


def _bounds(run: RunState) -> list[int]:
    """The step index each model starts at, the first at the run's first step kept."""
    steps = list(run.steps)
    if len(run.model_starts) < 2 or not steps:
        return []
    starts = [steps[0].step]
    for t in run.model_starts[1:]:
        # The Model event is written as the step that held the new optimizer's first step ends.
        first = next((s.step for s in reversed(steps) if s.t <= t), None)
        if first is None:
            continue  # before the steps kept
        if first - starts[-1] < MIN_MODEL_STEPS:
            starts[-1] = first  # joined to this one
        elif first > starts[-1]:
            starts.append(first)
    return starts if len(starts) > 1 else []


def model_spans(run: RunState, warmup: int) -> list[ModelSpan]:
    """Each model the run trained in turn, in order; [] for a run of one model (or of models trained together)."""
    starts = _bounds(run)
    if not starts:
        return []
    steps = list(run.steps)
    last = steps[-1].step
    ends = [s - 1 for s in starts[1:]] + [last]
    nonfinite = set(run.nonfinite_steps) | set(run.other_nonfinite_steps)  # either optimizer's (a GAN's G too)
    out = []
    for i, (lo, hi) in enumerate(zip(starts, ends), 1):
        mine = [s for s in steps if lo <= s.step <= hi and s.step >= warmup and s.mark is None]
        walls = [s.wall for s in mine]
        samples = [s.samples for s in mine]
        rate = None
        if mine and all(n is not None for n in samples) and sum(walls) > 0:
            rate = sum(n or 0 for n in samples) / sum(walls)
        finite = [v for k, v in run.losses.items() if lo <= k <= hi and v is not None]
        out.append(ModelSpan(
            index=i, first_step=lo, last_step=hi, measured=len(mine),
            step_p50_s=percentile(walls, 50) if walls else None, samples_per_s=rate,
            last_loss=finite[-1] if finite else None,
            nonfinite=sum(1 for k in nonfinite if lo <= k <= hi),
        ))
    return out


__all__ = ["MIN_MODEL_STEPS", "ModelSpan", "model_spans"]
