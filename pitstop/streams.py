"""Provides what an event source hands its viewers: batches of one process's events.

Standard library only, beside the event schema: the sources (`pitstop.profiling`),
the analysis that folds the batches and the fronts that show the answers all
import it, and none of them has to import another room for it (issue 13 found
`profiling/sources.py` importing `pitstop.analysis` for `StreamBatch` alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pitstop.events import Event


@dataclass(frozen=True)
class StreamBatch:
    """Events of one training process, as a viewer is handed them (see docs/internals.md)."""

    stream: str  # one id per training process ("pid:1234@host" or a record path)
    events: list[Event] = field(default_factory=list)
    closed: bool = False  # the stream ended here (socket closed, record read to its end)
