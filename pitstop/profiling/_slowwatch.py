"""Provides the slowdown watch: steps that slowed down capture their own evidence, a profiler window and the stacks.

A finding that explains a slow run from the periodic profiler windows shows
the ops of the steps those windows happened to cover (every 500 steps by
default), not the slow stretch. When the median of the last RECENT training
steps exceeds FACTOR times the run's median for SUSTAIN steps or more, the
stall watch's thread (`_stallwatch.py`, once a second) asks the profiler
windows for one window now (trigger "slowdown") and notes where the training
thread is (its innermost frames of the script's own code, read in-process),
at most once every COOLDOWN_S. Decided at the watch's tick, not per step:
one sort of the kept step times a second, nothing on the training thread.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

RECENT = 20
FACTOR = 2.0
SUSTAIN = 20
COOLDOWN_S = 600.0
# The run's median over its recent 2,000 training steps: a bounded window that a slowdown of
# 20 steps moves by at most 1%.
KEEP = 2_000


class SlowdownDetector:
    """The decision alone (see module doc): fed training step times, asked at each tick."""

    def __init__(self) -> None:
        self.walls: deque[float] = deque(maxlen=KEEP)
        self._new = 0  # steps since the last tick
        self.slow_steps = 0  # steps in a row (as ticks count them) with the recent median above FACTOR x
        self.last_capture = -math.inf
        self.ratio: float | None = None

    def step(self, wall: float) -> None:
        self.walls.append(wall)
        self._new += 1

    def steps(self, walls: list[float]) -> None:
        """Training steps' times, in order (the writer thread's runs of steps)."""
        self.walls.extend(walls)
        self._new += len(walls)

    def check(self, now: float) -> bool:
        """True when a capture is due now (and counts it)."""
        new, self._new = self._new, 0
        if len(self.walls) < 2 * RECENT or new == 0:
            return False
        walls = list(self.walls)
        run = statistics.median(walls)
        recent = statistics.median(walls[-RECENT:])
        self.ratio = recent / run if run > 0 else None
        if self.ratio is None or self.ratio <= FACTOR:
            self.slow_steps = 0
            return False
        self.slow_steps += new
        if self.slow_steps < SUSTAIN or now - self.last_capture < COOLDOWN_S:
            return False
        self.last_capture = now
        self.slow_steps = 0
        return True


def capture(agent: Any, detector: SlowdownDetector, step: int | None) -> str:
    """Open a profiler window (trigger "slowdown") and say where the training thread is, as a note."""
    from pitstop.profiling import waits

    windows = agent.windows
    window = windows.request("slowdown") if windows is not None else "profiler windows are off"
    where = ""
    try:
        main = next((s for s in waits.in_process(agent.pid) if s.role == "main"), None)
        mine = [f for f in (main.frames if main is not None else []) if not f.library][-2:]
        if mine:
            where = "; the training thread was at " + " < ".join(
                f"{f.file.rsplit('/', 1)[-1]}:{f.line} {f.function}" for f in reversed(mine))
    except Exception as err:  # noqa: BLE001 - the note says it
        where = f"; its stack not read: {type(err).__name__}: {err}"
    ratio = f"{detector.ratio:.1f}x" if detector.ratio is not None else "over 2x"
    message = (f"steps slowed down after step {step}: the median of the last {RECENT} is {ratio} the run's, "
               f"for {SUSTAIN}+ steps: {window}{where}")
    agent.note("warn", "slowdown", message, once=f"slowdown:{step}")
    return message
