"""Provides `chart`: a small line/area chart as inline SVG text, with axes, ticks and a legend.

Generated here rather than with a charting library (docs/report.md says why):
the report must open offline, with no script and no URL, and these charts need
only lines, filled areas and ticks. The SVG is written for inline use in HTML5,
so it carries no `xmlns` (no URL at all in the file).

A chart of times can be drawn to its measured lines' scale (`robust`, as the
TUI's bars): a 1.08 s first step ran the axis of 20 ms steps to 1,250 ms.
What stands above the top is drawn at it, marked ▲, and said under the title.
A chart whose every value is zero says so in one line (its axis ran 0..1,000 ms),
and an axis never repeats a label (a 2.5 s run's time axis read "0 s, 1 s, 2 s,
2 s, 2 s").
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pitstop.analysis import SCALE_PCT, above, scale_top

# Colour-blind-safe (Okabe-Ito) in the order series are usually given.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999")
FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True)
class Line:
    """One series: (x, y) points in x order; `area` fills it down to zero."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str = PALETTE[0]
    area: bool = False
    width: float = 1.5
    dashed: bool = False


def nice_ticks(lo: float, hi: float, count: int = 5, cover: bool = False,
               steps: Sequence[float] = (1, 2, 2.5, 5, 10)) -> list[float]:
    """Round tick values within lo..hi (1, 2, 2.5 or 5 times a power of ten apart, of `steps`).

    With `cover`, the last tick is the first at or above hi: a y axis that ends on a round number.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in steps if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    end = math.ceil(hi / step - 1e-9) * step if cover else hi
    while value <= end + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


def distinct_ticks(lo: float, hi: float, label: Callable[[float], str], count: int = 5,
                   cover: bool = False) -> list[float]:
    """`nice_ticks` with fewer of them where their labels would repeat (whole seconds over 2.5 s), and never
    2.5 apart: a label of one decimal reads 0.25 as "0.2"."""
    for n in range(count, 0, -1):
        ticks = nice_ticks(lo, hi, n, cover, steps=(1, 2, 5, 10))
        labels = [label(t) for t in ticks]
        if len(set(labels)) == len(labels):
            return ticks
    return ticks[:1]


def fmt_count(x: float) -> str:
    """1234 -> "1.2k", 3_400_000 -> "3.4M"."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:.1f}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.0f}k"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def chart(title: str, lines: Sequence[Line], x_label: str, y_format: Callable[[float], str],
          x_format: Callable[[float], str] = fmt_count, width: int = 720, height: int = 220,
          y_min: float | None = 0.0, robust: bool = False) -> str:
    """An SVG chart of the lines; an empty series list gives a chart that says "not recorded", one of
    zeros says "0 throughout". `robust`: the y axis ends at the solid lines' measured scale
    (`analysis.scale_top`); a dashed line (a bucket's slowest step) is drawn to it, not scaled by it."""
    left, right, top, bottom = 64, 12, 42, 34
    pw, ph = width - left - right, height - top - bottom
    pts = [p for line in lines for p in line.points if math.isfinite(p[0]) and math.isfinite(p[1])]
    esc = html.escape
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{esc(title)}">',
           f"<title>{esc(title)}</title>",
           f'<text x="{left}" y="16" {FONT} font-weight="bold">{esc(title)}</text>']
    if not pts:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" {FONT} text-anchor="middle" fill="#666">'
                   "not recorded</text></svg>")
        return "\n".join(out)
    if y_min == 0 and all(p[1] == 0 for p in pts):
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" {FONT} text-anchor="middle" fill="#666">'
                   f"{esc(y_format(0.0))} throughout</text></svg>")
        return "\n".join(out)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0 = min(p[1] for p in pts) if y_min is None else min(y_min, min(p[1] for p in pts))
    y1 = max(p[1] for p in pts)
    cut: list[float] = []  # the solid lines' points above the top (a dashed line of maxima is expected there)
    if robust:
        solid = [p[1] for line in lines if not line.dashed for p in line.points if math.isfinite(p[1])]
        y1 = max(scale_top(solid), y0 + 1e-12) if any(v > 0 for v in solid) else y1
        cut = above(solid, y1)
    if x1 <= x0:
        x1 = x0 + 1
    yt = distinct_ticks(y0, y1 if y1 > y0 else y0 + 1, y_format, cover=True)
    y1 = max(y1, yt[-1]) if yt else y1
    if y1 <= y0:
        y1 = y0 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (min(y, y1) - y0) / (y1 - y0) * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>')
    for y in yt:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" {FONT} text-anchor="end">{esc(y_format(y))}</text>')
    for x in distinct_ticks(x0, x1, x_format, 6):
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 14}" {FONT} text-anchor="middle">{esc(x_format(x))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 4}" {FONT} text-anchor="middle" fill="#444">'
               f"{esc(x_label)}</text>")
    marked: set[int] = set()
    for line in lines:
        good = [(x, y) for x, y in line.points if math.isfinite(x) and math.isfinite(y)]
        if not good:
            continue
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        if line.area:
            base = sy(max(y0, 0.0)) if y0 <= 0 else sy(y0)
            poly = f"{sx(good[0][0]):.1f},{base:.1f} {coords} {sx(good[-1][0]):.1f},{base:.1f}"
            out.append(f'<polygon points="{poly}" fill="{line.color}" fill-opacity="0.35" stroke="none"/>')
        dash = ' stroke-dasharray="4 3"' if line.dashed else ""
        out.append(f'<polyline points="{coords}" fill="none" stroke="{line.color}" '
                   f'stroke-width="{line.width}"{dash}/>')
        for x, y in good:
            if y > y1 * (1 + 1e-9) and round(sx(x)) not in marked:  # cut at the top: the line goes on above
                marked.add(round(sx(x)))
                out.append(f'<text x="{sx(x):.1f}" y="{top + 9}" {FONT} text-anchor="middle" '
                           f'fill="{line.color}">\u25b2</text>')
    lx = float(left)  # the legend: one row under the title, left to right
    for line in lines:
        out.append(f'<rect x="{lx:.0f}" y="23" width="10" height="10" fill="{line.color}"/>'
                   f'<text x="{lx + 13:.0f}" y="32" {FONT}>{esc(line.label)}</text>')
        lx += 24 + 6.2 * len(line.label)
    if cut:  # after the legend, in the row that says what is drawn
        most = max(p[1] for p in pts)
        out.append(f'<text x="{lx:.0f}" y="32" {FONT} fill="#444">\u25b2 {len(cut)} above the '
                   f"p{SCALE_PCT:.0f} scale, drawn at its top (max {esc(y_format(most))})</text>")
    out.append("</svg>")
    return "\n".join(out)
