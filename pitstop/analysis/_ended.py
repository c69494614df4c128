"""Provides how a rank ended, as far as pitstop saw it: running, finished, or gone and why, and what to read next."""

from __future__ import annotations

from collections.abc import Iterable

from pitstop.analysis._state import RunState
from pitstop.analysis._summary import END_REASONS, exit_code_text

# How a `front` note begins where pitstop got a stopping signal (Ctrl-C, a scheduler's SIGTERM) and passed it
# on: the ranks that then ended by a signal were stopped with the job, and no rank failed.
STOPPED_FROM_OUTSIDE = "stopped from outside"


def outside_stop(runs: Iterable[RunState]) -> str | None:
    """The front's note that the job was stopped from outside (`STOPPED_FROM_OUTSIDE`), from any of `runs`; None."""
    for run in runs:
        for note in run.notes:
            if note.source == "front" and note.message.startswith(STOPPED_FROM_OUTSIDE):
                return note.message
    return None


def stopped_with_the_job(reason: str) -> bool:
    """A rank ended by a signal (or without a recorded end), not by an exit of its own: once the job was
    stopped from outside, a consequence of the stop, not a failure (an `exit code 1` is still its own)."""
    return not reason.startswith("exit code")


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
