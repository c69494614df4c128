"""Provides the streams a record index reads: record files by byte offset, or events in memory.

A position is where an event's line starts (a byte offset in a file, an index
in memory); `events_from` and `events_at` come back to positions noted in the
first pass (`scan`), so a Timeline keeps positions instead of events.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

from pitstop.events import Event
from pitstop.profiling.record import ReadResult, RecordReader, scan_record


class ReplayStream(Protocol):
    name: str  # the stream id a JobState keys its RunState by
    closed: bool  # the stream was seen to end (every record file does)

    def scan(self, start: int = 0) -> Iterator[tuple[int, int, Event]]:
        """(start, end, event) of every event from position `start` (0: the beginning), checked: the indexing pass."""
        ...

    def events_from(self, start: int, kind: str | None = None, passing: int = 0) -> Iterator[tuple[int, int, Event]]:
        """(start, end, event) from position `start` on; only events of `kind` when given, less the first `passing`."""
        ...

    def events_at(self, positions: Iterable[int]) -> Iterator[Event]:
        """The events starting at `positions`, in that order."""
        ...

    def cached(self) -> AbstractContextManager[None]:
        """A stretch of reads that may come back to the same lines (a restore): read them once."""
        ...


class FileStream:
    """One record file: checked once by `scan`, then read again by offset."""

    closed = True

    def __init__(self, path: Path) -> None:
        self.name = str(path)  # as RecordSource names its streams
        self.path = path
        self.read = ReadResult()
        self._reader = RecordReader(path, stop=0)

    def scan(self, start: int = 0) -> Iterator[tuple[int, int, Event]]:
        self._reader.stop = start  # what a saved index covered; the lines after it are checked here
        for start, end, event in scan_record(self.path, self.read, start):
            self._reader.stop = end  # a torn tail (or lines appended later) stays out of every re-read
            yield start, end, event

    @property
    def stop(self) -> int:
        """The end of the last whole line scanned: what an index of this file covers."""
        return self._reader.stop

    def cover(self, stop: int) -> None:
        """Read again up to `stop`: lines a saved index checked, before `scan` reads on from there."""
        self._reader.stop = stop

    def events_from(self, start: int, kind: str | None = None, passing: int = 0) -> Iterator[tuple[int, int, Event]]:
        return self._reader.events_from(start, kind, passing)

    def events_at(self, positions: Iterable[int]) -> Iterator[Event]:
        return self._reader.events_at(positions)

    def cached(self) -> AbstractContextManager[None]:
        return self._reader.cached()


class MemoryStream:
    """Events a source handed in memory (tests, a non-record replay source)."""

    def __init__(self, name: str, events: Sequence[Event], closed: bool) -> None:
        self.name = name
        self.closed = closed
        self._events = events

    def scan(self, start: int = 0) -> Iterator[tuple[int, int, Event]]:
        return self.events_from(start)

    def events_from(self, start: int, kind: str | None = None, passing: int = 0) -> Iterator[tuple[int, int, Event]]:
        for i in range(start, len(self._events)):
            event = self._events[i]
            if kind is None or event.kind == kind:
                if passing:
                    passing -= 1
                    continue
                yield i, i + 1, event

    def events_at(self, positions: Iterable[int]) -> Iterator[Event]:
        return (self._events[i] for i in positions)

    def cached(self) -> AbstractContextManager[None]:
        return nullcontext()  # the events are in memory already
