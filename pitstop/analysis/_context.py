"""Provides Finding (one piece of advice) and Context (the measured figures every rule reads)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pitstop.analysis._state import WARMUP, RunState
from pitstop.analysis._stats import median_and_spread, percentile
from pitstop.events import DataLoaderInfo, Sample, Step

# WARMUP (steps 0..2, left out of the figures) is defined beside RunState, which needs it too.
# Timing rules wait for 10 measured steps: a p50 over fewer moves with one slow batch.
MIN_STEPS = 10
# GPU rules wait for 5 samples (2.5-5 s at 1-2 Hz) so one idle reading at an
# epoch boundary does not make a finding.
MIN_GPU_SAMPLES = 5

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


@dataclass(frozen=True)
class Finding:
    """One piece of advice with the evidence from this run that supports it."""

    rule: str  # stable id, e.g. "data-wait"
    title: str
    severity: str  # "high" | "medium" | "low"
    evidence: list[str] = field(default_factory=list)  # figures from THIS run
    cause: str = ""
    fix: str = ""  # code a user can paste
    gain: str = ""  # expected gain, estimated from the evidence
    knob: str | None = None  # the `pitstop tune` knob(s) that confirm it, comma-separated
    tune: str = ""  # the `pitstop tune --knobs KNOB ...` line for this run's command, as typed (advise fills it)


@dataclass(frozen=True)
class RuleFailure:
    """An advice rule that raised on this run's data, and why: every front says it once."""

    rule: str  # a RULE_IDS id; "measure" when the figures every rule reads could not be taken
    reason: str  # "TypeError: '>' not supported between instances of 'str' and 'float'"

    @property
    def text(self) -> str:
        """"advice rule host-sync failed: TypeError: ..." (STYLE.md: a failing part is switched off loudly)."""
        return f"advice rule {self.rule} failed: {self.reason}"


@dataclass(frozen=True)
class Advice:
    """What the rules found, most important first, and the rules that failed (never silently dropped)."""

    findings: tuple[Finding, ...] = ()
    failures: tuple[RuleFailure, ...] = ()

    def __add__(self, other: Advice) -> Advice:
        return Advice(self.findings + other.findings, self.failures + other.failures)


@dataclass(frozen=True)
class Context:
    """Figures over the measured steps (warm-up dropped) that several rules share."""

    run: RunState
    steps: list[Step]
    wall_sum: float
    wait_sum: float
    wall_p50: float | None
    compute_p50: float | None
    wait_p50: float | None
    wall_spread: float | None  # IQR / median of wall
    data_frac: float | None
    gpu_samples: list[Sample]  # samples after the warm-up with at least one GPU util

    @property
    def n(self) -> int:
        """Measured steps."""
        return len(self.steps)

    # Shares and gains of step time are of the means (sums over the measured steps, divided by
    # them): a share of sums is a share of the run's time, and the parts add up (mean wait + mean
    # compute = mean step), which p50s do not (p50 wait 4.2 ms of a p50 9.2 ms step beside a
    # 14% share of sums, in one finding).
    @property
    def wall_mean(self) -> float | None:
        """Mean step time over the measured steps."""
        return self.wall_sum / self.n if self.steps else None

    @property
    def wait_mean(self) -> float | None:
        """Mean data wait per measured step."""
        return self.wait_sum / self.n if self.steps else None

    @property
    def compute_mean(self) -> float | None:
        """Mean step time outside the data wait: wall_mean - wait_mean."""
        return (self.wall_sum - self.wait_sum) / self.n if self.steps else None

    @property
    def cuda(self) -> bool:
        """True when the run's device is CUDA."""
        return self.run.device_type == "cuda"

    def gpu_util_mean(self) -> float | None:
        """Mean over `gpu_samples` of the mean util over GPUs, percent."""
        per = []
        for s in self.gpu_samples:
            utils = [g.util for g in s.gpus if g.util is not None]
            per.append(sum(utils) / len(utils))
        return sum(per) / len(per) if per else None

    def loader(self) -> DataLoaderInfo | None:
        """The training DataLoader: the one whose batches fed the steps (`Step.loader`).

        Records written before steps named their loader: the one whose sampler
        shuffles, else the one built first (eval loaders are built after it).
        """
        found = self.run.training_loader()
        if found is not None:
            return found
        loaders = sorted(self.run.dataloaders.values(), key=lambda d: d.id)
        shuffled = [d for d in loaders if d.shuffle]
        return (shuffled or loaders or [None])[0]

    def max_workers(self) -> int:
        """Most num_workers of any DataLoader seen (0 when none)."""
        return max((d.num_workers for d in self.run.dataloaders.values()), default=0)

    def loader_worker_cpu(self, loader: DataLoaderInfo | None) -> tuple[int, float] | None:
        """(workers, mean CPU percent of one core, summed over them) of one loader's workers.

        Over the samples in which they ran; None when no sample saw them. Workers
        whose loader is unknown (older records) count for every loader.
        """
        want = loader.id if loader is not None else None
        total = 0.0
        n = 0
        most = 0
        for sample in self.run.samples:
            cpus = [p.cpu for p in sample.procs
                    if p.role == "worker" and (p.loader is None or p.loader == want) and p.cpu is not None]
            if cpus:
                total += sum(cpus)
                n += 1
                most = max(most, len(cpus))
        return (most, total / n) if n else None

    def usable_cpus(self) -> int | None:
        """CPUs the process may run on (affinity), else the machine's count, else None."""
        rt = self.run.runtime
        if rt is None:
            return None
        return rt.usable_cpus or rt.cpu_count or None


def measure(run: RunState, warmup: int = WARMUP) -> Context:
    """The shared figures of a run; empty when it has no measured step."""
    steps = run.measured_steps(warmup)
    wall_sum = sum(s.wall for s in steps)
    wait_sum = sum(s.data_wait for s in steps)
    wall_p50 = compute_p50 = wait_p50 = spread = None
    if steps:
        wall_p50, _, spread = median_and_spread(s.wall for s in steps)
        compute_p50 = percentile((s.compute for s in steps), 50)
        wait_p50 = percentile((s.data_wait for s in steps), 50)
    # Samples taken before the first measured step started belong to the warm-up.
    start = steps[0].t - steps[0].wall if steps else None
    gpu_samples = [
        s
        for s in run.samples
        if any(g.util is not None for g in s.gpus) and (start is None or s.t >= start)
    ]
    return Context(
        run=run,
        steps=steps,
        wall_sum=wall_sum,
        wait_sum=wait_sum,
        wall_p50=wall_p50,
        compute_p50=compute_p50,
        wait_p50=wait_p50,
        wall_spread=spread,
        data_frac=wait_sum / wall_sum if steps and wall_sum > 0 else None,
        gpu_samples=gpu_samples,
    )


def describe_loader(dl: DataLoaderInfo, role: str = "training") -> str:
    """A DataLoader as people recognise it: "training DataLoader (MNIST, batch_size=64, num_workers=4)"."""
    what = f"{dl.dataset}, " if dl.dataset else ""
    return f"{role} DataLoader ({what}batch_size={dl.batch_size}, num_workers={dl.num_workers})"


def truthy_override(run: RunState, *names: str) -> bool:
    """True when a tuned config applied any knob whose name contains one of `names`.

    A value like False, None, "off", "none", "no", "fp32" means the knob is
    applied as off, which does not count.
    """
    applied = run.applied.applied if run.applied is not None else {}
    for key, value in applied.items():
        if any(name in key.lower() for name in names):
            if isinstance(value, str) and value.strip().lower() in {"off", "none", "no", "fp32", "false", ""}:
                continue
            if value in (False, None, 0):
                continue
            return True
    return False
