"""Provides the pure figures the screens show, derived from a RunState (no widgets, no I/O).

Analysis owns the arithmetic of a whole run (`summarize`, `findings`,
`percentile`); what lives here is only what a live screen needs on top: the
recent window (`recent_rates`, so the header follows a change the user just
made), chart series, and "n/a (reason)" texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from pitstop.analysis import (
    WARMUP,
    Finding,
    JobState,
    JobSummary,
    RunState,
    StepSplit,
    cpu_now,
    data_verdict,
    end_reason_text,
    headline,
    job_cause,
    stall_open,
    stall_word,
    stalled_for,
    first_step_progress,
    first_step_text,
    gpu_reason,
    recent_rates,
)
from pitstop.analysis import format as fmt
from pitstop.events import Gpu, ProfileWindow, Sample, Step
from pitstop.tui.widgets import BarSeries, Layer, Row

# The step charts show the last 300 steps (a bar averages several when the chart is narrower).
CHART_STEPS = 300


@dataclass(frozen=True)
class Replay:
    """Where a replay stands."""

    cursor: float
    start: float
    end: float
    paused: bool
    speed: float


@dataclass(frozen=True)
class Frame:
    """What every screen is handed on a refresh: the state and the moment it describes."""

    job: JobState
    run: RunState | None  # the process shown (rank 0 unless the user chose another)
    rank_label: str
    now: float  # the clock for a live run, the cursor for a replay
    label: str  # the source's label
    live: bool
    failed: str | None = None  # why the reader stopped, when it failed
    ended: bool = False  # the stream ended (the source's batches() returned)
    replay: Replay | None = None
    # Job-level figures of every rank (throttled by the app: summarize walks every step).
    summary: JobSummary | None = None
    # The findings of the shown run (the job's first), computed once by the app for every
    # screen (throttled: the rules walk every step); None before the run's first step.
    findings: tuple[Finding, ...] | None = None
    # The shown run's step split (analysis.step_split), computed with the findings.
    split: StepSplit | None = None


# -- header -------------------------------------------------------------------
def device_text(run: RunState) -> str:
    rt = run.runtime
    if rt is None:
        return fmt.na("runtime not reported yet")
    if rt.device_type == "cuda" and rt.device_names:
        names = rt.device_names
        return names[0] if len(names) == 1 else f"{len(names)}x {names[0]}"
    return rt.device_type


def elapsed_s(run: RunState, now: float) -> float | None:
    if run.hello is None:
        return None
    until = run.end.t if run.end is not None else now
    return until - run.hello.started


def header_items(frame: Frame) -> tuple[tuple[str, str], ...]:
    """(label, value) pairs, most important first: the header drops the last ones that do not fit.

    pid, step and (in a replay) the cursor come first: at 80 columns a long record
    path or device name once pushed them off the header.
    """
    run = frame.run
    if run is None:
        return (("status", "waiting for the first event"),)
    hello = run.hello
    pace = recent_rates(run)  # the status line's steps and arithmetic (warm-up, marks out)
    steps_per_s, samples_per_s = pace.steps_per_s, pace.samples_per_s
    items: list[tuple[str, str]] = [
        ("pid", str(hello.pid) if hello else fmt.NA),
        ("step", str(run.last_step) if run.last_step is not None else "–"),
    ]
    if frame.replay is not None:
        r = frame.replay
        items.append(("at", f"{fmt.elapsed(r.cursor - r.start)}/{fmt.elapsed(r.end - r.start)}"
                      f" x{r.speed:g}" + (" paused" if r.paused else "")))
    if run.end is not None:  # worded as the summary words it: "terminated by SIGTERM (exit 143)"
        code = f" (exit {run.end.exit_code})" if run.end.exit_code is not None else ""
        items.append(("ended", end_reason_text(run.end.reason) + code))
    items += [
        ("samples/s", fmt.rate_value(samples_per_s) if samples_per_s is not None
         else fmt.na("batch size unknown" if steps_per_s else None)),
        ("steps/s", fmt.rate_value(steps_per_s) if steps_per_s is not None else fmt.NA),
    ]
    loss = loss_text(run)
    if loss is not None:
        items.append(("loss", loss))
    summary = frame.summary
    if summary is not None and summary.ranks > 1:
        # The job's figures next to the shown rank's: ranks in DDP each consume their own batch.
        gone = f", {len(summary.gone)} gone" if summary.gone else ""
        items.append(("ranks", f"{summary.ranks}{gone} (showing {frame.rank_label})"))
        items.append(("job samples/s", fmt.rate_value(summary.samples_per_s) if summary.samples_per_s is not None
                      else fmt.na("batch size unknown")))
        if summary.stragglers:
            items.append(("straggler", ", ".join(f"{s.label} ({s.where})" if s.where else s.label
                                                 for s in summary.stragglers)))
    items.append(("elapsed", fmt.elapsed(elapsed_s(run, frame.now))))
    items.append(("device", device_text(run)))
    return tuple(items)


def loss_text(run: RunState) -> str | None:
    """The latest loss; with a second optimizer's (a GAN's G), each: "1st 1.618 · 2nd 3.788" in the summary's
    order (the first optimizer to step, then the second); "NaN/inf" where the latest read was not finite
    (the latest finite value would be a stale figure); None before any was read."""
    last = run.last_loss()
    latest = next(reversed(run.losses.items()), None)
    first = "NaN/inf" if latest is not None and latest[1] is None else fmt.NA if last is None else f"{last:.4g}"
    other = run.other_loss
    bad = run.other_nonfinite_steps
    if other is not None or bad:
        second = "NaN/inf" if bad and (other is None or max(bad) > other[0]) else f"{other[1]:.4g}" if other else fmt.NA
        return f"1st {first} · 2nd {second}"
    return None if last is None and latest is None else first


def stuck_text(frame: Frame) -> str | None:
    """"STUCK stuck for 1m20s after step 19: rank 1 is blocked in ..." while a rank of the job is stuck
    ("WAITING no first step after 5m00s: ..." before its first step); else None."""
    ranks = frame.job.ranks()
    stuck = [run for _, run in ranks if stall_open(run)]
    if not stuck:
        return None
    longest = max(stuck, key=lambda run: stalled_for(run) or 0.0)
    cause = job_cause(ranks)
    return f"{stall_word(stuck)} {headline(longest)}" + (f": {cause}" if cause else "") + " (w: where each rank waits)"


def mode_text(frame: Frame) -> str:
    if frame.failed:
        return "FAILED"
    if frame.live and not frame.ended and frame.replay is None and stuck_text(frame) is not None:
        return stall_word([run for _, run in frame.job.ranks() if stall_open(run)])
    if frame.replay is not None:
        return "PAUSED" if frame.replay.paused else "REPLAY"
    if frame.ended or (frame.run is not None and frame.run.end is not None):
        return "ENDED"
    return "LIVE"


def title_text(frame: Frame) -> str:
    """The script; in a replay, with the record's name (its last two path parts: the session and file)."""
    run = frame.run
    label = frame.label
    if not frame.live and label.startswith("replay: "):
        # A record file keeps its session directory's name; a directory is its own name.
        parts = PurePath(label[len("replay: "):]).parts
        keep = 2 if parts and parts[-1].endswith((".jsonl", ".jsonl.gz")) else 1
        label = "replay: " + ("…/" if len(parts) > keep else "") + "/".join(parts[-keep:])
    if run is not None and run.hello is not None and run.hello.script:
        return run.hello.script if frame.live else f"{run.hello.script} ({label})"
    return label


# -- charts -------------------------------------------------------------------
STEP_LAYERS = (Layer("data wait", "red"), Layer("compute", "green"))


def _chart_marks(steps: list[Step]) -> tuple[str | None, ...]:
    # Warm-up steps are drawn apart like marked ones: the first step (CUDA set-up, worker
    # start-up) is often the slowest of the run and would otherwise set the scale.
    return tuple(s.mark if s.mark is not None else ("warm-up" if s.step < WARMUP else None) for s in steps)


def step_bars(run: RunState | None, steps: int = CHART_STEPS) -> BarSeries:
    """Step time of the last steps, stacked as data wait under compute (seconds)."""
    title = "step time"
    recent = run.recent_steps(steps) if run is not None else []
    if not recent:
        # A slow first step is not a hang: what it does, on a line of its own (120 columns cut it).
        found = first_step_progress(run) if run is not None else None
        note = first_step_text(*found, sep="\n  ") if found is not None else "no step yet"
        return BarSeries(title, STEP_LAYERS, note=note)
    return BarSeries(title, STEP_LAYERS, tuple(s.step for s in recent),
                     tuple((s.data_wait, s.compute) for s in recent), _chart_marks(recent))


def wait_bars(run: RunState | None, steps: int = CHART_STEPS) -> BarSeries:
    """Data wait of the last steps (seconds)."""
    title = "data wait per step"
    layers = (Layer("data wait", "red"),)
    recent = run.recent_steps(steps) if run is not None else []
    if not recent:
        return BarSeries(title, layers, note="no step yet")
    return BarSeries(title, layers, tuple(s.step for s in recent), tuple((s.data_wait,) for s in recent),
                     _chart_marks(recent))


def memory_bars(run: RunState | None, steps: int = CHART_STEPS) -> BarSeries:
    """Torch memory per step on CUDA (allocated under the allocator's cache), else host RSS (bytes).

    Scaled to the tallest bar, not robustly: a memory peak is what a person looks for.
    """
    recent = run.recent_steps(steps) if run is not None else []
    if not recent:
        return BarSeries("memory per step", (), note="no step yet", unit="B")
    marks = _chart_marks(recent)
    x = tuple(s.step for s in recent)
    if any(s.mem_allocated is not None for s in recent):
        layers = (Layer("allocated", "green"), Layer("cached (reserved, not allocated)", "yellow"))
        values = tuple((float(s.mem_allocated or 0), float(max(0, (s.mem_reserved or 0) - (s.mem_allocated or 0))))
                       for s in recent)
        return BarSeries("torch memory per step", layers, x, values, marks, unit="B", robust=False)
    if any(s.host_rss is not None for s in recent):
        return BarSeries("host RSS per step", (Layer("host rss", "cyan"),), x,
                         tuple((float(s.host_rss or 0),) for s in recent), marks, unit="B", robust=False)
    return BarSeries("memory per step", (), note="no memory reported", unit="B")


# -- panels -------------------------------------------------------------------
def latest_sample(run: RunState | None) -> Sample | None:
    return run.samples[-1] if run is not None and run.samples else None


def gpu_rows(run: RunState | None) -> tuple[Row, ...]:
    if run is None:
        return ()
    sample = latest_sample(run)
    if sample is None or not sample.gpus:
        reason = sample.gpu_unavailable if sample is not None and sample.gpu_unavailable else gpu_reason(run)
        return (Row("GPU", fmt.na(reason), "yellow"),)
    rows: list[Row] = []
    for g in sample.gpus:
        rows.extend(_gpu_rows(g, len(sample.gpus) > 1))
    return tuple(rows)


def _gpu_rows(g: Gpu, many: bool) -> list[Row]:
    tag = f"gpu{g.index} " if many else ""
    why = g.unavailable
    mem = fmt.size(g.mem_used, why.get("mem_used") or why.get("memory"))
    if g.mem_used is not None and g.mem_total:
        mem = f"{fmt.size_of(g.mem_used, g.mem_total)} ({fmt.pct(g.mem_used / g.mem_total)})"
    return [
        Row(f"{tag}util", fmt.percent(g.util, why.get("util"))),
        Row(f"{tag}memory", mem),
        Row(f"{tag}power", fmt.watts(g.power_w, g.power_limit_w, why.get("power_w") or why.get("power"))),
        *_gpm_rows(g, tag),
    ]


# GPM figures (Hopper and newer): what the SMs, tensor pipes and DRAM did, where
# `util` only says a kernel was running.
GPM_ROWS = (("SM active", "sm_active"), ("SM occupancy", "sm_occupancy"),
            ("tensor active", "tensor_active"), ("DRAM bandwidth", "dram_bw_util"))


def gpm_reason(g: Gpu) -> str:
    """Why the GPM figures are missing: the reason the reading gave, or that it gave none (an older record)."""
    return g.unavailable.get("gpm") or "not in this reading (recorded before pitstop read GPM?)"


def short_reason(reason: str) -> str:
    """The first clause of a reason, for a line with little room: "GPM needs Hopper or newer"."""
    return reason.split(" (")[0].split(":")[0]


def _gpm_rows(g: Gpu, tag: str) -> list[Row]:
    if all(getattr(g, name) is None for _, name in GPM_ROWS):
        return [Row(f"{tag}SM/tensor", fmt.na(gpm_reason(g)), "dim")]
    why = g.unavailable.get("gpm")
    return [Row(f"{tag}{label}", fmt.percent(getattr(g, name), why)) for label, name in GPM_ROWS]


def cpu_rows(run: RunState | None) -> tuple[Row, ...]:
    """The latest CPU reading in cores (1.0 = one core busy): main, each loader's workers, the machine."""
    if run is None:
        return ()
    if latest_sample(run) is None:
        return (Row("CPU", fmt.na("no sample yet")),)
    cpu = cpu_now(run, samples=1)
    rows = [Row("main", f"{cpu.main:.2f} cores" if cpu.main is not None else fmt.na("not reported"))]
    for group in cpu.loaders:
        # Short labels: the panel is ~25 columns at 80; the Data screen names each loader in full.
        label = "workers" if not group.label else "train workers" if group.label == "train" else (
            f"loader {group.loader} workers")
        cores = f"{group.cores:.2f} cores" if group.cores is not None else fmt.na("not reported")
        rows.append(Row(label, f"{cores} ({group.workers})"))
    if not cpu.loaders:
        rows.append(Row("workers", _no_workers_text(run)))
    if cpu.machine is not None:
        rows.append(Row("machine", f"{cpu.machine:.2f}/{cpu.machine_cores} cores"))
    elif cpu.machine_pct is not None:
        rows.append(Row("machine", f"{fmt.percent(cpu.machine_pct)} (CPU count not reported)"))
    return tuple(rows)


def _no_workers_text(run: RunState) -> str:
    """Why no worker runs now, from the training loader's settings (else any loader's), never a guess.

    At the end of a run that used 2 workers they have exited: that is not
    "num_workers=0".
    """
    info = run.training_loader() or max(run.dataloaders.values(), key=lambda d: d.num_workers, default=None)
    if info is None:
        return "none seen"
    if info.num_workers == 0:
        return "none (num_workers=0: batches load in the main process)"
    return f"none running now (num_workers={info.num_workers})"


def memory_rows(run: RunState | None, *, detail: bool = False) -> tuple[Row, ...]:
    if run is None:
        return ()
    last = run.steps[-1] if run.steps else None
    why = torch_mem_reason(run)
    rss = last.host_rss if last is not None and last.host_rss is not None else _main_rss(run)
    if why is not None:
        # One line says why torch's figures are missing, not four lines repeating it.
        rows = [Row("torch memory", fmt.na(why))]
    else:
        rows = [
            Row("allocated", fmt.size(last.mem_allocated if last else None, why)),
            Row("reserved", fmt.size(last.mem_reserved if last else None, why)),
            Row("peak", fmt.size(run.peak_mem_allocated, why)),
        ]
    rows.append(Row("host rss", fmt.size(rss, "not reported")))
    if detail:
        if why is None:
            rows.append(Row("peak reserved", fmt.size(run.peak_mem_reserved, why)))
        rows.append(Row("peak host rss", fmt.size(run.peak_rss, "not reported")))
        rows.extend(headroom_rows(run))
    return tuple(rows)


def headroom_rows(run: RunState) -> list[Row]:
    sample = latest_sample(run)
    rows: list[Row] = []
    if sample is None or not sample.gpus:
        reason = sample.gpu_unavailable if sample is not None and sample.gpu_unavailable else gpu_reason(run)
        rows.append(Row("GPU headroom", fmt.na(reason)))
    else:
        for g in sample.gpus:
            if g.mem_used is None or g.mem_total is None:
                rows.append(Row(f"gpu{g.index} headroom", fmt.na(g.unavailable.get("mem_used", "not reported"))))
            else:
                free = g.mem_total - g.mem_used
                style = "bold red" if free < 0.1 * g.mem_total else ""
                rows.append(Row(f"gpu{g.index} free", f"{fmt.size(free)} of {fmt.size(g.mem_total)}", style))
    if run.last_alloc_retries is None:
        rows.append(Row("alloc retries", fmt.na(torch_mem_reason(run) or "not reported")))
    else:
        retries = run.last_alloc_retries - (run.first_alloc_retries or 0)
        rows.append(Row("alloc retries", str(run.last_alloc_retries) + (f" (+{retries} while watched)" if retries else ""),
                        "bold red" if run.last_alloc_retries else ""))
    if run.last_ooms is not None:
        rows.append(Row("OOMs", str(run.last_ooms), "bold red" if run.last_ooms else ""))
    return rows


def _main_rss(run: RunState) -> int | None:
    sample = latest_sample(run)
    if sample is None:
        return None
    return next((p.rss for p in sample.procs if p.role == "main"), None)


def torch_mem_reason(run: RunState) -> str | None:
    """Why torch's memory figures are missing (None on CUDA, where they are reported)."""
    rt = run.runtime
    if rt is None:
        return "device not known yet"
    if rt.unavailable.get("memory"):
        return rt.unavailable["memory"]
    if rt.device_type != "cuda":
        return f"not on CUDA: device {rt.device_type}"
    return None


# -- data ---------------------------------------------------------------------
def data_rows(run: RunState | None, found: tuple[Finding, ...] | None = None,
              split: StepSplit | None = None) -> tuple[Row, ...]:
    """Data wait over the measured steps, the loader's rate against the step's appetite, and the verdict.

    The same steps and share as the data-wait finding (`split`, the run's
    step_split), and the verdict is that finding (`data_verdict`): the Data
    screen and the overview cannot disagree.
    """
    if run is None or split is None:
        return ()
    verdict = data_verdict(run, found or (), split=split)
    rows = [
        Row("data wait p50", fmt.duration(split.wait_p50)),
        Row("data wait p95", fmt.duration(split.wait_p95)),
        Row("share of step", fmt.pct(split.data_frac), "bold red" if verdict.bound else ""),
    ]
    # One batch per step: the loader delivered `steps` batches in the steps' wall time;
    # the step alone (without waiting) could take one every compute / steps seconds.
    compute = split.wall_sum - split.wait_sum
    consumed = split.steps / split.wall_sum if split.wall_sum > 0 else None
    appetite = split.steps / compute if compute > 0 else None
    rows.append(Row("loader delivers", fmt.rate(consumed, "batches")))
    rows.append(Row("step could take", fmt.rate(appetite, "batches") + " (if data were free)"))
    style = "bold red" if verdict.bound else ("green" if verdict.bound is False else "dim")
    rows.append(Row("verdict", verdict.text, style))
    return tuple(rows)


def worker_rows(run: RunState | None) -> tuple[Row, ...]:
    if run is None:
        return ()
    sample = latest_sample(run)
    if sample is None:
        return (Row("workers", fmt.na("no sample yet")),)
    rows = []
    labels = {}
    for dl in sorted(run.dataloaders.values(), key=lambda d: d.id):
        role = run.loader_role(dl.id)
        labels[dl.id] = f"{role} {dl.id}".strip() if role else f"loader {dl.id}"
        what = f"{dl.dataset}, " if dl.dataset else ""
        rows.append(Row(labels[dl.id], f"{what}batch {dl.batch_size or 'n/a'}, workers {dl.num_workers}, "
                        f"pin_memory {dl.pin_memory}, prefetch {dl.prefetch_factor or 'n/a'}"))
    workers = [p for p in sample.procs if p.role == "worker"]
    if not workers:
        rows.append(Row("workers", _no_workers_text(run)))
    for p in workers:
        of = f"  ({labels[p.loader]})" if p.loader in labels else ""
        cpu = f"{p.cpu / 100:.2f} cores" if p.cpu is not None else fmt.NA  # cores, as every CPU figure
        rows.append(Row(f"pid {p.pid}", f"{cpu}  rss {fmt.size(p.rss, 'n/a')}{of}"))
    return tuple(rows)


# -- profiler -----------------------------------------------------------------
def profile_at(run: RunState | None, back: int) -> ProfileWindow | None:
    """The profiler window `back` windows before the latest (0: the latest)."""
    if run is None or not run.profiles:
        return None
    back = min(max(0, back), len(run.profiles) - 1)
    return run.profiles[-1 - back]
