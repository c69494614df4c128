"""Provides MemoryScreen: torch and host memory over time, peak, GPU headroom, allocator retries."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal

from pitstop.tui import view
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame
from pitstop.tui.widgets import BarChart, Figures


class MemoryScreen(PitstopScreen):
    """Memory timeline with the figures that say how close the run is to an OOM."""

    TITLE_TEXT = "4 memory"

    def compose_body(self) -> ComposeResult:
        yield BarChart(id="memory-chart")
        with Horizontal(id="memory-panels"):
            yield Figures("Memory", id="memory-figures")
            yield Figures("GPU", id="memory-gpu")

    def show_body(self, frame: Frame) -> None:
        if self.charts_due(frame):
            self.query_one("#memory-chart", BarChart).series = view.memory_bars(frame.run)
        self.query_one("#memory-figures", Figures).rows = view.memory_rows(frame.run, detail=True)
        self.query_one("#memory-gpu", Figures).rows = view.gpu_rows(frame.run)
