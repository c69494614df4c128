"""Provides the series windows a reader holds for each rank of a job: full for a node's worth of ranks, shared out above.

One process's RunState keeps up to 20,000 steps, 3,600 samples, 20,000 loss
steps and 50 profiler windows: read back from a record that is ~35 MiB of
objects and ~0.3 s of decoding (a rank of a synthetic 10 ms-step job: steps
19 MiB, samples 13 MiB, losses 2.5 MiB, profiler windows 0.6 MiB). Restoring
the 64 ranks of benchmarks/replay_memory.py --job 64:1 from their indexes,
as a viewer and `view --summary` do first, took 35 s (22.5 s of CPU) and
2.5 GiB; the viewer then peaked at 5.1 GiB.

A job of more than JOB_FULL_RANKS ranks shares a budget of each series out
between its ranks instead, never below what the job's figures read: the
straggler table compares each rank's last 50 measured steps and the profiler
windows among them, a rank's row its steps' medians and its running totals
(which cover the whole run whatever the windows). The rank a person looks at
is read with the full windows (`Timeline.focus`, the `r` key; rank 0's own
summary in `view --summary`).
"""

from __future__ import annotations

from pitstop.analysis import SERIES

# Up to a node's worth of ranks (8 GPUs) each rank keeps a process's full windows: 8 x ~35 MiB.
JOB_FULL_RANKS = 8
# Entries of each series held across all the ranks of a larger job, and the least a rank keeps.
# At 64 ranks: 1,000 steps a rank (10 s of 10 ms steps for a row's medians, two profiler windows
# of the default schedule) and 60 samples (30 s at 2 Hz). With 2,000 steps and 120 samples a rank
# `view --summary` of the 64-rank job took 2.6 s of CPU, 7.2 s of it (under cProfile) decoding them.
JOB_BUDGET = {"step": 64_000, "sample": 3_840, "loss": 64_000, "profile": 320}
# A rank keeps at least the 50 steps (and warm-up) the straggler table compares, and the five
# profiler windows it takes the median of.
RANK_FLOOR = {"step": 500, "sample": 60, "loss": 500, "profile": 5}


def job_limits(ranks: int) -> dict[str, int] | None:
    """The series limits of each rank of a job of `ranks` processes; None: every rank keeps its full windows."""
    if ranks <= JOB_FULL_RANKS:
        return None
    return {kind: max(RANK_FLOOR[kind], JOB_BUDGET[kind] // ranks) for kind in SERIES if kind in JOB_BUDGET}


__all__ = ["JOB_FULL_RANKS", "job_limits"]
