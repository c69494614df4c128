"""Provides recorded runs as RunStates: every record file a path names, read through the one reader, grouped by job.

Shared by every front that reads records (the headless summary, `pitstop view`,
`pitstop compare`) and by a run's end summary; it sits below them so that no
front imports another (issue 13).
"""

from __future__ import annotations

from pathlib import Path

from pitstop.analysis import RunState
from pitstop.profiling.record import ReadResult, iter_record, record_files


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


def sessions(runs: list[RunState]) -> list[tuple[str | None, list[RunState]]]:
    """Runs grouped by job (`hello.session`), earliest first; a run with no Hello is a group of its own."""
    groups: dict[str, list[RunState]] = {}
    for i, run in enumerate(runs):
        key = run.hello.session if run.hello is not None else f"\0{i}"
        groups.setdefault(key, []).append(run)

    def started(item: tuple[str, list[RunState]]) -> float:
        return min((r.hello.started for r in item[1] if r.hello is not None), default=float("inf"))

    return [(None if key.startswith("\0") else key, members) for key, members in sorted(groups.items(), key=started)]


__all__ = ["load_runs", "sessions"]
