"""Provides the agent's CUDA readings off the step path: the allocator's figures, and the probes that time a step.

Per step the training thread reads nothing of CUDA's. The writer thread notices
when the script initialised CUDA (never per step: a script that trains on the
CPU of a GPU machine would ask torch at every step) and reads the allocator's
reserved and peak bytes at 2 Hz for the steps to carry. Every `PROBE_S` the
training thread cuts one step itself (a probe, `time_next`): the step clock's
marker records a CUDA timing event at each of that step's stamps, its end reads
the allocated bytes (`read_allocated`) and starts the copy of the losses held
since. `torch.cuda.memory_allocated` builds, flattens and sorts the whole
allocator statistics: ~100 us of Python alone on the 2-core VM, for a dict of
its shape in a tight loop, and it had been read at every step. The steps
between probes are held for the writer thread, as a CPU run's are.
"""

from __future__ import annotations

from typing import Any

# On CUDA the training thread takes one step in itself at most this often (a probe): it times that
# step's phases with CUDA events, reads the allocated bytes and starts the losses' copy. The steps
# between are held for the writer thread like a CPU run's and carry no phases and the last reading.
PROBE_S = 0.1


def read_cuda(agent: Any) -> None:
    """Writer thread, 2 Hz: CUDA once the script initialised it; then the training device's reserved and peak bytes."""
    try:
        if not agent.cuda_mem:
            agent.cuda_mem = agent.hooks.cuda_ready()  # the probes read allocated bytes from now on
            return
        index = agent.cuda_index
        if index is None:  # no probe has read it yet
            return
        stats = agent.torch.cuda.memory_stats(index)
        agent.cuda_stats = stats
        agent.cuda_reserved = stats.get("reserved_bytes.all.current")
        agent.cuda_peak = stats.get("allocated_bytes.all.peak")
    except Exception as err:  # stop trying: steps go on without CUDA memory
        agent.cuda_mem = agent.cuda_device = False
        agent.cuda_stats, agent.cuda_reserved, agent.cuda_peak = {}, None, None
        agent.note("warn", "agent", f"CUDA memory reading off: {err}", once="cuda-mem")


def read_allocated(agent: Any) -> None:
    """Training thread, at the end of a probe's step: the allocated bytes, from the allocator's statistics
    as torch holds them (not flattened and sorted)."""
    agent._mem_probe = agent._probed_at
    try:
        cuda = agent.torch.cuda
        if agent.cuda_index is None:
            agent.cuda_index = cuda.current_device()  # per thread in CUDA: only this one knows
        stats = cuda.memory_stats_as_nested_dict(agent.cuda_index)
        # (0 where torch has none, as `memory_allocated` says: CUDA not initialised yet)
        agent.cuda_allocated = int(stats.get("allocated_bytes", {}).get("all", {}).get("current", 0))
    except Exception as err:  # stop trying: steps go on without CUDA memory
        agent.cuda_mem = agent.cuda_device = False
        agent.cuda_allocated = None
        agent.note("warn", "agent", f"CUDA memory reading off: {err}", once="cuda-mem")


def time_next(agent: Any, now: float) -> None:
    """Training thread, as a step it cut ends: whether the next step is a probe.

    A probe is taken in at once (`Agent.may_batch` is False while the clock's marker is set), its
    phases are timed with CUDA events and it reads the allocated bytes (`Agent._on_step`); the
    steps between carry no phases (the host's stamps time launches there, not work)."""
    if not agent.cuda_device:  # (a CPU run, or CUDA readings switched off): no probes
        agent.probe_due = float("inf")
        return
    if now - agent._probed_at >= PROBE_S:
        agent._probed_at = now
        agent.probe_due = now + PROBE_S
        if agent.phases.marker is not None:
            agent.clock.time_next(agent.phases.marker)
    elif agent.clock.marker is not None:
        agent.clock.time_next(None)
