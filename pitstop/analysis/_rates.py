"""Provides the pace of training over some steps: steps/s, samples/s and the data-wait share, one definition.

The TUI's header, the headless status line, the end summary and the tuner's
measured windows all read their throughput here (the tuner folded
events with its own definition, and three fronts each cut their own recent
window of 50 steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis._context import WARMUP
from pitstop.analysis._state import RunState, training_part
from pitstop.events import Step

# The recent figures look at the last 50 measured steps: about a second of fast
# steps and a minute of slow ones, short enough to show a change the user just made.
RECENT_STEPS = 50


def is_measured(step: Step, warmup: int = WARMUP) -> bool:
    """A training step past the warm-up: the steps every figure of training counts (DESIGN rule 7)."""
    return step.step >= warmup and step.mark is None


def last_measured(run: RunState, n: int, warmup: int = WARMUP) -> list[Step]:
    """`run.measured_steps(warmup)[-n:]`, read from the end (that list walks all 20,000 kept steps, 4x a second)."""
    out: list[Step] = []
    each = run.evaluates_each_step()  # (then a step marked eval counts as its training part)
    for s in reversed(run.steps):
        if len(out) >= n:
            break
        if is_measured(s, warmup):
            out.append(s)
        elif each and s.mark == "eval" and s.step >= warmup:
            out.append(training_part(s))
    out.reverse()
    return out


@dataclass(frozen=True)
class Rates:
    """How fast some training steps went. None means unavailable (no time, or a batch size not seen)."""

    steps: int
    seconds: float  # the time the rates are per: wall time, or compute alone
    steps_per_s: float | None
    samples_per_s: float | None  # None unless every step reported its batch size, and some fetched a batch
    data_wait_frac: float | None  # data wait / wall time

    @property
    def counted(self) -> str:
        """"samples" when every step said its batch size, else "steps": what `value` counts per second."""
        return "samples" if self.samples_per_s is not None else "steps"

    @property
    def unit(self) -> str:
        """"samples/s" or "steps/s"."""
        return f"{self.counted}/s"

    @property
    def value(self) -> float | None:
        """The throughput in `unit`."""
        return self.samples_per_s if self.samples_per_s is not None else self.steps_per_s


def rates_of(steps: int, seconds: float, samples: int, with_samples: int, data_wait: float = 0.0,
             wall: float | None = None) -> Rates:
    """The one arithmetic: totals over some steps to rates (`wall` defaults to `seconds`)."""
    wall = seconds if wall is None else wall
    timed = steps > 0 and seconds > 0
    return Rates(
        steps=steps,
        seconds=seconds,
        steps_per_s=steps / seconds if timed else None,
        # None, not 0, where none of these steps fetched a batch (mnist_forward_forward trains 100
        # steps on one batch fetched before them: "0.00 samples/s" said it was not training).
        samples_per_s=samples / seconds if timed and with_samples == steps and samples > 0 else None,
        data_wait_frac=data_wait / wall if steps > 0 and wall > 0 else None,
    )


def rates(steps: Sequence[Step], compute_only: bool = False) -> Rates:
    """Rates over these steps; `compute_only`: per second of compute, the pace if data were free."""
    wall = sum(s.wall for s in steps)
    seconds = sum(s.compute for s in steps) if compute_only else wall
    known = [s.samples for s in steps if s.samples is not None]
    return rates_of(len(steps), seconds, sum(known), len(known), sum(s.data_wait for s in steps), wall)


def recent_rates(run: RunState, window: int = RECENT_STEPS, warmup: int = WARMUP) -> Rates:
    """Rates over the last `window` measured steps (warm-up and marked steps left out, as `summarize`)."""
    return rates(last_measured(run, window, warmup))
