"""Provides the step anatomy's CUDA clock: events recorded at the step clock's phase boundaries, read lazily.

On CUDA the host's stamps time the launches, not the work: a forward that
launches in 2 ms may keep the GPU busy for 40. So where the loss lives on CUDA
the step clock also records a timing event at each phase boundary (`marker`),
and the step carries the event pairs that bound its phases. Nothing here waits
for the GPU on the training thread (DESIGN rule 1): the agent's writer thread
asks `done` (cudaEventQuery, no sync) of the steps it is about to write, holds
a step whose events the GPU has not reached yet for a later pass (up to
`WAIT_S`, then the step keeps its host figures), and times the finished ones
with `elapsed_time`, which on completed events waits for nothing. Only the
last write at exit (`block`) synchronises, as the losses' last read does.

Torch-free: it is handed the event type (`torch.cuda.Event`), so the reader is
unit-tested with a fake one (tests/unit/test_phases_cuda.py). `PhaseClock` is
the agent's side of it; any error of torch's switches the CUDA clock off, with
one note, and the steps go on with the host's figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A step whose events are not complete this long after it ended keeps the host clock:
# a GPU seconds behind the host is a hung or starved device, and the writer must not
# hold the stream for it (viewers see steps within ~0.5 s, the writer's period).
WAIT_S = 2.0

# A step's figures as written: forward, backward, optimizer, other (seconds), clock.
Figures = tuple[float, float, float, float, str]


def cuda_marker(event_type: Any, on_error: Callable[[BaseException], None]) -> Callable[[], Any]:
    """A marker for the step clock: records a timing event on the current stream and returns it.

    A failing record calls `on_error` (which switches the marker off) and returns
    None: that step keeps the host clock, and training never sees the error.
    """

    def marker() -> Any:
        try:
            event = event_type(enable_timing=True)
            event.record()
            return event
        except Exception as err:
            on_error(err)
            return None

    return marker


def done(spans: list[tuple[int, Any, Any]]) -> bool:
    """True when the GPU has passed every event of a step (cudaEventQuery: never waits)."""
    seen: set[int] = set()
    for _, start, end in spans:
        for event in (start, end):
            if id(event) not in seen:
                seen.add(id(event))
                if not event.query():
                    return False
    return True


def figures(phases: Any, wall: float, data_wait: float, block: bool = False) -> Figures | None:
    """The step's forward, backward, optimizer, other and their clock; None for a step without phases.

    `phases` is the step clock's (forward, backward, optimizer, spans). With
    spans whose events are complete (`block`: the last write waits for them)
    the three come from the GPU ("cuda"); otherwise from the host's stamps
    ("host"). `other` is the rest of the step's compute on the host's
    wall clock, at least 0: on the cuda clock the GPU's phases may overlap the
    host's data wait (the GPU still runs the last step while the host waits).
    Errors of torch propagate: the agent notes them and switches the clock off.
    """
    if phases is None:
        return None
    forward, backward, optimizer, spans = phases
    clock = "host"
    if spans:
        if block:
            spans[-1][2].synchronize()
        if done(spans):  # else the GPU is over WAIT_S behind: the host's figures stand
            sums = [0.0, 0.0, 0.0]
            for phase, start, end in spans:
                sums[phase] += start.elapsed_time(end) / 1000.0
            forward, backward, optimizer = sums
            clock = "cuda"
    other = max(0.0, wall - data_wait - forward - backward - optimizer)
    return forward, backward, optimizer, other, clock


def pending(phases: Any, age: float) -> bool:
    """True while a step's events are still ahead of the GPU and it may wait for them (`WAIT_S`)."""
    if phases is None or not phases[3] or age > WAIT_S:
        return False
    return not done(phases[3])


class PhaseClock:
    """The agent's step phases: picks the clock at the first backward, and reads the steps' events (writer thread)."""

    def __init__(self, clock: Any, note: Callable[..., None]) -> None:
        self.clock = clock  # the StepClock: its `marker` is set for the steps timed (`_cuda.time_next`)
        self.note = note  # Agent.note
        self.marker: Callable[[], Any] | None = None  # the CUDA marker while the CUDA clock is on

    def start(self, torch: Any, tensor: Any) -> None:
        """At the first backward (training thread): a loss on CUDA puts the phases on the GPU's clock too.
        The step it starts in is timed from here (its forward had no token: it keeps no phases)."""
        try:
            if tensor.device.type == "cuda":
                self.marker = self.clock.marker = cuda_marker(torch.cuda.Event, self.off)
        except Exception as err:
            self.off(err)

    def off(self, err: BaseException) -> None:
        """The CUDA clock failed: the host's stamps alone from now on."""
        self.marker = self.clock.marker = None
        self.note("warn", "agent", f"step phases on the CUDA clock off (host clock from now on): "
                  f"{type(err).__name__}: {err}", once="cuda-phases")

    def pending(self, phases: Any, age: float) -> bool:
        """`pending`, an error being no reason to wait."""
        try:
            return pending(phases, age)
        except Exception as err:
            self.off(err)
            return False

    def figures(self, phases: Any, wall: float, data_wait: float, block: bool = False) -> Figures | None:
        """`figures`; after an error, the host's."""
        try:
            return figures(phases, wall, data_wait, block)
        except Exception as err:
            self.off(err)
            return figures(phases[:3] + (None,), wall, data_wait)
