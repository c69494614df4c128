"""Provides the top a chart of step times is drawn to: the measured steps', never one slow step's.

A run's first step (904 ms of CUDA and allocator warm-up over 15 ms steps), an
evaluation or a checkpoint drawn to scale flattens every other step into the
floor: the job report's sparkline read `█▁▁▁…  max 1.08 s` for 20 ms steps.
Every front that draws times (the TUI's bars, `--plot`, the report's
sparklines and SVG charts) scales to the values' p95 instead, unless the
tallest is within 1.5x of it, and marks what stands above the top.
"""

from __future__ import annotations

from collections.abc import Sequence

from pitstop.analysis._stats import percentile

# The scale is the values' p95 unless the tallest is within 1.5x of it (then the tallest):
# a one-off 100x step (the first, an eval pass, a checkpoint) must not flatten the others.
SCALE_PCT = 95.0
SCALE_SLACK = 1.5
SCALE_HEADROOM = 1.2
# Below this many positive values a percentile says nothing: the tallest sets the top.
SCALE_MIN_VALUES = 4


def scale_top(values: Sequence[float]) -> float:
    """The value a chart's top stands for: the tallest, or 1.2x the p95 where the tallest is over 1.5x it;
    0.0 where no value is above zero (the chart then says so instead of drawing an axis of nothing)."""
    positive = [v for v in values if v > 0]
    if not positive:
        return 0.0
    tallest = max(positive)
    if len(positive) < SCALE_MIN_VALUES:
        return tallest
    typical = percentile(positive, SCALE_PCT)
    return tallest if tallest <= SCALE_SLACK * typical else typical * SCALE_HEADROOM


def above(values: Sequence[float], top: float) -> list[float]:
    """The values a chart drawn to `top` cuts off, in order."""
    return [v for v in values if v > top * (1 + 1e-9)]


__all__ = ["SCALE_HEADROOM", "SCALE_PCT", "SCALE_SLACK", "above", "scale_top"]
