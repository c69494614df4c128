"""Provides the writer thread's side of the step queue: each queued step made into its events."""

from __future__ import annotations

from typing import Any

from pitstop.events import End, Event, Step
from pitstop.profiling._losses import LossBatch, Tail


class StepEvents:
    """What the training thread queued, as the events of the record, in order (writer thread).

    A step is queued as the tuple `Agent._on_step` builds, (index, now, wall,
    wait, samples, source, mem, rss, mark, eval_s, loader, phases, loss, passes): `now`
    is a perf_counter stamp, `phases` the step clock's, `loss` a float where it
    was read on the CPU (gathered here into `Loss` events) and else ignored.
    Building the `Step` on the training thread had cost ~11 us of ~38 a step.
    """

    def __init__(self, phases: Any) -> None:
        self.phases = phases  # the agent's PhaseClock: a step's CUDA phase events, timed here
        self.losses = LossBatch()

    def step(self, item: tuple[Any, ...], offset: float, final: bool = False) -> Step:
        """The `Step` event of a queued tuple; `offset` turns perf_counter stamps into wall time."""
        index, now, wall, wait, samples, source, mem, rss, mark, eval_s, loader, phases, _, passes = item
        alloc, reserved, peak = mem if mem is not None else (None, None, None)
        fig = self.phases.figures(phases, wall, wait, block=final)
        forward, backward, optimizer, other, clock = fig if fig is not None else (None,) * 5
        return Step(t=offset + now, step=index, wall=wall, data_wait=wait, samples=samples, source=source,
                    mem_allocated=alloc, mem_reserved=reserved, mem_peak=peak, host_rss=rss, mark=mark,
                    eval_s=eval_s, loader=loader if isinstance(loader, int) else None, forward_s=forward,
                    backward_s=backward, optimizer_s=optimizer, other_s=other, phase_clock=clock,
                    passes=passes if mark is not None and passes else None)

    def events(self, item: Event | tuple[Any, ...], offset: float, final: bool = False) -> list[Event]:
        """The events of one queued item: a step, then the `Loss` event its loss completed; an event
        as it is, `End` after the losses still held."""
        if type(item) is tuple:
            step = self.step(item, offset, final)
            loss = self.losses.add(item[0], item[12], item[1]) if type(item[12]) is float else None
            return [step] if loss is None else [step, loss]
        if type(item) is Tail:
            loss = self.losses.add(item.step, item.value, item.now)
            return [] if loss is None else [loss]
        if type(item) is End:
            loss = self.losses.take()
            if loss is not None:
                return [loss, item]
        return [item]  # type: ignore[list-item]
