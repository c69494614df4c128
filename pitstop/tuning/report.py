"""Provides the tune report: progress lines, the trials table, the winner, skipped knobs; text and JSON."""

from __future__ import annotations

from typing import Any

from pitstop.analysis import first_step_text, progress_text
from pitstop.analysis import format as fmt
from pitstop.tuning.results import SHORT, TrialResult
from pitstop.tuning.runner import Tick
from pitstop.tuning.verdict import Outcome, clock


def _size(n: int | None) -> str:
    return "-" if n is None else fmt.size(n)


def _ratio(result: TrialResult, base: TrialResult | None) -> str:
    """x over the baseline, for every trial that measured a figure (an unstable one too: the verdict quotes it)."""
    if not (result.throughput is not None and base is not None and base.ok and base.throughput):
        return "-"
    return f"x{(result.throughput or 0.0) / base.throughput:.2f}"


def steps_text(result: TrialResult) -> str:
    """`60` as planned, or `41 of 60` when the script ended sooner (a trial says what it measured)."""
    if result.script_ended and result.measured_steps and result.measured_steps < result.steps:
        return f"{result.measured_steps} of {result.steps}"
    return str(result.steps)


def progress_line(result: TrialResult, index: int, planned: int | None, base: TrialResult | None,
                  tune: str = "") -> str:
    """`[3/14] workers=2 pin=on  412.3 samples/s (x1.62 ±2.1%)  ok  [data, 30 steps]` (stderr, one per trial)."""
    head = f"[{index}/{max(index, planned) if planned else '?'}] {result.candidate.label()}"
    if result.ok:
        ratio = _ratio(result, base)
        spread = f" ±{result.spread:.1%}" if result.spread is not None else ""
        body = f"{fmt.rate_value(result.throughput)} {result.unit} ({ratio}{spread})"
    else:
        body = "-"
    tail = result.status if result.ok else f"{result.status}: {result.reason}"
    if result.notes:  # (an unstable trial measured again says so on its own line)
        tail += " (" + "; ".join(result.notes) + ")"
    where = " (journal)" if result.from_journal else ""
    line = f"{head}  {body}  {tail}{where}  [{result.stage}, {steps_text(result)} steps]"
    return f"{line}  | {tune}" if tune else line


def tune_status(done: int, planned: int | None, budget_left: str, eta: float | None) -> str:
    """`tune: 3/14 trials, budget 4m10s of 10m left, ETA ~3m20s`."""
    of = f"/{max(done, planned)}" if planned else ""
    text = f"tune: {done}{of} trials, budget {budget_left} left"
    return text + (f", ETA ~{clock(eta)}" if eta is not None else "")


def tick_line(tick: Tick, tune: str) -> str:
    """A running trial, every few seconds in headless mode: steps done of planned, elapsed, its limit.

    Before its first step, what the trial's process is doing, as its agent said
    (`first training step not done after 1m20s (LBFGS step running for 1m15s:
    14 closures; 14 backward, 1 batch fetched)`): a slow first step is not a hang.
    """
    if tick.steps_done == 0 and tick.progress is not None:
        if tick.first_step_limit is not None:
            where = (f"{first_step_text(tick.progress, tick.elapsed, clock)}, at most "
                     f"{clock(tick.first_step_limit)} (--first-step-timeout)")
        else:
            where = (f"0/{tick.steps_planned} steps, {clock(tick.elapsed)} (limit {clock(tick.limit)}), "
                     f"first step: {progress_text(tick.progress, clock)}")
    elif tick.steps_done == 0 and tick.first_step_limit is not None:
        where = (f"waiting for its first training step, {clock(tick.elapsed)} of at most "
                 f"{clock(tick.first_step_limit)} (--first-step-timeout)")
    else:
        where = (f"{tick.steps_done}/{tick.steps_planned} steps, {clock(tick.elapsed)} "
                 f"(limit {clock(tick.limit)})")
    return f"  ... trial {tick.index} {tick.label} [{tick.stage}]: {where}  | {tune}"


def format_report(outcome: Outcome, title: str = "", confirm_command: str = "") -> str:
    """The text report printed at the end of a tune."""
    base = outcome.baseline
    if base is None or not base.ok:  # an unstable first baseline: ratios against the first stable run
        base = next((r for r in outcome.results if r.ok and not r.candidate.settings), base)
    lines: list[str] = []
    if title:
        lines += [title, ""]
    header = ("#", "stage", "configuration", "steps", "throughput", "x base", "peak mem", "status")
    rows: list[tuple[str, ...]] = []
    for i, r in enumerate(outcome.results, 1):
        thr = f"{fmt.rate_value(r.throughput)} {r.unit}" if r.throughput is not None else "-"
        mem = _size(r.peak_mem) + (" (host)" if r.peak_mem and r.mem_kind == "host" else "")
        status = r.status if r.ok else f"{r.status}: {r.reason}"
        rows.append((str(i), r.stage, r.candidate.label(), steps_text(r), thr, _ratio(r, base), mem, status))
    widths = [max(len(h), *(len(row[c]) for row in rows)) if rows else len(h)
              for c, h in enumerate(header)]
    layout = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    lines.append(layout.format(*header))
    lines.append(layout.format(*("-" * w for w in widths[:-1]), "-" * len(header[-1])))
    lines += [layout.format(*row) for row in rows]
    lines.append("")
    lines += winner_lines(outcome, confirm_command)
    space = outcome.space
    if space is not None:
        if space.skipped:
            lines.append("")
            lines.append("Knobs skipped:")
            lines += [f"  {SHORT.get(k, k)}: {why}" for k, why in space.skipped.items()]
        lines.append("")
        if space.batch_tuned:
            lines.append(batch_line(outcome))
        else:
            why = space.skipped.get("batch_size")
            lines.append(f"Batch size: not tuned: {why}." if why else "Batch size: not tuned.")
        notes = [*space.notes, *outcome.notes]
    else:
        notes = list(outcome.notes)
    busy = [r.other_cpu for r in outcome.results if r.other_cpu is not None]
    if busy and max(busy) > 0.5:
        notes.append(f"the machine was busy: other processes kept up to {max(busy):.1f} cores busy during "
                     f"trials (median {sorted(busy)[len(busy) // 2]:.1f}); expect wider spreads")
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines += [f"  {n}" for n in notes]
    return "\n".join(lines)


def machine_line(outcome: Outcome) -> str:
    """How busy the machine was while the verdict was measured (the confirmation's runs, else every trial)."""
    load = outcome.load
    where = "during the confirmation"
    if load is None:
        busy = [r.other_cpu for r in outcome.results if r.other_cpu is not None]
        load, where = ((min(busy), max(busy)), "during the trials") if busy else (None, "")
    if load is None:
        return ""
    lo, hi = load
    of = f" of {outcome.cpus}" if outcome.cpus else ""
    span = f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"
    text = f"  machine: other processes kept {span}{of} cores busy {where}"
    if outcome.discarded:
        text += f"; {outcome.discarded} round(s) discarded and run again as that load moved within them"
    return text


def batch_tried(outcome: Outcome) -> bool:
    """A trial ran with a batch size of its own (--batch-size asked for it; the budget may end first)."""
    return any(r.candidate.get("batch_size") for r in outcome.results)


def batch_line(outcome: Outcome) -> str:
    """What --batch-size did: the ignite tune said "tuned: see the learning-rate guidance" with no batch
    trial run and no guidance written."""
    if not batch_tried(outcome):
        return "Batch size: not tried: the budget ended before the batch trials (a larger --budget runs them)."
    if outcome.winner is not None and outcome.winner.get("batch_size"):
        return "Batch size: tuned (--batch-size): see the learning-rate guidance in the config."
    return "Batch size: tried (--batch-size); the script's own batch size stays."


def winner_lines(outcome: Outcome, confirm_command: str = "") -> list[str]:
    out = _verdict_lines(outcome, confirm_command)
    machine = machine_line(outcome)
    if machine and outcome.winner is not None:
        out.append(machine)
        if outcome.improves and outcome.winner.get("threads"):
            # ignite's mnist: threads=1 won x10.41 while a neighbour held a core; on the quiet machine 0.5-0.96x.
            out.append("  threads is a win while other processes take cores, as they did here: on a quiet "
                       "machine it can be slower; tune again (or `pitstop tune --confirm`) where it will train")
    return out


def _verdict_lines(outcome: Outcome, confirm_command: str = "") -> list[str]:
    if outcome.winner is None:
        return [f"No configuration: {outcome.message}"]
    unit = outcome.baseline.unit if outcome.baseline else "samples/s"
    contests = ", ".join(f"{c.candidate.label()} " + (" / ".join(fmt.rate_value(t) for t in c.throughputs)
                                                      if not c.failure else c.failure)
                         for c in outcome.contests)
    if not outcome.improves:
        out = ["Nothing beat the script's own settings: no config written; keep training as you do."]
        if outcome.message:
            out.append(f"  {outcome.message}")
        if outcome.confirmed:
            out.append(f"  measured in fresh processes, alternating A/B, {outcome.rounds} round(s): {contests}")
        return out
    label = outcome.winner.label()
    base_thr = outcome.baseline_throughput
    if outcome.confirmed:
        out = [f"Winner: {label}"]
        lo, hi = outcome.interval or (outcome.speedup or 1.0, outcome.speedup or 1.0)
        rounds = (f"{outcome.rounds} rounds: the lowest round's; a re-run lands in x{lo:.2f} to x{hi:.2f}"
                  if outcome.rounds > 1 else f"one round, so wider: a re-run lands in x{lo:.2f} to x{hi:.2f}")
        out.append(f"  x{outcome.speedup:.2f} over the script's own settings ({rounds}): "
                   f"{fmt.rate_value(outcome.throughput)} vs {fmt.rate_value(base_thr)} {unit}")
        out.append(f"  confirmed in fresh processes, alternating A/B: {contests}")
    else:
        out = [f"Best found (not confirmed): {label}"]
        if outcome.speedup is not None and outcome.throughput is not None and base_thr:
            span = (f" (a re-run lands in x{outcome.interval[0]:.2f} to x{outcome.interval[1]:.2f})"
                    if outcome.interval else f" ±{outcome.noise:.1%}")
            out.append(f"  x{outcome.speedup:.2f}{span} over the script's own settings: "
                       f"{fmt.rate_value(outcome.throughput)} vs {fmt.rate_value(base_thr)} {unit} in the exploration runs")
        if confirm_command:
            out.append(f"  confirm it ({outcome.confirm_trials} trials, ~{clock(outcome.confirm_seconds)}): "
                       f"{confirm_command}")
    if outcome.message:
        out.append(f"  {outcome.message}")
    return out


def to_json(outcome: Outcome, config_path: str | None) -> dict[str, Any]:
    """The whole outcome as plain data (`--json`)."""
    space = outcome.space
    return {
        "winner": outcome.winner.as_dict() if outcome.winner is not None else None,
        "winner_label": outcome.winner.label() if outcome.winner is not None else None,
        "throughput": outcome.throughput,
        "baseline_throughput": outcome.baseline_throughput,
        "unit": outcome.baseline.unit if outcome.baseline else None,
        "speedup": outcome.speedup,
        "interval": list(outcome.interval) if outcome.interval else None,
        "spread": outcome.spread,
        "noise": outcome.noise,
        "confirmed": outcome.confirmed,
        "rounds": outcome.rounds,
        "improves": outcome.improves,
        "contests": [{"config": c.candidate.as_dict(), "throughputs": c.throughputs,
                      "median": c.median, "failure": c.failure} for c in outcome.contests],
        "confirm_trials": outcome.confirm_trials,
        "load": list(outcome.load) if outcome.load else None,
        "discarded_rounds": outcome.discarded,
        "stopped": outcome.stopped,
        "message": outcome.message,
        "skipped": dict(space.skipped) if space else {},
        "batch_size_tuned": bool(space and space.batch_tuned and batch_tried(outcome)),
        "notes": [*(space.notes if space else []), *outcome.notes],
        "trials": [r.to_dict() | {"label": r.candidate.label()} for r in outcome.results],
        "config": config_path,
    }
