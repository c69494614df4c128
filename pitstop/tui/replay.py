"""Provides Timeline: a recorded job indexed in one pass, and the JobState as it stood at any moment.

Replay design (docs/tui.md, issue 13): a 24-hour run at 10 ms steps records
~8.6 M lines, so the timeline never holds the record's events. One pass reads
the record (its files merged in time order) and feeds a JobState to the end,
keeping as it goes:
- every CHECKPOINT_EVENTS events, a checkpoint: each RunState's totals
  (`RunState.without_series`, a few KB) and where each file's reading stands;
- where each process's series events lie (byte offsets of every sample, loss,
  profiler window and note, and of every STEP_STRIDE-th step), so that the
  recent history a checkpoint leaves out is read back from the file.
A seek forward feeds the events in between. A seek back, or forward past more
than a checkpoint's worth of events, restores the last checkpoint at or
before the cursor, reads its series back and feeds on from there: a seek
decodes about one series window (less what the events fed after the
checkpoint push out) and at most 2 x CHECKPOINT_EVENTS events, whatever the
record's length. Memory is the current JobState (bounded by the analysis
windows) plus ~8 bytes per sample, loss, profile and note line.
"""

from __future__ import annotations

import bisect
import heapq
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path

from pitstop.analysis import SERIES, JobState, RunState, StreamBatch
from pitstop.events import Event, Hello, ProfileWindow
from pitstop.tui._replaystreams import FileStream, MemoryStream, ReplayStream

# A checkpoint every 5,000 events: a seek feeds at most twice that, ~0.1 s at
# ~10 us an event decoded and added (a window of 20,000 steps read back is the
# larger part, ~0.2 s), and a 24-hour record at 10 ms steps gets ~1,800
# checkpoints of ~6 KB a process.
CHECKPOINT_EVENTS = 5_000
# Steps are most of a record (one line each): their offsets are kept for one
# step in 256 (~270 KB for 8.6 M steps) and a window is read from the one before.
STEP_STRIDE = 256
_SERIES_INDEX = {kind: k for k, kind in enumerate(SERIES)}
BATCH_EVENTS = 2_000  # events fed to the JobState at once while reading (a live source's batches)


def event_time(event: Event) -> float | None:
    """When an event happened: its `t`, or `started` for Hello."""
    if isinstance(event, Hello):
        return float(event.started)
    t = getattr(event, "t", None)
    return float(t) if isinstance(t, (int, float)) else None


@dataclass(frozen=True)
class _Checkpoint:
    t: float  # time of the last event fed (-inf before the first)
    fed: int  # events fed
    runs: dict[str, RunState]  # `without_series` copies, in the job's order
    pos: tuple[int, ...]  # per stream: where its next line starts
    last_t: tuple[float | None, ...]  # per stream: the time of its last event fed
    counts: tuple[tuple[int, ...], ...]  # per stream: series events fed so far, by SERIES kind


class Timeline:
    """A recorded job: every stream's events in time order, with a cursor-driven JobState."""

    def __init__(self, batches: Sequence[StreamBatch]) -> None:
        """A timeline over events already in memory (tests, a non-live in-memory source)."""
        events: dict[str, list[Event]] = {}
        closed: set[str] = set()
        for batch in batches:
            events.setdefault(batch.stream, []).extend(batch.events)
            if batch.closed:
                closed.add(batch.stream)
        self._build([MemoryStream(name, evs, closed=name in closed) for name, evs in events.items()])

    @classmethod
    def of_files(cls, files: Sequence[Path]) -> Timeline:
        """A timeline over record files (one stream each), read once to index them."""
        timeline = cls.__new__(cls)
        timeline._build([FileStream(path) for path in files])
        return timeline

    def _build(self, streams: list[ReplayStream]) -> None:
        self._streams = streams
        self._names = [s.name for s in streams]
        self._strides = tuple(STEP_STRIDE if kind == "step" else 1 for kind in SERIES)
        self._offsets = [[array("q") for _ in SERIES] for _ in streams]
        self.profile_times = array("d")
        self.job = JobState()
        # Where the reading of each stream stands (see _Checkpoint).
        self._pos = [0] * len(streams)
        self._stream_t: list[float | None] = [None] * len(streams)
        self._counts = [[0] * len(SERIES) for _ in streams]
        self._fed = 0
        self._last_t = -math.inf
        self._checkpoints: list[_Checkpoint] = []
        self._checkpoint()
        self._firsts: list[float | None] = [None] * len(streams)
        self._feed(self._advance(math.inf, index=True), checkpoints=True)
        self._ck_times = [ck.t for ck in self._checkpoints]
        self._count = self._fed
        firsts = [t for t in self._firsts if t is not None]
        self.start = min(firsts) if firsts else 0.0
        self.end = self._last_t if self._fed else 0.0
        # stream -> time of its last event, for streams the source saw close: a stream is
        # closed in the replay once the cursor passes its end (a rank without End is gone).
        self.closes = {s.name: (t if t is not None else 0.0)
                       for s, t in zip(streams, self._stream_t) if s.closed}
        self.cursor = self.end

    def __len__(self) -> int:
        return self._count

    def seek(self, cursor: float) -> JobState:
        """The JobState with every event at or before `cursor` (clamped to the record).

        Raises RecordError when the record cannot be read again (the job keeps what it was fed).
        """
        cursor = min(max(cursor, self.start), self.end)
        ck = self._checkpoints[bisect.bisect_right(self._ck_times, cursor) - 1]
        try:
            if self._last_t > cursor or ck.fed > self._fed + CHECKPOINT_EVENTS:
                self._restore(ck, cursor)
            else:
                self._feed(self._advance(cursor, index=False))
        except BaseException:
            # The record could not be read again (moved, changed): the reading stands
            # nowhere known, so the next seek starts from a checkpoint.
            self._last_t = math.inf
            raise
        for stream, t in self.closes.items():
            if t <= cursor and stream in self.job.runs:
                self.job.close(stream)
        self.cursor = cursor
        return self.job

    def next_profile(self, after: float) -> float | None:
        """Time of the first profiler window strictly after `after`."""
        i = bisect.bisect_right(self.profile_times, after)
        return self.profile_times[i] if i < len(self.profile_times) else None

    def previous_profile(self, before: float) -> float | None:
        """Time of the last profiler window strictly before `before`."""
        i = bisect.bisect_left(self.profile_times, before)
        return self.profile_times[i - 1] if i > 0 else None

    # -- reading ----------------------------------------------------------
    def _events(self, i: int, index: bool) -> Iterator[tuple[float, int, int, int, Event]]:
        """(time, stream, start, end, event) of stream i from where its reading stands.

        The time never goes back within a stream (an event stamped before the one
        written ahead of it keeps its place), so the streams merge in file order.
        """
        last = self._stream_t[i]
        stream = self._streams[i]
        for start, end, event in (stream.scan() if index else stream.events_from(self._pos[i])):
            t = event_time(event)
            if t is None or (last is not None and t < last):
                t = last if last is not None else 0.0
            last = t
            yield t, i, start, end, event

    def _advance(self, cursor: float, index: bool) -> Iterator[tuple[int, Event]]:
        """(stream, event) of every event up to `cursor` in time order, moving the reading on.

        `index`: the first pass, which also notes where the series events lie.
        """
        readers = [self._events(i, index) for i in range(len(self._streams))]
        merged = readers[0] if len(readers) == 1 else heapq.merge(*readers, key=itemgetter(0))
        pos, stream_t = self._pos, self._stream_t
        try:
            for t, i, start, end, event in merged:
                if t > cursor:
                    return
                pos[i], stream_t[i] = end, t
                self._fed += 1
                self._last_t = t
                if index:
                    self._index(i, start, event, t)
                yield i, event
        finally:
            for reader in readers:  # closes the files now, not when collected
                reader.close()

    def _feed(self, events: Iterable[tuple[int, Event]], checkpoints: bool = False) -> None:
        """Feed the job, consecutive events of one stream in one batch (as a live source gives them)."""
        batch: list[Event] = []
        current = -1
        for i, event in events:
            if i != current or len(batch) >= BATCH_EVENTS:
                self._flush(current, batch)
                batch, current = [], i
            batch.append(event)
            if checkpoints and self._fed % CHECKPOINT_EVENTS == 0:
                self._flush(current, batch)
                batch = []
                self._checkpoint()
        self._flush(current, batch)

    def _flush(self, i: int, batch: list[Event]) -> None:
        if batch:
            self.job.add(StreamBatch(self._names[i], batch))

    def _index(self, i: int, start: int, event: Event, t: float) -> None:
        """Note where a series event lies (and when the stream began)."""
        if self._firsts[i] is None:
            self._firsts[i] = t
        k = _SERIES_INDEX.get(event.kind)
        if k is None:
            return
        counts = self._counts[i]
        if counts[k] % self._strides[k] == 0:
            self._offsets[i][k].append(start)
        counts[k] += 1
        if isinstance(event, ProfileWindow):
            self.profile_times.append(t)

    def _checkpoint(self) -> None:
        self._checkpoints.append(_Checkpoint(
            self._last_t, self._fed, {name: run.without_series() for name, run in self.job.runs.items()},
            tuple(self._pos), tuple(self._stream_t), tuple(tuple(c) for c in self._counts)))

    # -- seeking back -----------------------------------------------------
    def _restore(self, ck: _Checkpoint, cursor: float) -> None:
        """Make the job what it was at checkpoint `ck`, then feed it on to `cursor`.

        The events up to the cursor are read first: series entries they would push
        out of a window are then not read back (a seek decodes about one window
        of steps, not a window plus the events fed after it).
        """
        self._pos, self._stream_t = list(ck.pos), list(ck.last_t)
        self._fed, self._last_t = ck.fed, ck.t
        ahead = list(self._advance(cursor, index=False))  # < CHECKPOINT_EVENTS: the next one is past the cursor
        pushed = [[0] * len(SERIES) for _ in self._streams]
        for i, event in ahead:
            k = _SERIES_INDEX.get(event.kind)
            if k is not None:
                pushed[i][k] += 1
        job = JobState()
        for name, saved in ck.runs.items():
            run = job.runs[name] = saved.without_series()
            i = self._names.index(name)
            self._refill(run, i, ck.counts[i], pushed[i])
        job.version = 1
        self.job = job
        self._feed(ahead)

    def _refill(self, run: RunState, i: int, counts: tuple[int, ...], pushed: list[int]) -> None:
        """Read back the series of stream i's run at a checkpoint, less what `pushed` events will push out."""
        stream = self._streams[i]
        limits = run.series_limits()
        for k, kind in enumerate(SERIES):
            n, offsets, limit = counts[k], self._offsets[i][k], limits[kind]
            if kind == "loss":
                # The loss series keeps the last MAX_LOSSES distinct steps: read back
                # Loss events from the newest until they cover that many.
                got: list[Event] = []
                seen: set[int] = set()
                for event in stream.events_at(offsets[n - 1::-1] if n else ()):
                    got.append(event)
                    seen.update(getattr(event, "steps", ()))
                    if len(seen) >= limit:
                        break
                for event in reversed(got):
                    run.refill(event)
                continue
            keep = limit - pushed[k]
            if n == 0 or keep <= 0:
                continue
            first = max(0, n - keep)
            stride = self._strides[k]
            if stride == 1:
                for event in stream.events_at(offsets[first:n]):
                    run.refill(event)
                continue
            ordinal = first - first % stride
            for _, _, event in stream.events_from(offsets[first // stride], kind):
                if ordinal >= n:
                    break
                if ordinal >= first:
                    run.refill(event)
                ordinal += 1


def timeline_of(source: object) -> Timeline:
    """The timeline of a replay source: record files are indexed, other sources read into memory."""
    built = getattr(source, "timeline", None)
    if isinstance(built, Timeline):
        return built  # indexed before the screen opened (cmd_view)
    files = getattr(source, "files", None)
    if files is not None:
        return Timeline.of_files(files)
    return Timeline(list(source.batches()))  # type: ignore[attr-defined]
