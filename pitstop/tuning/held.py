"""Provides `held_signals`: a Ctrl-C (or a stop signal) that lands in a step which must finish is taken after it.

Python raises KeyboardInterrupt between any two bytecodes of the main thread.
Between `subprocess.Popen` starting a trial (in a session of its own, where
the terminal's Ctrl-C never reaches it) and the runner keeping its handle,
one left the trial running after `pitstop tune` had exited, never measured
and never killed; between SIGTERM and SIGKILL of a trial's group, a second
one skipped the SIGKILL. Inside `held_signals()` such a signal is noted and
raised again as the block ends, through the handler that was there before.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# The signals `pitstop tune` stops on: Ctrl-C, and what `command.STOP_SIGNALS` turns into a stop.
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


@contextmanager
def held_signals() -> Iterator[None]:
    """Run the block whole: HELD signals that come during it are raised again once it is done."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread gets Python's signal handlers: nothing to hold here
        return
    came: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    old = {}
    try:
        for sig in HELD:
            if signal.getsignal(sig) is not None:  # None: a handler set outside Python, which cannot be put back
                old[sig] = signal.signal(sig, note)
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(came):  # each once, in the order they came
            signal.raise_signal(sig)  # the handler that was there before decides, as if it came now


__all__ = ["HELD", "held_signals"]
