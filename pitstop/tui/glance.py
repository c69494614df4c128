"""Provides the overview's figures at a glance: where the step time goes, the findings as text, and
one line per resource (GPU, CPU, memory) with its history.

Pure functions of a Frame (no widgets are touched): the overview screen sets
their results on its widgets.
"""

from __future__ import annotations

from collections.abc import Sequence

from pitstop.analysis import WARMUP, Finding, RunState, cpu_now, gpu_reason, model_spans, shares_text, window_phases
from pitstop.analysis import format as fmt
from pitstop.events import Gpu, Sample
from pitstop.tui.opstable import MIN_PHASE_SHARE
from pitstop.tui.view import Frame, gpm_reason, latest_sample, short_reason, torch_mem_reason
from pitstop.tui.widgets import FindingView, Gauge, GaugeLine, Phase, SplitInfo

# Sparklines show the last 120 samples: 1-2 minutes at the samplers' 1-2 Hz.
HISTORY_SAMPLES = 120
HISTORY_STEPS = 300
# Short phase names: the overview gives the split one line (the Ops screen names them in full).
SHORT_PHASES = {"data": "data", "forward": "fwd", "backward": "bwd", "optimizer": "optim"}


# -- where the step time goes ----------------------------------------------------------
def split_info(frame: Frame) -> SplitInfo | None:
    """Data wait against compute over the measured steps; the latest profiler window's phases."""
    run = frame.run
    if run is None or run.last_step is None:
        return None
    split = frame.split
    bound = any(f.rule == "data-wait" for f in frame.findings or ())
    phases, title, note = (), "", _no_window_note(frame)
    if run.profiles:
        window = run.profiles[-1]
        shares = window_phases(window)
        if shares:
            phases = tuple(Phase(SHORT_PHASES.get(p.name, p.name), p.frac, _phase_ms(p.ms)) for p in shares
                           if p.frac >= MIN_PHASE_SHARE)
            title = f"profiled steps {window.step_start}-{window.step_end - 1}"
        else:
            note = f"profiled steps {window.step_start}-{window.step_end - 1} have no phase split"
    if split is None:
        warm = run.total_steps
        return SplitInfo(note=f"{fmt.count(warm, 'step')} so far, all warm-up or marked (not measured yet)",
                         phases=phases, phases_title=title, phases_note=note)
    return SplitInfo(
        step=fmt.duration(split.wall_p50),
        over=f"over {fmt.count(split.steps, 'measured step')}",
        wait_frac=split.data_frac,
        wait=fmt.duration(split.wait_p50),
        compute=fmt.duration(split.compute_p50),
        wait_style="bold red" if bound else "red",
        phases=phases,
        phases_title=title,
        phases_note=note,
        anatomy=shares_text(split.phases) if split.phases is not None else "",
        anatomy_compact=shares_text(split.phases, compact=True) if split.phases is not None else "",
    )


def _phase_ms(ms: float) -> str:
    return fmt.duration(ms / 1000.0).replace(" ", "")


def _no_window_note(frame: Frame) -> str:
    if frame.live:
        return "no profiler window yet (p profiles now; 2 shows its ops)"
    return "no profiler window in this record before the cursor"


# -- findings -------------------------------------------------------------------------
def finding_views(found: Sequence[Finding] | None) -> tuple[FindingView, ...] | None:
    """The findings as the widgets show them (evidence cut to two items, the fix to its first line)."""
    if found is None:
        return None
    return tuple(
        FindingView(severity=f.severity, title=f.title, evidence=tuple(f.evidence[:2]), gain=f.gain,
                    fix=(f.fix.splitlines() or [""])[0])
        for f in found
    )


def quiet_text(frame: Frame) -> str:
    """What the findings say when there is none: plainly whether the run is still going."""
    run = frame.run
    if run is None or run.last_step is None:
        return "waiting for steps…"
    steps = fmt.count(len(run.measured_steps()), "measured step")
    if run.end is not None or (frame.ended and frame.replay is None):
        return f"nothing to report: the run ended, and nothing in its {steps} calls for a change"
    if frame.replay is not None:
        return f"nothing to report up to the cursor ({steps})"
    return f"nothing to report so far ({steps})"


# -- resources ------------------------------------------------------------------------
def _history(run: RunState) -> list[Sample]:
    k = len(run.samples)
    return [run.samples[i] for i in range(max(0, k - HISTORY_SAMPLES), k)]


def gauge_lines(run: RunState | None) -> tuple[GaugeLine, ...]:
    """One line each for the GPU, the CPU (in cores) and memory; and the models, where several trained in turn."""
    if run is None:
        return ()
    samples = _history(run)
    lines = (_gpu_line(run, samples), _cpu_line(run, samples), _memory_line(run, samples))
    models = _models_line(run)
    return lines + (models,) if models is not None else lines


def _models_line(run: RunState) -> GaugeLine | None:
    """Models trained one after another (a sweep's trials): how many, the latest one's figures (the summary's
    `models` block has each), and each model's step p50 as a sparkline, one point a model."""
    if len(run.model_starts) < 2:  # (model_spans walks the steps: only where a second optimizer came)
        return None
    models = model_spans(run, WARMUP)
    if len(models) < 2:
        return None
    last = models[-1]
    figures = [f"{len(models)} in turn; model {last.index}: steps {last.first_step}-{last.last_step}",
               f"p50 {fmt.duration(last.step_p50_s)}" if last.step_p50_s is not None else "no measured step"]
    if last.samples_per_s is not None:
        figures.append(fmt.rate(last.samples_per_s, "samples"))
    if last.nonfinite:
        figures.append(f"loss non-finite at {last.nonfinite} step{'s' if last.nonfinite != 1 else ''}")
    elif last.last_loss is not None:
        figures.append(f"loss {last.last_loss:.4g}")
    p50s = tuple(m.step_p50_s for m in models)
    top = max((p for p in p50s if p is not None), default=None)
    return GaugeLine("models", (Gauge(", ".join(figures), p50s, top),))


def _gpu_line(run: RunState, samples: list[Sample]) -> GaugeLine:
    sample = latest_sample(run)
    if sample is None or not sample.gpus:
        reason = sample.gpu_unavailable if sample is not None and sample.gpu_unavailable else gpu_reason(run)
        return GaugeLine("GPU", (Gauge(fmt.na(reason), style="yellow"),))
    g = sample.gpus[0]
    many = f" (gpu0 of {len(sample.gpus)})" if len(sample.gpus) > 1 else ""

    def of(pick: str) -> tuple[float | None, ...]:
        return tuple(_gpu0_value(s, pick) for s in samples)

    why = g.unavailable
    util = Gauge(f"util {fmt.percent(g.util, why.get('util'))}{many}", of("util"), 100.0)
    if g.mem_used is not None and g.mem_total:
        mem = Gauge(f"mem {fmt.size_of(g.mem_used, g.mem_total)}", of("mem_used"), float(g.mem_total),
                    "bold red" if g.mem_used > 0.9 * g.mem_total else "")
    else:
        mem = Gauge(f"mem {fmt.size(g.mem_used, why.get('mem_used') or why.get('memory'))}", of("mem_used"))
    limit = f"/{g.power_limit_w:.0f} W" if g.power_w is not None and g.power_limit_w else (
        " W" if g.power_w is not None else "")
    power_text = f"{g.power_w:.0f}{limit}" if g.power_w is not None else fmt.na(why.get("power_w") or why.get("power"))
    power = Gauge(f"power {power_text}", of("power_w"), g.power_limit_w)
    return GaugeLine("GPU", (util, mem, power, _gpm_gauge(g, of("tensor_active"))))


def _gpm_gauge(g: Gpu, tensor: tuple[float | None, ...]) -> Gauge:
    """SM, DRAM and tensor-pipe activity (GPM, Hopper and newer), the tensor pipes' history beside them."""
    if g.sm_active is None and g.dram_bw_util is None and g.tensor_active is None:
        return Gauge(f"SM {fmt.na(short_reason(gpm_reason(g)))}", style="dim")
    return Gauge(f"SM {fmt.percent(g.sm_active)} dram {fmt.percent(g.dram_bw_util)} "
                 f"tensor {fmt.percent(g.tensor_active)}", tensor, 100.0)


def _gpu0_value(sample: Sample, pick: str) -> float | None:
    if not sample.gpus:
        return None
    value = getattr(sample.gpus[0], pick)
    return float(value) if value is not None else None


def _cpu_line(run: RunState, samples: list[Sample]) -> GaugeLine:
    if not samples:
        return GaugeLine("CPU", (Gauge(fmt.na("no sample yet"), style="dim"),))
    cpu = cpu_now(run, samples=1)
    main_hist = tuple(_main_cpu(s) for s in samples)
    # Cores have no natural top: a sparkline reaches from 0 to one core or the busiest reading.
    gauges = [Gauge(f"main {cpu.main:.2f}" if cpu.main is not None else f"main {fmt.NA}", main_hist,
                    max([1.0, *(v for v in main_hist if v is not None)]))]
    for group in cpu.loaders[:2]:
        name = "workers" if group.label in ("", "train") else f"loader {group.loader}"
        hist = tuple(_worker_cpu(s, group.loader) for s in samples)
        known = [v for v in hist if v is not None]
        cores = f"{group.cores:.2f}" if group.cores is not None else fmt.NA
        gauges.append(Gauge(f"{fmt.count(group.workers, 'worker')} {cores}" if name == "workers"
                            else f"{name} ({group.workers}) {cores}", hist, max([1.0, *known])))
    if not cpu.loaders:
        gauges.append(Gauge(_no_workers(run)))
    if cpu.machine is not None:
        hist = tuple(s.system_cpu for s in samples)
        gauges.append(Gauge(f"machine {cpu.machine:.1f}/{cpu.machine_cores}", hist, 100.0))
    elif cpu.machine_pct is not None:
        gauges.append(Gauge(f"machine {fmt.percent(cpu.machine_pct)}", tuple(s.system_cpu for s in samples), 100.0))
    return GaugeLine("CPU", tuple(gauges))


def _main_cpu(sample: Sample) -> float | None:
    return next((p.cpu / 100.0 for p in sample.procs if p.role == "main" and p.cpu is not None), None)


def _worker_cpu(sample: Sample, loader: int | None) -> float | None:
    cpus = [p.cpu for p in sample.procs if p.role == "worker" and p.loader == loader and p.cpu is not None]
    return sum(cpus) / 100.0 if cpus else None


def _no_workers(run: RunState) -> str:
    info = run.training_loader() or max(run.dataloaders.values(), key=lambda d: d.num_workers, default=None)
    if info is None:
        return "no DataLoader seen"
    if info.num_workers == 0:
        return "0 workers (loads in main)"
    return f"0 of {fmt.count(info.num_workers, 'worker')} running"


def _memory_line(run: RunState, samples: list[Sample]) -> GaugeLine:
    rss_hist = tuple(_main_rss(s) for s in samples)
    last = run.steps[-1] if run.steps else None
    rss = last.host_rss if last is not None and last.host_rss is not None else (
        rss_hist[-1] if rss_hist and rss_hist[-1] is not None else None)
    gauges = [Gauge(f"host rss {fmt.size(rss, 'not reported')}", rss_hist if any(rss_hist) else ())]
    if last is not None and last.mem_allocated is not None:
        k = len(run.steps)
        steps = [run.steps[i] for i in range(max(0, k - HISTORY_STEPS), k)]
        alloc = tuple(float(s.mem_allocated) if s.mem_allocated is not None else None for s in steps)
        top = float(run.peak_mem_reserved or max(v for v in alloc if v is not None) or 1)
        # Reserved and the peaks are on the Memory screen (4): one line has room for two histories.
        gauges.append(Gauge(f"torch {fmt.size(last.mem_allocated)} (peak {fmt.size(run.peak_mem_allocated)})",
                            alloc, top))
    else:
        gauges.append(Gauge(f"torch {fmt.na(torch_mem_reason(run) or 'not reported yet')}", style="dim"))
    return GaugeLine("mem", tuple(gauges))


def _main_rss(sample: Sample) -> float | None:
    return next((float(p.rss) for p in sample.procs if p.role == "main" and p.rss is not None), None)

