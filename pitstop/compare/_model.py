"""Provides Comparison: what `pitstop compare` found between two recorded runs, as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pitstop.analysis import (
    PHASE_LABELS,
    PHASES,
    WARMUP,
    Advice,
    JobState,
    PhaseSplit,
    RunState,
    StepComparison,
    advise,
    compare_steps,
    job_advice,
    job_summary,
    op_time_us,
    phase_split,
    summarize,
)
from pitstop.analysis.command import Command
from pitstop.events import ProfileWindow

# Ops listed: the union of each run's 10 costliest per profiled step; more is noise in a terminal.
TOP_OPS = 10
# Other processes' CPU differing by a quarter of a core and a tenth of the machine between the runs
# is worth a note: on the shared 2-core VM four runs of one command ran at 117, 83, 56 and 59
# samples/s as other jobs came and went, and compare said "slower" of the first against the last.
OTHER_LOAD_CORES = 0.25
OTHER_LOAD_FRAC = 0.10


@dataclass(frozen=True)
class Metric:
    """One figure of both runs: a row of the table."""

    name: str
    a: float | None
    b: float | None
    unit: str  # "s", "frac", "bytes", "samples/s", "steps/s", "cores", "pct"
    better: str  # "lower" | "higher": which way is an improvement

    @property
    def change(self) -> float | None:
        """B against A: a relative change (+0.25 = 25% more); a difference of points for fractions."""
        if self.a is None or self.b is None:
            return None
        if self.unit == "frac":
            return self.b - self.a
        return (self.b - self.a) / self.a if self.a else None


@dataclass(frozen=True)
class SettingDiff:
    """A setting or an environment figure whose value differs between the runs."""

    name: str
    a: str
    b: str


@dataclass(frozen=True)
class FindingRef:
    """A finding by id, as `compare` lists what appeared and went away."""

    rule: str
    severity: str
    title: str
    evidence: str  # its first line of evidence


@dataclass(frozen=True)
class Side:
    """One run as compare sees it: where it came from and its training steps."""

    name: str  # "A" | "B"
    path: str
    script: str
    session: str | None
    processes: int
    steps: int  # every step of the primary process (rank 0)
    training_steps: int  # measured: warm-up and marked steps out
    windows: int  # profiler windows of the primary process
    walls: tuple[float, ...] = field(repr=False, default=())  # training step times, in step order


@dataclass(frozen=True)
class Comparison:
    """Everything `pitstop compare` says, in the order it says it."""

    a: Side
    b: Side
    steps: StepComparison
    metrics: tuple[Metric, ...]
    phases: tuple[Metric, ...]  # ms per profiled step; empty unless both have windows
    ops: tuple[Metric, ...]  # us per profiled step
    settings: tuple[SettingDiff, ...]
    appeared: tuple[FindingRef, ...]
    gone: tuple[FindingRef, ...]
    kept: tuple[FindingRef, ...]
    notes: tuple[str, ...]  # too short, different lengths, forced, no windows


def _median_samples(steps: list[Any]) -> float:
    """The run's batch: the median samples of its steps, where most say theirs (0: unknown).

    Where the batch differs the verdict compares step time over it (HF Trainer at batch 16 against its
    tuned 64 read "B is slower: 0.31x the throughput of A" for +25% samples/s). The median, not every
    step's own count: accelerate fetches one batch ahead, so an epoch's first step counts 2 and its last 0.
    """
    known = sorted(s.samples for s in steps if s.samples)
    return float(known[len(known) // 2]) if known and 2 * len(known) >= len(steps) else 0.0


def primary(runs: list[RunState]) -> RunState:
    """Rank 0's run, else the first (as the summary does)."""
    job = JobState.of_runs(runs)
    found = job.primary()
    assert found is not None  # callers pass at least one run
    return found


def build(a_path: str, a_runs: list[RunState], b_path: str, b_runs: list[RunState],
          forced: str = "", warmup: int = WARMUP) -> Comparison:
    """Compare two loaded runs (each: every process of one job). Raises nothing for odd data."""
    pa, pb = primary(a_runs), primary(b_runs)
    sa, sb = pa.measured_steps(warmup), pb.measured_steps(warmup)
    wa = [s.wall for s in sa]
    wb = [s.wall for s in sb]
    side_a = _side("A", a_path, a_runs, pa, wa)
    side_b = _side("B", b_path, b_runs, pb, wb)
    batch_a, batch_b = _median_samples(sa), _median_samples(sb)
    per_sample = bool(batch_a and batch_b and batch_a != batch_b)
    if per_sample:  # a step of B is not a step of A: the time of a sample is (a tuned batch size)
        stats = replace(compare_steps([w / batch_a for w in wa], [w / batch_b for w in wb]), per="sample")
    else:
        stats = compare_steps(wa, wb)
    notes = []
    if per_sample:
        notes.append(f"the batch size differs (A {batch_a:g}, B {batch_b:g} samples a step): "
                     "the verdict compares the time per sample")
    if forced:
        notes.append(f"compared with --force although {forced}")
    if stats.reason:
        notes.append(stats.reason)
    if len(wa) and len(wb) and max(len(wa), len(wb)) >= 2 * min(len(wa), len(wb)):
        notes.append(f"the runs differ in length ({len(wa)} and {len(wb)} training steps): "
                     "each is cut into blocks of the same size")
    if side_a.processes != side_b.processes:
        notes.append(f"A has {side_a.processes} process(es), B {side_b.processes}: step times are rank 0's, "
                     "throughput is the job's")
    load_a, load_b = other_load(pa), other_load(pb)
    cores = pa.runtime.cpu_count if pa.runtime is not None and pa.runtime.cpu_count else None
    if load_a is not None and load_b is not None and cores and abs(load_b - load_a) >= max(
            OTHER_LOAD_CORES, OTHER_LOAD_FRAC * cores):
        busier, more, less = ("B", load_b, load_a) if load_b > load_a else ("A", load_a, load_b)
        notes.append(f"the machine was busier during {busier}: other processes used {more:.2f} cores on average "
                     f"against {less:.2f} (of {cores}); part of the difference may be the machine's, not the run's")
    phases, ops = _windows(pa, pb, notes)
    clocks = phase_split(pa, warmup), phase_split(pb, warmup)
    if clocks[0] is not None and clocks[1] is not None and clocks[0].clock != clocks[1].clock:
        notes.append(f"the step phases were timed on different clocks (A {clocks[0].clock}, B {clocks[1].clock}): "
                     "host stamps time the launches, CUDA events the GPU's work")
    fa, fb = _findings(a_runs, "A", notes), _findings(b_runs, "B", notes)
    return Comparison(
        a=side_a, b=side_b, steps=stats,
        metrics=_metrics(a_runs, pa, b_runs, pb, warmup),
        phases=phases, ops=ops,
        settings=tuple(SettingDiff(k, va, vb) for k, (va, vb) in _diff(settings(pa), settings(pb)).items()),
        appeared=tuple(fb[k] for k in fb if k not in fa),
        gone=tuple(fa[k] for k in fa if k not in fb),
        kept=tuple(fb[k] for k in fb if k in fa),
        notes=tuple(notes),
    )


def _side(name: str, path: str, runs: list[RunState], run: RunState, walls: list[float]) -> Side:
    hello = run.hello
    return Side(name=name, path=path, script=hello.script if hello is not None else "",
                session=hello.session if hello is not None else None, processes=len(runs),
                steps=run.total_steps, training_steps=len(walls), windows=len(run.profiles), walls=tuple(walls))


def _job_rate(runs: list[RunState], warmup: int) -> tuple[float | None, float | None]:
    """(samples/s, steps/s) of the job: samples summed over ranks, steps of the slowest."""
    if len(runs) == 1:
        s = summarize(runs[0], warmup)
        return s.samples_per_s, s.steps_per_s
    job = job_summary(JobState.of_runs(runs), warmup)
    return job.samples_per_s, job.steps_per_s


def _metrics(a_runs: list[RunState], pa: RunState, b_runs: list[RunState], pb: RunState,
             warmup: int) -> tuple[Metric, ...]:
    sa, sb = summarize(pa, warmup), summarize(pb, warmup)
    ra, rb = _job_rate(a_runs, warmup), _job_rate(b_runs, warmup)
    rows = [
        Metric("step time p50", sa.step_p50_s, sb.step_p50_s, "s", "lower"),
        Metric("step time mean", sa.step_mean_s, sb.step_mean_s, "s", "lower"),
        Metric("step time p95", sa.step_p95_s, sb.step_p95_s, "s", "lower"),
        Metric("compute p50", sa.compute_p50_s, sb.compute_p50_s, "s", "lower"),
        *_phase_rows(sa.phases, sb.phases),
        Metric("throughput", ra[0], rb[0], "samples/s", "higher"),
        Metric("steps/s", ra[1], rb[1], "steps/s", "higher"),
        Metric("data wait", sa.data_wait_frac, sb.data_wait_frac, "frac", "lower"),
        Metric("eval share", _eval_share(sa.eval_s, sa.elapsed_s), _eval_share(sb.eval_s, sb.elapsed_s),
               "frac", "lower"),
        Metric("peak allocated", sa.peak_mem_allocated, sb.peak_mem_allocated, "bytes", "lower"),
        Metric("peak reserved", sa.peak_mem_reserved, sb.peak_mem_reserved, "bytes", "lower"),
        Metric("peak host rss", sa.peak_rss, sb.peak_rss, "bytes", "lower"),
        Metric("gpu util", sa.gpu_util_mean, sb.gpu_util_mean, "pct", "higher"),
        Metric("cpu main", sa.cpu.main, sb.cpu.main, "cores", "lower"),
        Metric("cpu of other processes", other_load(pa), other_load(pb), "cores", "lower"),
    ]
    # A row neither run has says nothing (peak allocated on two CPU runs; eval share without eval).
    return tuple(m for m in rows if (m.a is not None or m.b is not None) and (m.a or m.b or m.unit != "frac"
                                                                           or m.name != "eval share"))


def _phase_rows(a: PhaseSplit | None, b: PhaseSplit | None) -> list[Metric]:
    """A row per phase of every step (forward, backward, optimizer, other p50) when both runs carry them."""
    if a is None or b is None:
        return []
    sa, sb = dict(a.seconds()), dict(b.seconds())
    return [Metric(f"{name} p50", sa[name], sb[name], "s", "lower") for name in sa if name in sb]


def other_load(run: RunState) -> float | None:
    """Mean cores the machine spent on processes outside this run (machine busy minus main and workers)."""
    count = run.runtime.cpu_count if run.runtime is not None else None
    if not count:
        return None
    total = 0.0
    n = 0
    for s in run.samples:
        own = [p.cpu for p in s.procs if p.cpu is not None]
        if s.system_cpu is None or not own:
            continue
        total += max(0.0, s.system_cpu / 100.0 * count - sum(own) / 100.0)
        n += 1
    return total / n if n else None


def _eval_share(eval_s: float, elapsed: float | None) -> float | None:
    return eval_s / elapsed if eval_s and elapsed else (0.0 if elapsed else None)


def _mean_phases(windows: list[ProfileWindow]) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for w in windows:
        for k, v in w.phases_ms.items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def _mean_ops(windows: list[ProfileWindow]) -> dict[str, float]:
    """Each op's time per profiled step (device time on CUDA), averaged over the windows."""
    sums: dict[str, float] = {}
    for w in windows:
        steps = max(1, w.step_end - w.step_start)
        for op in w.ops:
            sums[op.name] = sums.get(op.name, 0.0) + op_time_us(op, w) / steps
    return {k: v / len(windows) for k, v in sums.items()}


def _windows(pa: RunState, pb: RunState, notes: list[str]) -> tuple[tuple[Metric, ...], tuple[Metric, ...]]:
    wa, wb = list(pa.profiles), list(pb.profiles)
    missing = [name for name, w in (("A", wa), ("B", wb)) if not w]
    if missing:
        notes.append(f"no profiler window in {' and '.join(missing)}: the windows' phases and ops are not compared")
        return (), ()
    if {w.device for w in wa} != {w.device for w in wb}:
        notes.append("the windows profiled different devices: op times are not comparable (CPU vs CUDA)")
    ph_a, ph_b = _mean_phases(wa), _mean_phases(wb)
    names = [p for p in PHASES if p in ph_a or p in ph_b] + sorted((set(ph_a) | set(ph_b)) - set(PHASES))
    phases = tuple(Metric(PHASE_LABELS.get(p, p), ph_a.get(p), ph_b.get(p), "ms", "lower") for p in names)
    oa, ob = _mean_ops(wa), _mean_ops(wb)
    top = sorted(oa, key=lambda k: -oa[k])[:TOP_OPS]
    top += [k for k in sorted(ob, key=lambda k: -ob[k])[:TOP_OPS] if k not in top]
    top.sort(key=lambda k: -max(oa.get(k, 0.0), ob.get(k, 0.0)))
    ops = tuple(Metric(k, oa.get(k), ob.get(k), "us", "lower") for k in top)
    return phases, ops


def _findings(runs: list[RunState], side: str, notes: list[str]) -> dict[str, FindingRef]:
    """Every finding of the job by rule id: each process's, then the job's (stragglers, dead ranks).

    A rule that failed is a note ("A: advice rule host-sync failed: ..."): its
    finding is not "gone", it was not computed.
    """
    advice = Advice()
    for run in runs:
        advice = advice + advise(run)
    if len(runs) > 1:
        advice = advice + job_advice(JobState.of_runs(runs))
    notes.extend(dict.fromkeys(f"{side}: {failure.text}" for failure in advice.failures))
    out: dict[str, FindingRef] = {}
    for f in advice.findings:
        out.setdefault(f.rule, FindingRef(f.rule, f.severity, f.title, f.evidence[0] if f.evidence else ""))
    return out


def settings(run: RunState) -> dict[str, str]:
    """The configuration and environment of a run, as the text compare shows ("n/a" when not recorded)."""
    out: dict[str, str] = {}
    hello, rt, model = run.hello, run.runtime, run.model
    if hello is not None:
        # As typed to `pitstop run` (runs as shown); a record of an older pitstop has only the argv.
        out["command line"] = (Command.of(hello).line("run") if hello.command else
                               " ".join(hello.argv[1:]) if hello.argv else hello.script)
        out["python"] = hello.python
        out["pitstop"] = hello.pitstop_version
        out["host"] = hello.host
        out["world size"] = str(hello.world_size or 1)
    if rt is not None:
        out["torch"] = rt.torch_version
        out["CUDA"] = rt.cuda_version or "none (CPU build)"
        out["cuDNN"] = str(rt.cudnn_version) if rt.cudnn_version is not None else "n/a"
        out["device"] = rt.device_type + (f" ({', '.join(rt.device_names)})" if rt.device_names else "")
        out["CPUs usable"] = f"{rt.usable_cpus} of {rt.cpu_count}"
        if rt.torch_threads is not None:
            out["torch threads"] = str(rt.torch_threads)
    dl = run.training_loader()
    if dl is not None:
        for key in ("num_workers", "batch_size", "pin_memory", "persistent_workers", "prefetch_factor"):
            out[f"DataLoader {key}"] = str(getattr(dl, key))
        out["DataLoader dataset"] = dl.dataset or "n/a"
        for knob, value in dl.overrides.items():
            out[f"config applied {knob}"] = str(value)
    if model is not None:
        amp = "autocast" if model.autocast else "off"
        if model.grad_scaler:
            amp += " + GradScaler"
        out["AMP"] = amp
        out["cudnn.benchmark"] = str(model.cudnn_benchmark) if model.cudnn_benchmark is not None else "n/a"
        out["channels_last"] = "yes" if model.channels_last_params else "no"
        out["DDP"] = "yes" if model.ddp else "no"
        if model.dtype is not None:
            out["parameters dtype"] = model.dtype
    if run.applied is not None:
        for knob, value in run.applied.applied.items():
            out[f"config applied {knob}"] = str(value)
    return out


def _diff(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    keys = list(a) + [k for k in b if k not in a]
    return {k: (a.get(k, "n/a"), b.get(k, "n/a")) for k in keys if a.get(k, "n/a") != b.get(k, "n/a")}
