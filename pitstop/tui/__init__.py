"""Provides the Textual viewer: `run_viewer(source)` runs it and says how to come back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pitstop.profiling.sources import EventSource
    from pitstop.tui.tunelaunch import TuneRequest


def run_viewer(
    source: EventSource,
    *,
    log_path: Path | None = None,
    detach_hint: str | None = None,
    clock: Callable[[], float] = time.time,
    tune: Callable[[TuneRequest], int] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run the TUI on `source` until the user quits or detaches; 0 on a normal exit.

    The viewer is a separate process from the training run, so quitting never
    stops training; after the screen is restored this prints how to come back
    (`detach_hint`) or how the run ended. With `tune`, `t` offers to tune the
    script: the app exits with "tune" and `tune(request)` runs (the Trials
    view); its exit code is returned. `stop` set (pitstop got a SIGTERM, passed on
    to the training) closes the viewer, the terminal restored, with no goodbye.
    """
    from pitstop.tui.app import PitstopApp

    app = PitstopApp(source, log_path=log_path, detach_hint=detach_hint, clock=clock, can_tune=tune is not None,
                     stop=stop)
    try:
        app.run()
    finally:
        source.close()
    message = app.goodbye()
    if message:
        print(message)
    if app.return_value == "tune" and tune is not None and app.tune_request is not None:
        return tune(app.tune_request)
    return app.return_code or 0


__all__ = ["run_viewer"]
