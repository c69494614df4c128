"""Provides recorded runs as RunStates: every record file a path names, read through its index, grouped by job.

Shared by every front that reads records (the headless summary, `pitstop view`,
`pitstop compare`) and by a run's end summary; it sits below them so that no
front imports another. A record file is folded through its index
(`index_file`): the index saved beside it is restored and only what was
appended since is read, and the index is saved again when it grew.
"""

from __future__ import annotations

from pathlib import Path

from pitstop.analysis import RunState
from pitstop.profiling.record import record_files
from pitstop.recorded import _sidecar
from pitstop.recorded._index import StreamIndex
from pitstop.recorded._streams import FileStream


def index_file(path: Path) -> StreamIndex:
    """The index of one record file, folded to its end: restored from the saved index where it can be trusted.

    The index is saved again (atomically) when this pass read lines it did not cover:
    a record indexed for the first time, or one that grew since (a live run, the
    lines a run killed with SIGKILL wrote after the index it left).
    """
    stream = FileStream(path)
    index = StreamIndex(stream)
    loaded = _sidecar.load(index, path)
    covered = index.checkpoints[-1].fed
    stream.cover(index.checkpoints[-1].pos)
    index.index()
    if not loaded or index.total > covered:
        _sidecar.save(index, path, stream.stop)
    return index


def load_runs(target: Path) -> tuple[list[RunState], list[str]]:
    """RunStates of every record file `target` names, and notes about torn files."""
    runs = []
    notes = []
    for path in record_files(target):
        index = index_file(path)
        run = index.run
        assert isinstance(index.stream, FileStream)
        if index.stream.read.torn:
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


__all__ = ["index_file", "load_runs", "sessions"]
