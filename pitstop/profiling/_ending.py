"""Provides the agent's ending: the record's `End`, and all that `Agent.start()` took given back.

Called by `Agent.stop()` (at exit, at a trial's end, on a signal) once the
agent has started and not yet stopped. The order matters: the profiler window
closes before the held steps are flushed (no window may open on them), the
step clock's end (an evaluation after the last step) comes before the `End`
event that counts it, the writer's last pass after the `End` is queued, and
the exit watch's hooks are undone before the stall watch's (it wrapped ours).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from pitstop.events import End
from pitstop.profiling import _losses

_perf = time.perf_counter


def end(agent: Any, reason: str | None, exit_code: int | None) -> None:
    """End the record and close everything (see the module doc); `Agent.stop` checked it is due."""
    agent.disabled = False  # a failed agent still ends its record (hooks no longer matter at exit)
    if reason is None:
        reason, exit_code = agent._exits.outcome
    try:
        if agent.windows is not None:
            agent.windows.close()
    except Exception:
        pass
    try:
        agent.flush_stamps()  # the steps the hooks still hold (no window starts now: closed)
    except Exception:
        pass
    agent.batching = False
    eval_after = None
    try:
        eval_after = agent.clock.finish(_perf())  # held steps out; an evaluation after the last step
    except Exception:
        pass
    if agent.torch is not None:
        _losses.read_tail(agent)
        agent.flush_losses(block=True)
    if agent.sampler is not None:
        agent.sampler.stop()
    agent.blind.check(agent, final=True)
    if agent.stallwatch is not None:
        agent.stallwatch.stop()
    clock = agent.clock
    agent.emit(End(t=time.time(), steps=agent.step_index, dropped=agent.dropped, reason=reason, exit_code=exit_code,
                  eval_s=eval_after or 0.0, eval_passes=clock.end_passes or None, rollouts=clock.end_rollouts,
                  rollout_s=clock.end_rollout_s))
    agent._stop.set()
    if agent._writer_thread is not None and agent._writer_thread is not threading.current_thread():
        agent._writer_thread.join(timeout=2.0)
    agent._drain(final=True)
    try:
        if agent._writer is not None:
            agent._writer.close()
    except Exception:
        pass
    if agent.server is not None:
        agent.server.close()
    agent._exits.uninstall()
    if agent.stallwatch is not None:
        agent.stallwatch.release()  # after the exit watch's: it wrapped ours
    agent._last_signal.uninstall()
    agent._exits.keep_interrupt()
    fd, agent._rss_fd = agent._rss_fd, None
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    # The atexit entry stays (stop() again is a no-op): unregistering from inside
    # an atexit callback crashed CPython before 3.10.2 (bpo-46025).
