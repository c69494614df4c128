"""Provides PitstopScreen: the header/footer frame every data screen shares."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Static

from pitstop.tui import view
from pitstop.tui.view import Frame
from pitstop.tui.widgets import HeaderInfo, KeyBar, StatusHeader


# Chart data walks the last 300 steps: live, charts move once a second (the app refreshes at
# 4 Hz); plotext's charts took ~75 ms a render at 120x40, the text bars a few ms.
CHART_EVERY_S = 1.0


class PitstopScreen(Screen[None]):
    """A screen the app hands a Frame on each refresh (attributes down)."""

    TITLE_TEXT = ""

    def __init__(self) -> None:
        super().__init__()
        self._charts_at = 0.0
        self._charts_run: int | None = None

    def charts_due(self, frame: Frame) -> bool:
        """Whether to recompute chart data now: once a second live, always on a jump."""
        run_id = id(frame.run)
        now = time.monotonic()
        # A replay (a seek moves the whole picture) or another run shown redraws at once.
        if frame.replay is not None or run_id != self._charts_run or now - self._charts_at >= CHART_EVERY_S:
            self._charts_at, self._charts_run = now, run_id
            return True
        return False

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="status")
        # Every screen: a stuck job is said above whatever the screen shows.
        yield Static("", id="stall-banner", classes="hidden")
        yield from self.compose_body()
        # One line of text, not Textual's Footer: see widgets/_keybar.py (screen switches).
        yield KeyBar()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def show(self, frame: Frame) -> None:
        """Take a new frame: the header here, the body in `show_body`."""
        try:
            header = self.query_one(StatusHeader)
        except NoMatches:
            return  # not composed yet (a mode switch in flight) or already torn down
        header.info = HeaderInfo(
            title=view.title_text(frame),
            mode=view.mode_text(frame),
            items=view.header_items(frame),
            screen=self.TITLE_TEXT,
        )
        stuck = view.stuck_text(frame)
        banner = self.query_one("#stall-banner", Static)
        banner.set_class(stuck is None, "hidden")
        if stuck is not None:
            banner.update(stuck)
        self.show_body(frame)

    def show_body(self, frame: Frame) -> None:
        """Set the body widgets' reactives from the frame."""
