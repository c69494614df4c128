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

Taken by the writer thread, the steps go to its queue as one `PlainRun` a take,
not one tuple a step: the writer's drain then moved 500 queue tuples a pass one
at a time (~1.1 us a step of its ~8.5, `benchmarks/writer_pass.py`) and
transposed their fourteen fields back into columns (~1.0 us a step), where a
run's steps share all but eight (docs/internals.md, "The writer's runs").
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pitstop.profiling._stepcut import TRAINED_STEPS


class PlainRun:
    """Consecutive plain steps of one take, queued as one item (the writer's takes only).

    `rows` holds a step's own stamps as the hooks took them, (end, fetch started, data wait,
    samples, backward started, backward ended, optimizer started, loss): the durations are
    differences of them, taken a column at a time (`_stepevents.plain_columns`), not a float
    object at a time here. `first` is the first step's index, `start` where it began (the step
    before's end); the rest a step of the run shares with the others (its source "optimizer",
    the training loader, the process's RSS, no memory, mark, evaluation or passes). `losses` are
    the indexes in `rows` of the steps whose loss was read (a float). `tuples()` gives the
    steps as `Agent._on_step` queues them.
    """

    __slots__ = ("first", "start", "rows", "train", "rss", "losses")

    def __init__(self, first: int, start: float, train: Any, rss: int | None) -> None:
        self.first = first
        self.start = start
        self.rows: list[tuple[Any, ...]] = []
        self.train = train
        self.rss = rss
        self.losses: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def tuples(self) -> list[tuple[Any, ...]]:
        """The run's steps as the tuples `Agent._on_step` queues."""
        train, rss, index, start = self.train, self.rss, self.first, self.start
        out = []
        for end, started, waited, samples, b_start, b_end, o_start, loss in self.rows:
            mark = started + waited
            forward = b_start - mark if b_start > mark else 0.0
            out.append((index, end, end - start, waited, samples, "optimizer", None, rss, None, 0.0, train,
                        (forward, b_end - b_start, end - o_start, None), loss, 0))
            index += 1
            start = end
        return out


def take(clock: Any, stamps: deque[tuple[Any, ...]], limit: int, stop_at: int | None, agent: Any = None,
         runs: bool = False) -> int:
    """Cut the plain steps whose calls head `stamps` (at most `limit` calls, no step at index `stop_at`
    or later); returns the calls taken. 0 where the clock is not between plain steps.

    With `agent`, whose `_on_step` would only queue the step's tuple here (no profiler window or an
    idle one before `stop_at`, no CUDA memory or phase clock, no trial: `Agent._take_stamps` says), a
    step with no loss or a
    CPU one is queued as that tuple directly: a call a step less; with `runs` too (the writer
    thread, which drains its queue right after), the steps go to the queue as `PlainRun`s."""
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
    run = PlainRun(index, start, train, rss) if runs and queue is not None else None
    rows = run.rows if run is not None else None
    pop = stamps.popleft
    seen = clock._batches_seen
    shape_seen: Any = None
    shape_type: Any = tuple  # (a tuple's type once it was seen: torch.Size, a tuple's subclass)
    samples_of = 0
    taken = dropped = 0
    last = limit - 5
    try:
        while taken <= last:
            # (popped at once, and put back as they were where they are not a plain step's)
            fetch, forward, backward, opt, cut = pop(), pop(), pop(), pop(), pop()
            if fetch[0] is not on_fetch or forward[0] is not on_forward or backward[0] is not on_backward \
                    or opt[0] is not on_start or cut[0] is not on_step:
                if fetch[0] != on_fetch or forward[0] != on_forward or backward[0] != on_backward \
                        or opt[0] != on_start or cut[0] != on_step:
                    stamps.extendleft((cut, opt, backward, forward, fetch))
                    break
                # (the hooks hold one bound method each: `is` once it was seen)
                on_fetch, on_forward, on_backward, on_start, on_step = fetch[0], forward[0], backward[0], opt[0], cut[0]
            if fetch[1] != train or forward[1] is not True or forward[2] is not None or len(forward) != 4 \
                    or backward[4] is not None or backward[3] is None or opt[1] != primary or opt[3] is not None \
                    or cut[1] != primary:
                stamps.extendleft((cut, opt, backward, forward, fetch))
                break
            _, _, started, waited, shape = fetch
            fetched = shape
            if shape is not None and type(shape) is not int:  # `on_fetch`: the batch dimension of its shape
                if type(shape) is not shape_type and not isinstance(shape, tuple):
                    shape = None
                elif shape == shape_seen:
                    shape = samples_of
                else:
                    shape_seen, shape_type = shape, type(shape)
                    shape = samples_of = clock.batch_of(train, shape)
                fetched = shape
            b_end, loss, b_start = backward[1], backward[2], backward[3]
            o_start, end = opt[2], cut[2]
            taken += 5  # (a batch and a backward each: counted as the loop ends)
            if seen < TRAINED_STEPS:
                clock.index = index  # (read there: the clock's index and end are stored as the loop ends)
                shape = clock._trained(1, shape)
                seen = clock._batches_seen
            if rows is not None and (loss is None or type(loss) is float):
                if loss is not None:  # (the run's steps share the rest of `Agent._on_step`'s tuple)
                    run.losses.append(len(rows))  # type: ignore[union-attr]
                rows.append((end, started, waited, shape, b_start, b_end, o_start, loss))
            else:
                mark = started + waited
                phases = (b_start - mark if b_start > mark else 0.0, b_end - b_start, end - o_start, None)
                if queue is not None and (loss is None or type(loss) is float):  # as `Agent._on_step` queues it
                    if len(queue) == full:
                        dropped += 1
                    queue.append((index, end, end - start, waited, shape, "optimizer", None, rss, None, 0.0, train,
                                  phases, loss, 0))
                else:
                    if rows:  # (the run so far queued ahead of the step `_on_step` queues)
                        dropped += _queue_run(queue, run)  # type: ignore[arg-type]
                        run = PlainRun(index + 1, end, train, rss)
                        rows = run.rows
                    elif run is not None:
                        run.first, run.start = index + 1, end
                    clock.index = index + 1
                    clock.t_last = end
                    sink(index, start, end, waited, shape, "optimizer", None, 0.0, train, loss, phases, 0)
            index += 1
            start = end
    finally:
        if index > clock.index:  # (stored once, not a step at a time)
            clock.index = index
            clock.t_last = start
        if rows:
            dropped += _queue_run(queue, run)  # type: ignore[arg-type]
        if dropped:
            agent.dropped += dropped
        clock.batches += taken // 5
        clock.backwards += taken // 5
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



def _queue_run(queue: deque[Any], run: PlainRun) -> int:
    """Queue `run`; the steps the full queue dropped to make room (its oldest item: a step or a run)."""
    dropped = 0
    if len(queue) == queue.maxlen:
        oldest = queue[0]
        dropped = len(oldest) if type(oldest) is PlainRun else 1
    queue.append(run)
    return dropped
