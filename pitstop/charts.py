"""Provides plain-text charts of runs with plotext: step time with data wait, throughput and memory, at a terminal's width.

Where no TUI runs (`view --summary --plot`, `compare --plot`), a chart lives in
the text a terminal or a CI log shows. The TUI keeps its own bars. Each line
is cut to at most MAX_POINTS buckets first: plotext draws every point it is
given, and 20,000 steps took ~0.9 s to draw where 240 buckets take ~20 ms.
Without colour (stdout not a terminal, `--no-color`) the frame is plain ASCII.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pitstop.analysis import JobState, RunState

MAX_POINTS = 240
HEIGHT = 12
GIB = float(1 << 30)
_ASCII = str.maketrans({"┌": "+", "┐": "+", "└": "+", "┘": "+", "┬": "+", "┴": "+", "├": "+", "┤": "+",
                        "─": "-", "│": "|", "•": "*", "█": "#"})
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


def run_charts(runs: Sequence[tuple[str, RunState]]) -> list[Chart]:
    """Step time (with data wait for one run), throughput and memory over the steps each run holds."""
    step_lines, rate_lines, mem_lines = [], [], []
    for label, run in runs:
        steps = [s for s in run.steps if s.mark is None]
        if not steps:
            continue
        xs = [float(s.step) for s in steps]
        prefix = f"{label} " if len(runs) > 1 else ""
        step_lines.append(Line(f"{prefix}step ms", *buckets(xs, [s.wall * 1000 for s in steps])))
        if len(runs) == 1:
            step_lines.append(Line("data wait ms", *buckets(xs, [s.data_wait * 1000 for s in steps])))
        counted = [s for s in steps if s.samples is not None]
        if counted:
            rate_lines.append(Line(f"{prefix}samples/s".strip(), *_ratio_buckets(
                [float(s.step) for s in counted], [float(s.samples or 0) for s in counted], [s.wall for s in counted])))
        device = [s for s in steps if s.mem_allocated is not None]
        host = [s for s in steps if s.host_rss is not None]
        if device:
            mem_lines.append(Line(f"{prefix}allocated GiB", *buckets(
                [float(s.step) for s in device], [(s.mem_allocated or 0) / GIB for s in device])))
        elif host:
            mem_lines.append(Line(f"{prefix}host rss GiB", *buckets(
                [float(s.step) for s in host], [(s.host_rss or 0) / GIB for s in host])))
    charts = [Chart("step time (ms) by step", step_lines), Chart("throughput (samples/s) by step", rate_lines),
              Chart("memory (GiB) by step", mem_lines)]
    return [c for c in charts if c.lines]


def render(charts: Sequence[Chart], width: int, color: bool) -> str:
    """The charts one under the other, `width` columns wide; plain ASCII without colour."""
    import plotext as plt  # ~60 ms to import: only when a chart is asked for

    markers = ("*", "+", "o", "x", ".", "#")
    out = []
    for chart in charts:
        plt.clf()
        plt.plotsize(width, HEIGHT)
        plt.theme("pro" if color else "clear")
        for k, line in enumerate(chart.lines):
            plt.plot(line.xs, line.ys, label=line.label, marker=markers[k % len(markers)])
        plt.title(chart.title)
        text = plt.build()
        if not color:
            text = _ANSI.sub("", text).translate(_ASCII)
        out.append("\n".join(row.rstrip() for row in text.splitlines()))
    return "\n".join(out)


def job_plot(runs: Sequence[RunState], width: int, color: bool, most: int = 4) -> str:
    """The charts of a job's runs: one rank alone; of more, the slowest and the median by mean step time."""
    ranked = JobState.of_runs(list(runs)).ranks()
    if len(ranked) > 2:
        by_step = sorted(ranked, key=lambda item: item[1].total_wall / max(1, item[1].train_steps))
        ranked = [by_step[len(by_step) // 2], by_step[-1]][:most]
    return render(run_charts(ranked), width, color)
