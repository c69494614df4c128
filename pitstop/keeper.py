"""Provides the index keeper: a process beside a run that keeps each record's index current while it records.

    python -m pitstop.keeper --pid PID [--every SECONDS] RECORD

A day-long record is ~9 M lines; folding them took a viewer 186 s before its
first screen. `pitstop run` starts this keeper (its own session, niced, no
output) beside the training: every `--every` seconds it folds the lines each
record file gained since its last pass and saves the index beside the file
(`NAME.jsonl.index`, atomically; see pitstop/recorded/_sidecar.py), so a
viewer, `view --summary` or `attach` restores the last checkpoint and folds
at most one interval of lines. It runs outside the training process: the
training pays nothing for it (no GIL, no import), and it outlives a viewer
that quit. It ends with the training (`--pid` gone): a last pass, then exit.
A keeper killed or never started costs only time: the next reader indexes
from the last index that still matches the record. A pass takes at most a
tenth of the keeper's time: with many long records it passes less often.
`pitstop run` starts it only once the training has run one interval (`Later`):
its first pass was due then anyway, and a run that ends sooner is indexed by
its end summary, so most runs never pay for a keeper at all.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Seconds between passes: a viewer opening the record folds at most this much of it
# (30 s of 10 ms steps: 3,000 lines, ~0.05 s).
KEEP_EVERY_S = float(os.environ.get("PITSTOP_INDEX_EVERY", "30"))
# The keeper yields the cores to the training (and to everything else).
NICENESS = 10
# A pass may take at most this share of the keeper's time: a job of many long records
# waits longer between passes rather than keep a core busy.
MAX_BUSY_SHARE = 0.1
POLL_S = 1.0  # how often it looks whether the training still runs


class Keeper:
    """The indexes of one run's record files, folded on as the files grow, saved after each pass that grew."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.indexes: dict[Path, Any] = {}  # path -> StreamIndex (imported at the first pass)

    def files(self) -> list[Path]:
        from pitstop.errors import PitstopError
        from pitstop.recorded import job_files

        try:
            files, children = job_files(self.target)
        except PitstopError:
            return []  # not written yet
        return files + children

    def step(self) -> int:
        """One pass over every record file; returns the lines (events) its indexes gained."""
        from pitstop.analysis import SERIES
        from pitstop.errors import PitstopError
        from pitstop.recorded import index_file

        # What the keeper saves (checkpoints of the totals, where the series lie) needs none of the
        # series a RunState holds: with them the first pass over 8 one-hour ranks took 334 MiB.
        no_series = {kind: 0 for kind in SERIES}
        folded = 0
        for path in self.files():
            old = self.indexes.get(path)
            before = old.total if old is not None else 0
            try:
                self.indexes[path] = index = index_file(path, old, limits=no_series)
            except (PitstopError, OSError):
                self.indexes.pop(path, None)  # unreadable now (moved, foreign): the next pass starts it afresh
                continue
            folded += index.total - before
        return folded


def keep(target: Path, pid: int, every: float = KEEP_EVERY_S, first: float | None = None) -> int:
    """Keep `target`'s indexes until `pid` ends; a last pass then. SIGTERM ends it at once.

    The first pass comes `first` seconds after the start (default: `every`)."""
    import psutil

    keeper = Keeper(target)
    due = time.monotonic() + (every if first is None else first)
    while psutil.pid_exists(pid):
        time.sleep(POLL_S if every >= POLL_S else every)
        if time.monotonic() >= due:
            started = time.monotonic()
            keeper.step()
            took = time.monotonic() - started
            due = time.monotonic() + max(every, took / MAX_BUSY_SHARE)
    keeper.step()
    return 0


def start(record: str, pid: int, first: float | None = None) -> subprocess.Popen[bytes] | None:
    """Start a keeper for `record` beside training `pid`, its first pass `first` seconds on; None if it cannot.

    Its own session: a viewer that quits, or a Ctrl-C at the terminal, leaves it with the training.
    """
    extra = [] if first is None else ["--first", str(first)]
    try:
        return subprocess.Popen([sys.executable, "-m", "pitstop.keeper", "--pid", str(pid), *extra, record],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        return None


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """End a keeper now (the caller indexes the record itself next)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Later:
    """A keeper for `record` beside training `pid`, started once the training has run `every` seconds.

    Its first pass was due then anyway, so the index is kept as before. A run that ends
    sooner (every run of a test suite, most first tries) never starts one: a keeper's start
    and exit cost ~0.1 s of CPU and a process beside each `pitstop run` of a 5-step torch
    script, for a pass whose lines the end summary indexes itself.
    """

    def __init__(self, record: str, pid: int, every: float = KEEP_EVERY_S) -> None:
        self.record = record
        self.pid = pid
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(every, self.now)
        self._timer.name = "pitstop-keeper-later"
        self._timer.daemon = True
        self._timer.start()

    def now(self) -> None:
        """Start the keeper now (its first pass at once), unless it started or was stopped: the training
        goes on without this front (a viewer that quit), or it has run one interval."""
        with self._lock:
            if self._done:
                return
            self._done = True
            self._timer.cancel()
            self.proc = start(self.record, self.pid, first=0.0)

    def stop(self) -> None:
        """No keeper from now on; end the one that started (the caller indexes the record itself next)."""
        with self._lock:
            self._done = True
            self._timer.cancel()
        stop(self.proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pitstop.keeper", description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True, help="the training process: the keeper ends with it")
    parser.add_argument("--every", type=float, default=KEEP_EVERY_S, help="seconds between passes")
    parser.add_argument("--first", type=float, default=None, help="seconds to the first pass (default: --every)")
    parser.add_argument("record", help="the run's record: a .jsonl file or a session directory")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        os.nice(NICENESS)
    except OSError:
        pass
    first = None if args.first is None else max(0.0, args.first)
    return keep(Path(args.record), args.pid, max(0.1, args.every), first)


if __name__ == "__main__":
    raise SystemExit(main())
