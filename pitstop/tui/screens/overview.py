"""Provides OverviewScreen: where the step time goes, what to change, and how busy the machine is, at 80x24.

At 80x24 (a default SSH terminal) only the step chart used to fit.
Now the fixed parts come first and take what they need: the step's split into
data wait and compute (and the latest profiler window's phases), the top
finding with its fix and expected gain, one line each for GPU, CPU and memory
with their history; the chart gets what is left. Taller terminals also list
every finding under the chart; `f` lists them at any size.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll

from pitstop.tui import glance, view
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame
from pitstop.tui.widgets import BarChart, FindingsPanel, Gauges, TimeSplit, TopFinding

# From this height the findings panel (every finding, with evidence) has room under the chart.
TALL = 36


class OverviewScreen(PitstopScreen):
    """Where each step's time goes, what to do about it, and how busy the machine is."""

    TITLE_TEXT = "1 overview"

    def compose_body(self) -> ComposeResult:
        yield TimeSplit(id="split")
        yield TopFinding(id="top-finding")
        yield Gauges(id="gauges")
        yield BarChart(id="step-chart")
        with VerticalScroll(id="findings-scroll"):
            yield FindingsPanel(id="findings")

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height >= TALL, "tall")

    def show_body(self, frame: Frame) -> None:
        run = frame.run
        if self.charts_due(frame):
            self.query_one("#step-chart", BarChart).series = view.step_bars(run)
        self.query_one(TimeSplit).info = glance.split_info(frame)
        self.query_one(Gauges).lines = glance.gauge_lines(run)
        views = glance.finding_views(frame.findings)
        quiet = glance.quiet_text(frame)
        top = self.query_one(TopFinding)
        top.finding = views[0] if views else None
        top.more = max(0, len(views) - 1) if views else 0
        top.quiet = quiet
        panel = self.query_one(FindingsPanel)
        panel.findings = views
        panel.quiet = quiet
