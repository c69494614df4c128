"""Provides plain-text charts of runs with plotext: step time with data wait, throughput and memory, at a terminal's width.

Where no TUI runs (`view --summary --plot`, `compare --plot`, and the end of
`run --plot`), a chart lives in the text a terminal or a CI log shows. The TUI
keeps its own bars. Of several runs each draws its own line, and its data wait
on a chart of its own. Each line
is cut to at most MAX_POINTS buckets first: plotext draws every point it is
given, and 20,000 steps took ~0.9 s to draw where 240 buckets take ~20 ms.
Without colour (stdout not a terminal, `--no-color`) the frame is plain ASCII.
Times are drawn to the measured steps' scale (`analysis.scale_top`, as the
TUI's bars): a 904 ms first step over 15 ms steps flattened every other step
into the floor. What stands above the top is drawn at it and said in the
title; a line that is zero at every step is said in one line, not drawn
(plotext drew an axis from -1 to 1 for it).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis import SCALE_PCT, JobState, RunState, above, job_summary, scale_top

MAX_POINTS = 240
HEIGHT = 12
GIB = float(1 << 30)
_ASCII = str.maketrans({"┌": "+", "┐": "+", "└": "+", "┘": "+", "┬": "+", "┴": "+", "├": "+", "┤": "+",
                        "─": "-", "│": "|", "•": "*", "█": "#", "▲": "^"})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Line:
    label: str
    xs: list[float]
    ys: list[float]


@dataclass(frozen=True)
class Chart:
    title: str
    lines: list[Line]
    top: float | None = None  # the y axis ends here (values above are drawn at it); None: plotext's own
    notes: tuple[str, ...] = ()  # what the title says besides: clipped points, lines with nothing to draw


def _fit(title: str, lines: list[Line], unit: str) -> Chart:
    """A chart of times drawn to the measured scale: the points above it cut at its top and said, and
    the lines that are zero throughout said in words instead of drawn."""
    drawn = [line for line in lines if any(y > 0 for y in line.ys)]
    notes = [f"{line.label.removesuffix(' ' + unit)} 0 {unit} at every step"
             for line in lines if not any(y > 0 for y in line.ys)]
    if not drawn:
        return Chart(title, [], None, tuple(notes))
    ys = [y for line in drawn for y in line.ys]
    top = scale_top(ys)
    cut = above(ys, top)
    if not cut:
        return Chart(title, drawn, None, tuple(notes))
    notes.insert(0, f"▲ {len(cut)} above the p{SCALE_PCT:.0f} scale, drawn at its top (max {max(cut):.0f} {unit})")
    return Chart(title, [Line(line.label, line.xs, [min(y, top) for y in line.ys]) for line in drawn], top,
                 tuple(notes))


def buckets(xs: Sequence[float], ys: Sequence[float], n: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """(x, mean y) of at most `n` consecutive buckets of the points."""
    if len(xs) <= n:
        return list(xs), list(ys)
    size = len(xs) / n
    out_x, out_y = [], []
    for b in range(n):
        lo, hi = int(b * size), int((b + 1) * size)
        if hi > lo:
            out_x.append(xs[hi - 1])
            out_y.append(sum(ys[lo:hi]) / (hi - lo))
    return out_x, out_y


def _ratio_buckets(xs: list[float], num: list[float], den: list[float], n: int = MAX_POINTS
                   ) -> tuple[list[float], list[float]]:
    """(x, sum num / sum den) per bucket: a throughput is samples over time, not a mean of rates."""
    size = max(1.0, len(xs) / n)
    out_x, out_y = [], []
    for b in range(min(n, len(xs))):
        lo, hi = int(b * size), int((b + 1) * size)
        if hi > lo and sum(den[lo:hi]) > 0:
            out_x.append(xs[hi - 1])
            out_y.append(sum(num[lo:hi]) / sum(den[lo:hi]))
    return out_x, out_y


def _known(xs: list[float], values: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """(x, value) where the value is known; the values as they are when all are (the usual case)."""
    if None not in values:
        return xs, list(values)  # type: ignore[arg-type]  # no None left
    kept = [(x, v) for x, v in zip(xs, values) if v is not None]
    return [x for x, _ in kept], [v for _, v in kept]


def _scaled(line: tuple[list[float], list[float]], factor: float) -> tuple[list[float], list[float]]:
    """Bucketed points with y times `factor` (scaled after bucketing: 240 products, not 20,000)."""
    return line[0], [y * factor for y in line[1]]


def run_charts(runs: Sequence[tuple[str, RunState]]) -> list[Chart]:
    """Step time (with data wait for one run), throughput, memory, and data wait apart for several runs,
    over the steps each run holds.

    Of several runs each draws its own data wait: in a DDP job every rank's step
    time comes out the same (they wait for each other in the all-reduce), and a
    rank that waits for its batches shows only there.
    """
    step_lines, wait_lines, rate_lines, mem_lines = [], [], [], []
    for label, run in runs:
        # One pass over the steps into a row of figures each, then columns: 20,000 steps took ~50 ms
        # of CPU here with a comprehension per figure (and the steps' x again for each line), 27-40 ms
        # so (best of 9 on the loaded 2-core VM), beside plotext's ~17 ms of drawing. Scaled after
        # bucketing: 240 products, not 20,000.
        rows = [(s.step, s.wall, s.data_wait, s.samples, s.mem_allocated, s.host_rss)
                for s in run.steps if s.mark is None]
        if not rows:
            continue
        indices, walls, waits, samples, allocated, rss = zip(*rows)
        xs = list(map(float, indices))
        prefix = f"{label} " if len(runs) > 1 else ""
        step_lines.append(Line(f"{prefix}step ms", *_scaled(buckets(xs, walls), 1000)))
        (step_lines if len(runs) == 1 else wait_lines).append(
            Line(f"{prefix}data wait ms", *_scaled(buckets(xs, waits), 1000)))
        if any(n is not None for n in samples):
            kept = [(x, float(n), w) for x, n, w in zip(xs, samples, walls) if n is not None]
            rate_lines.append(Line(f"{prefix}samples/s".strip(), *_ratio_buckets(
                [x for x, _, _ in kept], [n for _, n, _ in kept], [w for _, _, w in kept])))
        memory, what = _known(xs, allocated), "allocated"
        if not memory[1]:
            memory, what = _known(xs, rss), "host rss"
        if memory[1]:
            mem_lines.append(Line(f"{prefix}{what} GiB", *_scaled(buckets(*memory), 1 / GIB)))
    charts = [_fit("step time (ms) by step", step_lines, "ms"), _fit("data wait (ms) by step", wait_lines, "ms"),
              Chart("throughput (samples/s) by step", rate_lines), Chart("memory (GiB) by step", mem_lines)]
    return [c for c in charts if c.lines or c.notes]


def render(charts: Sequence[Chart], width: int, color: bool) -> str:
    """The charts one under the other, `width` columns wide; plain ASCII without colour."""
    import plotext as plt  # ~60 ms to import: only when a chart is asked for

    markers = ("*", "+", "o", "x", ".", "#")
    out = []
    for chart in charts:
        if not chart.lines:  # nothing but zeros: one line says it
            text = textwrap.fill(f"{chart.title}: {'; '.join(chart.notes)}", width, subsequent_indent="  ")
            out.append(text if color else text.translate(_ASCII))
            continue
        plt.clf()
        plt.plotsize(width, HEIGHT)
        plt.theme("pro" if color else "clear")
        for k, line in enumerate(chart.lines):
            plt.plot(line.xs, line.ys, label=line.label, marker=markers[k % len(markers)])
        if chart.top is not None:
            plt.ylim(0, chart.top)
        plt.title(chart.title)
        text = plt.build()
        if chart.notes:  # lines of their own, under the chart: plotext drops a title wider than the chart
            said = textwrap.fill("; ".join(chart.notes), width, initial_indent="  ", subsequent_indent="  ")
            text = "\n".join((text.rstrip("\n"), said))
        if not color:
            text = _ANSI.sub("", text).translate(_ASCII)
        out.append("\n".join(row.rstrip() for row in text.splitlines()))
    return "\n".join(out)


def pick_ranks(ranked: Sequence[tuple[str, RunState]], most: int,
               stragglers: Sequence[str] = ()) -> list[tuple[str, RunState, str]]:
    """(label, run, why) of the ranks a chart draws, in rank order: every rank of up to `most`;
    of more, the stragglers named (`stragglers`, slowest first), else the rank of the longest mean
    step, then the median rank by mean step time, up to `most` in all. `why` is "" when all are drawn.

    In DDP every rank's wall time comes out the same (each waits for the slowest in the
    all-reduce), so the slowest by step time alone can be any rank: a straggler named by
    the job's analysis is the one to draw, with a median rank to hold it against.
    """
    if len(ranked) <= most:
        return [(label, run, "") for label, run in ranked]
    by_step = sorted(ranked, key=lambda item: item[1].total_wall / max(1, item[1].train_steps))
    known = {label for label, _ in ranked}
    why = {label: "straggler" for label in stragglers if label in known}
    why = dict(list(why.items())[:max(1, most - 1)]) or {by_step[-1][0]: "slowest"}
    rest = [label for label, _ in by_step if label not in why]
    if rest and len(why) < max(2, most):
        why[rest[len(rest) // 2]] = "median"
    return [(label, run, why[label]) for label, run in ranked if label in why]


def job_plot(runs: Sequence[RunState], width: int, color: bool, most: int = 2) -> str:
    """The charts of a job's runs: of up to `most` ranks each; of more, the straggler (else the slowest)
    and the median (`pick_ranks`), as `view --summary --plot` and `run --plot` draw them."""
    job = JobState.of_runs(list(runs))
    ranked = job.ranks()
    named: list[str] = []
    if len(ranked) > most:
        named = [s.label for s in job_summary(job).stragglers]
    picked = pick_ranks(ranked, most, named)
    return render(run_charts([(label, run) for label, run, _ in picked]), width, color)
