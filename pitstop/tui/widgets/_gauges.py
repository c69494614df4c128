"""Provides Gauges: one line per resource (GPU, CPU, memory), each figure with its history as a sparkline.

As nvitop shows them: the latest value and, beside it, how it
moved. On each line the sparklines share the width its figures leave, and
disappear before a figure is cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget

SPARKS = "▁▂▃▄▅▆▇█"
MIN_SPARK = 3
MAX_SPARK = 24


def sparkline(values: Sequence[float | None], width: int, top: float | None = None) -> str:
    """The last values as `width` cells of ▁..█ (0..top; top defaults to the largest), " " for unknown.

    More values than cells are averaged in consecutive groups, the newest at the
    right; fewer are drawn from the left and padded, so the line grows as they come.
    """
    if width <= 0:
        return ""
    vals = list(values)
    if len(vals) > width:
        size = len(vals) / width
        groups = [vals[int(i * size): int((i + 1) * size)] for i in range(width)]
        vals = [None if not (known := [v for v in g if v is not None]) else sum(known) / len(known)
                for g in groups]
    known = [v for v in vals if v is not None]
    high = top if top is not None and top > 0 else (max(known) if known else 0.0)
    cells = []
    for v in vals:
        if v is None:
            cells.append(" ")
        elif high <= 0 or v <= 0:
            cells.append(SPARKS[0])
        else:
            cells.append(SPARKS[min(7, max(0, round(v / high * 7)))])
    return "".join(cells).ljust(width)


@dataclass(frozen=True)
class Gauge:
    """One figure: its text, its history (oldest first) and the value the history's top stands for."""

    text: str
    history: tuple[float | None, ...] = ()
    top: float | None = None
    style: str = ""


@dataclass(frozen=True)
class GaugeLine:
    """A resource's line: its label, then its figures."""

    label: str
    gauges: tuple[Gauge, ...]
    style: str = ""  # the label's: red when the resource needs attention


class Gauges(Widget):
    """Resource lines; a parent sets `lines`."""

    lines: reactive[tuple[GaugeLine, ...]] = reactive((), layout=True)

    def render(self) -> RenderResult:
        if not self.lines:
            return Text("waiting for the first sample…", style="dim")
        return Text("\n").join(layout(self.lines, self.content_region.width))


def layout(lines: Sequence[GaugeLine], width: int) -> list[Text]:
    """The lines as text `width` cells wide; each line's sparklines share what its figures leave."""
    label_w = max(len(line.label) for line in lines)
    out = []
    for line in lines:
        text = Text(line.label.ljust(label_w) + " ", style=line.style or "bold")
        sparks = sum(1 for g in line.gauges if g.history)
        used = label_w + 1 + sum(len(g.text) + 2 for g in line.gauges) + sparks
        spark_w = min(MAX_SPARK, (width - used) // sparks) if sparks else 0
        if spark_w < MIN_SPARK:
            spark_w = 0
        for i, gauge in enumerate(line.gauges):
            if i:
                text.append("  ")
            text.append(gauge.text, style=gauge.style)
            if gauge.history and spark_w:
                text.append(" ")
                text.append(sparkline(gauge.history, spark_w, gauge.top), style="cyan")
        text.rstrip()
        text.truncate(width, overflow="ellipsis")
        out.append(text)
    return out
