"""Provides the derived figures of one run (Summary) and their text forms for the headless front."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pitstop.analysis import format as fmt
from pitstop.analysis._anatomy import PhaseSplit, phase_split_of
from pitstop.analysis._context import WARMUP
from pitstop.analysis._cpu import STATUS_SAMPLES, CpuFigures, cpu_mean, cpu_now, cpu_text, loader_label
from pitstop.analysis._models import ModelSpan, model_spans
from pitstop.analysis._rates import RECENT_STEPS, last_measured, rates, rates_of
from pitstop.analysis._state import HEAD_STEPS, RunState
from pitstop.analysis._stats import mean, percentile
from pitstop.events import Note, Step

if TYPE_CHECKING:
    from pitstop.analysis._context import Finding, RuleFailure

# How each way of ending reads in the summary (End.reason; docs/events.md).
END_REASONS = {
    "exit": "exited",
    "exception": "died of an uncaught exception",
    "interrupted": "interrupted by SIGINT (Ctrl-C, or k in the viewer)",
    "trial-complete": "trial complete",
    "terminated": "terminated by SIGTERM",
    "signal": "killed by a signal before it could record its end",  # written by `pitstop run`, which saw it
}
# How steps were counted, where it is not a torch optimizer's steps: Keras's own optimizer applies
# its updates (every 2nd backward with gradient_accumulation_steps=2: 37 updates, 75 steps) unseen.
COUNTED_BY = {
    "backward": "counted at each backward call: no torch.optim optimizer step seen (manual updates, a "
                "framework's own optimizer, or a step compiled by torch.compile: steps it accumulates over "
                "are not seen)",
    "manual": "marked by the script (pitstop.step())",
}
# How each Step.mark reads where steps are counted (docs/events.md).
MARK_WORDS = {"eval": "with evaluation", "rollout": "with rollouts", "profiled": "in profiler windows",
              "after-profile": "after profiler windows"}
# A Note from this source says a viewer asked the agent to stop the script (`k`).
STOP_NOTE_SOURCE = "stop"
# A warm-up this long, and over 10x as many measured steps, is said with its time on the steps row.
LONG_WARMUP_S = 1.0


@dataclass(frozen=True)
class Summary:
    """Derived figures of one run. None means unavailable; `*_unavailable` says why."""

    steps: int  # every step seen
    measured_steps: int  # after the warm-up
    warmup: int
    warmup_s: float | None  # the warm-up steps' wall time (a compile, a first LBFGS step), where kept
    elapsed_s: float | None  # first to last time stamp of the stream
    measured_s: float  # sum of wall over measured steps
    samples_per_s: float | None  # None when a measured step did not report its batch size
    steps_per_s: float | None
    step_p50_s: float | None
    step_p95_s: float | None
    step_mean_s: float | None
    compute_p50_s: float | None
    data_wait_p50_s: float | None
    data_wait_frac: float | None  # sum(data_wait) / sum(wall), measured steps
    peak_mem_allocated: int | None
    peak_mem_reserved: int | None
    mem_unavailable: str | None
    peak_rss: int | None
    gpu_util_mean: float | None  # percent, mean over samples of the mean over GPUs
    gpu_mem_peak: int | None
    gpu_mem_total: int | None
    gpu_power_mean: float | None  # watts, all the job's GPUs of this process together
    gpu_unavailable: str | None
    cpu: CpuFigures  # means over the run, in cores (workers: while they ran, per loader)
    workers: int  # most DataLoader workers seen at once (all loaders)
    last_loss: float | None
    nonfinite_losses: int
    first_nonfinite_step: int | None
    dropped: int | None  # None until the stream ended
    end_reason: str | None  # None while running
    exit_code: int | None
    device_type: str | None
    stopped: bool = False  # a viewer asked the agent to stop the script (`k`)
    stuck: bool = False  # its stall was open when it ended (or closed by the end): no step was in flight
    marked: tuple[tuple[str, int], ...] = ()  # (Step.mark, steps) kept out of the training figures
    eval_passes: int = 0  # evaluation passes, in steps and after the last step (`RunState.eval_passes`)
    rollouts: int = 0  # a policy's rollouts, counted apart from evaluation (`RunState.rollouts`)
    rollout_s: float = 0.0
    # Optimizers that stepped (`Model.optimizers`): with several (a GAN's), the loss shown is the clock's
    # optimizer's (the first to step), summed over its backward calls since another optimizer's step.
    loss_optimizers: int = 1
    # The second optimizer's latest loss and its step (a GAN's G: its backward calls between the first
    # optimizer's steps, `RunState.other_loss`), shown beside the first's; None where none was read.
    other_loss: float | None = None
    other_loss_step: int | None = None
    # The second optimizer's non-finite losses (a GAN's G: `RunState.other_nonfinite_total`), counted apart.
    other_nonfinite_losses: int = 0
    other_first_nonfinite_step: int | None = None
    evaluates_each_step: bool = False  # most steps evaluate: their training parts are measured (RunState)
    eval_s: float = 0.0  # time spent evaluating in them
    applied: tuple[str, ...] = ()  # what a tuned config applied: "amp=bf16 (process-wide)"
    skipped: tuple[str, ...] = ()  # what it could not: "batch_size (train loader 1): a custom batch_sampler"
    notes: tuple[str, ...] = ()  # the agent's warnings and errors: "prometheus: metrics endpoint off: ..."
    phases: PhaseSplit | None = None  # the measured steps' anatomy (analysis._anatomy.phase_split)
    counted_by: str | None = None  # the latest step's `source`: "optimizer" | "backward" | "manual"
    models: tuple[ModelSpan, ...] = ()  # models trained one after another (`_models`); () for one

    @property
    def long_warmup_s(self) -> float | None:
        """The warm-up's seconds where they are worth saying (HF Trainer's compiled first step took 89 s):
        at least LONG_WARMUP_S and over 10x as many measured steps; else None."""
        took = self.warmup_s
        if took is None or took < LONG_WARMUP_S:
            return None
        return took if self.step_p50_s is None or took > 10 * self.warmup * self.step_p50_s else None


def summarize(run: RunState, warmup: int = WARMUP) -> Summary:
    """Summary of one run; steps with an index below `warmup` are left out of timings."""
    warmup = max(0, warmup)
    window = run.measured_steps(warmup)
    n, evals, wall, wait, samples, known = _measured_totals(run, warmup, window)
    pace = rates_of(n + evals, wall, samples, known, wait)
    each = run.evaluates_each_step()
    if each:  # the steps that evaluate are measured by their training part
        n, evals = n + evals, 0

    step_p50 = step_p95 = step_mean = compute_p50 = wait_p50 = None
    if window:
        walls = [s.wall for s in window]
        step_p50 = percentile(walls, 50)
        step_p95 = percentile(walls, 95)
        step_mean = sum(walls) / len(walls)
        compute_p50 = percentile((s.compute for s in window), 50)
        wait_p50 = percentile((s.data_wait for s in window), 50)

    elapsed = None
    if run.first_t is not None and run.last_t is not None:
        elapsed = run.last_t - run.first_t

    mem_unavailable = None
    if run.peak_mem_allocated is None:
        mem_unavailable = _mem_reason(run)

    end = run.end
    return Summary(
        marked=tuple(sorted(run.marked.items())),
        evaluates_each_step=each,
        eval_passes=run.eval_passes,
        eval_s=run.eval_s,
        rollouts=run.rollouts,
        rollout_s=run.rollout_s,
        steps=run.total_steps,
        measured_steps=n,
        warmup=warmup,
        warmup_s=_warmup_s(run, warmup),
        elapsed_s=elapsed,
        measured_s=wall,
        samples_per_s=pace.samples_per_s,
        steps_per_s=pace.steps_per_s,
        step_p50_s=step_p50,
        step_p95_s=step_p95,
        step_mean_s=step_mean,
        compute_p50_s=compute_p50,
        data_wait_p50_s=wait_p50,
        data_wait_frac=pace.data_wait_frac,
        peak_mem_allocated=run.peak_mem_allocated,
        peak_mem_reserved=run.peak_mem_reserved,
        mem_unavailable=mem_unavailable,
        peak_rss=run.peak_rss,
        gpu_util_mean=run.gpu_util_sum / run.gpu_util_n if run.gpu_util_n else None,
        gpu_mem_peak=run.gpu_mem_peak,
        gpu_mem_total=run.gpu_mem_total,
        gpu_power_mean=run.gpu_power_sum / run.gpu_power_n if run.gpu_power_n else None,
        gpu_unavailable=None if run.gpu_util_n else gpu_reason(run),
        cpu=cpu_mean(run),
        workers=run.workers_max,
        last_loss=run.last_loss(),
        loss_optimizers=run.model.optimizers if run.model is not None and run.model.optimizers else 1,
        other_loss=run.other_loss[1] if run.other_loss is not None else None,
        other_loss_step=int(run.other_loss[0]) if run.other_loss is not None else None,
        other_nonfinite_losses=run.other_nonfinite_total,
        other_first_nonfinite_step=min(run.other_nonfinite_steps) if run.other_nonfinite_steps else None,
        nonfinite_losses=run.nonfinite_total,
        first_nonfinite_step=min(run.nonfinite_steps) if run.nonfinite_steps else None,
        dropped=end.dropped if end is not None and end.reason != "signal" else None,  # (not counted: killed)
        end_reason=end.reason if end is not None else None,
        exit_code=end.exit_code if end is not None else None,
        device_type=run.device_type,
        stopped=any(n.source == STOP_NOTE_SOURCE for n in run.notes),
        stuck=run.stall is not None and run.stall.phase != "end",
        applied=_applied(run),
        skipped=_skipped(run),
        notes=_notes(run),
        phases=phase_split_of(window),
        counted_by=run.steps[-1].source if run.steps else None,
        models=tuple(model_spans(run, warmup)),
    )


# -- config and notes ----------------------------------------------------------
def _scope(run: RunState, loader: int) -> str:
    label = loader_label(run, loader)
    return f"{label} loader {loader}" if label == "train" else label


def _applied(run: RunState) -> tuple[str, ...]:
    out = []
    if run.applied is not None:
        out += [f"{k}={_value(v)} (process-wide)" for k, v in run.applied.applied.items()]
    for dl in sorted(run.dataloaders.values(), key=lambda d: d.id):
        if dl.overrides:
            knobs = ", ".join(f"{k}={_value(v)}" for k, v in dl.overrides.items())
            out.append(f"{knobs} ({_scope(run, dl.id)})")
    return tuple(out)


def _skipped(run: RunState) -> tuple[str, ...]:
    out = []
    if run.applied is not None:
        out += [f"{k}: {why}" for k, why in run.applied.skipped.items()]
    # One line per knob and reason, its loaders listed: HF Trainer builds an eval loader at each
    # evaluation, and the summary said the same skip eleven times.
    scopes: dict[tuple[str, str], list[str]] = {}
    for dl in sorted(run.dataloaders.values(), key=lambda d: d.id):
        for k, why in dl.skipped.items():
            scopes.setdefault((k, why), []).append(_scope(run, dl.id))
    for (k, why), where in scopes.items():
        shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        out.append(f"{k} ({shown}): {why}")
    return tuple(out)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def note_text(note: Note) -> str:
    """One line for a person: "warning (prometheus): metrics endpoint off: ..."."""
    level = {"warn": "warning"}.get(note.level, note.level)
    return f"{level} ({note.source}): {note.message}"


def _notes(run: RunState) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for note in run.notes:
        if note.level in ("warn", "error"):
            seen.setdefault(note_text(note), None)
    return tuple(seen)


def _warmup_s(run: RunState, warmup: int) -> float | None:
    """The wall time of the warm-up's training steps (`RunState.head` keeps them), or None."""
    early = [s.wall for s in run.head if s.step < warmup]
    return sum(early) if early else None


def _measured_totals(
    run: RunState, warmup: int, window: list[Step]
) -> tuple[int, int, float, float, int, int]:
    """(steps, eval steps, wall, data wait, samples, steps with samples) over every measured step.

    Uses the whole-stream totals minus the warm-up steps kept in `head`, so the
    figures cover the run even after the step deque dropped its oldest; falls
    back to the window when the warm-up is longer than `head` keeps. The training part of
    the steps marked eval counts in the time, wait and samples (not in the steps): their wall
    less the evaluation, their training loader's wait (`RunState.eval_train_wall`).
    """
    if warmup > HEAD_STEPS or len(run.steps) == run.total_steps:
        # (where most steps evaluate, the window holds their training parts already)
        evals = [] if run.evaluates_each_step() else [s for s in run.steps if s.mark == "eval" and s.step >= warmup]
        return (
            len(window),
            len(evals),
            sum(s.wall for s in window) + sum(max(0.0, s.wall - s.eval_s) for s in evals),
            sum(s.data_wait for s in window) + sum(s.data_wait for s in evals),
            sum(s.samples for s in (*window, *evals) if s.samples is not None),
            sum(1 for s in (*window, *evals) if s.samples is not None),
        )
    early = [s for s in run.head if s.step < warmup]
    return (
        run.train_steps - len(early),  # marked steps (eval, profiler) are in no total but total_steps
        run.eval_train_steps,
        run.total_wall - sum(s.wall for s in early) + run.eval_train_wall,
        run.total_data_wait - sum(s.data_wait for s in early) + run.eval_train_wait,
        run.total_samples - sum(s.samples for s in early if s.samples is not None) + run.eval_train_samples,
        run.steps_with_samples - sum(1 for s in early if s.samples is not None) + run.eval_train_known,
    )


def _mem_reason(run: RunState) -> str:
    device = run.device_type
    if device is None:
        return "device not known yet"
    if device != "cuda":
        return f"not on CUDA: device {device}"
    reason = run.runtime.unavailable.get("memory") if run.runtime is not None else None
    return reason or "not reported"


def gpu_reason(run: RunState) -> str:
    """Why there is no GPU utilisation figure for this run."""
    for sample in reversed(run.samples):
        if sample.gpu_unavailable:
            return sample.gpu_unavailable
        for gpu in sample.gpus:
            why = gpu.unavailable.get("util")
            if why:
                return why
        if sample.gpus:
            return "utilisation not reported"
    rt = run.runtime
    if rt is not None:
        for key in ("gpu", "nvml", "gpu_util"):
            if rt.unavailable.get(key):
                return rt.unavailable[key]
        if rt.device_type != "cuda":
            return f"no CUDA device: device {rt.device_type}"
    return "no GPU sample yet"


# -- text ---------------------------------------------------------------------
def format_summary(
    summary: Summary,
    findings: Sequence[Finding] = (),
    title: str = "pitstop summary",
    max_findings: int = 5,
    exit_code: int | None = None,
    failures: Sequence[RuleFailure] = (),
) -> str:
    """Multi-line human summary; an unavailable figure reads "n/a (reason)", never 0.

    `exit_code` is the process's own exit code where the front saw it end
    (`pitstop run`): it is what a shell sees, and wins over the record's.
    `failures`: advice rules that raised (`advise`), each said on its own line.
    """
    s = summary
    lines = [title, ""]
    steps = f"{s.steps}"
    if s.steps:
        took = f": {fmt.seconds(s.long_warmup_s)}" if s.long_warmup_s is not None else ""
        steps += f" ({s.measured_steps} measured, first {s.warmup} dropped as warm-up{took})"
    if s.elapsed_s is not None:
        steps += f" in {s.elapsed_s:.1f} s"
    lines.append(_row("steps", steps))
    how = COUNTED_BY.get(s.counted_by or "")
    if how:
        lines.append(_row("", how))
    if s.marked:
        kept = ", ".join(f"{n} {MARK_WORDS.get(mark, mark)}" for mark, n in s.marked
                         if not (s.evaluates_each_step and mark == "eval"))
        if kept:
            lines.append(_row("", f"kept out of training figures: {kept}"))
        evals = dict(s.marked).get("eval", 0)
        if s.evaluates_each_step and evals:
            lines.append(_row("", f"{evals} steps evaluate (most): each measured without its evaluation"))
    if s.eval_passes:
        share = f", {fmt.pct(s.eval_s / s.elapsed_s)} of wall time" if s.elapsed_s else ""
        passes = f"{s.eval_passes} pass{'es' if s.eval_passes != 1 else ''}"
        lines.append(_row("eval", f"{passes}, {s.eval_s:.1f} s{share}"))
    if s.rollouts:
        share = f", {fmt.pct(s.rollout_s / s.elapsed_s)} of wall time" if s.elapsed_s else ""
        lines.append(_row("rollouts", f"{s.rollouts}, {s.rollout_s:.1f} s{share} (the policy collecting the data "
                                      "it trains on: not evaluation)"))
    if s.measured_steps == 0:
        lines.append(_row("throughput", "n/a (no measured step yet)"))
    else:
        through = fmt.rate(s.samples_per_s, "samples", "batch size not seen")
        if s.steps_per_s is not None:
            through += f", {fmt.rate(s.steps_per_s, 'steps')}"
        lines.append(_row("throughput", through))
        lines.append(
            _row(
                "step time",
                f"p50 {fmt.duration(s.step_p50_s)}, p95 {fmt.duration(s.step_p95_s)}, "
                f"mean {fmt.duration(s.step_mean_s)} (compute p50 {fmt.duration(s.compute_p50_s)})",
            )
        )
        lines.append(_row("data wait", f"{fmt.pct(s.data_wait_frac)} of step time"))
        if s.phases is not None:
            shares = dict(s.phases.shares())
            parts = ", ".join(f"{name} {fmt.duration(sec)} ({fmt.pct(shares.get(name))})"
                              for name, sec in s.phases.seconds())
            lines.append(_row("compute", f"{parts}; p50 per step, {s.phases.clock} clock"))
    lines.extend(_row("models" if i == 0 else "", text) for i, text in enumerate(models_lines(s.models)))
    mem_line = f"peak allocated {fmt.size(s.peak_mem_allocated, s.mem_unavailable)}"
    if s.peak_mem_reserved is not None:
        mem_line += f", reserved {fmt.size(s.peak_mem_reserved)}"
    mem_line += f", peak host rss {fmt.size(s.peak_rss, 'not reported')}"
    lines.append(_row("memory", mem_line))
    if s.gpu_util_mean is not None:
        gpu = f"util {fmt.percent(s.gpu_util_mean)}"
        if s.gpu_mem_peak is not None:
            gpu += f", memory peak {fmt.size(s.gpu_mem_peak)}"
            if s.gpu_mem_total:
                gpu += f" of {fmt.size(s.gpu_mem_total)}"
        gpu += ", power " + fmt.watts(s.gpu_power_mean, reason="not reported")
    else:
        gpu = fmt.na(s.gpu_unavailable)
    lines.append(_row("gpu", gpu))
    lines.append(_row("cpu", cpu_text(s.cpu)))
    if s.last_loss is not None or s.nonfinite_losses or s.other_nonfinite_losses:
        loss = f"last {s.last_loss:.4g}" if s.last_loss is not None else "last n/a (non-finite)"
        if len(s.models) > 1:  # trained in turn: the loss is the last model's, not a GAN's first optimizer's
            loss += f" (model {len(s.models)}'s, the last of {len(s.models)} trained in turn)"
        elif s.other_loss is not None:  # a GAN's: each optimizer's loss, as the script logs Loss_D and Loss_G
            loss += (" from the first optimizer to step (its backward calls' losses summed: a GAN's D, errD_real + "
                     f"errD_fake); {s.other_loss:.4g} from the second at step {s.other_loss_step} (a GAN's G)")
        elif s.loss_optimizers > 1:
            loss += (f" (the first optimizer to step, of {s.loss_optimizers}: its backward calls' losses summed,"
                     " as a GAN's D loss)")
        if s.nonfinite_losses:
            whose = "optimizer 1's " if s.other_nonfinite_losses else ""
            loss += f", {whose}{s.nonfinite_losses} non-finite (first at step {s.first_nonfinite_step})"
        if s.other_nonfinite_losses:
            loss += (f", optimizer 2's (a GAN's G) non-finite from step "
                     f"{s.other_first_nonfinite_step} ({s.other_nonfinite_losses} step"
                     f"{'s' if s.other_nonfinite_losses != 1 else ''})")
        lines.append(_row("loss", loss))
    if s.applied:
        lines.append(_row("config", "applied " + "; ".join(s.applied)))
    for i, text in enumerate(s.skipped):
        lines.append(_row("skipped" if i == 0 else "", text))
    for i, text in enumerate(s.notes):
        lines.append(_row("notes" if i == 0 else "", text))
    end = end_text(s, exit_code)
    if s.dropped is not None:
        end += f", {s.dropped} events dropped"
    lines.append(_row("end", end))
    lines.append("")
    shown = list(findings)[: max(0, max_findings)]
    if not findings:
        lines.append("findings: none (nothing in this run crossed a threshold)" if not failures else
                     f"findings: none from the rules that ran ({len(failures)} failed, below)")
    else:
        more = f", top {len(shown)} shown" if len(shown) < len(findings) else ""
        lines.append(f"findings ({len(findings)}{more}):")
        for i, f in enumerate(shown, 1):
            lines.append(f"  {i}. [{f.severity}] {f.title} ({f.rule})")
            if f.evidence:
                lines.append(f"     {f.evidence[0]}")
            if f.gain:
                lines.append(f"     gain: {f.gain}")
            fix_lines = f.fix.splitlines() or [""]
            lines.append(f"     fix:  {fix_lines[0]}")
            lines.extend(f"           {line}" for line in fix_lines[1:])
            if f.tune:
                lines.append(f"     tune: {f.tune}")
    lines.extend(f"  {failure.text}" for failure in failures)
    return "\n".join(lines)


def models_lines(models: tuple[ModelSpan, ...], shown: int = 12) -> list[str]:
    """"6 trained one after another (a new optimizer each); the figures above mix them:" then one line a model."""
    if not models:
        return []
    out = [f"{len(models)} trained one after another (a new optimizer each); the figures above mix them:"]
    for m in models[:shown]:
        figures = [f"p50 {fmt.duration(m.step_p50_s)}" if m.step_p50_s is not None else "no measured step"]
        if m.samples_per_s is not None:
            figures.append(fmt.rate(m.samples_per_s, "samples"))
        if m.nonfinite:
            last = f" (last finite {m.last_loss:.4g})" if m.last_loss is not None else ""
            figures.append(f"loss non-finite at {m.nonfinite} step{'s' if m.nonfinite != 1 else ''}{last}")
        elif m.last_loss is not None:
            figures.append(f"last loss {m.last_loss:.4g}")
        out.append(f"{m.index}: steps {m.first_step}-{m.last_step} ({m.steps}), " + ", ".join(figures))
    if len(models) > shown:
        out.append(f"... and {len(models) - shown} more")
    return out


def _row(label: str, text: str) -> str:
    return f"  {label:<11} {text}"


def exit_code_text(code: int) -> str:
    """"exit code 137 (SIGKILL)": a shell's 128+N names the signal N."""
    import signal

    name = ""
    if 128 < code < 128 + 65:
        try:
            name = f" ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}{name}"


def end_reason_text(reason: str) -> str:
    """An End's reason as the summary words it: "terminated by SIGTERM" for `terminated`."""
    return END_REASONS.get(reason, reason)


def end_text(s: Summary, exit_code: int | None = None) -> str:
    """How the run ended: "exited (exit code 0)", "stopped from a viewer (k), then exited (exit code 1)".

    `exit_code` is the process's own, where the front saw it end; it wins over
    the record's (a bare `raise SystemExit(3)` is not seen from inside).
    """
    # The agent writes every ~0.5 s: what it held when the kill came is not in the record (a Trainer
    # killed by SIGUSR1 had logged 565 steps, its record 559).
    lost = "; its last ~0.5 s of steps were not written"
    if s.stuck or not s.steps:
        # No step ended in its last stretch: a run stuck for 43 s read "its last ~0.5 s of steps were not
        # written", as did one with no step at all.
        lost = ""
    if s.end_reason is None:
        if exit_code is None:
            return "still running (or the stream was cut)"
        return f"killed before it could record its end ({exit_code_text(exit_code)}){lost}"
    text = END_REASONS.get(s.end_reason, s.end_reason)
    if s.stopped:
        text = "stopped from a viewer (k: SIGINT)" if s.end_reason == "interrupted" else f"stopped from a viewer (k), then {text}"
    code = exit_code if exit_code is not None else s.exit_code
    text = f"{text} ({exit_code_text(code)})" if code is not None else text
    return text + lost if s.end_reason == "signal" else text


def status_line(run: RunState, warmup: int = WARMUP) -> str:
    """One compact line for the headless front, over the last RECENT_STEPS measured steps.

    The steps are those `summarize` measures (warm-up dropped), so the line's
    steps/s and the summary's agree: one definition (0.58 steps/s
    beside a 448 ms median, where the summary said 1.92).
    """
    if run.last_step is None:
        return "waiting for the first step"
    recent = last_measured(run, RECENT_STEPS, warmup)
    pace = rates(recent)
    parts = [f"step {run.last_step}"]
    if pace.value is None:
        parts.append(f"warming up (the first {warmup} steps are not measured)")
    else:
        parts.append(fmt.rate(pace.value, pace.counted))
        p50 = percentile((s.wall for s in recent), 50)
        parts.append(f"step {fmt.duration(p50)} (p50 last {len(recent)})")
        parts.append(f"data {fmt.pct(pace.data_wait_frac)}")
    last = run.steps[-1]
    if last.mem_allocated is not None:
        parts.append(f"mem {fmt.size(last.mem_allocated)}")
    elif last.host_rss is not None:
        parts.append(f"rss {fmt.size(last.host_rss)}")
    # The latest reading of each figure within the last few samples (2-5 s at
    # 1-2 Hz): older than that would be stale for a live line.
    utils: list[float] = []
    for i in range(len(run.samples) - 1, max(-1, len(run.samples) - 1 - STATUS_SAMPLES), -1):
        utils = [g.util for g in run.samples[i].gpus if g.util is not None]
        if utils:
            break
    parts.append(f"gpu {fmt.percent(mean(utils))}" if utils else f"gpu {fmt.NA}")
    cpu = cpu_now(run)
    has_cpu = cpu.main is not None or cpu.machine_pct is not None or any(g.cores is not None for g in cpu.loaders)
    parts.append(f"cpu {cpu_text(cpu, short=True)}" if has_cpu else "cpu n/a")
    bad, other_bad = run.nonfinite_total, run.other_nonfinite_total
    if bad:
        parts.append(f"loss NaN/inf x{bad}" + (f", optimizer 2's x{other_bad}" if other_bad else ""))
    elif other_bad:  # a GAN's G went first (D's follows from G's NaN output a step later)
        parts.append(f"loss NaN/inf x{other_bad} (optimizer 2's)")
    else:
        loss = run.last_loss()
        if loss is not None:
            parts.append(f"loss {loss:.4g}")
    return " | ".join(parts)
