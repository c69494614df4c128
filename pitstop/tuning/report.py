"""Provides the tune report: progress lines, the trials table, the winner, skipped knobs; text and JSON."""

from __future__ import annotations

from typing import Any

from pitstop.tuning.results import SHORT, TrialResult
from pitstop.tuning.strategy import Outcome


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _ratio(result: TrialResult, base: TrialResult | None) -> str:
    if not (result.ok and base is not None and base.ok and base.throughput):
        return "-"
    return f"x{(result.throughput or 0.0) / base.throughput:.2f}"


def progress_line(result: TrialResult, index: int, planned: int, base: TrialResult | None) -> str:
    """`[3/14] workers=2 pin=on  412.3 samples/s (x1.62 ±2.1%)  ok` (stderr, one per trial)."""
    head = f"[{index}/{max(index, planned)}] {result.candidate.label()}"
    if result.ok:
        ratio = _ratio(result, base)
        spread = f" ±{result.spread:.1%}" if result.spread is not None else ""
        body = f"{result.throughput:.1f} {result.unit} ({ratio}{spread})"
    else:
        body = "-"
    tail = result.status if result.ok else f"{result.status}: {result.reason}"
    where = " (journal)" if result.from_journal else ""
    return f"{head}  {body}  {tail}{where}  [{result.stage}, {result.steps} steps]"


def format_report(outcome: Outcome, title: str = "") -> str:
    """The text report printed at the end of a tune."""
    base = outcome.baseline
    lines: list[str] = []
    if title:
        lines += [title, ""]
    header = ("#", "stage", "configuration", "steps", "throughput", "x base", "peak mem", "status")
    rows: list[tuple[str, ...]] = []
    for i, r in enumerate(outcome.results, 1):
        thr = f"{r.throughput:.1f} {r.unit}" if r.ok else "-"
        mem = _size(r.peak_mem) + (" (host)" if r.peak_mem and r.mem_kind == "host" else "")
        status = r.status if r.ok else f"{r.status}: {r.reason}"
        rows.append((str(i), r.stage, r.candidate.label(), str(r.steps), thr, _ratio(r, base), mem, status))
    widths = [max(len(h), *(len(row[c]) for row in rows)) if rows else len(h)
              for c, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    lines.append(fmt.format(*header))
    lines.append(fmt.format(*("-" * w for w in widths[:-1]), "-" * len(header[-1])))
    lines += [fmt.format(*row) for row in rows]
    lines.append("")
    lines += winner_lines(outcome)
    space = outcome.space
    if space is not None:
        if space.skipped:
            lines.append("")
            lines.append("Knobs skipped:")
            lines += [f"  {SHORT.get(k, k)}: {why}" for k, why in space.skipped.items()]
        lines.append("")
        if space.batch_tuned:
            lines.append("Batch size: tuned (--batch-size): see the learning-rate guidance in the config.")
        else:
            why = space.skipped.get("batch_size", "not tuned")
            lines.append(f"Batch size: not tuned ({why}).")
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


def winner_lines(outcome: Outcome) -> list[str]:
    if outcome.winner is None:
        return [f"No configuration: {outcome.message}"]
    how = ("confirmed in fresh processes, alternating A/B: "
           + ", ".join(f"{c.candidate.label()} {c.median:.1f}" if c.median else
                       f"{c.candidate.label()} {c.failure}" for c in outcome.contests)
           if outcome.confirmed else "not confirmed (budget): figures from the exploration runs")
    unit = outcome.baseline.unit if outcome.baseline else "samples/s"
    out = [f"Winner: {outcome.winner.label()}"]
    if outcome.throughput is not None and outcome.speedup is not None:
        out.append(f"  {outcome.throughput:.1f} {unit}, x{outcome.speedup:.2f} ±{(outcome.spread or 0):.1%} "
                   f"over the script's own settings ({outcome.baseline_throughput:.1f} {unit})")
    out.append(f"  {how}")
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
        "spread": outcome.spread,
        "noise": outcome.noise,
        "confirmed": outcome.confirmed,
        "contests": [{"config": c.candidate.as_dict(), "throughputs": c.throughputs,
                      "median": c.median, "failure": c.failure} for c in outcome.contests],
        "stopped": outcome.stopped,
        "message": outcome.message,
        "skipped": dict(space.skipped) if space else {},
        "batch_size_tuned": bool(space and space.batch_tuned),
        "notes": [*(space.notes if space else []), *outcome.notes],
        "trials": [r.to_dict() | {"label": r.candidate.label()} for r in outcome.results],
        "config": config_path,
    }
