"""Provides Playback: PitstopApp's replay keys (play and pause, seek, speed, the next profiler window).

A mixin of the app: a replay (pitstop.tui.replay.Timeline) is shown up to a
cursor, and these actions move it; a live run has no cursor (check_action
hides them there).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pitstop.analysis import JobState
from pitstop.errors import PitstopError
from pitstop.tui.replay import Timeline
from pitstop.tui.screens import KernelsScreen

if TYPE_CHECKING:
    from textual.app import App
    from textual.timer import Timer

    _AppBase = App[str]
else:
    _AppBase = object

# A replay plays at real speed times this; + and - double and halve it.
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
SEEK_FRACTION = 0.10
# The cursor moves as often as the viewer refreshes (app.REFRESH_S): 4 times a second.
PLAY_TICK_S = 0.25


class Playback(_AppBase):
    """Moves a replay's cursor; each move shows the job as it stood there."""

    # Set by PitstopApp.__init__ (the timeline once the record is indexed).
    timeline: Timeline | None
    job: JobState
    paused: bool
    speed: float
    _play_timer: Timer | None
    _play_last: float

    if TYPE_CHECKING:
        def refresh_views(self) -> None: ...

    def _seek(self, cursor: float) -> None:
        if self.timeline is None:
            return
        try:
            self.job = self.timeline.seek(cursor)
        except PitstopError as err:  # a seek reads the record file again (pitstop.tui.replay)
            self.notify(f"replay: {err}", title="pitstop", severity="error", timeout=12)
            if not self.paused:
                self.action_toggle_play()  # one notice, not one a tick
            return
        self.refresh_views()

    def action_seek(self, direction: int) -> None:
        if self.timeline is None:
            return
        span = self.timeline.end - self.timeline.start
        self._seek(self.timeline.cursor + direction * SEEK_FRACTION * span)

    def action_seek_to(self, where: str) -> None:
        if self.timeline is not None:
            self._seek(self.timeline.start if where == "start" else self.timeline.end)

    def action_toggle_play(self) -> None:
        tl = self.timeline
        if tl is None:
            return
        self.paused = not self.paused
        if not self.paused:
            if tl.cursor >= tl.end:
                self._seek(tl.start)  # play from the start when at the end
            self._play_last = time.monotonic()
            self._play_timer = self.set_interval(PLAY_TICK_S, self._play_tick)
        elif self._play_timer is not None:
            self._play_timer.stop()
            self._play_timer = None
        self.refresh_views()

    def _play_tick(self) -> None:
        tl = self.timeline
        if tl is None or self.paused:
            return
        now = time.monotonic()
        step, self._play_last = (now - self._play_last) * self.speed, now
        self._seek(tl.cursor + step)
        if tl.cursor >= tl.end:
            self.action_toggle_play()  # pause at the end

    def action_speed(self, direction: int) -> None:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        self.speed = SPEEDS[min(max(0, i + direction), len(SPEEDS) - 1)]
        self.refresh_views()

    def on_kernels_screen_seek_profile(self, message: KernelsScreen.SeekProfile) -> None:
        tl = self.timeline
        if tl is None:
            return
        target = tl.next_profile(tl.cursor) if message.newer else tl.previous_profile(tl.cursor)
        if target is None:
            self.notify("no newer profiler window" if message.newer else "no older profiler window")
            return
        self._seek(target)
