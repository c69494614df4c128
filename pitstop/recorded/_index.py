"""Provides StreamIndex: one stream of a record folded once, with checkpoints, and its RunState at any moment.

A 24-hour run at 10 ms steps records ~9 M lines, so an index never holds a
record's events. One pass folds the stream into a RunState, keeping as it goes:
- every CHECKPOINT_EVENTS events, a checkpoint: the RunState's totals
  (`RunState.without_series`, a few KB) and where the reading stands;
- where the series events lie (positions of every sample, loss, profiler
  window and note, and of every STEP_STRIDE-th step), so that the recent
  history a checkpoint leaves out is read back from the record.
A record file's index is saved beside it (pitstop/recorded/_sidecar.py): the
next reader restores it and folds only what was appended since, instead of
reading the whole record again.

Seeking: forward feeds the events in between; back, or forward past more than
a checkpoint's worth of events, restores the last checkpoint at or before the
cursor, reads its series back and feeds on from there: a seek decodes about
one series window and at most 2 x CHECKPOINT_EVENTS events, whatever the
record's length. A stream's RunState depends on its own events only, so each
stream of a job seeks on its own.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pitstop.analysis import SERIES, RunState
from pitstop.events import Event, Hello, ProfileWindow
from pitstop.profiling._linedecode import decode_line
from pitstop.recorded._streams import ReplayStream

# A checkpoint every 5,000 events: a seek feeds at most twice that, ~0.1 s at
# ~10 us an event decoded and added (a window of 20,000 steps read back is the
# larger part, ~0.2 s), and a 24-hour record at 10 ms steps gets ~1,800.
CHECKPOINT_EVENTS = 5_000
# Steps are most of a record (one line each): their offsets are kept for one
# step in 256 (~270 KB for 8.6 M steps) and a window is read from the one before.
STEP_STRIDE = 256
SERIES_INDEX = {kind: k for k, kind in enumerate(SERIES)}


def event_time(event: Event) -> float | None:
    """When an event happened: its `t`, or `started` for Hello."""
    if isinstance(event, Hello):
        return float(event.started)
    t = getattr(event, "t", None)
    return float(t) if isinstance(t, (int, float)) else None


class SavedState:
    """A checkpoint's RunState as an index file saved it, built only when a reader restores it.

    A day-long record has ~1,800 checkpoints and a reader restores one or two: building
    every RunState when the index loads took 4.5 s of a 24-hour record's summary.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self._run: RunState | None = None

    def to_checkpoint(self) -> dict[str, Any]:
        return self._data

    def without_series(self) -> RunState:
        if self._run is None:
            # Its HEAD_STEPS steps through the record reader's decoder: 2.3 ms a rank through
            # `events.decode`, 1.8 ms through it (the 128-rank job of benchmarks/replay_memory.py).
            self._run = RunState.from_checkpoint(dict(self._data), _decode_saved)
        return self._run.without_series()


def _decode_saved(line: str) -> Event | None:
    """An event line an index saved (`encode`'s), decoded as the record reader decodes one."""
    return decode_line(line.encode())


@dataclass(frozen=True)
class Checkpoint:
    t: float  # time of the last event fed (-inf before the first)
    fed: int  # events fed
    pos: int  # where the next line starts
    last_t: float | None  # the time of the last event fed (None before the first)
    counts: tuple[int, ...]  # series events fed so far, by SERIES kind
    state: RunState | SavedState  # `without_series` (as saved, when read from an index file)


class StreamIndex:
    """One stream: checkpoints of its folded RunState, where its series events lie, and a cursor."""

    def __init__(self, stream: ReplayStream, stride: int | None = None) -> None:
        self.stream = stream
        self.name = stream.name
        self.every = CHECKPOINT_EVENTS  # read at construction so tests can shrink them
        self.strides = tuple((STEP_STRIDE if stride is None else stride) if kind == "step" else 1 for kind in SERIES)
        self.offsets = [array("q") for _ in SERIES]
        self.counts = [0] * len(SERIES)
        self.profile_times = array("d")
        self.first_t: float | None = None
        self.checkpoints = [Checkpoint(-math.inf, 0, 0, None, (0,) * len(SERIES), RunState())]
        self._times: list[float] = []
        # Where the reading stands, and the RunState it has fed.
        self.pos = 0
        self.last_t: float | None = None
        self.fed = 0
        self.run = RunState()
        self._folded = False  # self.run is the fold of the whole stream, as index() left it
        self.total = 0  # events in the stream (after `index`)
        # The reader's caps on the series its RunState holds ({SERIES kind: entries}), below the
        # RunState's own windows: a job's many ranks each keep less (pitstop/recorded/_windows.py).
        # The saved checkpoints keep the RunState's own windows: another reader reads them whole.
        self.limits: dict[str, int] | None = None

    # -- the indexing pass -------------------------------------------------
    def index(self) -> RunState:
        """Fold the stream from the last checkpoint to its end, checkpointing; returns the whole RunState."""
        last = self.checkpoints[-1]
        if self._folded and self.fed == last.fed and self.pos == last.pos:
            run = self.run  # folded to the end and not moved since (the keeper's passes): go on
        else:
            run = self._restored(last, [0] * len(SERIES))
        if len(self.checkpoints) > 1 and last.fed % self.every:
            # The end checkpoint of the pass before (a live record folded again): the fold
            # goes on from it and ends with a new one, so passes do not pile them up.
            self.checkpoints.pop()
            self._times = []
        self.pos, self.last_t, self.fed = last.pos, last.last_t, last.fed
        counts = self.counts = list(last.counts)
        for start, end, event in self.stream.scan(last.pos):
            t = self._clamp(event)
            if self.first_t is None:
                self.first_t = t
            k = SERIES_INDEX.get(event.kind)
            if k is not None:
                if counts[k] % self.strides[k] == 0:
                    self.offsets[k].append(start)
                counts[k] += 1
                if isinstance(event, ProfileWindow):
                    self.profile_times.append(t)
            run.add(event)
            self.pos = end
            self.fed += 1
            if self.fed % self.every == 0:
                self._checkpoint(run)
        if self.fed > self.checkpoints[-1].fed:
            self._checkpoint(run)  # the end: a reader that comes back restores the whole stream from it
        self.run, self.total = run, self.fed
        self._folded = True
        if self.limits is not None:
            run.keep_last(self.limits)
        return run

    def _checkpoint(self, run: RunState) -> None:
        self.checkpoints.append(Checkpoint(self.last_t if self.last_t is not None else -math.inf, self.fed,
                                           self.pos, self.last_t, tuple(self.counts), run.without_series()))

    def _clamp(self, event: Event) -> float:
        """The event's time, never before the one fed ahead of it (the stream keeps file order)."""
        t = event_time(event)
        last = self.last_t
        if t is None or (last is not None and t < last):
            t = last if last is not None else 0.0
        self.last_t = t
        return t

    # -- seeking -----------------------------------------------------------
    @property
    def end(self) -> float:
        """Time of the stream's last event (0 when it has none)."""
        return self.checkpoints[-1].last_t or 0.0

    def seek(self, cursor: float) -> RunState | None:
        """The RunState of every event at or before `cursor`; None before the stream's first event."""
        ck = self._checkpoint_at(cursor)
        self._folded = False  # the run moves with the cursor now
        try:
            if (self.last_t is not None and self.last_t > cursor) or ck.fed > self.fed + self.every:
                self._restore(ck, cursor)
            else:
                for event in self._read(cursor):
                    self.run.add(event)
        except BaseException:
            # The record could not be read again (moved, changed): the reading stands
            # nowhere known, so the next seek starts from a checkpoint.
            self.last_t = math.inf
            raise
        if self.limits is not None:
            self.run.keep_last(self.limits)
        return self.run if self.fed else None

    def set_limits(self, limits: dict[str, int] | None, cursor: float) -> RunState | None:
        """Hold at most `limits` of each series from now on (None: the RunState's own windows); the run at `cursor`.

        Narrower, the oldest entries go at once; wider, the windows are read back from
        the record (a restore at `cursor`, where the reading stands).
        """
        old, self.limits = self.limits, limits
        wider = old is not None and (limits is None or any(limits.get(k, math.inf) > v for k, v in old.items()))
        if wider and self.fed:
            self.last_t = math.inf  # moves the next seek to a restore, which reads the windows back
        return self.seek(cursor)

    def _checkpoint_at(self, cursor: float) -> Checkpoint:
        if len(self._times) != len(self.checkpoints):  # appended (an end checkpoint popped resets it)
            self._times = [c.t for c in self.checkpoints]
        return self.checkpoints[bisect.bisect_right(self._times, cursor) - 1]

    def _read(self, cursor: float) -> Iterator[Event]:
        """The events from where the reading stands up to `cursor`, moving it on."""
        events = self.stream.events_from(self.pos)
        try:
            for _, end, event in events:
                last = self.last_t
                t = event_time(event)
                if t is None or (last is not None and t < last):
                    t = last if last is not None else 0.0
                if t > cursor:
                    return
                self.pos, self.last_t = end, t
                self.fed += 1
                yield event
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # closes the file now, not when collected

    def _restore(self, ck: Checkpoint, cursor: float) -> None:
        """Make the run what it was at checkpoint `ck`, then feed it on to `cursor`.

        The events up to the cursor are read first: series entries they would push
        out of a window are then not read back.
        """
        self.pos, self.last_t, self.fed = ck.pos, ck.last_t, ck.fed
        ahead = list(self._read(cursor))  # fewer than a checkpoint's worth: the next one is past the cursor
        pushed = [0] * len(SERIES)
        for event in ahead:
            k = SERIES_INDEX.get(event.kind)
            if k is not None:
                pushed[k] += 1
        run = self._restored(ck, pushed)
        for event in ahead:
            run.add(event)
        self.run = run

    def _restored(self, ck: Checkpoint, pushed: list[int]) -> RunState:
        """Checkpoint `ck`'s RunState with its series read back, less what `pushed` events will push out."""
        with self.stream.cached():  # each series is read on its own, mostly from the same last members
            return self._read_back(ck, pushed)

    def _read_back(self, ck: Checkpoint, pushed: list[int]) -> RunState:
        run = ck.state.without_series()
        stream = self.stream
        limits = run.series_limits()
        if self.limits is not None:
            limits = {kind: min(limit, self.limits.get(kind, limit)) for kind, limit in limits.items()}
        for k, kind in enumerate(SERIES):
            n, offsets, limit = ck.counts[k], self.offsets[k], limits[kind]
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
            stride = self.strides[k]
            if stride == 1:
                for event in stream.events_at(offsets[first:n]):
                    run.refill(event)
                continue
            # From the noted event at or before the first one wanted: the steps between are passed
            # over (up to stride - 1 of them, most in lines never decoded).
            ordinal = first
            for _, _, event in stream.events_from(offsets[first // stride], kind, first % stride):
                if ordinal >= n:
                    break
                run.refill(event)
                ordinal += 1
        return run
