"""Provides the agent's loss reading: losses read in batches, so reading never syncs the GPU per step.

The losses of one step every LOSS_EVERY_S are read (every step's at slower
steps), and the last step's as the run ends (`read_tail`).
On the CPU a loss is read at its backward (a float, no sync) and rides in its
step's queue entry; the writer thread gathers LOSS_BATCH of them into one
`Loss` event (`LossBatch`): building the event, and checking the values, on
the training thread cost ~2 us a step. A loss on a GPU is kept as a tensor
and LOSS_BATCH of them are copied to the host in one async copy, enqueued on
the training thread (on its stream, after the work that made them), read once
its event has completed; at the end of the run they are read blocking. A
failure switches loss reading off, noted once.
"""

from __future__ import annotations

import time
from typing import Any

from pitstop.events import Loss

LOSS_BATCH = 32  # losses read together, so a GPU loss costs one async copy per 32 steps
LOSS_MAX_AGE_S = 2.0  # ...or every 2 s on slow loops
# A step's losses are read when this long passed since the last step read began: every step's
# at 10 ms steps or slower, one step in ~10 at 1 ms. A loss read in place (`item()`, or `detach()`
# on a GPU) cost ~5 us of the agent's ~25 a step on the 2-core Xeon VM (benchmarks/hotpath.py,
# the read switched off in one variant); the last step's loss is read as the run ends (`read_tail`).
# A tune trial reads every step's (its AMP check compares losses).
LOSS_EVERY_S = 0.01


def loss_event(steps: list[int], values: list[float], optimizer: int = 1) -> Loss:
    """The `Loss` event of these steps' values; a non-finite value is None, its step listed."""
    finite = [v if v == v and v not in (float("inf"), float("-inf")) else None for v in values]
    bad = [s for s, v in zip(steps, finite) if v is None]
    return Loss(t=time.time(), steps=steps, values=finite, nonfinite=bad, optimizer=optimizer)


class Tail:
    """The loss of the run's last step where it was not read (`read_tail`), queued after that step."""

    __slots__ = ("step", "value", "now")

    def __init__(self, step: int, value: float) -> None:
        self.step, self.value, self.now = step, value, time.perf_counter()


def read_tail(agent: Any) -> None:
    """As the run ends: the loss of the last step with a backward, where its losses were not read
    (`LOSS_EVERY_S`), so that the run's last loss is its last step's. A step of several backward
    calls (micro-steps, a closure's) keeps its last read loss: one part is not the step's.

    And the last iteration's loss of a second optimizer (a GAN's G), which no later step took in
    (`StepClock.finish` leaves it in `other_loss`): under the last step, the iteration it belongs to.
    """
    other = agent.clock.other_loss
    if other is not None and agent.step_index:
        agent.clock.other_loss = None
        agent._pending_other[agent.step_index - 1] = other
    hooks = agent.hooks
    tail = hooks.loss_tail if hooks is not None else None
    if tail is None:
        return
    hooks.loss_tail = None
    if not hooks.capture_loss or hooks.tail_parts != 1 or hooks.tail_step >= agent.step_index:
        return  # (a backward whose step never ended is no step's)
    try:
        if tail.numel() != 1:
            return
        scale = None
        if hooks.scalers and type(tail.grad_fn).__name__ == "MulBackward0":
            scale = _last_scale(hooks.scalers)
            if scale is None:
                return  # a GradScaler's scaled loss of an unknown scale: the last loss read stands
        if tail.is_cpu:
            value = float(tail.item()) if scale is None else float(tail.item()) / float(scale.item())
            agent.emit(Tail(hooks.tail_step, value))  # after its step in the queue
        else:
            # the last copy reads it
            agent._pending_losses[hooks.tail_step] = tail.detach() if scale is None else tail.detach() / scale
    except Exception:
        return


def _last_scale(scalers: list[Any]) -> Any:
    """The scale the only live GradScaler multiplied the last step's loss by, where its last update
    left it as it was; else None. The update after a step grows the scale (every 2000 good steps) or
    backs it off (an overflow), and zeroes its growth tracker either way: a tracker above 0 says the
    scale now is the one that step used."""
    live = [s for s in (ref() for ref in scalers) if s is not None]
    if len(live) != 1:
        return None
    scale, tracker = getattr(live[0], "_scale", None), getattr(live[0], "_growth_tracker", None)
    if scale is None or tracker is None or int(tracker.item()) <= 0:
        return None
    return scale


class LossBatch:
    """CPU losses gathered on the writer thread, from the steps' queue entries, into `Loss` events."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[float] = []
        self.first = 0.0  # perf_counter stamp of the first step held

    def add(self, step: int, value: float, now: float) -> Loss | None:
        """Hold one step's loss; the event of the batch once LOSS_BATCH are held or the first is LOSS_MAX_AGE_S old."""
        if not self.steps:
            self.first = now
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) >= LOSS_BATCH or now - self.first > LOSS_MAX_AGE_S:
            return self.take()
        return None

    def take(self) -> Loss | None:
        """The event of the losses held (the run ends), or None."""
        if not self.steps:
            return None
        event = loss_event(self.steps, self.values)
        self.steps, self.values = [], []
        return event


def _per_step(values: list[float], counts: list[int] | None) -> list[float]:
    """The values read, one per step: each step's parts added up (`counts`: parts per step)."""
    if counts is None:
        return values
    out, at = [], 0
    for n in counts:
        out.append(sum(values[at:at + n]))
        at += n
    return out


def flush(agent: Any, block: bool) -> None:
    """Read the agent's pending losses (see module doc); `block`: wait for copies still in flight."""
    agent._last_loss_flush = time.perf_counter()
    try:
        _start_reads(agent, agent._pending_losses, 1)
        agent._pending_losses = {}
        # The second optimizer's (a GAN's G: `StepCut.other_loss`), floats and tensors alike, read the same way.
        _start_reads(agent, agent._pending_other, 2)
        agent._pending_other = {}
        still = []
        for steps, host, done, counts, optimizer in agent._loss_reads:
            if done is not None and not block and not done.query():
                still.append((steps, host, done, counts, optimizer))
                continue
            if done is not None:
                done.synchronize()
            agent.emit(loss_event(steps, _per_step(host if isinstance(host, list) else host.tolist(), counts),
                                  optimizer))
        agent._loss_reads = still
    except Exception as err:
        agent._loss_reads = []
        agent.note("warn", "loss", f"loss reading off: {err}", once="loss")
        if agent.hooks is not None:
            agent.hooks.capture_loss = False


def _start_reads(agent: Any, pending: dict[int, Any], optimizer: int) -> None:
    """Queue the reads of `pending` (step -> a float, a tensor, or a step's parts) in `agent._loss_reads`."""
    if pending:
        read = sorted(s for s, v in pending.items() if isinstance(v, float))  # CPU: read at backward
        if read:
            agent._loss_reads.append((read, [pending[s] for s in read], None, None, optimizer))
        steps = sorted(pending.keys() - set(read))  # tensors: read here, in one copy
        if steps:
            # A step of gradient accumulation holds its micro-steps' losses (`StepClock._combine`):
            # copied with the rest, added up once read.
            parts = [pending[s] if type(pending[s]) is list else [pending[s]] for s in steps]
            tensors = [t for step in parts for t in step]
            counts = [len(step) for step in parts] if len(tensors) > len(steps) else None
            torch = agent.torch
            if tensors[0].device.type == "cuda":
                stacked = torch.stack([t.reshape(()).float() for t in tensors])
                host = stacked.to("cpu", non_blocking=True)
                done = torch.cuda.Event()
                done.record()
                agent._loss_reads.append((steps, host, done, counts, optimizer))
            else:
                agent._loss_reads.append((steps, torch.stack([t.reshape(()).float() for t in tensors]), None, counts,
                                          optimizer))
