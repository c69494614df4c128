"""Provides the plain statistics every front and the tuner share: percentiles and spread."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks.

    This is the "linear" method (Hyndman & Fan type 7, numpy's default): for
    sorted x[0..n-1] the position is (n - 1) * q / 100 and the value is
    interpolated between its two neighbours. Raises ValueError for no values or
    a q outside 0..100, because a percentile of nothing is not a number to show.
    """
    xs = sorted(map(float, values))
    if not xs:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0 or math.isnan(q):
        raise ValueError(f"percentile q must be within 0..100, got {q!r}")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def median_and_spread(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, interquartile range, IQR / median) of the values.

    The IQR (p75 - p25, linear method) is used rather than the standard
    deviation because step times have long right tails (a GC pause, a
    checkpoint) that would swamp a standard deviation. The relative spread is
    0.0 when every value is equal and inf when the median is 0 but the values
    differ. Raises ValueError for no values.
    """
    xs = sorted(map(float, values))
    if not xs:
        raise ValueError("median_and_spread of no values")
    med = percentile(xs, 50.0)
    iqr = percentile(xs, 75.0) - percentile(xs, 25.0)
    if med != 0.0:
        rel = iqr / abs(med)
    else:
        rel = 0.0 if iqr == 0.0 else math.inf
    return med, iqr, rel


def mean(values: Iterable[float]) -> float | None:
    """Arithmetic mean, or None for no values."""
    total = 0.0
    n = 0
    for v in values:
        total += v
        n += 1
    return total / n if n else None
