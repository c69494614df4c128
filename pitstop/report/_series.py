"""Provides Buckets: a bounded, whole-run downsampling of a stream of points, and the report's series.

A report covers the whole record, not the last 20,000 steps a RunState keeps:
each series is cut into at most MAX_BUCKETS buckets of equal width, and when a
point falls past the last one every two neighbours merge (the width doubles).
Memory is bounded whatever the run's length, the points arrive once, and a
24-hour record draws as 200-400 points per line (a report stays well under a MB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pitstop.analysis import RunState
from pitstop.events import Event, Sample, Step

MAX_BUCKETS = 400


@dataclass
class _Agg:
    n: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    maxes: dict[str, float] = field(default_factory=dict)

    def add(self, values: dict[str, float | None]) -> None:
        self.n += 1
        for k, v in values.items():
            if v is None or not math.isfinite(v):
                continue
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1
            self.maxes[k] = max(self.maxes.get(k, v), v)

    def merge(self, other: _Agg) -> None:
        self.n += other.n
        for k, v in other.sums.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + other.counts[k]
        for k, v in other.maxes.items():
            self.maxes[k] = max(self.maxes.get(k, v), v)


class Buckets:
    """Points (x, {name: value}) in at most `max_buckets` buckets of equal width over x >= 0."""

    def __init__(self, width: float = 1.0, max_buckets: int = MAX_BUCKETS) -> None:
        self.width = width
        self.max_buckets = max(2, max_buckets)
        self._buckets: dict[int, _Agg] = {}

    def add(self, x: float, values: dict[str, float | None]) -> None:
        if not math.isfinite(x) or x < 0:
            return
        index = int(x // self.width)
        while index >= self.max_buckets:
            self._halve()
            index = int(x // self.width)
        self._buckets.setdefault(index, _Agg()).add(values)

    def _halve(self) -> None:
        merged: dict[int, _Agg] = {}
        for index in sorted(self._buckets):
            agg = self._buckets[index]
            target = merged.get(index // 2)
            if target is None:
                merged[index // 2] = agg
            else:
                target.merge(agg)
        self._buckets = merged
        self.width *= 2

    def points(self, name: str, how: str = "mean") -> list[tuple[float, float]]:
        """(x at the bucket's middle, mean | max | sum | count of `name`) for each bucket that has it."""
        out = []
        for index in sorted(self._buckets):
            agg = self._buckets[index]
            if name not in agg.counts:
                continue
            if how == "max":
                value = agg.maxes[name]
            elif how == "sum":
                value = agg.sums[name]
            elif how == "count":
                value = float(agg.counts[name])
            else:
                value = agg.sums[name] / agg.counts[name]
            out.append(((index + 0.5) * self.width, value))
        return out

    def ratio(self, num: str, den: str) -> list[tuple[float, float]]:
        """(x, sum(num) / sum(den)) per bucket: a rate over the bucket, such as samples per second."""
        out = []
        for index in sorted(self._buckets):
            agg = self._buckets[index]
            d = agg.sums.get(den)
            if d and num in agg.sums:
                out.append(((index + 0.5) * self.width, agg.sums[num] / d))
        return out

    def names(self) -> set[str]:
        """Every value name some bucket holds."""
        return {k for agg in self._buckets.values() for k in agg.counts}

    def __len__(self) -> int:
        return len(self._buckets)


class RunSeries:
    """The report's time series of one process, fed the same events as its RunState.

    Steps are keyed by their index (training steps only for time and samples;
    memory from every step); sampler readings by seconds since the first event.
    """

    def __init__(self, max_buckets: int = MAX_BUCKETS) -> None:
        self.steps = Buckets(1.0, max_buckets)
        self.samples = Buckets(1.0, max_buckets)
        self.t0: float | None = None
        self.marked = 0

    def add(self, event: Event, run: RunState) -> None:
        t = getattr(event, "t", None)
        if self.t0 is None and isinstance(t, (int, float)):
            self.t0 = float(t)
        if isinstance(event, Step):
            train = event.mark is None
            self.marked += 0 if train else 1
            self.steps.add(event.step, {
                "wall": event.wall if train else None,
                "wait": event.data_wait if train else None,
                "samples": float(event.samples) if train and event.samples is not None else None,
                "wall_known": event.wall if train and event.samples is not None else None,
                "rss": float(event.host_rss) if event.host_rss is not None else None,
                "allocated": float(event.mem_allocated) if event.mem_allocated is not None else None,
                "reserved": float(event.mem_reserved) if event.mem_reserved is not None else None,
            })
        elif isinstance(event, Sample) and self.t0 is not None:
            self.samples.add(event.t - self.t0, _sample_values(event, run))


def _sample_values(s: Sample, run: RunState) -> dict[str, float | None]:
    values: dict[str, float | None] = {"machine": None, "main": None}
    count = run.runtime.cpu_count if run.runtime is not None else None
    if s.system_cpu is not None and count:
        values["machine"] = s.system_cpu / 100.0 * count
    workers: dict[str, float] = {}
    for p in s.procs:
        if p.role == "main":
            values["main"] = p.cpu / 100.0 if p.cpu is not None else None
            values["main_rss"] = float(p.rss) if p.rss is not None else None
        elif p.role == "worker" and p.cpu is not None:
            # Keyed by loader id: which loader is the training one is known only at the end.
            key = f"workers:{p.loader if p.loader is not None else '?'}"
            workers[key] = workers.get(key, 0.0) + p.cpu / 100.0
    values.update(workers)
    utils = [g.util for g in s.gpus if g.util is not None]
    values["gpu_util"] = sum(utils) / len(utils) if utils else None
    used = [g.mem_used for g in s.gpus if g.mem_used is not None]
    values["gpu_mem"] = float(sum(used)) if used else None
    return values
