"""Provides the one text form of every figure: sizes, durations, shares, rates, and "n/a (why)".

Every front (the TUI, the headless lines and summary, `pitstop report`,
`pitstop compare`) and the advice rules print through here, so one value reads
the same everywhere (`pct(0.62)` gave "1%" beside `fmt_pct(0.62)`'s
"62%", and one step time read "12.5 s" on a screen and "12500.0 ms" in a summary).
Standard library only, as the rest of `pitstop.analysis`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

NA = "n/a"


def na(reason: str | None = None) -> str:
    """An unavailable figure, with the reason when there is one (never a zero)."""
    return f"{NA} ({reason})" if reason else NA


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _number(n: float) -> str:
    """Three significant digits at most, no trailing ".0": 1.55, 12.5, 312, 40."""
    if abs(n) >= 100 or float(n).is_integer():
        return f"{n:.0f}"
    text = f"{n:.2f}" if abs(n) < 10 else f"{n:.1f}"
    return text.rstrip("0").rstrip(".")


def size(value: float | None, reason: str | None = None) -> str:
    """Bytes in binary units with at most three significant digits: 1.55 GiB, 312 MiB, 40 GiB."""
    if value is None:
        return na(reason)
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{_number(n) if unit != 'B' else f'{n:.0f}'} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop always returns


def size_of(used: float, total: float) -> str:
    """"5.5/40 GiB": both in the unit of the total, so the pair fits a narrow panel."""
    number, unit = size(total).split(" ", 1)
    return f"{_number(used / _UNITS[unit])}/{number} {unit}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 line", "2 lines", "1 worker": the noun agrees with the number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def duration(seconds: float | None, reason: str | None = None) -> str:
    """A step-scale duration: milliseconds below a second, seconds from one ("2244 ms")."""
    if seconds is None:
        return na(reason)
    if seconds >= 10:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def seconds(value: float) -> str:
    """A run-scale sum at one decimal, "12.3 s": time lost in all, where `span` would round to whole seconds."""
    return f"{value:.1f} s"


def us(micros: float | None) -> str:
    """Profiler microseconds as µs/ms/s with three significant digits ("950 µs", "45.0 ms", "26.8 s")."""
    if micros is None:
        return NA
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "µs")):
        if micros >= scale or unit == "µs":
            v = micros / scale
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}"
    return NA  # pragma: no cover - the loop always returns


def span(seconds: float) -> str:
    """A run-scale duration, coarse: "45 s", "12 min", "3.5 h" (time to a limit, a chart's time axis)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def pct(frac: float | None, reason: str | None = None, digits: int = 0) -> str:
    """A fraction (0.62) as a percentage ("62%"): every share of time, memory or steps."""
    if frac is None:
        return na(reason)
    return f"{frac * 100:.{digits}f}%"


def percent(value: float | None, reason: str | None = None, digits: int = 0) -> str:
    """A reading already in percent (NVML utilisation, psutil's CPU of the machine): 62.0 -> "62%"."""
    return pct(value / 100 if value is not None else None, reason, digits)


def share(part: float, whole: float, unit: Callable[[float], str] = duration) -> str:
    """"14% (1.3 ms of 9.2 ms)": a share with the two figures it is the ratio of, so they cannot disagree.

    Every share a finding quotes goes through here: "14% of step time (p50 4.2 ms
    of 9.2 ms)" read 46% to anyone who divided, because the 14% came from sums.
    """
    return f"{pct(part / whole if whole else None)} ({unit(part)} of {unit(whole)})"


def ratio(value: float) -> str:
    """A speed-up factor: "1.17x", "12.3x"."""
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def speedup(before: float, after: float, unit: Callable[[float], str] = duration) -> str:
    """"1.17x (9.2 ms to ~7.9 ms)": a gain with the two figures it is the ratio of (before / after)."""
    return f"{ratio(before / after) if after > 0 else NA} ({unit(before)} to ~{unit(after)})"


def speedup_range(before: float, best: float, worst: float, unit: Callable[[float], str] = duration) -> str:
    """"1.30x (9.2 ms to ~7.1 ms) to 1.80x (9.2 ms to ~5.1 ms)": each end of a range with its own figures."""
    return f"{speedup(before, worst, unit)} to {speedup(before, best, unit)}"


def change(frac: float) -> str:
    """A relative change with its sign: 0.12 -> "+12%", -0.004 -> "-0.4%" (one decimal under 1%)."""
    return f"{frac * 100:+.0f}%" if abs(frac) >= 0.01 else f"{frac * 100:+.1f}%"


def rate(value: float | None, unit: str, reason: str | None = None) -> str:
    """A per-second rate with a sensible number of digits: "1,234 samples/s", "12.5 steps/s", "1.55 batches/s"."""
    if value is None:
        return na(reason)
    return f"{rate_value(value)} {unit}/s"


def rate_value(value: float) -> str:
    """The number of a rate where a label already says the unit (the TUI header's "samples/s 1,234")."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def elapsed(seconds: float | None) -> str:
    """Wall time as h:mm:ss."""
    if seconds is None or seconds < 0:
        return NA
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def clock_time(t: float | None) -> str:
    """A time.time() stamp as local HH:MM:SS (UTC when TZ is unset: snapshots set TZ)."""
    if t is None:
        return NA
    return time.strftime("%H:%M:%S", time.localtime(t))


def watts(value: float | None, limit: float | None = None, reason: str | None = None) -> str:
    """Power draw, with the board's limit when known."""
    if value is None:
        return na(reason)
    return f"{value:.0f} W" + (f" / {limit:.0f} W" if limit else "")


def shorten(text: str, width: int) -> str:
    """Cut a long name (kernel names run to hundreds of characters) keeping its start."""
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"
