"""Provides the ranks compared phase by phase (leave-one-out): which rank does extra work, and in which phase.

In DDP the wall times of the ranks come out equal (every rank waits for the
slowest in the all-reduce), so a mild straggler hides in the totals: on the
2-rank gloo job, rank 1's optimizer step doing extra matmuls took 10.0 ms per
step against rank 0's 0.4 ms in 40-42 ms steps, and the wall and
outside-collective bases said "straggler none". The step anatomy (Step.forward_s,
backward_s, optimizer_s, other_s and data_wait) shows it: each rank's phase
median against the median of the OTHER ranks' (leave-one-out: with 2 ranks a
median over all of them is their mean and halves the difference).

The rank that waits shows the same extra time in the phase where it waits:
rank 0's backward took 37.4 ms against rank 1's 21.8 ms. Backward is never
compared (DDP's all-reduce runs inside it, so its time cannot be told from
waiting). The other phases are ranked by how unlikely a collective wait is in
them: data wait (a DataLoader never waits for another rank), optimizer, other
(a loss all-reduce for logging lands there), forward (DDP's buffer broadcast
and FSDP's all-gathers land there); a rank's extra time in a later phase that
is about the size of an extra already named on another rank is that wait, not
a second straggler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis._anatomy import phase_split_of
from pitstop.analysis._stats import percentile
from pitstop.events import Step

# Compared phases, from the least to the most likely to hold another rank's wait.
PHASES = ("data wait", "optimizer", "other", "forward")
# A phase's extra time names a straggler from this share of the job's step. On the
# balanced 2-rank gloo job (2 cores shared with the launcher and other work) the
# compared phase medians of the two ranks differed by at most 0.1 ms of a 44 ms step;
# the mild straggler above was 9.6 ms of a 41 ms step (23%), and 6.3 ms of 58.8 ms (11%)
# on a busier machine.
PHASE_MIN_SHARE = 0.10
# Data wait jitters more with the machine's load: on the balanced ddp_gloo job in a loaded
# suite, rank 1 waited 3.1 ms against rank 0's 1.7 ms of a 10 ms step (14%), and was named.
DATA_MIN_SHARE = 0.20
# ...and at least a scheduler timeslice (3-4 ms under load): the balanced job's 5.9 ms steps
# in a loaded suite showed rank 0 waiting 2.5 ms against 1.3 ms over the last 50 steps (21%),
# with both ranks' whole-run p50 at 1.5 ms.
DATA_MIN_EXCESS_S = 0.003
# ...and when it is at least half again the others' time in that phase (a phase that
# is most of the step anyway moves by more than 10% of the step with the machine's load).
PHASE_MIN_REL = 0.5
# An extra time on another rank at least this fraction of one already named is taken for its wait.
MIRROR_FRACTION = 0.5


@dataclass(frozen=True)
class PhaseExcess:
    """One rank's time in one phase against the median of the other ranks' (seconds per step)."""

    phase: str
    time_s: float
    reference_s: float

    @property
    def extra_s(self) -> float:
        return self.time_s - self.reference_s


def rank_phases(steps: Sequence[Step]) -> dict[str, float]:
    """{phase: p50 seconds per step} over a rank's measured steps: data wait always, the rest where timed."""
    if not steps:
        return {}
    out = {"data wait": percentile((s.data_wait for s in steps), 50)}
    split = phase_split_of(steps)
    if split is not None:
        out.update(forward=split.forward, other=split.other)
        if split.optimizer_seen:
            out["optimizer"] = split.optimizer
    return out


def phase_excesses(ranks: Sequence[dict[str, float]]) -> list[list[PhaseExcess]]:
    """For each rank, each phase every rank has, against the median of the others' (leave-one-out)."""
    if len(ranks) < 2:
        return [[] for _ in ranks]
    shared = [p for p in PHASES if all(p in r for r in ranks)]
    out = []
    for i, mine in enumerate(ranks):
        others = ranks[:i] + ranks[i + 1:]
        out.append([PhaseExcess(p, mine[p], percentile((o[p] for o in others), 50)) for p in shared])
    return out


def phase_counts(x: PhaseExcess, job_step_s: float, min_excess_s: float) -> bool:
    """Whether a phase's extra time counts: over the floor, its share of the job's step, and half again the others'."""
    share = DATA_MIN_SHARE if x.phase == "data wait" else PHASE_MIN_SHARE
    floor = max(min_excess_s, DATA_MIN_EXCESS_S) if x.phase == "data wait" else min_excess_s
    return (x.extra_s >= floor and x.extra_s >= share * job_step_s
            and x.extra_s >= PHASE_MIN_REL * x.reference_s)


def lagging_phases(
    excesses: Sequence[Sequence[PhaseExcess]], job_step_s: float, min_excess_s: float,
    named: dict[int, float] | None = None,
) -> dict[int, PhaseExcess]:
    """{rank index: its phase with extra work} for the ranks that lag in a phase, beyond those in `named`.

    `named`: {rank index: extra seconds per step} of stragglers already found
    another way; an extra on another rank mirroring one of theirs is a wait.
    """
    candidates = sorted(
        ((PHASES.index(x.phase), -x.extra_s, i, x) for i, xs in enumerate(excesses) for x in xs
         if phase_counts(x, job_step_s, min_excess_s)),
        key=lambda c: (c[0], c[1], c[2]),
    )
    extra = dict(named or {})
    found: dict[int, PhaseExcess] = {}
    for _, _, i, x in candidates:
        if i in extra:
            continue
        if any(j != i and e >= MIRROR_FRACTION * x.extra_s for j, e in extra.items()):
            continue  # the time this rank waits for one already named
        extra[i] = x.extra_s
        found[i] = x
    return found


def main_phase(excesses: Sequence[PhaseExcess], job_step_s: float, min_excess_s: float) -> PhaseExcess | None:
    """The compared phase with the most extra time, when it counts (`phase_counts`); else None.

    Not held against the extra time a profiler window showed: profiling slows the
    profiled steps, most where ops are many (on the gloo job one window said
    +48.3 ms outside collectives where the unprofiled steps' optimizer said +20 ms).
    """
    best = max(excesses, key=lambda x: x.extra_s, default=None)
    if best is None or not phase_counts(best, job_step_s, min_excess_s):
        return None
    return best


__all__ = ["PHASES", "PhaseExcess", "lagging_phases", "main_phase", "phase_counts", "phase_excesses", "rank_phases"]
