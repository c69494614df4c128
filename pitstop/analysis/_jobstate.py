"""Provides JobState: the streams of one job, one RunState per training process, ordered by rank."""

from __future__ import annotations

from pitstop.analysis._state import RunState
from pitstop.streams import StreamBatch


class JobState:
    """The streams of one job (one per training process), keyed by stream id."""

    def __init__(self) -> None:
        self.version = 0
        self.runs: dict[str, RunState] = {}
        # Streams known to have closed (socket gone, record read to its end): a
        # closed stream without an End event is a rank that died (see `job_summary`).
        self.closed: set[str] = set()
        # How a stream's process ended where the front that started it saw it (its exit code), for
        # a record without its End: a SIGTERM's 143 names the signal, not "SIGKILL or OOM".
        self.exits: dict[str, int] = {}

    @classmethod
    def of_runs(cls, runs: list[RunState], closed: bool = True) -> JobState:
        """A JobState over RunStates already fed (records read whole); closed by default."""
        job = cls()
        for i, run in enumerate(runs):
            stream = run.hello.record if run.hello is not None and run.hello.record else f"run:{i}"
            if stream in job.runs:
                stream = f"{stream}#{i}"
            job.runs[stream] = run
            if closed:
                job.closed.add(stream)
        job.version = 1
        return job

    def close(self, stream: str) -> None:
        """Mark a stream as ended (its source saw it close)."""
        if stream not in self.closed:
            self.closed.add(stream)
            self.version += 1

    def close_all(self) -> None:
        """Mark every stream as ended: a replay after its last batch, a live job after exit."""
        for stream in self.runs:
            self.close(stream)

    def add(self, batch: StreamBatch) -> RunState:
        """Feed a batch to its stream's RunState (created on first sight); returns it."""
        run = self.runs.get(batch.stream)
        if run is None:
            run = self.runs[batch.stream] = RunState()
        for event in batch.events:
            run.add(event)
        self.version += 1
        if batch.closed:
            self.close(batch.stream)
        return run

    def ranks(self) -> list[tuple[str, RunState]]:
        """(label, run) ordered by rank, then pid, then stream id; label like "rank 0"."""

        def key(item: tuple[str, RunState]) -> tuple[int, int, int, int, str]:
            stream, run = item
            rank, pid = run.rank, run.pid
            return (
                rank is None,
                rank if rank is not None else 0,
                pid is None,
                pid if pid is not None else 0,
                stream,
            )

        return [(_label(stream, run), run) for stream, run in sorted(self.runs.items(), key=key)]

    def primary(self) -> RunState | None:
        """Rank 0's run, else the first in `ranks()` order; None before any stream."""
        ordered = self.ranks()
        for _, run in ordered:
            if run.rank == 0:
                return run
        return ordered[0][1] if ordered else None


def _label(stream: str, run: RunState) -> str:
    if run.rank is not None:
        return f"rank {run.rank}"
    if run.pid is not None:
        return f"pid {run.pid}"
    return stream
