"""Provides the statistics of `pitstop compare`: two runs' training steps, a ratio, an interval and a verdict.

Steps are not independent draws: a worker that falls behind slows several
steps in a row, a machine's load drifts, and with workers the steps alternate
between "batch ready" and "waited". So the unit compared is a block of
consecutive training steps (its mean step time is the run's throughput over
that block), grown until neighbouring blocks are nearly uncorrelated. The
effect is the Hodges-Lehmann estimate of the shift between the two runs' log
block means (a ratio of step times), with the distribution-free interval that
inverts the Mann-Whitney test (Hollander & Wolfe, Nonparametric Statistical
Methods, 3rd ed., 4.3), so a GC pause or a checkpoint moves neither.
Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

# Blocks start at 5 steps: with 2-4 DataLoader workers the wait comes back every
# 2-4 steps, and a block of 5 holds at least one whole cycle.
MIN_BLOCK = 5
# A run needs 6 blocks for an interval: with 6 against 6 the 95% Mann-Whitney
# interval exists (its smallest p-value is 0.002); with 3 against 3 it does not (0.1).
MIN_BLOCKS = 6
# Blocks grow (doubling) while neighbouring block means correlate above this:
# drift or bursts make blocks that are not independent, and the interval too narrow.
MAX_LAG1 = 0.3
CONFIDENCE = 0.95
# A difference under 2% is called no difference even when the interval excludes
# it: the interval covers the steps' own variation, not what differs between two
# processes (allocator and page-cache state, CPU clocks), and 2% is too small to
# act on. What differs a lot more on a shared machine is other jobs' load: compare
# shows it and says so (compare/_model.py, OTHER_LOAD_CORES).
MIN_EFFECT = 0.02


@dataclass(frozen=True)
class Shift:
    """Hodges-Lehmann shift of b against a, with its interval (same units as the inputs)."""

    estimate: float
    low: float | None  # None when the samples are too small for the interval
    high: float | None
    superiority: float  # P(b < a) + P(b == a) / 2 over every pair


@dataclass(frozen=True)
class StepComparison:
    """B's training step time against A's: a ratio (< 1: B is faster), its interval, and the verdict."""

    verdict: str  # "faster" | "slower" | "no difference" | "too short"
    ratio: float | None  # B's step time / A's (Hodges-Lehmann, over block means)
    low: float | None  # the interval of the ratio (CONFIDENCE)
    high: float | None
    b_faster: float | None  # P(a block of B is faster than a block of A)
    block: int  # training steps per block
    blocks_a: int
    blocks_b: int
    steps_a: int  # training steps compared
    steps_b: int
    confidence: float = CONFIDENCE
    min_effect: float = MIN_EFFECT
    reason: str = ""  # why "too short", or what to keep in mind
    per: str = "step"  # what `ratio` times: a training "step", or a "sample" (the runs' batch sizes differ)

    @property
    def change(self) -> float | None:
        """Relative change of step time, B against A (-0.38: B's steps take 38% less time)."""
        return None if self.ratio is None else self.ratio - 1.0


def block_means(values: Sequence[float], size: int) -> list[float]:
    """Means of consecutive whole blocks of `size` values (a last partial block is left out)."""
    size = max(1, size)
    return [sum(values[i : i + size]) / size for i in range(0, len(values) - size + 1, size)]


def lag1(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0.0 for fewer than 3 values or no variation)."""
    n = len(values)
    if n < 3:
        return 0.0
    mu = sum(values) / n
    den = sum((v - mu) ** 2 for v in values)
    if den <= 0:
        return 0.0
    return sum((values[i] - mu) * (values[i + 1] - mu) for i in range(n - 1)) / den


def choose_block(a: Sequence[float], b: Sequence[float]) -> int:
    """The block size both runs are cut into: MIN_BLOCK, doubled while blocks stay correlated.

    It never doubles below MIN_BLOCKS blocks for the shorter run, so a short run
    keeps an interval (wider, and said to be so by its block count).
    """
    size = MIN_BLOCK
    shorter = min(len(a), len(b))
    while shorter // (size * 2) >= MIN_BLOCKS * 2:
        if max(lag1(block_means(a, size)), lag1(block_means(b, size))) <= MAX_LAG1:
            break
        size *= 2
    return size


def _count_le(a: Sequence[float], b: Sequence[float], x: float) -> int:
    """Pairs (i, j) with b[j] - a[i] <= x; a and b sorted ascending. O(len(a) + len(b))."""
    count = 0
    i = 0  # first a[i] >= b[j] - x; moves right as b[j] grows
    n = len(a)
    for bj in b:
        threshold = bj - x
        while i < n and a[i] < threshold:
            i += 1
        count += n - i
    return count


def _count_lt(a: Sequence[float], b: Sequence[float], x: float) -> int:
    """Pairs with b[j] - a[i] < x."""
    count = 0
    i = 0
    n = len(a)
    for bj in b:
        threshold = bj - x
        while i < n and a[i] <= threshold:
            i += 1
        count += n - i
    return count


def _order_stat(a: Sequence[float], b: Sequence[float], k: int) -> float:
    """The k-th smallest (1-based) of the len(a) * len(b) differences b[j] - a[i].

    Found by bisection on the value with a linear count per probe, so 20,000
    blocks against 200 cost milliseconds instead of four million differences.
    """
    lo, hi = b[0] - a[-1], b[-1] - a[0]
    for _ in range(200):
        if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
            break
        mid = (lo + hi) / 2
        if _count_le(a, b, mid) >= k:
            hi = mid
        else:
            lo = mid
    return hi


def hodges_lehmann(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Shift:
    """Shift of b against a: median of all differences b - a, its Mann-Whitney interval, P(b < a).

    The interval's ends are the k-th smallest and largest differences with
    k = nm/2 - z * sqrt(nm(n+m+1)/12) (normal approximation, no tie correction:
    block means of float step times do not tie). Raises ValueError on an empty side.
    """
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    if not n or not m:
        raise ValueError("hodges_lehmann needs values on both sides")
    total = n * m
    median = (_order_stat(xs, ys, (total + 1) // 2) + _order_stat(xs, ys, total // 2 + 1)) / 2
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    k = math.floor(total / 2 - z * math.sqrt(total * (n + m + 1) / 12))
    low = high = None
    if k >= 1:
        low = _order_stat(xs, ys, k)
        high = _order_stat(xs, ys, total - k + 1)
    below = _count_lt(xs, ys, 0.0)
    ties = _count_le(xs, ys, 0.0) - below
    return Shift(estimate=median, low=low, high=high, superiority=(below + ties / 2) / total)


def compare_steps(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                  min_effect: float = MIN_EFFECT) -> StepComparison:
    """Compare two runs' training step times (seconds, in step order), for the verdict.

    Runs of different lengths are cut into blocks of the same size; a run with
    fewer than MIN_BLOCKS blocks gives no verdict ("too short"), and says how many
    training steps it would need.
    """
    a = [float(v) for v in a if math.isfinite(v) and v > 0]
    b = [float(v) for v in b if math.isfinite(v) and v > 0]
    size = choose_block(a, b)
    ma, mb = block_means(a, size), block_means(b, size)
    base = dict(block=size, blocks_a=len(ma), blocks_b=len(mb), steps_a=len(a), steps_b=len(b),
                confidence=confidence, min_effect=min_effect)
    short = [f"{name} has {n} training step{'s' if n != 1 else ''}" for name, n in (("A", len(a)), ("B", len(b)))
             if n < MIN_BLOCK * MIN_BLOCKS]
    if short:
        reason = (" and ".join(short) + f": at least {MIN_BLOCK * MIN_BLOCKS} each are needed for an interval "
                  f"({MIN_BLOCKS} blocks of {MIN_BLOCK})")
        ratio = None
        if ma and mb:
            ratio = math.exp(hodges_lehmann([math.log(v) for v in ma], [math.log(v) for v in mb]).estimate)
        return StepComparison(verdict="too short", ratio=ratio, low=None, high=None, b_faster=None,
                              reason=reason, **base)  # type: ignore[arg-type]
    shift = hodges_lehmann([math.log(v) for v in ma], [math.log(v) for v in mb], confidence)
    ratio = math.exp(shift.estimate)
    low = math.exp(shift.low) if shift.low is not None else None
    high = math.exp(shift.high) if shift.high is not None else None
    verdict = "no difference"
    if high is not None and high < 1.0 and ratio <= 1.0 - min_effect:
        verdict = "faster"
    elif low is not None and low > 1.0 and ratio >= 1.0 + min_effect:
        verdict = "slower"
    reason = ""
    if verdict == "no difference" and low is not None and high is not None and (high < 1.0 or low > 1.0):
        reason = f"the difference is real but under {min_effect:.0%}, what two runs of one command differ by"
    return StepComparison(verdict=verdict, ratio=ratio, low=low, high=high, b_faster=shift.superiority,
                          reason=reason, **base)  # type: ignore[arg-type]


def slower_beyond(result: StepComparison, pct: float) -> bool | None:
    """B is slower than A by more than `pct` percent beyond the noise (the whole interval above 1 + pct/100).

    None when the runs were too short to say.
    """
    if result.low is None:
        return None
    return result.low > 1.0 + pct / 100.0
