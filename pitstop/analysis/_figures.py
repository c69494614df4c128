"""Provides the viewers' derived figures: the step split, the data verdict, profiler-window shares.

One definition each, shared by every screen that shows them (DESIGN rule 7):
the step split is over the measured steps that the data-wait finding reads
(`measure`: warm-up and marked steps out), and the Data screen's verdict *is*
that finding (the Data screen said "the loader keeps up" beside an
overview finding that said it cannot).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis._anatomy import PhaseSplit, phase_split_of
from pitstop.analysis._context import MIN_STEPS, WARMUP, Finding
from pitstop.analysis._stats import percentile
from pitstop.analysis._rules_loop import DATA_WAIT_FRAC
from pitstop.analysis._state import RunState
from pitstop.events import OpStat, ProfileWindow

# The phases a profiler window splits a step into (ProfileWindow.phases_ms), in step order.
PHASES = ("data", "forward", "backward", "optimizer", "sync", "other")
PHASE_LABELS = {
    "data": "data (main)",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "sync": "sync",
    "other": "other",
}
# Op names that say their phase (the record_function names torch puts around parts of a
# step, see profiling/_aggregate.py). Any other op ran in forward, the loss, the optimizer's
# arithmetic or, with num_workers=0, the dataset's __getitem__: OpStat does not say which.
_DATA_PREFIX = "enumerate(DataLoader)#"
_OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
_BACKWARD_PREFIX = "autograd::engine::evaluate_function:"


@dataclass(frozen=True)
class StepSplit:
    """Where the measured steps' time goes: data wait against compute."""

    steps: int  # measured steps (warm-up and marked steps left out)
    wall_p50: float  # seconds
    wait_p50: float
    compute_p50: float
    data_frac: float  # total data wait / total wall: the data-wait finding's share
    wait_p95: float
    wall_sum: float  # seconds over the measured steps
    wait_sum: float
    phases: PhaseSplit | None = None  # the same steps' anatomy (analysis._anatomy), when they carry it


def step_split(run: RunState, warmup: int = WARMUP) -> StepSplit | None:
    """The split over the measured steps (`RunState.measured_steps`, as `measure`); None before the first.

    The same figures as `measure` gives the rules (p50s by `percentile`, the
    share as total wait over total wall), computed with one sort per series:
    the viewer asks once a second and `measure` sorted each series four times
    (a quarter of the viewer's CPU at 1,000 events/s, benchmarks/viewer.py).
    """
    steps = run.measured_steps(warmup)
    if not steps:
        return None
    walls = sorted(s.wall for s in steps)
    waits = sorted(s.data_wait for s in steps)
    computes = sorted(s.compute for s in steps)
    # Summed in step order, as `measure` does: the same share to the last bit.
    wall_sum, wait_sum = sum(s.wall for s in steps), sum(s.data_wait for s in steps)
    if wall_sum <= 0:
        return None
    return StepSplit(len(steps), percentile(walls, 50), percentile(waits, 50), percentile(computes, 50),
                     wait_sum / wall_sum, percentile(waits, 95), wall_sum, wait_sum, phase_split_of(steps))


@dataclass(frozen=True)
class DataVerdict:
    """Whether the loader keeps up, said once for every screen."""

    bound: bool | None  # True: the data-wait finding fired; None: too few steps to say
    text: str
    severity: str = ""  # the finding's severity when bound


def data_verdict(run: RunState, found: Sequence[Finding], warmup: int = WARMUP,
                 split: StepSplit | None = None) -> DataVerdict:
    """The verdict *is* the data-wait finding: present means loader-bound, absent means it keeps up.

    `split` is the run's step_split when the caller has it (it sorts every measured step).
    """
    finding = next((f for f in found if f.rule == "data-wait"), None)
    if finding is not None:
        return DataVerdict(True, f"loader-bound: {finding.title}", finding.severity)
    split = split if split is not None else step_split(run, warmup)
    if split is None or split.steps < MIN_STEPS:
        have = split.steps if split is not None else 0
        return DataVerdict(None, f"too early to say: {have} of {MIN_STEPS} measured steps")
    return DataVerdict(False, f"the loader keeps up (data wait under {DATA_WAIT_FRAC:.0%} of the step)")


@dataclass(frozen=True)
class PhaseShare:
    """One phase of a profiled step: host milliseconds per step and its share of the phases' sum."""

    name: str
    label: str
    ms: float
    frac: float


def window_phases(window: ProfileWindow) -> tuple[PhaseShare, ...]:
    """The window's phases in step order; empty when the window split none."""
    known = [(name, window.phases_ms[name]) for name in PHASES if name in window.phases_ms]
    known += [(k, v) for k, v in window.phases_ms.items() if k not in PHASES]
    total = sum(max(0.0, v) for _, v in known)
    if total <= 0:
        return ()
    return tuple(PhaseShare(k, PHASE_LABELS.get(k, k), v, max(0.0, v) / total) for k, v in known)


def window_step_s(run: RunState | None, window: ProfileWindow) -> float | None:
    """Mean wall time of the steps a window profiled (they carry its overhead, as its op times do).

    Falls back to the sum of the window's phases when those steps left the run's
    bounded history; None when neither is known.
    """
    if run is not None:
        walls = [s.wall for s in run.steps if window.step_start <= s.step < window.step_end]
        if walls and sum(walls) > 0:
            return sum(walls) / len(walls)
    total_ms = sum(max(0.0, v) for v in window.phases_ms.values())
    return total_ms / 1000.0 if total_ms > 0 else None


def op_time_us(op: OpStat, window: ProfileWindow) -> float:
    """The time an op is ranked by: device self time on CUDA, self CPU time otherwise."""
    if window.device == "cuda" and op.device_self_us is not None:
        return op.device_self_us
    return op.self_us


def op_step_share(op: OpStat, window: ProfileWindow, step_s: float | None) -> float | None:
    """An op's time per profiled step as a fraction of the step (`op_time_us`); None without a step time."""
    if step_s is None or step_s <= 0:
        return None
    steps = max(1, window.step_end - window.step_start)
    return op_time_us(op, window) / 1e6 / steps / step_s


def op_phase(name: str) -> str | None:
    """The phase an op's own name tells ("data", "backward", "optimizer"); None when it does not."""
    if name.startswith(_DATA_PREFIX):
        return "data"
    if name.startswith(_OPTIMIZER_PREFIXES):
        return "optimizer"
    if name.startswith(_BACKWARD_PREFIX) or "backward" in name.lower():
        # aten::*_backward and autograd's evaluate_function run only in backward.
        return "backward"
    return None
