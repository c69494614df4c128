"""Provides CPU figures in one unit, cores: the main process, each DataLoader's workers apart, the machine.

Sampler readings are percent of one core per process (`Proc.cpu`) and percent
of the whole machine (`Sample.system_cpu`); every front shows them converted
to cores, saying so ("main 93%" of a core beside "system 79%" of the
machine). Workers of different loaders are never summed into one figure.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pitstop.analysis._state import RunState
from pitstop.analysis._stats import median_and_spread, percentile
from pitstop.events import Sample, Step

# A process's threads waited, ready to run, a quarter of a core's time for a CPU (Linux run
# delay; ~0 on a quiet machine, 1.3-1.6 cores with torch's 2 threads beside the test suite on
# the 2-core VM): the machine is contended (the cpu-contended rule, the straggler floor).
CONTENDED_WAIT_CORES = 0.25
# From 0.9 cores' worth of waiting the bound is over 10x: no longer worth stating.
STALL_BOUND_MAX = 0.9
# The bound reads the mean wait from the sampler's readings while the measured steps ran (one a
# second), and one reading swings: calibration's threads-hog (2 threads beside a hog, 2 cores) read
# 0.34-0.78 cores a second, and its quick runs' 2-3 readings over ~2 s of steps gave means of
# 0.39-0.74; the 0.39 stated "at most 1.65x" where 1 thread measured 1.95x. So the bound takes the
# mean plus two standard errors of it, and wants at least STALL_BOUND_READINGS readings.
STALL_BOUND_READINGS = 3
# The latest reading within the last 5 samples (2-5 s at 1-2 Hz): older is stale for a live line.
STATUS_SAMPLES = 5


@dataclass(frozen=True)
class LoaderCpu:
    """CPU of the DataLoader workers of one loader, in cores (1.0 = one core busy)."""

    loader: int | None  # DataLoaderInfo.id; None for workers whose loader is not known
    label: str  # "train", "eval loader 2 (ValSet)", "" when the loader is not known
    workers: int  # worker processes: in the reading, or the most seen at once for a mean
    cores: float | None


@dataclass(frozen=True)
class CpuFigures:
    """CPU use in one unit, cores: the main process, each loader's workers, the whole machine."""

    main: float | None
    loaders: tuple[LoaderCpu, ...]
    machine: float | None  # cores busy on the whole machine (all its processes)
    machine_cores: int | None  # logical CPUs of the machine
    machine_pct: float | None  # kept for when the CPU count is unknown


def training_loader_id(run: RunState) -> int | None:
    """The id of the training loader (`RunState.training_loader`: the one whose batches fed the latest step)."""
    info = run.training_loader()
    return info.id if info is not None else None


def loader_label(run: RunState, loader: int | None) -> str:
    """"train" for the training loader, "eval loader 2 (ValSet)" for another, "" when unknown.

    The training loader is the one whose batches feed optimizer steps
    (`Step.loader`); any other loader iterated is an evaluation's (DESIGN rule 7).
    """
    if loader is None:
        return ""
    train = training_loader_id(run)
    if loader == train:
        return "train"
    info = run.dataloaders.get(loader)
    name = f"loader {loader}" if train is None else f"eval loader {loader}"
    return f"{name} ({info.dataset})" if info is not None and info.dataset else name


def _cores(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def _machine_cores(run: RunState) -> int | None:
    return run.runtime.cpu_count if run.runtime is not None else None


def _worker_groups(run: RunState, sample: Sample) -> dict[int | None, list[float | None]]:
    """Worker CPU percents of one sample, by the loader they serve."""
    groups: dict[int | None, list[float | None]] = {}
    for p in sample.procs:
        if p.role == "worker":
            groups.setdefault(p.loader, []).append(p.cpu)
    return groups


def _loader_order(run: RunState, loader: int | None) -> tuple[int, int]:
    train = training_loader_id(run)
    return (0 if loader == train and loader is not None else 1 if loader is not None else 2, loader or 0)


def cpu_now(run: RunState, samples: int = STATUS_SAMPLES) -> CpuFigures:
    """The latest reading of each CPU figure within the last `samples` samples (older is stale)."""
    main = machine = None
    loaders: tuple[LoaderCpu, ...] | None = None
    for i in range(len(run.samples) - 1, max(-1, len(run.samples) - 1 - samples), -1):
        sample = run.samples[i]
        if main is None:
            main = next((p.cpu for p in sample.procs if p.role == "main" and p.cpu is not None), None)
        if loaders is None and sample.procs:
            groups = _worker_groups(run, sample)
            loaders = tuple(
                LoaderCpu(loader, loader_label(run, loader), len(cpus),
                          _cores(sum(c for c in cpus if c is not None)) if any(c is not None for c in cpus) else None)
                for loader, cpus in sorted(groups.items(), key=lambda kv: _loader_order(run, kv[0]))
            )
        if machine is None:
            machine = sample.system_cpu
    return _figures(run, _cores(main), loaders or (), machine)


def cpu_mean(run: RunState) -> CpuFigures:
    """Means over the run: main and machine over every sample; each loader's workers while they ran.

    Per-loader figures come from the samples kept (MAX_SAMPLES: the last 30-60
    minutes of a longer run); workers of different loaders are never summed.
    """
    sums: dict[int | None, float] = {}
    counts: dict[int | None, int] = {}
    most: dict[int | None, int] = {}
    for sample in run.samples:
        for loader, cpus in _worker_groups(run, sample).items():
            most[loader] = max(most.get(loader, 0), len(cpus))
            known = [c for c in cpus if c is not None]
            if known:
                sums[loader] = sums.get(loader, 0.0) + sum(known)
                counts[loader] = counts.get(loader, 0) + 1
    loaders = tuple(
        LoaderCpu(loader, loader_label(run, loader), most[loader],
                  _cores(sums[loader] / counts[loader]) if counts.get(loader) else None)
        for loader in sorted(most, key=lambda k: _loader_order(run, k))
    )
    main = run.cpu_main_sum / run.cpu_main_n if run.cpu_main_n else None
    machine = run.system_cpu_sum / run.system_cpu_n if run.system_cpu_n else None
    return _figures(run, _cores(main), loaders, machine)


def _figures(run: RunState, main: float | None, loaders: tuple[LoaderCpu, ...], machine_pct: float | None) -> CpuFigures:
    count = _machine_cores(run)
    machine = machine_pct / 100.0 * count if machine_pct is not None and count else None
    return CpuFigures(main=main, loaders=loaders, machine=machine, machine_cores=count, machine_pct=machine_pct)


def _workers_label(group: LoaderCpu) -> str:
    return f"{group.label} workers" if group.label else "workers"


def cpu_text(cpu: CpuFigures, short: bool = False) -> str:
    """CPU in one unit, cores (1.0 = one core busy), and saying so.

    Long (summary): "main 0.93 cores, train workers 1.60 cores (2), machine 1.58 of 2 cores".
    Short (status line): "main 0.93, train workers 1.60, machine 1.58 of 2 (cores)".
    """
    unit = "" if short else " cores"
    parts = ["main " + (f"{cpu.main:.2f}{unit}" if cpu.main is not None else "n/a")]
    for group in cpu.loaders:
        cores = f"{group.cores:.2f}{unit}" if group.cores is not None else "n/a"
        parts.append(f"{_workers_label(group)} {cores}" + ("" if short else f" ({group.workers})"))
    if cpu.machine is not None:
        parts.append(f"machine {cpu.machine:.2f} of {cpu.machine_cores}{unit}")
    elif cpu.machine_pct is not None:
        parts.append(f"machine {cpu.machine_pct:.0f}% (CPU count not reported)")
    return ", ".join(parts) + (" (cores)" if short else "")


def other_cores(sample: Sample, cpus: int | None) -> float | None:
    """Cores other processes kept busy in one reading: the machine's busy cores minus the run's process tree.

    None when the machine's figure, its CPU count or any of the run's own processes is unread.
    """
    if sample.system_cpu is None or not cpus or any(p.cpu is None for p in sample.procs):
        return None
    mine = sum(p.cpu or 0.0 for p in sample.procs) / 100.0
    return max(0.0, sample.system_cpu / 100.0 * cpus - mine)


@dataclass(frozen=True)
class Contention:
    """What wants the machine's cores while training steps ran: torch's threads, the workers, other processes."""

    threads: int  # torch's intra-op threads (torch.get_num_threads())
    workers: int  # DataLoader worker processes of the training loader
    worker_cores: float  # cores those workers were measured to use
    other: float  # cores other processes kept busy (median of the readings while steps ran)
    cores: int  # the machine's logical CPUs
    usable: int  # the CPUs this process may run on
    p50: float  # median step wall time, seconds
    p95: float
    follows: bool  # steps were slower while the other processes were busier
    waiting: float | None = None  # cores' worth of its threads ready to run but waiting for a CPU (median)
    waiting_mean: float | None = None  # the same, mean of the readings
    waiting_high: float | None = None  # that mean plus two standard errors: what bounds the stalled share
    waiting_readings: int = 0  # the readings behind them

    @property
    def demand(self) -> float:
        """Cores wanted at once: every intra-op thread, the workers' measured use, everyone else's."""
        return self.threads + self.worker_cores + self.other

    @property
    def swing(self) -> float:
        return self.p95 / self.p50 if self.p50 > 0 else 1.0

    def free_threads(self) -> int:
        """Threads that fit the cores the workers and the other processes leave (at least one)."""
        left = min(self.usable, self.cores - self.other) - self.worker_cores
        return max(1, int(left + 0.5))


def stall_bound(waiting_mean: float | None) -> float | None:
    """The most a step can gain once its threads stop waiting for a core: 1 / (1 - waiting), or None.

    A parallel op stalls while any of its threads waits for a core, and the share
    of the time at least one thread waits is at most the mean number waiting
    (P(N >= 1) <= E[N]): so the stalled share of the step is at most `waiting_mean`.
    Threads that fit the free cores take that share back and run the rest no
    faster (fewer threads). On the 2-core VM beside one hog, calibration's
    threads-hog (torch's 2 threads) went x1.60 with `torch.set_num_threads(1)`.
    None from a core's worth of waiting on (then nothing bounds it) or unread.
    """
    if waiting_mean is None or waiting_mean >= STALL_BOUND_MAX:
        return None
    return 1.0 / (1.0 - max(0.0, waiting_mean))


def _waits(run: RunState, since: float | None) -> list[float]:
    """The readings of the process's threads' wait for a CPU (`Sample.cpu_wait`, cores' worth) from `since` on."""
    return [s.cpu_wait for s in run.samples if s.cpu_wait is not None and (since is None or s.t >= since)]


def run_delay_high(run: RunState, since: float | None = None) -> tuple[float | None, int]:
    """The mean run delay (`run_delay`) plus two standard errors of it, and the readings behind it.

    None (with the count) under STALL_BOUND_READINGS readings: too few to say how far one swings.
    """
    waits = _waits(run, since)
    if len(waits) < STALL_BOUND_READINGS:
        return None, len(waits)
    mean = sum(waits) / len(waits)
    var = sum((w - mean) ** 2 for w in waits) / (len(waits) - 1)
    return mean + 2.0 * (var / len(waits)) ** 0.5, len(waits)


def run_delay(run: RunState, since: float | None = None, mean: bool = False) -> float | None:
    """Median (or mean) cores' worth of the process's threads that waited for a CPU (`cpu_wait`) from `since` on."""
    waits = _waits(run, since)
    if not waits:
        return None
    return sum(waits) / len(waits) if mean else median_and_spread(waits)[0]


def workers_delay(run: RunState, since: float | None = None) -> float | None:
    """Median over the readings from `since` on of the cores' worth of the DataLoader workers' threads that
    waited for a CPU (`Proc.cpu_wait`, summed over the workers of a reading); None where no reading has one.

    A rank's data wait grows when its workers wait for a core, while its own threads wait for nothing.
    """
    waits = []
    for s in run.samples:
        if since is not None and s.t < since:
            continue
        read = [p.cpu_wait for p in s.procs if p.role == "worker" and p.cpu_wait is not None]
        if read:
            waits.append(sum(read))
    return median_and_spread(waits)[0] if waits else None


def contention(run: RunState, steps: list[Step], workers: int, worker_cores: float) -> Contention | None:
    """The CPU demand over `steps` (the measured ones), from the sampler's readings while they ran.

    None without torch's thread count (older records), the machine's CPU count or a reading.
    """
    rt = run.runtime
    if rt is None or not rt.torch_threads or not rt.cpu_count or not steps:
        return None
    start = steps[0].t - steps[0].wall
    readings = [(s.t, o) for s in run.samples if s.t >= start
                and (o := other_cores(s, rt.cpu_count)) is not None]
    if not readings:
        return None
    others = [o for _, o in readings]
    other = median_and_spread(others)[0]
    walls = [s.wall for s in steps]
    # Steps slower while the others were above their median: each step takes the first reading after its end.
    times = [t for t, _ in readings]
    busy_walls: list[float] = []
    quiet_walls: list[float] = []
    for step in steps:
        _, near = readings[min(len(readings) - 1, bisect.bisect_left(times, step.t))]
        (busy_walls if near > other else quiet_walls).append(step.wall)
    high, count = run_delay_high(run, start)
    follows = bool(busy_walls and quiet_walls) and (
        median_and_spread(busy_walls)[0] > median_and_spread(quiet_walls)[0] * 1.2)
    return Contention(threads=rt.torch_threads, workers=workers, worker_cores=worker_cores, other=other,
                      cores=rt.cpu_count, usable=rt.usable_cpus or rt.cpu_count,
                      p50=median_and_spread(walls)[0], p95=percentile(walls, 95), follows=follows,
                      waiting=run_delay(run, start), waiting_mean=run_delay(run, start, mean=True),
                      waiting_high=high, waiting_readings=count)
