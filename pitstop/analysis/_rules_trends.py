"""Provides the rules that read a run over time: memory that creeps up, stalls at every epoch boundary."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pitstop.analysis import format as fmt
from pitstop.analysis._context import Context, Finding
from pitstop.analysis._loaderfix import loader_fix
from pitstop.analysis._stats import percentile
from pitstop.events import Step

# A creep is judged over at least 200 steps and 8 distinct readings: host RSS is
# read every ~0.5 s by the writer thread, so fast steps share a reading, and
# fewer readings cannot tell a slope from the allocator's first growth.
CREEP_MIN_STEPS = 200
CREEP_MIN_READINGS = 8
# It must grow by at least 64 MiB and 5% of where it started over the window:
# caches, the allocator's pools and a profiler window's buffers move RSS by tens
# of MiB once (the demo: +290 MiB at its first profiler window, then flat).
CREEP_MIN_BYTES = 64 << 20
CREEP_MIN_FRAC = 0.05
# ...and still be growing in the last quarter at a quarter of its mean rate:
# a warm-up that levels off (every run) is not a leak.
CREEP_TAIL = 0.25
# Theil-Sen over at most 200 points (40,000 pairs) keeps the rule cheap on 20,000 steps.
CREEP_POINTS = 200
# Time to the limit under which the creep is high: it will end the run within a working session.
CREEP_URGENT_S = 2 * 3600.0

# An epoch's first batches wait for its workers to start (fork, dataset copy,
# worker_init_fn) when persistent_workers is off. Counted over the first 2 steps
# of each epoch: the first waits for start-up plus one batch, the second for the
# rest of the prefetch.
EPOCH_HEAD_STEPS = 2
# The spike must be at least 2 median steps and 20 ms (a timer tick on fast steps
# is not a stall), seen at 2 epoch boundaries, and cost 1% of the time.
EPOCH_SPIKE_STEPS = 2.0
EPOCH_SPIKE_MIN_S = 0.020
EPOCH_MIN_BOUNDARIES = 2
EPOCH_MIN_SHARE = 0.01
EPOCH_MEDIUM_SHARE = 0.05


def _theil_sen(points: Sequence[tuple[float, float]]) -> float:
    """Median slope over every pair of points (robust to a jump or an outlier reading)."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    return percentile(slopes, 50) if slopes else 0.0


def _quarter_medians(points: Sequence[tuple[float, float]]) -> list[float]:
    n = len(points)
    return [percentile((y for _, y in points[n * q // 4: n * (q + 1) // 4]), 50) for q in range(4)]


def _creep(steps: list[Step], field: str) -> tuple[float, float, float, float, int] | None:
    """(bytes per step, growth over the window, first reading, last reading, readings) of a steady creep."""
    points = [(float(s.step), float(getattr(s, field))) for s in steps if getattr(s, field) is not None]
    if len(points) < 4 or points[-1][0] - points[0][0] < CREEP_MIN_STEPS:
        return None
    readings = len({y for _, y in points})
    if readings < CREEP_MIN_READINGS:
        return None
    stride = max(1, math.ceil(len(points) / CREEP_POINTS))
    sample = points[::stride]
    slope = _theil_sen(sample)
    span = points[-1][0] - points[0][0]
    growth = slope * span
    m1, m2, m3, m4 = _quarter_medians(sample)
    if growth < max(CREEP_MIN_BYTES, CREEP_MIN_FRAC * m1):
        return None
    if not (m1 < m2 < m3 < m4) or m4 - m3 < CREEP_TAIL * growth / 4:
        return None
    return slope, growth, points[0][1], points[-1][1], readings


def memory_creep(ctx: Context) -> Finding | None:
    """Host RSS or CUDA allocated memory grows steadily from step to step: something keeps every step's tensors."""
    run = ctx.run
    steps = [s for s in run.steps if s.step >= 3]  # every step: memory does not care about marks
    if len(steps) < 2:
        return None
    seconds_per_step = (steps[-1].t - steps[0].t) / max(1, steps[-1].step - steps[0].step)
    found = None
    for field, what in (("mem_allocated", "CUDA allocated memory"), ("host_rss", "host RSS")):
        creep = _creep(steps, field)
        if creep is not None:
            found = (field, what, creep)
            break
    if found is None:
        return None
    field, what, (slope, growth, start, last, readings) = found
    limit, limit_name = _limit(ctx, field)
    evidence = [
        f"{what} grew {fmt.size(growth)} over steps {steps[0].step}-{steps[-1].step} "
        f"({fmt.size(slope * 1000)} per 1,000 steps, a fit over {readings} readings that ended at {fmt.size(last)}; "
        f"the first read {fmt.size(start)})",
        "it kept growing to the last quarter of the window: not a warm-up that levels off",
    ]
    to_limit = None
    if limit is not None and slope > 0 and seconds_per_step > 0:
        to_limit = max(0.0, (limit - last) / slope * seconds_per_step)
        evidence.append(f"at this rate it reaches the {limit_name} ({fmt.size(limit)}) in {fmt.span(to_limit)} "
                        f"(~{fmt.duration(seconds_per_step)} per step)")
    else:
        evidence.append(f"time to the limit: unknown ({limit_name})")
    cuda = field == "mem_allocated"
    fix = (
        "running_loss += loss.item()          # not `+= loss`: a tensor keeps its graph alive\n"
        "history.append(out.detach().cpu())  # not `append(out)`: keep copies, not live tensors\n"
        + ("# between evaluations: with torch.no_grad(): ...; del tensors kept only for logging\n" if cuda else
           "# a cache keyed by index or step (memoised samples, a list in the dataset) grows the same way\n")
        + "# find what grows: tracemalloc snapshots, or torch.cuda.memory._record_memory_history()"
    )
    return Finding(
        rule="memory-creep",
        title=f"{what[0].upper()}{what[1:]} creeps up every step",
        severity="high" if to_limit is not None and to_limit < CREEP_URGENT_S else "medium",
        evidence=evidence,
        cause=(
            "something keeps a reference to every step's tensors: a loss summed as a tensor (its graph), "
            "outputs or losses appended to a list, a cache that grows with the steps"
            + ("" if cuda else ", or Python objects accumulated by the loop or the dataset")
        ),
        fix=fix,
        gain=("the run reaches its end instead of an out-of-memory kill"
              + (f" (in ~{fmt.span(to_limit)} at this rate)" if to_limit is not None else "")),
        knob=None,
    )


def _limit(ctx: Context, field: str) -> tuple[float | None, str]:
    """(bytes, what) the memory can grow to; None with the reason when the record does not say."""
    if field == "mem_allocated":
        total = ctx.run.gpu_mem_total
        return (float(total), "GPU's memory") if total else (None, "the GPU's memory size was not sampled")
    rt = ctx.run.runtime
    total = rt.host_mem_total if rt is not None else None  # MemTotal or a smaller cgroup limit; None in older records
    return (float(total), "memory this process may use") if total else (
        None, "the record does not carry the machine's memory size")


def _epoch_lengths(ctx: Context) -> list[int]:
    """Steps per epoch the training loader implies: with and without drop_last, in steps of its batches."""
    dl = ctx.loader()
    if dl is None or not dl.dataset_len or not dl.batch_size:
        return []
    known = [s.samples for s in ctx.steps if s.samples]
    per_step = round(percentile(known, 50) / dl.batch_size) if known else 1  # gradient accumulation
    per_step = max(1, per_step)
    lengths = {math.ceil(dl.dataset_len / dl.batch_size), dl.dataset_len // dl.batch_size}
    return sorted({n // per_step for n in lengths if n // per_step >= 2 * EPOCH_HEAD_STEPS})


def epoch_stall(ctx: Context) -> Finding | None:
    """The first batches of each epoch wait for new workers: persistent_workers is off."""
    dl = ctx.loader()
    if dl is None or dl.num_workers <= 0 or dl.persistent_workers or ctx.wall_p50 is None:
        return None
    # Every step, eval-marked ones too: an evaluation between epochs marks the new epoch's first
    # step, and its data_wait still counts only the training loader's batches.
    steps = {s.step: s for s in ctx.run.steps if s.mark != "profiled"}
    waits = [s.data_wait for s in ctx.steps]
    if not waits:
        return None
    base = percentile(waits, 50)
    best = None
    for length in _epoch_lengths(ctx):
        starts = [b for b in range(length, max(steps) + 1, length) if b in steps and b - 1 in steps]
        excess = [sum(max(0.0, steps[b + i].data_wait - base) for i in range(EPOCH_HEAD_STEPS) if b + i in steps)
                  for b in starts]
        if len(excess) >= EPOCH_MIN_BOUNDARIES and (best is None or sum(excess) > sum(best[1])):
            best = (length, excess, starts)
    if best is None:
        return None
    length, excess, starts = best
    spike = percentile(excess, 50)
    wall = sum(s.wall for s in steps.values() if s.step >= min(steps) and s.step >= 3)
    share = sum(excess) / wall if wall > 0 else 0.0
    if spike < max(EPOCH_SPIKE_STEPS * ctx.wall_p50, EPOCH_SPIKE_MIN_S) or share < EPOCH_MIN_SHARE:
        return None
    return Finding(
        rule="epoch-stall",
        title="Every epoch starts with a stall: DataLoader workers restart",
        severity="medium" if share >= EPOCH_MEDIUM_SHARE else "low",
        evidence=[
            f"the first {EPOCH_HEAD_STEPS} steps of each epoch wait {fmt.duration(spike)} more for data than usual "
            f"(median over {len(starts)} epoch starts, steps {', '.join(str(b) for b in starts[:5])}"
            f"{', ...' if len(starts) > 5 else ''}; a step is {fmt.duration(ctx.wall_p50)})",
            f"{fmt.share(sum(excess), wall, fmt.seconds)} of the wall time of the steps measured",
            f"training DataLoader: num_workers={dl.num_workers}, persistent_workers=False, "
            f"{dl.dataset_len} samples / batch_size={dl.batch_size} = {length} steps per epoch",
        ],
        cause=("without persistent_workers every epoch shuts its worker processes down and starts new ones: "
               "each forks, copies the dataset object, runs worker_init_fn and refills its prefetch before "
               "the first batch arrives"),
        fix=loader_fix(dl, ["dataset", "...", f"num_workers={dl.num_workers}", "persistent_workers=True"]),
        gain=f"~{fmt.share(sum(excess), wall, fmt.seconds)} of the steps' wall time ({fmt.duration(spike)} per epoch)",
        knob="num_workers",
    )
