"""Provides the step anatomy: where a training step's compute goes (forward, backward, optimizer, other).

One definition for every front (DESIGN rule 7): the TUI's overview line, the
headless summary and `pitstop compare` all read `phase_split`. It covers the
measured steps (`RunState.measured_steps`: warm-up and marked steps out, the
same steps as the data-wait split) that carry phases (`Step.forward_s` ...);
steps without them (no backward: an inference loop, a record of an older
pitstop) are left out, and with none there is no figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis import format as fmt
from pitstop.analysis._context import WARMUP
from pitstop.analysis._state import RunState
from pitstop.analysis._stats import percentile
from pitstop.events import Step

# The phases in step order, with the short names the overview line uses.
PHASE_NAMES = ("forward", "backward", "optimizer", "other")
SHORT_NAMES = {"forward": "fwd", "backward": "bwd", "optimizer": "opt", "other": "other"}


@dataclass(frozen=True)
class PhaseSplit:
    """The median of each phase over the measured training steps that carry phases (seconds)."""

    steps: int  # measured steps with phases
    forward: float
    backward: float
    optimizer: float
    other: float
    clock: str  # "host" | "cuda" | "host+cuda": where the figures were timed (Step.phase_clock)
    # A torch optimizer stepped: a loop that updates by hand (word_language_model's manual SGD) has
    # no optimizer phase, and "optimizer 0.0 ms (0%)" would say it had one that cost nothing.
    optimizer_seen: bool = True

    def seconds(self) -> tuple[tuple[str, float], ...]:
        """(phase, median seconds) in step order; the optimizer only where one stepped."""
        opt = (("optimizer", self.optimizer),) if self.optimizer_seen else ()
        return (("forward", self.forward), ("backward", self.backward), *opt, ("other", self.other))

    def shares(self) -> tuple[tuple[str, float], ...]:
        """(phase, share of the four medians' sum): how a median step's compute divides; empty when all are 0."""
        total = sum(value for _, value in self.seconds())
        if total <= 0:
            return ()
        return tuple((name, value / total) for name, value in self.seconds())


def phase_split(run: RunState, warmup: int = WARMUP) -> PhaseSplit | None:
    """The run's step anatomy over its measured training steps; None when no such step carries phases."""
    return phase_split_of(run.measured_steps(warmup))


def phase_split_of(steps: Sequence[Step]) -> PhaseSplit | None:
    """`phase_split` over steps already chosen (the caller's measured steps, walked once)."""
    have = [s for s in steps if s.forward_s is not None and s.backward_s is not None
            and s.optimizer_s is not None and s.other_s is not None]
    if not have:
        return None
    found = {s.phase_clock or "host" for s in have}
    clocks = [c for c in ("host", "cuda") if c in found] + sorted(found - {"host", "cuda"})
    return PhaseSplit(
        steps=len(have),
        forward=percentile((s.forward_s for s in have), 50),  # type: ignore[misc]
        backward=percentile((s.backward_s for s in have), 50),  # type: ignore[misc]
        optimizer=percentile((s.optimizer_s for s in have), 50),  # type: ignore[misc]
        other=percentile((s.other_s for s in have), 50),  # type: ignore[misc]
        clock="+".join(clocks),
        optimizer_seen=any(s.source == "optimizer" for s in have),
    )


def shares_text(split: PhaseSplit, compact: bool = False, other: bool = False) -> str:
    """"fwd 40% · bwd 45% · opt 5%" (`compact`: "fwd 40 bwd 45 opt 5%"); "other" only when asked."""
    parts = [(SHORT_NAMES[name], frac) for name, frac in split.shares() if other or name != "other"]
    if not parts:
        return ""
    if compact:
        return " ".join(f"{name} {frac * 100:.0f}" for name, frac in parts) + "%"
    return " · ".join(f"{name} {fmt.pct(frac)}" for name, frac in parts)
