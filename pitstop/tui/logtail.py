"""Provides LogBuffer (the last lines of the script's output) and `tail`, the file follower."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

# A viewer left open for days must not keep every line a chatty script prints.
MAX_LOG_LINES = 5000
POLL_S = 0.25


class LogBuffer:
    """The last MAX_LOG_LINES lines, and how many were ever added (to show only new ones)."""

    def __init__(self, path: Path | None, maxlen: int = MAX_LOG_LINES) -> None:
        self.path = path
        self.lines: deque[str] = deque(maxlen=maxlen)
        self.total = 0
        self.error: str | None = None

    def extend(self, lines: list[str]) -> None:
        self.lines.extend(lines)
        self.total += len(lines)

    def since(self, total: int) -> list[str]:
        """Lines added after `total` had been added (all retained ones if more were dropped)."""
        new = self.total - total
        if new <= 0:
            return []
        keep = min(new, len(self.lines))
        return [self.lines[i] for i in range(len(self.lines) - keep, len(self.lines))]


def tail(
    path: Path,
    deliver: Callable[[list[str]], None],
    stop: threading.Event,
    *,
    follow: bool = True,
    start_lines: int = MAX_LOG_LINES,
) -> None:
    """Deliver the last `start_lines` lines of `path`, then new lines as they are written.

    Runs in a worker thread until `stop` is set. Waits for the file to appear
    (the CLI may start the viewer a moment before the script writes anything).
    A partial last line is held back until its newline arrives.
    """
    while not path.exists():
        if stop.wait(POLL_S) or not follow:
            return
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        # Start near the end: a multi-GB log must not be read whole.
        size = path.stat().st_size
        start = max(0, size - start_lines * 200)
        handle.seek(start)
        if start:
            handle.readline()  # drop the torn first line
        pending = ""
        first = True
        while True:
            chunk = handle.read(1 << 16)
            if chunk:
                text = pending + chunk
                parts = text.split("\n")
                pending = parts.pop()
                if parts:
                    lines = [p.rstrip("\r") for p in parts]
                    deliver(lines[-start_lines:] if first else lines)
                    first = False
                continue
            first = False
            if not follow:
                if pending:
                    deliver([pending])
                return
            if stop.wait(POLL_S):
                return
