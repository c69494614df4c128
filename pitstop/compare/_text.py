"""Provides the terminal text of `pitstop compare`: the verdict, the tables, and both step-time distributions."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pitstop.analysis import StepComparison
from pitstop.analysis import format as fmt
from pitstop.compare._model import Comparison, FindingRef, Metric

# Eighths of a cell, for bars finer than one character.
_EIGHTHS = " ▏▎▍▌▋▊▉"
PLOT_BINS = 10
PLOT_WIDTH = 28


def verdict_text(c: StepComparison) -> str:
    """One line a person reads first: "B is faster: 3.77x the throughput of A (step time -73%, ...)"."""
    if c.ratio is None:
        return f"too short to tell: {c.reason}" if c.reason else "nothing to compare: no training step"
    interval = ""
    if c.low is not None and c.high is not None:
        interval = f", {c.confidence:.0%} interval {fmt.change(c.low - 1)} to {fmt.change(c.high - 1)}"
    step = f"{'time per sample' if c.per == 'sample' else 'step time'} {fmt.change(c.ratio - 1)}{interval}"
    if c.verdict == "faster":
        return f"B is faster: {1 / c.ratio:.2f}x the throughput of A ({step})"
    if c.verdict == "slower":
        return f"B is slower: {1 / c.ratio:.2f}x the throughput of A ({step})"
    if c.verdict == "too short":
        return f"too short to tell ({c.reason}); the estimate would be {step}"
    return f"no difference beyond the noise ({step})"


def basis_text(c: StepComparison) -> str:
    """Where the verdict comes from: blocks, steps, and the probability of superiority."""
    text = (f"from {c.blocks_a} and {c.blocks_b} blocks of {c.block} training steps "
            f"({c.steps_a} and {c.steps_b} steps; warm-up, eval and profiled steps left out)")
    if c.b_faster is not None:
        text += f"; a block of B is faster than one of A with probability {c.b_faster:.2f}"
    return text


def _value(m: Metric, v: float | None) -> str:
    if v is None:
        return "n/a"
    if m.unit == "s":
        return fmt.duration(v)
    if m.unit == "ms":
        return fmt.duration(v / 1e3)
    if m.unit == "us":
        return fmt.us(v)
    if m.unit == "frac":
        return fmt.pct(v)
    if m.unit == "bytes":
        return fmt.size(v)
    if m.unit == "pct":
        return fmt.percent(v)
    if m.unit == "cores":
        return f"{v:.2f} cores"
    if m.unit.endswith("/s"):
        return fmt.rate(v, m.unit.removesuffix("/s"))
    return f"{v:.1f} {m.unit}"


def _change(m: Metric) -> str:
    ch = m.change
    # Below 0.1 ms a change of a phase or an op is the timer's, not the run's.
    tiny = m.unit in ("ms", "us") and max(abs(m.a or 0.0), abs(m.b or 0.0)) < (0.1 if m.unit == "ms" else 100.0)
    if ch is None or tiny:
        return ""
    if _value(m, m.a) == _value(m, m.b):
        return ""  # "0.01 cores 0.01 cores +74%": a change between figures shown alike is not shown
    if m.unit == "frac":
        return f"{ch * 100:+.0f} points"
    return fmt.change(ch)


def metric_table(rows: Sequence[Metric], indent: str = "  ") -> list[str]:
    """Rows "name  A  B  change", aligned."""
    table = [("", "A", "B", "change")] + [(m.name, _value(m, m.a), _value(m, m.b), _change(m)) for m in rows]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    return [indent + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))).rstrip() for row in table]


def _bar(frac: float, width: int, ascii_only: bool) -> str:
    cells = max(0.0, frac) * width
    whole = int(cells)
    if ascii_only:
        return "#" * whole + ("+" if cells - whole >= 0.5 else "")
    part = _EIGHTHS[int((cells - whole) * 8)]
    return ("█" * whole + part).rstrip()


def _short_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def distribution_plot(a: Sequence[float], b: Sequence[float], bins: int = PLOT_BINS, width: int = PLOT_WIDTH,
                      ascii_only: bool = False) -> list[str]:
    """Both runs' step times in shared bins, side by side; bars are each run's share of its steps.

    Bins span the 1st to 99th percentile of both runs together (the rest is
    counted in the end bins), on a log scale when the span is over 3x, so a
    run 4x faster still shows its shape.
    """
    if not a or not b:
        return []
    both = sorted([*a, *b])
    lo = both[int(0.01 * (len(both) - 1))]
    hi = both[int(math.ceil(0.99 * (len(both) - 1)))]
    if hi <= lo:
        hi = lo * 1.01 + 1e-9
    log = lo > 0 and hi / lo > 3.0
    if log:
        edges = [lo * (hi / lo) ** (i / bins) for i in range(bins + 1)]
    else:
        edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]

    def shares(values: Sequence[float]) -> list[float]:
        counts = [0] * bins
        for v in values:
            i = 0
            while i < bins - 1 and v >= edges[i + 1]:
                i += 1
            counts[i] += 1
        return [c / len(values) for c in counts]

    sa, sb = shares(a), shares(b)
    top = max(max(sa), max(sb)) or 1.0
    labels = [f"{_short_time(edges[i])} - {_short_time(edges[i + 1])}" for i in range(bins)]
    labels[0] = f"< {_short_time(edges[1])}"
    labels[-1] = f">= {_short_time(edges[-2])}"
    lw = max(len(x) for x in labels)
    head_a, head_b = f"A ({len(a)} steps)", f"B ({len(b)} steps)"
    lines = [f"  {'':<{lw}}  {head_a:<{width}}  {head_b}"]
    for i in range(bins):
        bar_a = _bar(sa[i] / top, width, ascii_only)
        bar_b = _bar(sb[i] / top, width, ascii_only)
        lines.append(f"  {labels[i]:>{lw}}  {bar_a:<{width}}  {bar_b}".rstrip())
    return lines


def _finding_lines(title: str, refs: Sequence[FindingRef]) -> list[str]:
    if not refs:
        return [f"  {title:<9} none"]
    out = []
    for i, f in enumerate(refs):
        out.append(f"  {title if i == 0 else '':<9} [{f.severity}] {f.title} ({f.rule})")
        if f.evidence:
            out.append(f"  {'':<9}   {f.evidence}")
    return out


def comparison_text(c: Comparison, ascii_only: bool = False) -> str:
    """The whole terminal report."""
    lines = ["pitstop compare", ""]
    for side in (c.a, c.b):
        lines.append(f"  {side.name}  {side.path}: {side.script or '?'}, {side.processes} process(es), "
                     f"{side.steps} steps ({side.training_steps} training steps measured)")
    lines += ["", "verdict: " + verdict_text(c.steps), "         " + basis_text(c.steps)]
    # Notes right under the verdict: "the machine was busier during B" changes how to read it.
    lines += [f"  - {n}" for n in c.notes] + [""]
    lines += metric_table(c.metrics)
    plot = distribution_plot(c.a.walls, c.b.walls, ascii_only=ascii_only)
    if plot:
        lines += ["", "step time distribution (share of each run's training steps)"] + plot
    if c.phases:
        lines += ["", "phases (profiler windows, host ms per profiled step)"] + metric_table(c.phases)
    if c.ops:
        lines += ["", "top ops (profiler windows, time per profiled step)"] + metric_table(c.ops)
    lines += ["", "configuration and environment"]
    if c.settings:
        width = max(len(s.name) for s in c.settings)
        wa = max(len(s.a) for s in c.settings)
        lines += [f"  {s.name:<{width}}  A {s.a:<{wa}}  B {s.b}" for s in c.settings]
    else:
        lines.append("  no difference in what the records carry")
    lines += ["", "findings"]
    lines += _finding_lines("gone", c.gone) + _finding_lines("appeared", c.appeared)
    lines += _finding_lines("in both", c.kept)
    return "\n".join(lines)
