"""Provides how a rank ended, as far as pitstop saw it: running, finished, or gone and why, and what to read next."""

from __future__ import annotations

from collections.abc import Iterable

from pitstop.analysis._state import RunState
from pitstop.analysis._summary import END_REASONS, exit_code_text
from pitstop.events import Note

# How a `front` note begins where pitstop got a stopping signal (Ctrl-C, a scheduler's SIGTERM) and passed it
# on: the ranks that then ended by a signal were stopped with the job, and no rank failed.
STOPPED_FROM_OUTSIDE = "stopped from outside"


# A rank's last reading may come this long before the stop reached it (the sampler reads 1-2 times a second).
STOP_GRACE_S = 2.0


def outside_stop(runs: Iterable[RunState]) -> Note | None:
    """The front's note that the job was stopped from outside (`STOPPED_FROM_OUTSIDE`, dated when the
    signal came), from any of `runs`; None."""
    for run in runs:
        for note in run.notes:
            if note.source == "front" and note.message.startswith(STOPPED_FROM_OUTSIDE):
                return note
    return None


def stopped_with_the_job(run: RunState, reason: str, stop: Note) -> bool:
    """A rank that ended by a signal (or without a recorded end) once the job was stopped from outside: a
    consequence of the stop, not a failure. Not one that exited with an error of its own (`exit code 1`),
    nor one that ended before the stop came (an OOM kill that left the job hanging, then stopped)."""
    if reason.startswith("exit code"):
        return False
    if run.end is not None:
        ended = run.end.t
    else:  # (not `last_t`: the front's note, read back from the record, is an event of the run too)
        times = [run.samples[-1].t] if run.samples else []
        if run.last_step_t is not None:
            times.append(run.last_step_t)
        ended = max(times, default=None)
    return ended is None or ended >= stop.t - STOP_GRACE_S


def rank_status(run: RunState, closed: bool, exit_code: int | None = None) -> tuple[str, str | None]:
    """("running" | "finished" | "gone", why gone). A stream is only gone once it closed.
    `exit_code`: how the process ended where the front that started it saw it (no End in its record)."""
    end = run.end
    if end is None:
        if closed and exit_code is not None:
            return "gone", f"killed before it could record its end ({exit_code_text(exit_code)})"
        if closed:
            # Nothing says which signal: not a SIGTERM where SIGTERM had its default action (the agent leaves
            # a trace of that, `_lastsignal`), not an exit (atexit writes the End). The OOM killer is named
            # only with its evidence, as the reader of `dmesg` would.
            return "gone", ("stream ended without an End event: the process died without running its exit "
                            "handlers (SIGKILL, a signal its own handler did not survive, or a crash in native code)")
        return "running", None
    # "trial-complete" is the tuner ending a trial on purpose, with exit code 0.
    if end.reason == "terminated" and run.hello is not None and run.hello.parent_pid is not None:
        # A child that trained (hogwild), ended by SIGTERM from its parent: `with Pool()` ends
        # its workers that way once their work is done. Called "gone" (high), it read as a crash.
        return "finished", None
    if end.reason == "signal" and end.exit_code is not None:  # its launcher recorded it (`runflow.record_end`)
        return "gone", f"killed before it could record its end ({exit_code_text(end.exit_code)})"
    if end.reason not in ("exit", "trial-complete"):
        said = END_REASONS.get(end.reason, f"ended by {end.reason}")
        code = ""
        if end.exit_code is not None:  # "terminated by SIGTERM (exit code 143)": the signal said once
            code = f" (exit code {end.exit_code})" if "SIG" in said else f" ({exit_code_text(end.exit_code)})"
        return "gone", f"{said}{code}"
    if end.exit_code not in (None, 0):
        return "gone", f"exit code {end.exit_code}"
    return "finished", None


def gone_fix(reason: str) -> str:
    """What to read next, by what pitstop saw of the rank's end: a SIGTERM was sent to it (by whom), a SIGKILL
    has several senders (the OOM killer among them, with `dmesg` to tell), and without a signal its output."""
    if "SIGTERM" in reason:
        return ("# SIGTERM is sent, not raised: torchrun sends it to every rank once one rank fails, a scheduler\n"
                "# (Slurm, Kubernetes) when the job is cancelled or preempted; find the first rank that failed\n"
                "# (its own exit code in torchrun's output) or the scheduler's reason")
    if "(SIGKILL)" in reason:
        return ("# SIGKILL comes from a user, a launcher after its grace period, or the kernel's OOM killer;\n"
                "# `dmesg | grep -i 'killed process'` or the cgroup's memory.events (oom_kill) tell which")
    return ("# read the dead rank's own output: torchrun prints each failed rank's exit code or signal\n"
            "# (a traceback there is a crash in its code; none, a signal from outside)")


__all__ = ["STOPPED_FROM_OUTSIDE", "gone_fix", "outside_stop", "rank_status", "stopped_with_the_job"]
