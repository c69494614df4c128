"""Provides the writer thread's take of held plain steps: a step's five hook calls cut in one pass.

Between plain steps the hooks hold five calls a step (`Agent.flush_stamps`): the
DataLoader's `on_fetch`, the root module's training `on_forward`, `on_backward`,
the optimizer's `on_optimizer_start` and `on_optimizer_step`. Taken in one call
at a time, each through its general method, they cost the writer thread ~15 us
of CPU a step (a 20,000-step pass of such calls under cProfile, 2-core VM), half
of all it did a step: on a 2-core machine that CPU, and the GIL it holds, is
taken from the training. `take` recognises the five calls of a plain step at the
head of the held deque and cuts the step in one pass over locals, with the same
arithmetic as the five methods and `StepClock._fast_cut`, leaving the clock as
they leave it. Anything else (another loader, an evaluation's forward, a second
backward, another optimizer, a phase token, a profiler window's step) stops it:
the caller takes that call in through its method, as before.
`tests/unit/test_plainsteps.py` runs random held streams both ways.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pitstop.profiling._stepcut import TRAINED_STEPS


def take(clock: Any, stamps: deque[tuple[Any, ...]], limit: int, stop_at: int | None, agent: Any = None) -> int:
    """Cut the plain steps whose calls head `stamps` (at most `limit` calls, no step at index `stop_at`
    or later); returns the calls taken. 0 where the clock is not between plain steps.

    With `agent`, whose `_on_step` would only queue the step's tuple here (no profiler window, no
    CUDA memory or phase clock, no trial: `Agent._take_stamps` says), a step with no loss or a
    CPU one is queued as that tuple directly: a call a step less."""
    if len(stamps) < 5 or limit < 5 or clock.mode != "optimizer" or clock.marker is not None \
            or clock._seg_t0 is not None or clock._eval_t0 is not None or clock._pending or clock._rollouts \
            or clock._open or clock._fetch or clock._loose or clock._phased or clock._losses \
            or clock._loss is not None or clock._fwd_samples is not None or clock.t_last is None:
        return 0
    on_fetch, on_forward, on_backward = clock.on_fetch, clock.on_forward, clock.on_backward
    on_start, on_step = clock.on_optimizer_start, clock.on_optimizer_step
    primary, train, sink = clock.primary, clock.train_loader, clock.on_step
    index, start = clock.index, clock.t_last
    if stop_at is not None:
        limit = min(limit, 5 * max(0, stop_at - index))
    queue = agent._queue if agent is not None else None
    full = queue.maxlen if queue is not None else None
    rss = agent.rss_now if agent is not None else None
    pop = stamps.popleft
    shape_seen: Any = None
    samples_of = 0
    taken = dropped = 0
    batches = backwards = 0
    try:
        while taken + 5 <= limit:
            # (indexing a deque near its head is O(1); the calls stay held until the step is cut)
            fetch, forward, backward, opt, cut = stamps[0], stamps[1], stamps[2], stamps[3], stamps[4]
            if fetch[0] is not on_fetch:  # (the hooks hold one bound method each: `is` once it was seen)
                if fetch[0] != on_fetch:
                    break
                on_fetch = fetch[0]
            if forward[0] is not on_forward:
                if forward[0] != on_forward:
                    break
                on_forward = forward[0]
            if backward[0] is not on_backward:
                if backward[0] != on_backward:
                    break
                on_backward = backward[0]
            if opt[0] is not on_start:
                if opt[0] != on_start:
                    break
                on_start = opt[0]
            if cut[0] is not on_step:
                if cut[0] != on_step:
                    break
                on_step = cut[0]
            if fetch[1] != train or forward[1] is not True or forward[2] is not None or len(forward) != 4 \
                    or backward[4] is not None or backward[3] is None or opt[1] != primary or opt[3] is not None \
                    or cut[1] != primary:
                break
            _, _, started, waited, shape = fetch
            fetched = shape
            if shape is not None and type(shape) is not int:  # `on_fetch`: the batch dimension of its shape
                if type(shape) is not tuple and not isinstance(shape, tuple):
                    shape = None
                elif shape == shape_seen:
                    shape = samples_of
                else:
                    shape_seen = shape
                    shape = samples_of = clock.batch_of(train, shape)
                fetched = shape
            mark = started + waited
            b_end, loss, b_start = backward[1], backward[2], backward[3]
            o_start, end = opt[2], cut[2]
            pop()
            pop()
            pop()
            pop()
            pop()
            taken += 5
            batches += 1
            backwards += 1
            if clock._batches_seen < TRAINED_STEPS:
                shape = clock._trained(1, shape)
            fwd = b_start - mark if b_start > mark else 0.0
            clock.index = index + 1
            clock.t_last = end
            if queue is not None and (loss is None or type(loss) is float):  # as `Agent._on_step` queues it
                if len(queue) == full:
                    dropped += 1
                queue.append((index, end, end - start, waited, shape, "optimizer", None, rss, None, 0.0, train,
                              (fwd, b_end - b_start, end - o_start, None), loss, 0))
            else:
                sink(index, start, end, waited, shape, "optimizer", None, 0.0, train, loss,
                     (fwd, b_end - b_start, end - o_start, None), 0)
            index += 1
            start = end
    finally:
        if dropped:
            agent.dropped += dropped
        clock.batches += batches
        clock.backwards += backwards
        if taken:
            # As the five calls and `_fast_cut` leave the clock after a plain step.
            clock.opened_at = o_start
            # (`_first` is only read once a second backward came since the cut: kept as the calls keep it)
            clock._first = (b_end, waited, fetched)
            clock._mark = end
            clock._unused = clock._fwd_end = clock._last_loader = None
            clock._closure_loss = False
            clock._others = 0
    return taken

