"""Provides Chart: a plotext line or stacked-bar chart fed one frozen ChartData at a time."""

from __future__ import annotations

from dataclasses import dataclass

from textual.reactive import reactive
from textual_plotext import PlotextPlot


@dataclass(frozen=True)
class Series:
    """One named line (or bar layer) of a chart."""

    name: str
    values: tuple[float, ...]
    color: str = "blue"


@dataclass(frozen=True)
class ChartData:
    """What a Chart shows; `note` replaces the plot when there is nothing to draw, and why."""

    title: str
    x: tuple[float, ...] = ()
    series: tuple[Series, ...] = ()
    stacked: bool = False
    xlabel: str = ""
    note: str | None = None
    ymin: float | None = 0.0


class Chart(PlotextPlot):
    """A chart that redraws only when its data changes (plotext takes ~8 ms a build)."""

    data: reactive[ChartData | None] = reactive(None, always_update=False)

    def watch_data(self, data: ChartData | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if data is None:
            plt.title("waiting for data…")
            self.refresh()
            return
        if data.note is not None or not data.x or not data.series:
            plt.title(f"{data.title}: {data.note or 'no data yet'}")
            self.refresh()
            return
        # Whole numbers keep plotext's ticks short ("16" rather than "16.0").
        x = [int(v) if float(v).is_integer() else v for v in data.x]
        if data.stacked:
            plt.stacked_bar(
                x,
                [list(s.values) for s in data.series],
                labels=[s.name for s in data.series],
                color=[s.color for s in data.series],
                width=1.0,
                minimum=0,
            )
        else:
            for s in data.series:
                plt.plot(x, list(s.values), label=s.name, color=s.color, marker="braille")
        if data.ymin is not None and not data.stacked:
            top = max((max(s.values) for s in data.series if s.values), default=0.0)
            plt.ylim(data.ymin, top * 1.1 if top > data.ymin else data.ymin + 1)
        # Explicit ticks: plotext picks bar-chart ticks in an order that changes between
        # processes (seen as flaky snapshots), and a handful of round labels reads better.
        ticks = _ticks(x)
        plt.xticks(ticks, [f"{t:g}" for t in ticks])
        plt.title(data.title)
        if data.xlabel:
            plt.xlabel(data.xlabel)
        self.refresh()


def _ticks(x: list[float], count: int = 6) -> list[float]:
    """Up to `count` x values, evenly spread, first and last included."""
    if len(x) <= count:
        return list(x)
    step = (len(x) - 1) / (count - 1)
    return [x[round(i * step)] for i in range(count)]
