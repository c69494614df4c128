"""Provides Timeline: a recorded job indexed stream by stream, and the JobState as it stood at any moment.

Replay design (docs/tui.md): a 24-hour run at 10 ms steps records ~9 M lines,
so the timeline never holds the record's events. Each stream (one record file
a process) has its own index (pitstop/recorded/_index.py): checkpoints of its
folded RunState and where its series events lie, saved beside a record file
so that the next viewer restores it instead of reading the record again. A
stream's RunState depends on its own events only, so a seek moves each stream
to the cursor on its own and the JobState gathers them, in the order a replay
from the start would have met them (their first event's time). The ranks of
a large job hold a share of the series windows (pitstop/recorded/_windows.py),
the rank on screen its own (`focus`).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from pathlib import Path

from pitstop.analysis import JobState, RunState, StreamBatch
from pitstop.events import Event
from pitstop.recorded import index_file, job_limits
from pitstop.recorded._index import StreamIndex, event_time
from pitstop.recorded._streams import MemoryStream

__all__ = ["Timeline", "event_time", "timeline_of"]


class Timeline:
    """A recorded job: every stream's index, with a cursor-driven JobState."""

    def __init__(self, batches: Sequence[StreamBatch]) -> None:
        """A timeline over events already in memory (tests, a non-live in-memory source)."""
        events: dict[str, list[Event]] = {}
        closed: set[str] = set()
        for batch in batches:
            events.setdefault(batch.stream, []).extend(batch.events)
            if batch.closed:
                closed.add(batch.stream)
        indexes = []
        for name, evs in events.items():
            index = StreamIndex(MemoryStream(name, evs, closed=name in closed))
            index.index()
            indexes.append(index)
        self._build(indexes)

    @classmethod
    def of_files(cls, files: Sequence[Path]) -> Timeline:
        """A timeline over record files (one stream each): each restored from its saved index, or indexed.

        The ranks of a job of more than JOB_FULL_RANKS hold a share of the windows, its primary rank its own.
        """
        timeline = cls.__new__(cls)
        limits = job_limits(len(files))
        timeline._build([index_file(path, limits=limits) for path in files], limits)
        return timeline

    def _build(self, indexes: list[StreamIndex], limits: dict[str, int] | None = None) -> None:
        # The order a replay from the start meets the streams in: their first event's time.
        self._indexes = sorted((ix for ix in indexes if ix.total),
                               key=lambda ix: ix.first_t if ix.first_t is not None else 0.0)
        self._count = sum(ix.total for ix in indexes)
        self.profile_times = array("d", sorted(t for ix in indexes for t in ix.profile_times))
        firsts = [ix.first_t for ix in self._indexes if ix.first_t is not None]
        self.start = min(firsts) if firsts else 0.0
        self.end = max((ix.end for ix in self._indexes), default=0.0)
        # stream -> time of its last event, for streams the source saw close: a stream is
        # closed in the replay once the cursor passes its end (a rank without End is gone).
        self.closes = {ix.name: ix.end for ix in self._indexes if ix.stream.closed}
        self.job = JobState()
        self.cursor = self.end
        self._gather(self.end, {ix.name: ix.run for ix in self._indexes})
        self.limits = limits  # each stream's but the focused one's (None: every stream its own windows)
        self.focused: str | None = None
        primary = self.job.primary()
        if limits is not None and primary is not None:
            self.focus(next(name for name, run in self.job.runs.items() if run is primary))

    def __len__(self) -> int:
        return self._count

    def seek(self, cursor: float) -> JobState:
        """The JobState with every event at or before `cursor` (clamped to the record).

        Raises RecordError when the record cannot be read again (the job keeps what it was fed).
        """
        cursor = min(max(cursor, self.start), self.end)
        runs: dict[str, RunState] = {}
        for ix in self._indexes:
            run = ix.seek(cursor)
            if run is not None:
                runs[ix.name] = run
        self._gather(cursor, runs)
        self.cursor = cursor
        return self.job

    def focus(self, stream: str) -> JobState:
        """The JobState with `stream` holding its full windows (the rank on screen), the one before a job's share.

        A rank's own figures (its findings, step split, charts) read its whole windows:
        widening one reads them back from its record (~0.3 s for 20,000 steps).
        """
        if self.limits is None or stream == self.focused:
            return self.job
        runs: dict[str, RunState] = {}
        for ix in self._indexes:
            if ix.name in (stream, self.focused):
                run = ix.set_limits(None if ix.name == stream else self.limits, self.cursor)
            else:
                run = ix.run if ix.fed else None
            if run is not None:
                runs[ix.name] = run
        self.focused = stream
        self._gather(self.cursor, runs)
        return self.job

    def _gather(self, cursor: float, runs: dict[str, RunState]) -> None:
        """The job of `runs`: the same JobState fed on when every run is the one it had, else a new one."""
        job = self.job
        if list(runs) != list(job.runs) or any(run is not job.runs[name] for name, run in runs.items()):
            job = self.job = JobState()  # a run restored from a checkpoint (a seek back): a new state
        job.runs = runs
        job.closed = {stream for stream, t in self.closes.items() if t <= cursor and stream in runs}
        job.version += 1

    def next_profile(self, after: float) -> float | None:
        """Time of the first profiler window strictly after `after`."""
        i = bisect.bisect_right(self.profile_times, after)
        return self.profile_times[i] if i < len(self.profile_times) else None

    def previous_profile(self, before: float) -> float | None:
        """Time of the last profiler window strictly before `before`."""
        i = bisect.bisect_left(self.profile_times, before)
        return self.profile_times[i - 1] if i > 0 else None


def timeline_of(source: object) -> Timeline:
    """The timeline of a replay source: record files are indexed, other sources read into memory."""
    built = getattr(source, "timeline", None)
    if isinstance(built, Timeline):
        return built  # indexed before the screen opened (cmd_view)
    files = getattr(source, "files", None)
    if files is not None:
        return Timeline.of_files(files)
    return Timeline(list(source.batches()))  # type: ignore[attr-defined]
