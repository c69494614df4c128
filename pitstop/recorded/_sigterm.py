"""Provides the end a SIGTERM trace tells: a process whose record holds no `End`, but whose `RECORD.sigterm` says
SIGTERM ended it (`profiling/_lastsignal.py`: faulthandler wrote its stacks, then the signal's default action ran).

Read by the recorded runs (`load_runs`) and by the live viewer as a stream closes: the live TUI's header read
"stream ended without an End event" for a rank torchrun had stopped with SIGTERM, while the summary printed after
it said "terminated by SIGTERM" from the same file.
"""

from __future__ import annotations

import signal
from pathlib import Path

from pitstop.analysis import JobState, RunState
from pitstop.events import End
from pitstop.profiling._lastsignal import read_trace, trace_path


def sigterm_end(run: RunState, path: Path | None = None) -> End | None:
    """The `End` (reason "terminated", exit code 143) the SIGTERM trace beside `path` (else the run's own record)
    says, where the run recorded no end of its own; None otherwise."""
    if run.end is not None:
        return None
    if path is None:
        hello = run.hello
        if hello is None or not hello.record:
            return None
        path = Path(hello.record)
    if read_trace(path) is None:
        return None
    try:
        at = trace_path(path).stat().st_mtime
    except OSError:
        return None
    return End(t=at, steps=run.total_steps, dropped=0, reason="terminated", exit_code=128 + signal.SIGTERM)


def read_sigterm_ends(job: JobState) -> list[str]:
    """Give each closed stream of `job` without an end the one its SIGTERM trace tells; the notes saying so."""
    notes = []
    for stream in sorted(job.closed):
        run = job.runs.get(stream)
        end = sigterm_end(run) if run is not None else None
        if run is None or end is None:
            continue
        run.add(end)
        job.version += 1
        assert run.hello is not None  # (sigterm_end found its record through it)
        notes.append(f"pid {run.hello.pid} was ended by SIGTERM; every thread's stack at that moment is in "
                     f"{trace_path(Path(run.hello.record))}")
    return notes


__all__ = ["read_sigterm_ends", "sigterm_end"]
