"""Provides the DataLoader worker model: the step a measured loader would give with N workers, and the N to name.

Three things bound a step once its batches load in workers, each read from
the run: the main process still computes (`compute`, plus taking each batch
from a worker); W workers hand over at most W batches per time one batch takes
to load (`load / W`); and all the CPU the step needs, the model's and the
loading's, must fit the cores other processes leave (`cpu / cores`). The CPU is
the main process's measured CPU per step (with its workers', when it has
some): a main process that waits for data holds no core while it waits, so the
CPU it spends loading moves to the workers, and reads that sleep cost no CPU
at all. On the 2-core VM a loader of torch ops at num_workers=0 (27.2 ms a
step, 89% waiting) went x1.01 with 1 worker and x1.96 with 2, where a rule that
kept a core for the main process named 1 worker and "up to 1.12x".

Workers also cost: each start (once per DataLoader when persistent, once per
epoch when not) and each batch carried across processes. Below MIN_GAIN the
model's gain is smaller than what it leaves out (torch's intra-op threads
losing a core to a worker): minGPT's adder, 11% data wait, was promised 1.12x
for 1 worker and measured x0.9; pytorch/examples' mnist, 16%, 1.20x and x0.94.

Workers that take the cores also take them from torch's intra-op threads: a
parallel region waits for every thread, and one without a core stalls the whole
op. calibration.py's loader of torch ops (2 cores, 2 intra-op threads, 37 ms a
step) went x1.12 with 2 workers, where the bounds said ~1.6x; at load 4-7 the
same 2 workers took 12.1 s and, with `torch.set_num_threads(1)` beside them,
6.8 s. So where workers and threads would not fit the usable cores the plan
names the threads as well (`WorkerPlan.threads`), and counts the compute as
if it slowed in proportion to the cores it kept busy (`parallel`: a bound, as
small ops lose nothing).
Pure functions over plain numbers: the rules read the run, this reads numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# What the main process pays to take one batch from a worker (a queue read, the
# tensors rebuilt from shared memory), on the 2-core VM with 32 samples of 256
# floats: ~0.3 ms a batch beside 0.02 ms for an in-process fetch of a ready batch.
IPC_S = 0.3e-3
# One worker's start (fork, its first batch's way through the queue): the Optuna sweep of
# 6 trials, one DataLoader each over 50 steps of ~1 ms, went from 0.41-0.45 s to 1.16-1.21 s
# of training with workers, ~0.12 s a trial for its workers' start.
WORKER_START_S = 0.06
# A gain under 1.15x is within what the model leaves out: the adder's 1.05x by the
# bounds above measured x0.9 (the model's 2 intra-op threads lost a core to the worker).
MIN_GAIN = 1.15
# The workers named reach 90% of the gain the bounds allow: the rest costs more
# workers than it is worth (each holds a copy of the dataset object and memory).
CAPTURE = 0.9
# At most 8 workers per free core, however little CPU the loading uses (reads that
# sleep), and never more than 32: memory and start-up grow with each.
WORKERS_PER_CORE = 8
MAX_WORKERS = 32


@dataclass(frozen=True)
class LoaderFacts:
    """What the run measured of its loader, per training step (seconds; CPU in core-seconds)."""

    wall: float  # mean step
    compute: float  # mean step outside the data wait
    load: float  # wall time one batch takes to load in one process
    workers: int  # the loader's workers now
    cores: float | None  # cores left to this run: usable minus what other processes kept busy; None unknown
    cpu: float | None  # CPU per step of the main process and its workers; None when unread
    steps_per_start: float | None  # training steps per worker start (steps per DataLoader); None: many
    contended: bool = False  # its threads waited for a core: the free cores, and so the gain, are a bound
    usable: int | None = None  # the cores it may run on: the most workers named on a contended machine
    threads: int | None = None  # torch's intra-op threads in the main process; None unknown


@dataclass(frozen=True)
class WorkerPlan:
    """The workers to name, the mean step they predict, and what stops more workers from helping."""

    workers: int
    step: float  # predicted mean step with them
    stop: str  # why not more, in words
    bound: bool  # True: the step is a floor (the CPU was not read), the gain an upper bound
    threads: int | None = None  # the intra-op threads to set beside the workers; None: leave them

    def gain(self, wall: float) -> float:
        return wall / self.step if self.step > 0 else 1.0

    def named(self) -> str:
        """The configuration its step is for: "1 worker", or "1 worker with torch.set_num_threads(1)".

        A count held back still names the threads its step assumes: on the demo's quiet
        record 1 worker "would give 0.81x" with the compute on 1 thread, a figure a
        user (and calibration) checked against 1 worker beside torch's 2 threads.
        """
        count = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        return f"{count} with torch.set_num_threads({self.threads})" if self.threads else count


def _startup(f: LoaderFacts, workers: int) -> float:
    """Start-up per step: each worker started once per `steps_per_start` steps (0 when many steps share it)."""
    if not f.steps_per_start:
        return 0.0
    return workers * WORKER_START_S / f.steps_per_start


def threads_with(f: LoaderFacts, workers: int) -> int | None:
    """The intra-op threads to set beside `workers` workers busy loading, or None to leave torch's.

    Only where the workers and threads together would not fit the usable cores, and the
    loading takes cores: not reads that mostly wait, where the CPU was read to say so.
    Unread, the loading is taken to compute (calibration's frequent-eval, 19 steps too short
    to read: 1 worker beside 2 threads on 2 cores, "at most 1.20x", measured x0.75).
    """
    usable = f.usable or (int(f.cores) if f.cores is not None else None)
    if not f.threads or f.threads <= 1 or usable is None or workers + f.threads <= usable:
        return None
    if f.cpu is not None and f.cpu - f.compute < 0.5 * f.load:
        return None  # reads that wait: the workers sleep, the threads keep their cores
    return max(1, usable - workers)


def parallel(f: LoaderFacts) -> float:
    """The cores the compute kept busy: torch's threads, or fewer where the CPU read says so.

    Without workers the main process loads each batch on one core during the wait, so
    the CPU left over is the compute's. Threads that waited for a core, or ops too small
    to split, keep fewer cores busy than there are threads, and lose that much less when
    cut: pytorch/examples' super_resolution beside other work (2 threads, 0.98 cores for
    the whole step, 97 ms of its 418 waiting) was told 1 worker with 1 thread "would give
    0.65x" (its compute doubled), and measured x1.7 beside CPU hogs.
    """
    if not f.threads:
        return 1.0
    if f.workers or f.cpu is None or f.compute <= 0:
        return float(f.threads)
    return min(float(f.threads), max(1.0, (f.cpu - f.load) / f.compute))


def bounds(f: LoaderFacts, workers: int) -> dict[str, float]:
    """The three floors of the step with `workers` workers (the CPU's only when read), start-up included."""
    extra = _startup(f, workers)
    threads = threads_with(f, workers)
    # Fewer threads: the compute counted as slowing in proportion to the cores it kept busy, a bound.
    compute = f.compute * max(1.0, parallel(f) / threads) if threads else f.compute
    out = {"compute": compute + IPC_S + extra, "loader": f.load / workers + extra}
    if f.cpu is not None and f.cores is not None:
        cpu = (f.cpu + IPC_S) / max(f.cores, 1.0)
        # On a contended machine the cores it gets move with everyone else's load: moving
        # the loading to workers is not counted to make the step longer than it is.
        out["cpu"] = (min(cpu, f.wall) if f.contended else cpu) + extra
    return out


def step_with(f: LoaderFacts, workers: int) -> float:
    """Predicted mean step with `workers` workers: the highest of its floors."""
    return max(bounds(f, workers).values())


def cap(f: LoaderFacts) -> int:
    """Most workers worth naming: 8 per free core (reads that sleep share a core), 32 at most."""
    return max(1, min(MAX_WORKERS, int(WORKERS_PER_CORE * max(f.cores or 1.0, 1.0))))


def plan(f: LoaderFacts) -> WorkerPlan:
    """The fewest workers that reach CAPTURE of the best gain the floors allow, and why no more.

    Without the CPU read, the workers are held to the free cores (a loading that
    computes needs a core each) and the step is a floor: the gain an upper bound.
    """
    if f.cores is None:
        top = min(MAX_WORKERS, needed(f))  # no core count: the loader's own need, as a bound
    elif f.cpu is None:
        top = max(1, int(f.cores) - 1)
    elif f.contended:
        # A starved loader's low CPU is no sign of I/O: no more workers than cores.
        top = max(1, min(cap(f), f.usable or int(f.cores)))
    else:
        top = cap(f)
    steps = {w: step_with(f, w) for w in range(1, top + 1)}
    best = min(steps.values())
    want = 1 + CAPTURE * (f.wall / best - 1)
    # Where no count gains (the floors above the step itself), the one that loses least.
    chosen = next((w for w in sorted(steps) if f.wall / steps[w] >= want - 1e-9), min(steps, key=steps.__getitem__))
    floors = bounds(f, chosen + 1) if chosen < top else bounds(f, chosen)
    limit = max(floors, key=lambda k: floors[k])
    if limit == "compute":
        stop = f"beyond {chosen}, the model's own compute ({f.compute * 1e3:.1f} ms a step) sets the pace"
    elif f.contended and (limit == "cpu" or chosen == top):
        stop = (f"held to {top} for {f.usable or int(f.cores)} usable core(s): its threads waited for a core on "
                f"a contended machine, where the cores workers get move with everyone else's load")
    elif limit == "cpu" and f.cpu is not None:
        stop = (f"beyond {chosen}, the CPU sets the pace: the model and the loading take "
                f"{f.cpu * 1e3:.1f} ms of CPU a step, and {f.cores:.1f} core(s) are free for it")
    elif chosen < top:
        stop = f"beyond {chosen}, each more worker gains under {1 - CAPTURE:.0%} of what is left"
    elif f.cores is None:
        stop = f"{top} keep the loader up with compute; the machine's core count was not reported"
    elif f.cpu is None:
        stop = (f"held to {top} for {f.cores:.0f} usable core(s), one kept for the main process: the CPU "
                "the loading takes was not read, so whether more fit is unknown")
    else:
        stop = f"more would still help, but {top} is the most named for {f.cores:.1f} free core(s)"
    extra = _startup(f, chosen)
    if extra > 0.1 * steps[chosen] and f.steps_per_start:
        stop += (f"; each DataLoader feeds ~{f.steps_per_start:.0f} steps, and its workers' start-up "
                 f"(~{WORKER_START_S * 1e3:.0f} ms each) costs {extra * 1e3:.2f} ms a step")
    return WorkerPlan(workers=chosen, step=steps[chosen], stop=stop, bound=f.cpu is None or f.cores is None or f.contended,
                      threads=threads_with(f, chosen))


def needed(f: LoaderFacts) -> int:
    """Workers for the loader alone to keep up with compute: ceil(load / compute)."""
    # 1e-9: 0.03 - 0.02 is 0.00999..., and a ratio of 2.0000000000000004 is 2 workers.
    return max(1, math.ceil(f.load / max(f.compute, 1e-4) - 1e-9))
