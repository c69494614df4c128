"""Provides the agent's writer thread: each pass takes the slow readings, the held hook calls, and writes the queue.

Every WRITE_INTERVAL_S the thread reads what steps carry that need not be read
per step (the process's RSS, CUDA memory), takes in the calls the hooks held
for the step clock (`Agent._take_held`), then builds the queued steps' events,
encodes them once as the record's lines and hands the same lines to the record,
the live viewers and the exporters.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pitstop.events import Event
from pitstop.profiling import _cuda, _watch
from pitstop.profiling.record import record_lines

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

    The lines are the record's (`record_lines`: runs of steps as `steps` lines), encoded
    once for the record and the viewers: one JSON line per event as well had been ~a
    third of the writer's time (~15 us a step of ~0.3 ms steps, benchmarks/hotpath.py)."""
    with agent._write_lock:
        events: list[Event] = []
        queue = agent._queue
        perf = time.perf_counter()
        offset = time.time() - perf  # steps carry perf_counter stamps; events carry wall time
        while queue:
            try:
                head = queue[0]
                if not final and type(head) is tuple and agent.phases.pending(head[11], perf - head[1]):
                    break
                events.extend(agent._steps.events(queue.popleft(), offset, final))
            except IndexError:
                break
            except Exception as err:  # an event that cannot be built is dropped, not fatal
                agent.dropped += 1
                agent.note("warn", "writer", f"event dropped: {err}", once="encode")
        if not events:
            return
        try:
            lines = record_lines(events)
        except Exception:  # an unencodable event is dropped, not the batch
            lines = _lines_one_by_one(agent, events)
        try:
            agent._writer.write_lines(lines)
        except Exception as err:
            if "writer-failed" not in agent._noted:
                agent._noted.add("writer-failed")
                sys.stderr.write(f"pitstop: recording stopped: {err}\n")
        if agent.server is not None:
            agent.server.publish(lines)
        for tap in agent.taps:
            try:
                tap(events)
            except Exception as err:
                agent.taps.remove(tap)
                agent.note("warn", "agent", f"{getattr(tap, '__qualname__', tap)} off: {err}")


def _lines_one_by_one(agent: Any, events: list[Event]) -> list[str]:
    lines: list[str] = []
    for event in events:
        try:
            lines.extend(record_lines([event]))
        except Exception as err:
            agent.dropped += 1
            agent.note("warn", "writer", f"event dropped: {err}", once="encode")
    return lines
