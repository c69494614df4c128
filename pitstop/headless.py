"""Provides the headless front: status lines while training runs, a summary at the end.

Used by `pitstop run --headless` (and whenever stdout is not a terminal) and by
`pitstop view RECORD --summary`. It reads the same stream, through the same
`analysis` functions, as the TUI. The script's own output is never touched:
pitstop writes only to stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from pitstop.analysis import JobState, RunState, StreamBatch, findings, format_summary, status_line, summarize
from pitstop.errors import PitstopError
from pitstop.events import Event
from pitstop.profiling.record import ReadResult, iter_record, record_files
from pitstop.profiling.sources import SocketSource

STATUS_INTERVAL_S = float(os.environ.get("PITSTOP_STATUS_INTERVAL", "5"))


def _label(run: RunState) -> str:
    hello = run.hello
    if hello is None:
        return "?"
    rank = f" rank {hello.rank}" if hello.rank is not None else ""
    return f"{hello.script or 'run'}{rank} (pid {hello.pid})"


def summary_text(runs: list[RunState], notes: list[str] | None = None) -> str:
    """The end-of-run summary for one or several processes."""
    blocks = []
    for run in runs:
        summary = summarize(run)
        title = f"pitstop summary: {_label(run)}"
        blocks.append(format_summary(summary, findings(run), title=title))
    if notes:
        blocks.append("\n".join(notes))
    return "\n\n".join(blocks)


def load_runs(target: Path) -> tuple[list[RunState], list[str]]:
    """RunStates of every record file `target` names, and notes about torn files."""
    runs = []
    notes = []
    for path in record_files(target):
        result = ReadResult()
        run = RunState()
        for event in iter_record(path, result):
            run.add(event)
        if result.torn:
            notes.append(f"note: {path} ends in a cut line (the run was killed); read up to its last whole line")
        runs.append(run)
    runs.sort(key=lambda r: (r.hello.rank if r.hello and r.hello.rank is not None else -1, r.hello.pid if r.hello else 0))
    return runs, notes


class LiveStatus:
    """Follows a session's sockets on a thread and prints a status line every few seconds."""

    def __init__(self, session: str, label: str, proc: subprocess.Popen[bytes], out: TextIO = sys.stderr) -> None:
        self.job = JobState()
        self._lock = threading.Lock()
        self._out = out
        self._proc = proc
        self._source = SocketSource(label, session=session, until=lambda: proc.poll() is not None)
        self._thread = threading.Thread(target=self._follow, name="pitstop-headless", daemon=True)
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def _follow(self) -> None:
        try:
            for batch in self._source.batches():
                with self._lock:
                    self.job.add(batch)
        except PitstopError as err:
            self.error = str(err)
        except Exception as err:  # the viewer dies, training goes on
            self.error = f"{type(err).__name__}: {err}"

    def line(self) -> str | None:
        with self._lock:
            ranks = self.job.ranks()
            if not ranks:
                return None
            if len(ranks) == 1:
                return status_line(ranks[0][1])
            return " || ".join(f"r{i} {status_line(run)}" for i, (_, run) in enumerate(ranks))

    def wait(self) -> int:
        """Wait for the training command, printing status lines; returns its exit code."""
        next_t = time.monotonic() + STATUS_INTERVAL_S
        while True:
            try:
                code = self._proc.wait(timeout=max(0.05, next_t - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:
                # From a terminal the child got the same SIGINT; a SIGINT sent to
                # pitstop alone is passed on if the child is still running 1 s later.
                try:
                    self._proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    self._proc.send_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    pass
                continue
            next_t += STATUS_INTERVAL_S
            line = self.line()
            if line:
                print(f"pitstop | {line}", file=self._out, flush=True)
        self._source.close()
        return code


def exit_code_of(returncode: int) -> int:
    """A shell's view of a child's exit: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def feed(run: RunState, events: list[Event]) -> RunState:
    for event in events:
        run.add(event)
    return run


__all__ = ["LiveStatus", "StreamBatch", "exit_code_of", "load_runs", "summary_text"]
