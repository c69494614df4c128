"""Provides the agent's loss reading: losses read in batches, so reading never syncs the GPU per step.

On the CPU a loss is read at its backward (a float, no sync). A CUDA loss is
kept as a tensor and LOSS_BATCH of them are copied to the host in one async
copy, read once its event has completed; at the end of the run they are read
blocking. A failure switches loss reading off, noted once.
"""

from __future__ import annotations

import time
from typing import Any

from pitstop.events import Loss


def flush(agent: Any, block: bool) -> None:
    """Read the agent's pending losses (see module doc); `block`: wait for copies still in flight."""
    agent._last_loss_flush = time.perf_counter()
    pending, agent._pending_losses = agent._pending_losses, {}
    try:
        read = sorted(s for s, v in pending.items() if isinstance(v, float))  # CPU: read at backward
        if read:
            agent._loss_reads.append((read, [pending[s] for s in read], None))
        steps = sorted(pending.keys() - set(read))  # tensors: read here, in one copy
        if steps:
            tensors = [pending[s] for s in steps]
            torch = agent.torch
            if tensors[0].device.type == "cuda":
                stacked = torch.stack([t.reshape(()).float() for t in tensors])
                host = stacked.to("cpu", non_blocking=True)
                done = torch.cuda.Event()
                done.record()
                agent._loss_reads.append((steps, host, done))
            else:
                agent._loss_reads.append((steps, torch.stack([t.reshape(()).float() for t in tensors]), None))
        still = []
        for steps, host, done in agent._loss_reads:
            if done is not None and not block and not done.query():
                still.append((steps, host, done))
                continue
            if done is not None:
                done.synchronize()
            values = host if isinstance(host, list) else host.tolist()
            finite = [v if v == v and v not in (float("inf"), float("-inf")) else None for v in values]
            bad = [s for s, v in zip(steps, finite) if v is None]
            agent.emit(Loss(t=time.time(), steps=steps, values=finite, nonfinite=bad))
        agent._loss_reads = still
    except Exception as err:
        agent._loss_reads = []
        agent.note("warn", "loss", f"loss reading off: {err}", once="loss")
        if agent.hooks is not None:
            agent.hooks.capture_loss = False
