"""Provides the trace a SIGTERM leaves: every thread's stack, written beside the record as the signal arrives.

A rank that torchrun stops with SIGTERM (a peer failed, the job was
cancelled) dies at once where SIGTERM has its default action: no atexit, no
`End` event, and its record read as "killed, e.g. SIGKILL or OOM killer".
A Python-level handler would see it, but it runs only when the main thread
next runs bytecode: a rank blocked in a gloo all-reduce (C++) would ignore
the SIGTERM until the collective's 30-minute timeout. faulthandler's handler
is C: it writes the stacks of every thread to a file we hold open, then
chains to the default action, so the process dies exactly as it would have,
and the file (`RECORD.sigterm`) says which signal ended it and where each
thread was. Nothing is installed where the script (or a framework) already
handles SIGTERM; a handler it installs later replaces ours. The empty file
of a run that ended otherwise is removed at stop.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

SUFFIX = ".sigterm"


def trace_path(record: Path) -> Path:
    """`rank0.jsonl.gz.sigterm` beside `rank0.jsonl.gz` (as its index, `rank0.jsonl.gz.index`)."""
    return record.with_name(record.name + SUFFIX)


def read_trace(record: Path) -> str | None:
    """The stacks written when SIGTERM ended the process of `record`; None when none was (no file, or empty)."""
    try:
        text = trace_path(record).read_text(errors="replace")
    except OSError:
        return None
    return text if text.strip() else None


class SignalTrace:
    """Writes every thread's stack to `RECORD.sigterm` when SIGTERM arrives, then lets it end the process."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._fork_hooked = False

    @property
    def installed(self) -> bool:
        return self._file is not None

    def install(self, record: Path, warn: Callable[[str], None]) -> None:
        """Only from the main thread, only where SIGTERM has its default action."""
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # the script's own handler decides (its exit then writes the End)
            path = trace_path(record)
            self._file = open(path, "w")  # noqa: SIM115 - held open for the C handler until stop
            self._path = path
            faulthandler.register(signal.SIGTERM, file=self._file, all_threads=True, chain=True)
            if not self._fork_hooked:  # cannot be undone: inert once uninstalled (no file)
                self._fork_hooked = True
                os.register_at_fork(after_in_child=self.after_fork_child)
        except (OSError, ValueError, RuntimeError, AttributeError) as err:
            self._close()
            warn(f"a SIGTERM that ends this process will not be recorded: {err}")

    def _ours(self) -> bool:
        # Python's table still says SIG_DFL: nobody called signal.signal since, so the C handler is faulthandler's.
        # Unregistering after the script installed its own would put SIG_DFL back under the script's handler.
        return self._file is not None and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def after_fork_child(self) -> None:
        """A forked child (a DataLoader worker) must not write its parent's trace when its SIGTERM comes."""
        if self._ours():
            try:
                faulthandler.unregister(signal.SIGTERM)
            except (ValueError, RuntimeError):
                pass
        self._file = None  # the parent's: never closed or removed here
        self._path = None

    def uninstall(self) -> None:
        """At stop: the handler given back (where still ours) and the file removed while empty.

        Where the script installed its own handler since, signal.signal replaced ours in the OS and
        nothing can call it again (a later SIG_DFL is the OS default, not faulthandler's): the file
        can go, and faulthandler is left registered, as unregistering would undo the script's handler.
        """
        if self._ours():
            try:
                faulthandler.unregister(signal.SIGTERM)
            except (ValueError, RuntimeError):
                return  # still registered: the file stays open for it
        self._close()

    def _close(self) -> None:
        f, path = self._file, self._path
        self._file = self._path = None
        if f is None:
            return
        try:
            f.close()
            if path is not None and os.path.getsize(path) == 0:
                os.unlink(path)
        except OSError:
            pass


__all__ = ["SUFFIX", "SignalTrace", "read_trace", "trace_path"]
