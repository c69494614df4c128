"""Provides the agent's life in child processes: dormant until the first step, re-armed after a fork.

A `multiprocessing` child may train (pytorch/examples' mnist_hogwild steps an
optimizer in every child) or only serve (DataLoader workers, pool helpers).
Both get a dormant agent: the torch hooks are in, but no record, socket or
thread exists until the child's first backward or optimizer step wakes it.
A DataLoader worker never steps, so it never opens a file or starts a thread.

A forked child inherits the parent's agent with its hooks, and those hooks
hold the agent and its step clock in closures (`_hooks`): the child keeps the
same objects and re-initialises them in place, touching no lock the parent's
threads may have held at the fork.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from pitstop.profiling._exits import ExitWatch


def distributed() -> tuple[int, int] | None:
    """(rank, world size) of this process in an initialised torch.distributed job of several processes, else None.

    Read at a child's first step: the ranks `torch.multiprocessing.spawn` starts (pytorch/examples'
    multigpu.py, imagenet's --multiprocessing-distributed, Lightning's ddp_spawn) set up their process
    group before it, and have no RANK in their environment."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return None
        world = int(dist.get_world_size())
        return (int(dist.get_rank()), world) if world > 1 else None
    except Exception:
        return None


def reset_after_fork(agent: Any) -> None:
    """In a forked child: the parent's agent becomes this child's dormant agent (no I/O, no threads)."""
    parent = agent.pid
    agent.disabled = True  # every hook passes through until `wake`
    agent.dormant = agent.hooks is not None or agent.dormant  # without hooks there is nothing to wake it
    if agent.server is not None:
        agent.server.close_in_child()
    writer, agent._writer = agent._writer, None
    if writer is not None and getattr(writer, "_fd", -1) >= 0:
        try:
            os.close(writer._fd)  # the child's copy of the parent's record: never written here
        except OSError:
            pass
        writer._fd = -1
    fd, agent._rss_fd = agent._rss_fd, None
    if fd is not None:
        try:
            os.close(fd)  # /proc/self/statm opened by the parent reads the parent
        except OSError:
            pass
    agent._exits.uninstall()
    agent._exits = ExitWatch()
    agent.pid = os.getpid()
    agent.parent_pid = parent
    agent.rank = None  # a rank's helper is not that rank (its own record, its own row)
    agent.server = agent.sampler = agent.windows = None
    agent.record_path = agent.hello = None
    agent._writer_thread = None
    agent._started = agent.finished = agent.failed = False
    agent._stop = threading.Event()
    agent._write_lock = threading.Lock()
    agent._queue = deque(maxlen=agent._queue.maxlen)
    agent._noted = set()
    agent.dropped = 0
    agent._pending_losses = {}
    agent._pending_other = {}
    agent._loss_reads = []
    agent.worker_pids = {}
    agent.taps = []
    agent.step_taps = []
    agent._model_optimizers = 0
    agent.cuda_mem = agent.cuda_device = False  # CUDA cannot be used in a forked child
    agent.cuda_index, agent.cuda_stats, agent.cuda_reserved, agent.cuda_peak = None, {}, None, None
    alive = agent.clock.alive  # the hooks' weak references to optimizers: the child's copies stay valid
    agent.clock.__init__(agent._on_first_step, agent._on_eval, agent._new_optimizer)  # same object: the hooks hold it
    agent.clock.alive = alive
    agent.phases.__init__(agent.clock, agent.note)
    agent.blind.__init__()


def wake(agent: Any) -> None:
    """A dormant child's first step: start the agent for real; say so once on stderr if it cannot."""
    with _wake_lock:
        if not agent.dormant:
            return
        agent.dormant = False
        try:
            agent.start()
        except Exception as err:  # the training run comes first: this child goes unmeasured
            try:
                sys.stderr.write(f"pitstop: child process {os.getpid()} not measured: {type(err).__name__}: {err}\n")
            except Exception:
                pass
            return
        agent.disabled = False
        agent.clock.t_start = time.perf_counter()  # step 0 starts at the wake
        hooks = agent.hooks
        if hooks is not None:
            try:
                hooks.on_wake()
            except Exception as err:
                agent.note("warn", "hooks", f"runtime not read in this child: {err}")
        _finalize_with_multiprocessing(agent)
        _end_on_sigterm(agent)
        if agent.job is not None and agent.job.launcher == "ray":
            from pitstop.profiling._ray import end_with_training_thread

            end_with_training_thread(agent)


_wake_lock = threading.Lock()


def _finalize_with_multiprocessing(agent: Any) -> None:
    """A forked `multiprocessing` child ends in os._exit, past atexit: its End is written by
    multiprocessing's own exit finalizers, which run before that."""
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is None:
        return
    try:
        mp_util.Finalize(None, agent.stop, exitpriority=100)
    except Exception:
        pass


def _end_on_sigterm(agent: Any) -> None:
    """A Pool ends its workers with SIGTERM (`with Pool() as p` calls terminate()): their last
    steps and their End were lost, read as 0 steps of a killed process. Where SIGTERM has its
    default action, the child writes its End first, then dies of SIGTERM as it would have."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the script's own handler: never replaced

        def on_term(signum: int, frame: Any) -> None:
            try:
                agent.stop(reason="terminated", exit_code=128 + signum)
            finally:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):
        pass
