"""Provides a trial's measurement from its recorded events: warm-up dropped, windows, median and spread.

Each window's throughput is `pitstop.analysis.rates`, the definition every
front shows (the tuner counted samples its own way); what is the
tuner's own is the cut into windows and their median and spread (DESIGN rule 6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pitstop.analysis import is_measured, median_and_spread, other_cores, rates
from pitstop.events import Applied, DataLoaderInfo, End, Event, Hello, Loss, Model, Runtime, Sample, Step
from pitstop.tuning.results import Facts

# Windows the measured steps are cut into; the throughput is their median and
# the spread their IQR / median. With five, one disturbed window (a GC pause,
# a neighbour's burst) moves neither the median nor the IQR much; with three it
# doubled the spread on our shared 2-core CI machine.
WINDOWS = 5
# The sampler reads the machine every 0.5-1 s.
SAMPLE_PERIOD_S = 1.0


@dataclass
class Measurement:
    """Figures of one trial's record."""

    steps_seen: int = 0
    measured_steps: int = 0
    throughput: float | None = None
    spread: float | None = None
    unit: str = "samples/s"
    compute_throughput: float | None = None
    compute_spread: float | None = None
    step_time: float | None = None
    measured_seconds: float = 0.0
    jitter: float | None = None
    peak_mem: int | None = None
    mem_kind: str = "host"
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, value) of finite losses
    nonfinite: list[int] = field(default_factory=list)
    alloc_retries: int | None = None  # retries that happened during the measured steps
    other_cpu: float | None = None  # cores busy with processes outside the trial (median)
    trial_complete: bool = False
    agent_started: bool = False
    skipped: dict[str, str] = field(default_factory=dict)  # knob -> why the agent did not apply it
    applied: dict[str, Any] = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)


def measure(events: Iterable[Event], warmup: int, windows: int = WINDOWS) -> Measurement:
    """Measure a trial: the first `warmup` steps are dropped, the rest cut into `windows` windows."""
    m = Measurement()
    steps: list[Step] = []
    samples: list[Sample] = []
    runtime: Runtime | None = None
    loaders: list[DataLoaderInfo] = []
    model: Model | None = None
    hello: Hello | None = None
    for event in events:
        if isinstance(event, Hello):
            hello = event
            m.agent_started = True
        elif isinstance(event, Step):
            steps.append(event)
        elif isinstance(event, Loss):
            # The step's loss only (a GAN's D): G's (optimizer 2) came in between, and a trial's loss curve, held
            # against the script's own settings' for AMP, read both as one. A NaN of either ends the trial.
            if event.optimizer == 1:
                for step, value in zip(event.steps, event.values):
                    if value is not None:
                        m.losses.append((step, float(value)))
            m.nonfinite.extend(event.nonfinite)
        elif isinstance(event, Sample):
            samples.append(event)
        elif isinstance(event, Runtime):
            runtime = event
        elif isinstance(event, DataLoaderInfo):
            loaders.append(event)
            m.skipped.update(event.skipped)
            m.applied.update(event.overrides)
        elif isinstance(event, Applied):
            m.skipped.update(event.skipped)
            m.applied.update(event.applied)
        elif isinstance(event, Model):
            model = event
        elif isinstance(event, End):
            m.trial_complete = event.reason == "trial-complete"
    m.steps_seen = len(steps)
    # Training steps only, as every front counts them (RunState.measured_steps): a step
    # holding an eval pass or a profiler window is not the pace of training.
    measured = [s for s in steps if is_measured(s, warmup)]
    m.measured_steps = len(measured)
    # Step-time jitter is judged on groups of steps: with N workers, batches
    # arrive in round-robin bursts, so single steps alternate between ~0 and a
    # full wait by design. Groups of 2N steps (at least 4) average a burst out.
    workers = loaders[0].num_workers if loaders else 0
    if measured:
        _throughput(m, measured, windows, max(1, workers), max(4, 2 * workers))
        t0 = measured[0].t - measured[0].wall
        m.alloc_retries = _retries_since(samples, t0)
        # From one sampler period before the measured steps: a trial that measured 0.6 s (2 workers
        # at a quarter of the baseline's step time) held no reading of its own, and its jitter
        # on a machine 1.8 cores busy was then blamed on the configuration.
        m.other_cpu = _other_cpu([s for s in samples if s.t > t0 - SAMPLE_PERIOD_S], runtime)
    m.peak_mem, m.mem_kind = _peak_memory(steps, samples)
    m.facts = _facts(hello, runtime, loaders, model, samples)
    threads = m.applied.get("threads")
    if threads and runtime is not None and runtime.torch_threads not in (None, threads):
        # The latest runtime event holds the count at the first step: the script set its own after import.
        m.applied.pop("threads")
        m.skipped["threads"] = (f"the script sets its own thread count (torch.set_num_threads("
                                f"{runtime.torch_threads})) after pitstop applied {threads}")
    return m


def _throughput(m: Measurement, measured: list[Step], windows: int, burst: int, group: int) -> None:
    # Window sizes are whole groups: with 2 workers, a window of 5 steps holds
    # either 2 or 3 of the slow steps of a round-robin pair (a ±20% swing
    # that is arithmetic, not instability).
    unit = burst if len(measured) >= windows * burst else 1
    count = max(1, min(windows, len(measured) // unit))
    size = (len(measured) // count) // unit * unit
    m.unit = rates(measured).unit  # samples/s when every step said its batch size, as every front
    wall_rates: list[float] = []
    compute_rates: list[float] = []
    for i in range(count):
        chunk = measured[i * size: (i + 1) * size]  # equal windows; a remainder of < 1 window is dropped
        for out, pace in ((wall_rates, rates(chunk)), (compute_rates, rates(chunk, compute_only=True))):
            value = pace.samples_per_s if m.unit == "samples/s" else pace.steps_per_s
            if value is not None:
                out.append(value)
    if wall_rates:
        m.throughput, _, m.spread = median_and_spread(wall_rates)
    if compute_rates:
        m.compute_throughput, _, m.compute_spread = median_and_spread(compute_rates)
    m.measured_seconds = sum(s.wall for s in measured)
    m.step_time = median_and_spread([s.wall for s in measured])[0]
    groups = [measured[i:i + group] for i in range(0, len(measured) - group + 1, group)]
    if len(groups) >= 2:
        m.jitter = median_and_spread([sum(s.wall for s in g) / len(g) for g in groups])[2]


def _other_cpu(samples: list[Sample], runtime: Runtime | None) -> float | None:
    """Cores used by other processes while the trial measured: a busy machine widens every spread."""
    cpus = runtime.cpu_count if runtime else None
    busy = [o for s in samples if (o := other_cores(s, cpus)) is not None]
    return median_and_spread(busy)[0] if busy else None


def _retries_since(samples: list[Sample], t0: float) -> int | None:
    before = [s.alloc_retries for s in samples if s.t <= t0 and s.alloc_retries is not None]
    after = [s.alloc_retries for s in samples if s.t > t0 and s.alloc_retries is not None]
    if not after:
        return None
    return max(after) - (before[-1] if before else 0)


def _peak_memory(steps: list[Step], samples: list[Sample]) -> tuple[int | None, str]:
    gpu = [s.mem_peak for s in steps if s.mem_peak is not None]
    if gpu:
        return max(gpu), "gpu"
    # Host: the process tree's resident memory (main + workers; shared pages count
    # once per process, so this is an upper bound, labelled as such in the report).
    totals = [sum(p.rss or 0 for p in s.procs) for s in samples if s.procs]
    totals += [s.host_rss for s in steps if s.host_rss is not None]
    return (max(totals), "host") if totals else (None, "host")


def _facts(hello: Hello | None, runtime: Runtime | None, loaders: list[DataLoaderInfo],
           model: Model | None, samples: list[Sample]) -> Facts:
    loader: dict[str, Any] = {}
    first = loaders[0] if loaders else None
    if first is not None:
        # The script's own values: what the agent reports, minus what it overrode.
        loader = {
            "num_workers": first.num_workers,
            "pin_memory": first.pin_memory,
            "persistent_workers": first.persistent_workers,
            "prefetch_factor": first.prefetch_factor,
            "batch_size": first.batch_size,
        }
    gpu_total = None
    for sample in samples:
        for gpu in sample.gpus:
            if gpu.mem_total:
                gpu_total = gpu.mem_total
    device_type = runtime.device_type if runtime else "cpu"
    return Facts(
        device_type=device_type,
        torch_version=runtime.torch_version if runtime else None,
        cuda_version=runtime.cuda_version if runtime else None,
        device_names=list(runtime.device_names) if runtime else [],
        usable_cpus=runtime.usable_cpus if runtime else None,
        shm_bytes=runtime.shm_bytes if runtime else None,
        has_dataloader=first is not None,
        loader=loader,
        batch_sampler=bool(first and first.batch_sampler),
        conv2d=model.conv2d if model else 0,
        grad_scaler=bool(model and model.grad_scaler),
        script_autocast=bool(model and model.autocast),
        memory_limit=gpu_total if device_type == "cuda" else _host_memory(),
        world_size=hello.world_size if hello else None,
        torch_threads=runtime.torch_threads if runtime else None,
        cpu_count=runtime.cpu_count if runtime else None,
    )


def _host_memory() -> int | None:
    try:
        import psutil
    except ImportError:  # psutil is a dependency, but a missing figure must not fail a tune
        return None
    return int(psutil.virtual_memory().total)
