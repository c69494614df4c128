"""Provides what an event source hands its viewers: batches of one process's events, and each process's answer to a command.

Standard library only, beside the event schema: the sources (`pitstop.profiling`),
the analysis that folds the batches and the fronts that show the answers all
import it, and none of them has to import another room for it (once,
`profiling/sources.py` imported `pitstop.analysis` for `StreamBatch` alone).
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
    error: str | None = None  # why it ended, when it broke ("ConnectionResetError: ..."): fronts say it


@dataclass(frozen=True)
class Answer:
    """One process's answer to a command, or why there is none."""

    process: str  # "rank 0", or "pid 4242" outside a distributed job
    text: str  # the agent's own reply; when not `answered`, why there is none ("no answer in 5 s")
    answered: bool = True

    def __str__(self) -> str:
        return f"{self.process}: {self.text}"


@dataclass(frozen=True)
class Replies:
    """What every process of a job answered to one command, in rank order."""

    cmd: str
    answers: tuple[Answer, ...] = ()

    @property
    def complete(self) -> bool:
        """Every process answered."""
        return all(a.answered for a in self.answers)

    def text(self) -> str:
        """One line per process: "rank 0: profiler windows are off in this run"."""
        return "\n".join(str(a) for a in self.answers)


def process_name(rank: int | None, pid: int | None) -> str:
    """How a person tells the processes of a job apart: its rank, else its pid."""
    if rank is not None:
        return f"rank {rank}"
    return f"pid {pid}" if pid is not None else "the process"
