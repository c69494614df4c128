"""Provides LogBuffer (the last lines of the script's output) and `tail`, the file follower."""

from __future__ import annotations

import re
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


# A terminal's colour and cursor sequences (CSI ... letter, OSC ... BEL/ST): a Log would print them.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def clean(line: str) -> str:
    """A line as a terminal would leave it: after its last carriage return (progress bars redraw with
    \r), without escape sequences, tabs expanded, other control characters dropped."""
    if "\r" in line:
        parts = [p for p in line.split("\r") if p]
        line = parts[-1] if parts else ""
    if "\x1b" in line:
        line = _ESCAPES.sub("", line)
    line = line.expandtabs(8)
    if any(ord(c) < 32 for c in line):
        line = "".join(c for c in line if ord(c) >= 32)
    return line


def session_log(record: str | Path) -> Path | None:
    """The script's output that `pitstop run` wrote beside a process's record, if it is there.

    `pitstop run` writes the output to `output.log` in the session's record
    directory, or to `NAME.output.log` beside a `--record NAME.jsonl` (see
    cli._run_tui); a rank's record is `rank1.jsonl` in the directory, or
    `NAME.rank1.jsonl` / `NAME.pid123.jsonl` beside the named file
    (record.record_path_for). `attach` and `view` find the log from the record
    the stream names (their Log screen said "No log here").
    """
    path = Path(record)
    stem = re.sub(r"\.jsonl(\.gz)?$", "", path.name)
    if re.fullmatch(r"rank\d+(-\d+)?", stem):  # a record directory's file
        candidate = path.parent / "output.log"
    else:
        candidate = path.with_name(re.sub(r"(\.rank\d+)?(\.pid\d+)?$", "", stem) + ".output.log")
    return candidate if candidate.is_file() else None


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
