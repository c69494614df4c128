"""Provides the agent's writer thread: each pass takes the slow readings, the held hook calls, and writes the queue.

Every WRITE_INTERVAL_S the thread reads what steps carry that need not be read
per step (the process's RSS, CUDA memory), takes in the calls the hooks held
for the step clock (`Agent._take_held`), then turns each run of queued steps
into columns (a list a `Step` field), encodes them once as the record's lines
and hands the same lines to the record and the live viewers, the columns to the
step taps (the stall watch) and events to the exporters (`Step` events are
built only for those).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from pitstop.events import Event, Loss, Step
from pitstop.profiling import _cuda, _watch
from pitstop.profiling._plainsteps import PlainRun
from pitstop.profiling._stepevents import plain_lines, steps_of
from pitstop.profiling.record import record_lines
from pitstop.stepcolumns import MAX_STEPS, encode_columns, encode_loss

_FIELDS = tuple(f.name for f in dataclasses.fields(Step))

WRITE_INTERVAL_S = 0.5  # viewers see a step within ~0.5 s (wake-ups cost: docs/internals.md)


def loop(agent: Any) -> None:
    """The writer thread's body: a pass every WRITE_INTERVAL_S until the agent stops."""
    next_t = time.monotonic()
    while not agent._stop.is_set():
        next_t += WRITE_INTERVAL_S
        agent._stop.wait(max(0.0, next_t - time.monotonic()))
        agent._read_slow()
        agent._take_held()
        agent._drain()


def read_slow(agent: Any) -> None:
    """The readings steps carry that need not be taken per step (writer thread, 2 Hz)."""
    agent.rss_now = rss(agent)
    if agent.hooks is None:
        _watch.install_late(agent)  # torch imported past the import watcher: hooked now, and said
    agent.blind.check(agent)
    if agent.cuda_device:
        _cuda.read_cuda(agent)


def rss(agent: Any) -> int | None:
    """Resident bytes of the agent's process. Read on the writer thread (2 Hz), not per step:
    a read per step on the training thread cost ~0.4% of a 10 ms step in an
    in-process A/B (benchmarks/_overhead_ab.py, the read switched off in one
    variant), far more than its 2 us in a tight loop."""
    if agent._rss_fd is None:
        return None
    try:
        fields = os.pread(agent._rss_fd, 128, 0).split()
        return int(fields[1]) * agent._page
    except (OSError, IndexError, ValueError):
        return None


def drain(agent: Any, final: bool = False) -> None:
    """Write what the queue holds. A step whose CUDA phase events the GPU has not reached yet
    stops the pass (it and what follows wait for the next, in order), unless `final`.

    The lines are the record's, as `record_lines` writes them (each run of steps as `steps`
    lines, the losses read meanwhile after them), encoded once for the record and the
    viewers: one JSON line per event as well had been ~a third of the writer's time (~15 us
    a step of ~0.3 ms steps, benchmarks/hotpath.py). A run of queued steps goes to its lines
    as columns (`StepEvents.columns`; `run_columns` where it holds the `PlainRun`s of the writer's
    own takes); `Step` events are built only for the taps."""
    with agent._write_lock:
        queue = agent._queue
        perf = time.perf_counter()
        offset = time.time() - perf  # steps carry perf_counter stamps; events carry wall time
        made = agent._steps
        add_loss = made.losses.add
        taps = agent.taps
        runs: list[dict[str, list[Any]]] = []  # for the step taps
        lines: list[str] = []
        tapped: list[Event] = []
        rows: list[Any] = []  # the run's steps: queued tuples, and the `PlainRun`s of the writer's own takes
        count = [0, 0]  # the run's steps, and its `PlainRun`s
        losses: list[tuple[int, Loss]] = []  # the run's losses, each after how many of its steps

        def run_out() -> None:  # the run so far: its steps' lines, then its losses'
            try:
                seconds: dict[str, Any] = {}  # (a run of one `PlainRun`: its numpy arrays, for the line)
                columns = None if not rows else made.run_columns(rows, offset, final, seconds) if count[1] \
                    else made.columns(rows, offset, final)
                # (a run of one `PlainRun`, the pass's usual: its lines from the arrays, as the columns')
                run_lines = plain_lines(rows[0], seconds) if count[1] == 1 and len(rows) == 1 else None
                if run_lines is None and columns is not None:
                    run_lines = steps_lines(columns, seconds)
                lines.extend(run_lines or ())
                lines.extend(encode_loss(loss) for _, loss in losses)
                if taps:
                    tapped.extend(in_queue_order(steps_of(columns) if columns is not None else [], losses))
                if columns is not None:
                    runs.append(columns)
            except Exception:  # a step that cannot be encoded: the run event by event, that one dropped
                steps = _steps_one_by_one(agent, _tuples(rows) if count[1] else rows, offset, final)
                lines.extend(_lines_one_by_one(agent, in_queue_order(steps, losses), tapped if taps else None))
                if steps:
                    runs.append({name: [getattr(s, name) for s in steps] for name in _FIELDS})
            rows.clear()
            losses.clear()
            count[0] = count[1] = 0

        while queue:
            try:
                head = queue[0]
                if type(head) is tuple:
                    phases = head[11]  # (a step with CUDA spans may wait for the GPU to pass them)
                    if not final and phases is not None and phases[3] and agent.phases.pending(phases, perf - head[1]):
                        break
                    row = queue.popleft()
                    rows.append(row)
                    count[0] += 1
                    if type(row[12]) is float:  # a CPU loss: gathered into a `Loss` event every LOSS_BATCH
                        loss = add_loss(row[0], row[12], row[1])
                        if loss is not None:
                            losses.append((count[0], loss))
                    continue
                if type(head) is PlainRun:  # (host-timed CPU steps: nothing waits for a GPU)
                    run = queue.popleft()
                    rows.append(run)
                    at = count[0]
                    count[0] += len(run.rows)
                    count[1] += 1
                    first, run_rows = run.first, run.rows
                    for i in run.losses:  # (their losses: as the steps' tuples add them, in order)
                        row = run_rows[i]
                        loss = add_loss(first + i, row[7], row[0])
                        if loss is not None:
                            losses.append((at + i + 1, loss))
                    continue
                events = made.events(queue.popleft(), offset, final)
            except IndexError:
                break
            except Exception as err:  # an event that cannot be built is dropped, not fatal
                agent.dropped += 1
                agent.note("warn", "writer", f"event dropped: {err}", once="encode")
                continue
            for event in events:
                if type(event) is Loss:  # (a loss does not end a run: it follows the run's steps)
                    losses.append((len(rows), event))
                    continue
                if rows or losses:
                    run_out()
                lines.extend(_lines_one_by_one(agent, [event]))
                if taps:
                    tapped.append(event)
        if rows or losses:
            run_out()
        if not lines:
            return
        try:
            agent._writer.write_lines(lines)
        except Exception as err:
            if "writer-failed" not in agent._noted:
                agent._noted.add("writer-failed")
                sys.stderr.write(f"pitstop: recording stopped: {err}\n")
        if agent.server is not None:
            agent.server.publish(lines)
        for step_tap in list(agent.step_taps):
            try:
                for columns in runs:
                    step_tap(columns)
            except Exception as err:
                agent.step_taps.remove(step_tap)
                agent.note("warn", "agent", f"{getattr(step_tap, '__qualname__', step_tap)} off: {err}")
        for tap in list(taps):
            try:
                tap(tapped)
            except Exception as err:
                agent.taps.remove(tap)
                agent.note("warn", "agent", f"{getattr(tap, '__qualname__', tap)} off: {err}")


def steps_lines(columns: dict[str, list[Any]], seconds: dict[str, Any] | None = None) -> list[str]:
    """The `steps` lines of a run of steps given as columns: MAX_STEPS a line, as `record_lines` cuts them
    (`seconds`: numpy arrays of some timing columns' values, `encode_columns` says)."""
    n = len(columns["step"])
    if n <= MAX_STEPS:
        return [encode_columns(columns, seconds)]
    return [encode_columns({name: values[i:i + MAX_STEPS] for name, values in columns.items()},
                           {name: values[i:i + MAX_STEPS] for name, values in seconds.items()} if seconds else None)
            for i in range(0, n, MAX_STEPS)]


def in_queue_order(steps: list[Step], losses: list[tuple[int, Loss]]) -> list[Event]:
    """A run's steps and losses as the queue held them (the taps' order): each loss after its step."""
    out: list[Event] = []
    at = 0
    for after, loss in losses:
        out.extend(steps[at:after])
        out.append(loss)
        at = max(at, after)
    out.extend(steps[at:])
    return out


def _lines_one_by_one(agent: Any, events: list[Event], tapped: list[Event] | None = None) -> list[str]:
    """Each event's lines on their own; one that cannot be encoded is dropped and noted (`tapped`: the
    ones encoded, for the taps)."""
    lines: list[str] = []
    for event in events:
        try:
            lines.extend(record_lines([event]))
        except Exception as err:
            agent.dropped += 1
            agent.note("warn", "writer", f"event dropped: {err}", once="encode")
            continue
        if tapped is not None:
            tapped.append(event)
    return lines


def _tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    """A run's steps as queued tuples, its `PlainRun`s opened."""
    out: list[tuple[Any, ...]] = []
    for item in rows:
        if type(item) is PlainRun:
            out.extend(item.tuples())
        else:
            out.append(item)
    return out


def _steps_one_by_one(agent: Any, rows: list[tuple[Any, ...]], offset: float, final: bool) -> list[Step]:
    """The `Step` events of queued steps, one at a time; one that cannot be built is dropped and noted."""
    steps = []
    for row in rows:
        try:
            steps.append(agent._steps.step(row, offset, final))
        except Exception as err:
            agent.dropped += 1
            agent.note("warn", "writer", f"event dropped: {err}", once="encode")
    return steps
