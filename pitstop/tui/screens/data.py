"""Provides DataScreen: how long steps wait for data, and what the DataLoader workers do."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal

from pitstop.tui import view
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame
from pitstop.tui.widgets import BarChart, Figures


class DataScreen(PitstopScreen):
    """Data wait per step with p50/p95, loader rate vs step rate, per-worker CPU and RSS."""

    TITLE_TEXT = "3 data"
    BINDINGS = [
        # Which line of __getitem__ is slow: py-spy, the loader never paused.
        Binding("s", "app.sample_stacks", "Stacks", show=False),
    ]

    def compose_body(self) -> ComposeResult:
        yield BarChart(id="wait-chart")
        with Horizontal(id="data-panels"):
            # The data-wait finding's steps: every training step after the warm-up.
            yield Figures("Data wait (measured steps)", id="data-figures")
            yield Figures("Loaders and workers", id="workers")

    def show_body(self, frame: Frame) -> None:
        if self.charts_due(frame):
            self.query_one("#wait-chart", BarChart).series = view.wait_bars(frame.run)
        self.query_one("#data-figures", Figures).rows = view.data_rows(frame.run, frame.findings, frame.split)
        self.query_one("#workers", Figures).rows = view.worker_rows(frame.run)
