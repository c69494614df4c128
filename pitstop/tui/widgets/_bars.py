"""Provides BarChart: per-step stacked bars in text cells, robustly scaled, marked steps apart.

Drawn by hand rather than with plotext: plotext's legend sat on the
bars, its ticks read "24104.5", one slow step set the scale, and a 120x40
render cost ~75 ms. Here the scale is the 95th percentile of the bars (bars
above it are clipped and marked ▲, and the chart says so), ticks are round
(1-2-5) in ms or s, the legend is a line of its own, every bar says how many
steps it averages, and marked steps (warm-up, eval, profiled) are drawn in their
own colour without setting the scale. A render is a few ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget

from pitstop.analysis import SCALE_PCT, scale_top
from pitstop.analysis import format as fmt

BLOCKS = " ▁▂▃▄▅▆▇█"
CLIP = "▲"
# Marks: what a marked step is drawn in, and the letter under a bar that mixes one in.
MARK_STYLE = {"warm-up": "grey50", "eval": "blue", "rollout": "cyan", "profiled": "magenta", "after-profile": "magenta"}
MARK_LETTER = {"warm-up": "w", "eval": "e", "rollout": "r", "profiled": "p", "after-profile": "p"}
MARK_LEGEND = {"warm-up": "warm-up", "eval": "eval", "rollout": "rollout", "profiled": "profiled",
               "after-profile": "profiled"}


@dataclass(frozen=True)
class Layer:
    """One stacked part of every bar (bottom first)."""

    name: str
    style: str


@dataclass(frozen=True)
class BarSeries:
    """Per-step values, seconds, one per layer; `marks` says which steps are not training steps."""

    title: str
    layers: tuple[Layer, ...]
    steps: tuple[int, ...] = ()
    values: tuple[tuple[float, ...], ...] = ()  # per step, one value per layer
    marks: tuple[str | None, ...] = ()
    note: str | None = None  # replaces the bars when there is nothing to draw, and says why
    unit: str = "s"  # "s" (drawn in ms or s) or "B" (drawn in MiB or GiB)
    robust: bool = True  # scale to the bars' p95 (times); False: to the tallest (memory peaks are real)


@dataclass(frozen=True)
class Bin:
    """Consecutive steps drawn as one bar: the mean of its training steps, its marked ones apart."""

    first: int
    last: int
    values: tuple[float, ...] | None  # mean per layer over its training steps; None: none
    count: int  # training steps in it
    marks: tuple[str, ...]  # distinct marks of its marked steps, in order
    marked_total: float | None  # mean total of its marked steps

    @property
    def total(self) -> float | None:
        return sum(self.values) if self.values is not None else None


def bin_steps(series: BarSeries, columns: int) -> tuple[list[Bin], int]:
    """(bins, steps per bin): the latest steps in groups of a whole number of steps that fill `columns`.

    With more steps than columns, k = n // columns steps make a bar and the
    oldest n - k * columns steps are left out (fewer than a column's worth per
    bar), so the chart is always full width and every bar averages the same count.
    """
    n = len(series.steps)
    if n == 0 or columns <= 0:
        return [], 1
    size = max(1, n // columns)
    first = n - min(n, columns * size)
    bins = []
    for i in range(first, n, size):
        idx = range(i, min(n, i + size))
        train = [j for j in idx if series.marks[j] is None]
        marked = [j for j in idx if series.marks[j] is not None]
        values = None
        if train:
            values = tuple(sum(series.values[j][k] for j in train) / len(train)
                           for k in range(len(series.layers)))
        marks = tuple(dict.fromkeys(series.marks[j] for j in marked))  # type: ignore[misc]
        marked_total = sum(sum(series.values[j]) for j in marked) / len(marked) if marked else None
        bins.append(Bin(series.steps[idx[0]], series.steps[idx[-1]], values, len(train), marks, marked_total))
    return bins, size


def nice_step(top: float, count: int) -> float:
    """A 1-2-5 step that cuts 0..top into about `count` parts."""
    if top <= 0 or count <= 0:
        return 1.0
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw - 1e-12:
            return m * mag
    return 10 * mag  # pragma: no cover - the loop always returns


def unit_of(top: float, unit: str = "s") -> tuple[str, float]:
    """(name, factor) of the axis unit for values reaching `top`: ms or s for seconds, MiB or GiB for bytes."""
    if unit == "B":
        return ("GiB", 1.0 / (1 << 30)) if top >= (1 << 30) else ("MiB", 1.0 / (1 << 20))
    return ("s", 1.0) if top >= 1.0 else ("ms", 1000.0)


def _tick_text(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


@dataclass(frozen=True)
class _Axis:
    top: float  # seconds at the top of the plot
    step: float  # seconds between ticks
    unit: str
    scale: float  # seconds -> unit


def _axis(top: float, rows: int, unit: str = "s") -> _Axis:
    """Round ticks whose last one is the lowest above `top` (with a tick every other row or so)."""
    top = top if top > 0 else (1e-3 if unit == "s" else float(1 << 20))
    unit, scale = unit_of(top, unit)
    # The step that reaches least above `top` (the bars use the height); of those, the one whose
    # tick count is nearest a tick every other row (a 10 s top once read "0" and "10" alone).
    want = max(1, rows // 2)
    options = []
    for count in range(1, max(1, rows - 1) + 1):
        step = nice_step(top * scale, count) / scale
        reach = math.ceil(top / step - 1e-9) * step
        options.append((round(reach * scale, 9), abs(round(reach / step) - want), step, reach))
    _, _, step, reach = min(options)
    return _Axis(reach, step, unit, scale)


def _layer_at(bounds: list[float], v: float) -> int:
    for k in range(1, len(bounds)):
        if v < bounds[k]:
            return k - 1
    return len(bounds) - 2


def _cell(lo: float, size: float, bounds: list[float], styles: list[str]) -> tuple[str, str]:
    """(character, style) of one cell covering lo..lo+size of a bar with cumulative `bounds`."""
    total = bounds[-1]
    filled = min(1.0, max(0.0, (total - lo) / size))
    eighths = round(filled * 8)
    if eighths == 0:
        return " ", ""
    # The layer at the cell's bottom and the one at the top of its fill.
    bottom = _layer_at(bounds, lo + 1e-12)
    top = _layer_at(bounds, lo + filled * size - 1e-12)
    if bottom == top:
        return BLOCKS[eighths], styles[bottom]
    lower = min(1.0, max(0.0, (bounds[bottom + 1] - lo) / size))
    if eighths == 8:
        low8 = round(lower * 8)
        if low8 == 0:
            return BLOCKS[8], styles[top]
        if low8 == 8:
            return BLOCKS[8], styles[bottom]
        return BLOCKS[low8], f"{styles[bottom]} on {styles[top]}"
    return BLOCKS[eighths], styles[bottom] if lower >= filled / 2 else styles[top]


YLABEL_W = 5  # "12.5", "1000": tick labels of ms up to 1 s, then of seconds


def bar_total(b: Bin) -> float:
    """The height a bin is drawn at: its training steps' mean, else its marked steps'."""
    return b.total if b.total is not None else (b.marked_total or 0.0)


def render_lines(series: BarSeries, width: int, height: int) -> list[Text]:
    """The chart as at most `height` lines of `width` cells (one line when there is nothing to draw)."""
    title = Text(series.title, style="bold")
    if series.note is not None or not series.steps:
        title.append(f": {series.note or 'no data yet'}", style="dim")
        return [title]
    columns = max(1, width - YLABEL_W - 1)
    bins, per_bin = bin_steps(series, columns)
    bar_w = 2 if 2 * len(bins) <= columns else 1
    pick = scale_top if series.robust else (lambda totals: max(totals, default=0.0))
    top = pick([b.total for b in bins if b.total is not None])
    if top <= 0:  # only marked steps so far: they set the scale, there is nothing else
        top = pick([b.marked_total for b in bins if b.marked_total is not None])
    # The header (1-2 lines) says what is clipped, which depends on the axis, which depends on
    # the rows the header leaves: a first guess, then once more with the rows known.
    rows = max(1, height - 3)
    for _ in range(2):
        axis = _axis(top, rows, series.unit)
        clipped = [b for b in bins if bar_total(b) > axis.top + 1e-12]
        header = _pack(_header_items(series, bins, per_bin, axis, clipped), width, 2)
        rows = max(1, height - len(header) - 2)
    layer_styles = [layer.style for layer in series.layers]
    size = axis.top / rows
    tick_rows: dict[int, float] = {}
    for k in range(int(round(axis.top / axis.step)) + 1):
        value = k * axis.step
        tick_rows.setdefault(rows - 1 - min(rows - 1, int(value / size + 1e-9)), value)
    # Each bar's cumulative layer bounds and styles, once (not per row).
    bars: list[tuple[list[float], list[str], bool]] = []
    for b in bins:
        if b.values is not None:
            bounds = [0.0]
            for v in b.values:
                bounds.append(bounds[-1] + max(0.0, v))
            styles = layer_styles
        else:
            bounds = [0.0, max(0.0, b.marked_total or 0.0)]
            styles = [MARK_STYLE.get(b.marks[0], "grey50") if b.marks else "grey50"]
        bars.append((bounds, styles, bounds[-1] > axis.top + 1e-12))
    lines = list(header)
    for r in range(rows):
        lo = (rows - 1 - r) * size
        line = Text()
        label = _tick_text(tick_rows[r] * axis.scale) if r in tick_rows else ""
        line.append(label.rjust(YLABEL_W), style="dim")
        line.append("┤" if r in tick_rows else "│", style="dim")
        # Runs of one style go in as one span: a cell per append cost ~20 ms at 120x40.
        run_chars: list[str] = []
        run_style = ""
        for bounds, styles, over in bars:
            if r == 0 and over:
                char, style = CLIP, f"bold white on {styles[-1]}"
            elif bounds[-1] <= lo:
                char, style = " ", ""
            else:
                char, style = _cell(lo, size, bounds, styles)
            if style != run_style and run_chars:
                line.append("".join(run_chars), style=run_style)
                run_chars = []
            run_style = style
            run_chars.append(char * bar_w)
        if run_chars:
            line.append("".join(run_chars), style=run_style)
        lines.append(line)
    lines.append(_x_axis(bins, bar_w))
    lines.append(_x_labels(bins, bar_w, width))
    return lines


def _header_items(series: BarSeries, bins: list[Bin], per_bin: int, axis: _Axis, clipped: list[Bin]) -> list[Text]:
    """Title with the unit, the legend, what one bar is, and what is above the scale."""
    items: list[Text] = [Text(f"{series.title} ({axis.unit})", style="bold")]
    for layer in series.layers:
        items.append(Text.assemble(("■ ", layer.style), layer.name))
    for name in dict.fromkeys(MARK_LEGEND[m] for b in bins for m in b.marks if m in MARK_LEGEND):
        style = next(MARK_STYLE[m] for m in MARK_STYLE if MARK_LEGEND[m] == name)
        items.append(Text.assemble(("■ ", style), name))
    n = len(series.steps)
    items.append(Text(f"bar = mean of {per_bin} steps" if per_bin > 1 else
                      ("1 step so far" if n == 1 else "bar = 1 step"), style="dim"))
    if clipped:
        highest = max(bar_total(b) for b in clipped)
        most = fmt.size(highest) if series.unit == "B" else fmt.duration(highest)
        items.append(Text(f"{CLIP} {len(clipped)} above the p{SCALE_PCT:.0f} scale (max {most})", style="bold"))
    return items


def _pack(items: list[Text], width: int, max_lines: int) -> list[Text]:
    """Items joined by two spaces, wrapped at item boundaries; what does not fit is dropped."""
    lines: list[Text] = []
    current = Text()
    for item in items:
        if len(current) and len(current) + 2 + len(item) > width:
            lines.append(current)
            current = Text()
            if len(lines) == max_lines:
                return lines
        if len(current):
            current.append("  ")
        current.append_text(item)
    if len(current):
        lines.append(current)
    return lines[:max_lines]


def _x_axis(bins: list[Bin], bar_w: int) -> Text:
    """The axis line; under a bar that averages in a marked step, the mark's letter."""
    line = Text(" " * YLABEL_W + "└", style="dim")
    for b in bins:
        if b.values is not None and b.marks:
            line.append(MARK_LETTER.get(b.marks[0], "·") * bar_w, style=MARK_STYLE.get(b.marks[0], ""))
        else:
            line.append("─" * bar_w, style="dim")
    return line


def _x_labels(bins: list[Bin], bar_w: int, width: int) -> Text:
    """The first step of a bar every ~10 columns, never overlapping; "step" at the left."""
    cells = list("step".ljust(YLABEL_W + 1))
    cells += [" "] * max(0, width - len(cells))
    every = max(1, math.ceil(10 / bar_w))
    free_from = YLABEL_W + 1
    for i in range(0, len(bins), every):
        col = YLABEL_W + 1 + i * bar_w
        label = str(bins[i].first)
        if col < free_from or col + len(label) > width:
            continue
        cells[col : col + len(label)] = label
        free_from = col + len(label) + 1
    return Text("".join(cells).rstrip(), style="dim")


class BarChart(Widget):
    """Renders a BarSeries to its size; a parent sets `series`."""

    series: reactive[BarSeries | None] = reactive(None)

    def render(self) -> RenderResult:
        if self.series is None:
            return Text("waiting for data…", style="dim")
        width, height = self.content_region.size
        return Text("\n").join(render_lines(self.series, width, height))
