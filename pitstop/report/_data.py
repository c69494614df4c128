"""Provides ReportData: everything a report shows about one recorded run, read in one pass over its files."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pitstop.analysis.command import Command
from pitstop.analysis import (
    WARMUP,
    Finding,
    JobState,
    JobSummary,
    RunState,
    Summary,
    advise,
    cpu_mean,
    cpu_text,
    end_text,
    job_advice,
    job_summary,
    loader_label,
    models_lines,
    op_time_us,
    summarize,
)
from pitstop.analysis import format as fmt
from pitstop.errors import UsageError
from pitstop.profiling.record import ReadResult, iter_record
from pitstop.recorded import job_files
from pitstop.report._job import RankSeries, drawn, rank_findings
from pitstop.report._series import RunSeries

# What the agent costs the training thread per step, measured in place on 2-core
# VMs with ~1 ms CPU steps (docs/internals.md, "What the agent costs the training
# thread": benchmarks/hotpath.py +4.5 to +7.9 us of the thread's CPU on one VM,
# +11.7 to +26.7 on another, runs of one code). Not measured in the run itself:
# the report says so next to it.
AGENT_STEP_COST_S = 16e-6
TOP_ROWS = 20


@dataclass(frozen=True)
class TableRow:
    """One row of an op or kernel table: per profiled step, averaged over the windows."""

    name: str
    calls: float
    ms: float
    share: float | None  # of the profiled steps' mean wall time


@dataclass(frozen=True)
class LoaderRow:
    """A DataLoader by role, its settings and its workers' CPU."""

    role: str  # "train", "eval loader 2 (ValSet)"
    settings: str
    workers_cores: float | None


@dataclass
class ReportData:
    """One run (every process of one job), as the report shows it."""

    path: str
    generated: float
    runs: list[RunState]
    primary: RunState
    series: RunSeries
    summary: Summary
    found: list[Finding]
    job: JobSummary | None
    drawn: list[RankSeries] = field(default_factory=list)  # a job's ranks its charts draw
    loaders: list[LoaderRow] = field(default_factory=list)
    ops: list[TableRow] = field(default_factory=list)
    kernels: list[TableRow] = field(default_factory=list)
    windows: list[str] = field(default_factory=list)
    environment: list[tuple[str, str]] = field(default_factory=list)
    overhead: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def primary_label(self) -> str:
        """The process the summary, tables and environment are of: "rank 0" of a job."""
        return next((r.label for r in self.job.rows if r.pid == self.primary.pid), "rank 0") if self.job else "run"

    @property
    def script(self) -> str:
        hello = self.primary.hello
        return hello.script if hello is not None and hello.script else "run"


def load(path: Path, warmup: int = WARMUP) -> ReportData:
    """Read every record file of `path` once, feeding RunStates and the whole-run series together."""
    runs: list[RunState] = []
    series: list[RunSeries] = []
    notes = []
    files, beside = job_files(path)  # a `NAME.jsonl` with its `NAME.rank1.jsonl`...: the whole job
    for file in files + beside:
        result = ReadResult()
        run, s = RunState(), RunSeries()
        for event in iter_record(file, result):
            run.add(event)
            s.add(event, run)
        if file in beside and not _same_run(run, runs[0] if runs else None):
            continue  # another run's file that happens to share the name
        if result.torn:
            notes.append(f"{file} ends in a cut line (the run was killed): read up to its last whole line")
        runs.append(run)
        series.append(s)
    sessions = {r.hello.session for r in runs if r.hello is not None}
    if len(sessions) > 1:
        raise UsageError(f"{path} holds records of {len(sessions)} different runs: report one run's file or directory")
    job = JobState.of_runs(runs)
    primary = job.primary()
    assert primary is not None  # record_files raised if there was no file
    summary_job = None
    drawn_ranks: list[RankSeries] = []
    if len(runs) > 1:
        # A job: its own findings (stragglers, gone ranks) first, then each rank's, titled with the rank.
        ranked = job.ranks()
        summary_job = job_summary(job, warmup)
        advice = job_advice(job, warmup)
        found, failed = rank_findings(ranked, warmup)
        found = list(advice.findings) + found
        notes += [failure.text for failure in advice.failures] + failed
        drawn_ranks = drawn(ranked, {id(run): s for run, s in zip(runs, series)}, summary_job)
    else:
        advice = advise(primary, warmup)
        found = list(advice.findings)
        notes += [failure.text for failure in advice.failures]  # said, not dropped
    data = ReportData(path=str(path), generated=time.time(), runs=runs, primary=primary,
                      series=series[runs.index(primary)], summary=summarize(primary, warmup), found=found,
                      job=summary_job, drawn=drawn_ranks, notes=notes)
    data.loaders = _loaders(primary)
    data.ops, data.kernels, data.windows = _tables(primary)
    data.environment = _environment(primary)
    data.overhead = _overhead(data)
    return data


def _same_run(run: RunState, first: RunState | None) -> bool:
    return (run.hello is not None and first is not None and first.hello is not None
            and run.hello.session == first.hello.session)


def _loaders(run: RunState) -> list[LoaderRow]:
    cpu = {g.loader: g.cores for g in cpu_mean(run).loaders}
    rows = []
    train = run.training_loader()
    ordered = sorted(run.dataloaders.values(), key=lambda d: (train is None or d.id != train.id, d.id))
    for dl in ordered:
        settings = (f"{dl.dataset + ', ' if dl.dataset else ''}batch_size={dl.batch_size}, num_workers={dl.num_workers}, "
                    f"pin_memory={dl.pin_memory}, persistent_workers={dl.persistent_workers}, "
                    f"prefetch_factor={dl.prefetch_factor}, shuffle={dl.shuffle}")
        if dl.dataset_len is not None:
            settings += f", {dl.dataset_len} samples"
        if dl.overrides:
            settings += "; a config applied " + ", ".join(f"{k}={v}" for k, v in dl.overrides.items())
        rows.append(LoaderRow(loader_label(run, dl.id) or f"loader {dl.id}", settings, cpu.get(dl.id)))
    return rows


def _tables(run: RunState) -> tuple[list[TableRow], list[TableRow], list[str]]:
    windows = list(run.profiles)
    if not windows:
        return [], [], []
    ops: dict[str, list[float]] = {}
    kernels: dict[str, list[float]] = {}
    walls: list[float] = []
    lines = []
    for w in windows:
        steps = max(1, w.step_end - w.step_start)
        for op in w.ops:
            acc = ops.setdefault(op.name, [0.0, 0.0])
            acc[0] += op.calls / steps
            acc[1] += op_time_us(op, w) / steps / 1e3
        for k in w.kernels:
            acc = kernels.setdefault(k.name, [0.0, 0.0])
            acc[0] += k.calls / steps
            acc[1] += k.total_us / steps / 1e3
        step_walls = [s.wall for s in run.steps if w.step_start <= s.step < w.step_end]
        if step_walls:
            walls.append(sum(step_walls) / len(step_walls))
        what = "CUDA device time" if w.device == "cuda" else "CPU self time"
        kern = f", kernels n/a ({w.kernels_unavailable})" if w.kernels_unavailable else ""
        lines.append(f"steps {w.step_start}-{w.step_end - 1} ({w.trigger}, {w.duration_s:.1f} s, {what}{kern})")
    n = len(windows)
    step_ms = sum(walls) / len(walls) * 1e3 if walls else None

    def rows(table: dict[str, list[float]]) -> list[TableRow]:
        ordered = sorted(table.items(), key=lambda kv: -kv[1][1])[:TOP_ROWS]
        return [TableRow(name, calls / n, ms / n, (ms / n) / step_ms if step_ms else None)
                for name, (calls, ms) in ordered]

    return rows(ops), rows(kernels), lines


def _environment(run: RunState) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    hello, rt = run.hello, run.runtime
    if hello is not None:
        applied = ("--config", hello.config) if hello.config else ()  # the run as it ran: with its tuned config
        out.append(("command", Command.of(hello).line("run", *applied) if hello.command
                    else " ".join(hello.argv) or hello.script))
        out.append(("started", time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(hello.started))))
        out.append(("host", hello.host))
        out.append(("python", hello.python))
        out.append(("pitstop", hello.pitstop_version))
        if hello.world_size:
            out.append(("world size", str(hello.world_size)))
    if rt is None:
        out.append(("torch", "not recorded (the run ended before torch was imported)"))
        return out
    out.append(("torch", rt.torch_version))
    out.append(("CUDA", rt.cuda_version or "none (CPU build)"))
    out.append(("cuDNN", str(rt.cudnn_version) if rt.cudnn_version is not None else "n/a"))
    out.append(("device", rt.device_type))
    gpus = list(rt.device_names)
    if not gpus:
        seen = {g.name for s in run.samples for g in s.gpus}
        gpus = sorted(seen)
    out.append(("GPU", ", ".join(gpus) if gpus else "none seen"))
    out.append(("GPU driver", "not in the record"))
    out.append(("CPU", f"{rt.usable_cpus} usable of {rt.cpu_count} logical CPUs"
                + {True: ", native bf16", False: ", no native bf16", None: ""}[rt.cpu_bf16]))
    if rt.torch_threads is not None:
        out.append(("torch threads", str(rt.torch_threads)))
    out.append(("/dev/shm", fmt.size(rt.shm_bytes, "none")))
    for metric, why in rt.unavailable.items():
        out.append((f"{metric} unavailable", why))
    out.append(("doctor", "not in the record (pitstop doctor checks the machine; paste its output beside)"))
    return out


def _overhead(data: ReportData) -> list[tuple[str, str]]:
    run, s = data.primary, data.summary
    out = []
    if run.end is not None:
        if run.end.reason == "signal":
            out.append(("events dropped", "unknown: killed before its agent could count them (its end was "
                        "recorded by pitstop run)"))
        else:
            out.append(("events dropped", f"{run.end.dropped} (the agent's bounded queue drops the oldest when full)"))
    else:
        out.append(("events dropped", "unknown: the record has no end event (killed, or still running)"))
    p50 = s.step_p50_s
    if p50:
        out.append(("agent per step", f"~{AGENT_STEP_COST_S * 1e6:.0f} us per step, {AGENT_STEP_COST_S / p50:.2%} of this "
                    f"run's {fmt.duration(p50)} p50 step (measured by benchmarks/overhead.py, not in this run)"))
    marked = [st for st in run.steps if st.mark in ("profiled", "after-profile")]
    if run.profiles or marked:
        extra = sum(st.wall for st in marked) - len(marked) * (p50 or 0.0)
        elapsed = s.elapsed_s or 0.0
        share = f" ({extra / elapsed:.1%} of the run's {elapsed:.0f} s)" if elapsed > 0 and p50 else ""
        out.append(("profiler windows", f"{len(run.profiles)} window(s); {len(marked)} steps inside or right after them "
                    f"took {extra:.1f} s more than as many p50 steps{share}; they are left out of training figures"))
    return out


def overview(data: ReportData) -> list[tuple[str, str]]:
    """The summary's figures as (label, text) rows; "n/a (why)" where a figure is unavailable."""
    s = data.summary
    took = f": {s.long_warmup_s:.1f} s" if s.long_warmup_s is not None else ""
    rows = [("steps", f"{s.steps} ({s.measured_steps} training steps measured, first {s.warmup} dropped as warm-up{took})"
             + (f" in {s.elapsed_s:.1f} s" if s.elapsed_s is not None else ""))]
    kept = [(mark, n) for mark, n in s.marked if not (s.evaluates_each_step and mark == "eval")]
    if kept:
        rows.append(("kept out", ", ".join(f"{n} {mark}" for mark, n in kept)))
    if s.evaluates_each_step:
        rows.append(("evaluating", f"{dict(s.marked).get('eval', 0)} steps (most): each measured without its evaluation"))
    if s.samples_per_s is not None:
        rows.append(("throughput", fmt.rate(s.samples_per_s, "samples")
                     + (f", {fmt.rate(s.steps_per_s, 'steps')}" if s.steps_per_s is not None else "")))
    elif s.steps_per_s is not None:
        rows.append(("throughput", f"{fmt.rate(s.steps_per_s, 'steps')} (batch size not seen)"))
    if s.step_p50_s is not None:
        rows.append(("step time", f"p50 {fmt.duration(s.step_p50_s)}, p95 {fmt.duration(s.step_p95_s)}, "
                     f"mean {fmt.duration(s.step_mean_s)} (compute p50 {fmt.duration(s.compute_p50_s)})"))
    if s.data_wait_frac is not None:
        rows.append(("data wait", f"{fmt.pct(s.data_wait_frac)} of training step time"))
    rows.extend(("models" if i == 0 else "", text) for i, text in enumerate(models_lines(s.models)))
    if s.eval_passes:
        share = f", {fmt.pct(s.eval_s / s.elapsed_s)} of wall time" if s.elapsed_s else ""
        rows.append(("evaluation", f"{s.eval_passes} pass(es), {s.eval_s:.1f} s{share}"))
    mem = f"peak allocated {fmt.size(s.peak_mem_allocated, s.mem_unavailable)}"
    if s.peak_mem_reserved is not None:
        mem += f", reserved {fmt.size(s.peak_mem_reserved)}"
    rows.append(("memory", mem + f", peak host rss {fmt.size(s.peak_rss, 'not reported')}"))
    if s.gpu_util_mean is not None:
        rows.append(("gpu", f"util {fmt.percent(s.gpu_util_mean)}, memory peak {fmt.size(s.gpu_mem_peak)} "
                     f"of {fmt.size(s.gpu_mem_total)}"))
    else:
        rows.append(("gpu", fmt.na(s.gpu_unavailable)))
    rows.append(("cpu", cpu_text(s.cpu)))
    if s.last_loss is not None or s.nonfinite_losses:
        rows.append(("loss", (f"last {s.last_loss:.4g}" if s.last_loss is not None else "last n/a")
                     + (f", {s.nonfinite_losses} non-finite" if s.nonfinite_losses else "")))
    if s.applied:
        rows.append(("config", "applied " + "; ".join(s.applied)))
    rows.append(("end", end_text(s)))
    return rows
