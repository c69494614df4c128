"""Provides Timeline: a whole recorded job, and the JobState as it stood at any moment.

Replay design (docs/tui.md): the app reads the record to its end into a
Timeline, then shows the state up to a cursor time. Moving forward feeds only
the events between the old and the new cursor; moving back rebuilds from the
start. Records are bounded (the agent's rolling windows), so a rebuild of a
long record is well under a second, and nothing here keeps a second copy.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pitstop.analysis import JobState, StreamBatch
from pitstop.events import Event, Hello, ProfileWindow


def event_time(event: Event) -> float | None:
    """When an event happened: its `t`, or `started` for Hello."""
    if isinstance(event, Hello):
        return float(event.started)
    t = getattr(event, "t", None)
    return float(t) if isinstance(t, (int, float)) else None


@dataclass(frozen=True)
class _Item:
    t: float
    stream: str
    event: Event


class Timeline:
    """Every event of a recorded job in time order, with a cursor-driven JobState."""

    def __init__(self, batches: list[StreamBatch]) -> None:
        items: list[_Item] = []
        # stream -> time of its last event, for streams the source saw close: a stream is
        # closed in the replay once the cursor passes its end (a rank without End is gone).
        self.closes: dict[str, float] = {}
        last_of: dict[str, float] = {}
        for batch in batches:
            last = last_of.get(batch.stream)
            for event in batch.events:
                t = event_time(event)
                # An event without a time keeps its place after the one before it.
                t = t if t is not None else (last if last is not None else 0.0)
                last = t
                items.append(_Item(t, batch.stream, event))
            if last is not None:
                last_of[batch.stream] = last
            if batch.closed:
                self.closes[batch.stream] = last_of.get(batch.stream, 0.0)
        # Stable sort: events of one stream at the same time keep their order.
        items.sort(key=lambda item: item.t)
        self._items = items
        self._times = [item.t for item in items]
        self.start = items[0].t if items else 0.0
        self.end = items[-1].t if items else 0.0
        self.profile_times = sorted(
            item.t for item in items if isinstance(item.event, ProfileWindow)
        )
        self.job = JobState()
        self._fed = 0  # items[:_fed] are in self.job
        self.cursor = self.start

    def __len__(self) -> int:
        return len(self._items)

    def seek(self, cursor: float) -> JobState:
        """The JobState with every event at or before `cursor` (clamped to the record)."""
        cursor = min(max(cursor, self.start), self.end)
        upto = bisect.bisect_right(self._times, cursor)
        if upto < self._fed:
            self.job = JobState()
            self._fed = 0
        self._feed(upto)
        for stream, t in self.closes.items():
            if t <= cursor and stream in self.job.runs:
                self.job.close(stream)
        self.cursor = cursor
        return self.job

    def _feed(self, upto: int) -> None:
        # Consecutive events of one stream go in one batch: the same shape a live source gives.
        i = self._fed
        while i < upto:
            stream = self._items[i].stream
            j = i
            events: list[Event] = []
            while j < upto and self._items[j].stream == stream:
                events.append(self._items[j].event)
                j += 1
            self.job.add(StreamBatch(stream, events))
            i = j
        self._fed = upto

    def next_profile(self, after: float) -> float | None:
        """Time of the first profiler window strictly after `after`."""
        i = bisect.bisect_right(self.profile_times, after)
        return self.profile_times[i] if i < len(self.profile_times) else None

    def previous_profile(self, before: float) -> float | None:
        """Time of the last profiler window strictly before `before`."""
        i = bisect.bisect_left(self.profile_times, before)
        return self.profile_times[i - 1] if i > 0 else None
