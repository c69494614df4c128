"""Writes synthetic records as the agent's writer does (used by replay_memory.py): a long run of ~10 ms steps on one GPU.

The events are built as the agent builds them and written through
`RecordWriter.write_events` in the passes the writer thread makes (every
0.5 s), so the file is what a real run of that length leaves: compressed
blocks, `steps` lines, losses to 9 digits. The figures carry a real loop's
noise (measured on `_workload_10ms.py`: wall within ~±10%, phases and data
wait jittering by tens of microseconds, a float32 loss): noise is what costs
bytes once compressed, so a too-regular synthetic record would flatter it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

from pitstop.events import (
    SCHEMA_VERSION,
    Copies,
    DataLoaderInfo,
    End,
    Event,
    Gpu,
    Hello,
    KernelStat,
    Loss,
    Model,
    OpStat,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
)
from pitstop.profiling.record import RecordWriter

STEP_S = 0.010
SAMPLE_S = 0.5
WRITE_S = 0.5  # the agent's writer period
LOSS_EVERY = 32
PROFILE_EVERY, PROFILE_FIRST, PROFILE_ACTIVE = 500, 50, 5  # the CLI's default schedule
T0 = 1_700_000_000.0
GIB = 1 << 30


def _sample(t: float, k: int, rank: int, rng: random.Random) -> Sample:
    gpu = Gpu(index=rank % 8, name="NVIDIA H100 80GB HBM3", util=float(rng.randint(85, 100)),
              mem_used=40 * GIB + rng.randrange(1 << 20), mem_total=80 * GIB, power_w=round(rng.uniform(450, 650), 1),
              power_limit_w=700.0, temp_c=float(rng.randint(55, 70)), sm_clock_mhz=1980.0,
              pcie_tx_kbs=float(rng.randint(1000, 1400)), pcie_rx_kbs=float(rng.randint(5000, 5600)))
    procs = [Proc(pid=1000 + rank, role="main", cpu=round(rng.uniform(95, 102), 1), rss=3 * GIB + k % 11 * 4096)]
    procs += [Proc(pid=2000 + 10 * rank + w, role="worker", cpu=round(rng.uniform(30, 60), 1), rss=GIB, loader=0)
              for w in range(4)]
    return Sample(t=t, gpus=[gpu], procs=procs, system_cpu=round(rng.uniform(30, 45), 1), alloc_retries=0, ooms=0,
                  cpu_wait=round(rng.uniform(0, 0.05), 3))


def _profile(t: float, start: int) -> ProfileWindow:
    ops = [OpStat(name=f"aten::op_{n}", calls=20 * (n + 1), self_us=1000.0 / (n + 1), total_us=2000.0 / (n + 1),
                  device_self_us=900.0 / (n + 1)) for n in range(20)]
    kernels = [KernelStat(name=f"sm90_xmma_gemm_kernel_{n}", calls=10 * (n + 1), total_us=800.0 / (n + 1),
                          mean_us=80.0 / (n + 1) ** 2) for n in range(20)]
    return ProfileWindow(t=t, step_start=start, step_end=start + PROFILE_ACTIVE, device="cuda", duration_s=0.06,
                         ops=ops, kernels=kernels, copies=Copies(h2d_bytes=64 << 20, h2d_us=3000.0, h2d_count=10),
                         syncs_per_step={"aten::item": 1.0},
                         phases_ms={"data": 0.3, "forward": 3.1, "backward": 5.2, "optimizer": 1.1})


def head(path: Path, session: str, rank: int | None = None, world: int | None = None) -> list[Event]:
    """What a run records before its first step."""
    return [Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session=session, pid=1000 + (rank or 0), ppid=1,
                  host="bench", argv=["python", "train.py"], cwd="/tmp", started=T0, python="3.11", script="train.py",
                  record=str(path), rank=rank, world_size=world, local_rank=None if rank is None else rank % 8),
            Runtime(t=T0 + 0.1, torch_version="2.5.0", cuda_version="12.4", device_type="cuda",
                    device_names=["NVIDIA H100 80GB HBM3"], cpu_count=32, usable_cpus=32),
            DataLoaderInfo(t=T0 + 0.2, id=0, num_workers=4, batch_size=64, pin_memory=True,
                           persistent_workers=True, prefetch_factor=2, dataset_len=1_281_167, dataset="ImageNet"),
            Model(t=T0 + 0.3, conv2d=53, optimizers=1, autocast=True, cudnn_benchmark=True)]


def passes(hours: float, rank: int = 0, data_ms: float = 0.5, seed: int = 13) -> Iterator[list[Event]]:
    """The events of a run of `hours` after its head, in the writer's passes (one list each).

    `data_ms`: the median data wait of a step (a straggler's rank waits longer).
    """
    rng = random.Random(seed + rank)
    n_steps = int(hours * 3600 / STEP_S)
    t = T0 + 1.0
    next_sample, next_write = t + SAMPLE_S, t + WRITE_S
    k = 0
    window_end = -1
    pending: list[Event] = []
    loss_steps: list[int] = []
    loss = 2.5
    for i in range(n_steps):
        wait = max(0.0, rng.gauss(data_ms, data_ms * 0.1)) / 1000
        forward = rng.gauss(0.0031, 0.00004)
        backward = rng.gauss(0.0052, 0.00006)
        optimizer = rng.gauss(0.0011, 0.00002)
        wall = wait + forward + backward + optimizer + rng.uniform(0.00005, 0.0002)
        if rng.random() < 0.02:
            wall += rng.uniform(0.0005, 0.003)  # a hiccup: the loop's own noise
        t += wall
        mark = None
        if i >= PROFILE_FIRST and (i - PROFILE_FIRST) % PROFILE_EVERY == 0:
            window_end = i + PROFILE_ACTIVE
        if i < window_end:
            mark = "profiled"
        elif i == window_end:
            mark = "after-profile"
            pending.append(_profile(t - 0.001, i - PROFILE_ACTIVE))
        pending.append(Step(t=t, step=i, wall=wall, data_wait=wait, samples=64, mem_allocated=4 * GIB,
                            mem_reserved=6 * GIB, mem_peak=5 * GIB, host_rss=3 * GIB + k % 89 * 4096, mark=mark,
                            loader=0, forward_s=forward, backward_s=backward, optimizer_s=optimizer,
                            other_s=max(0.0, wall - wait - forward - backward - optimizer), phase_clock="cuda"))
        loss_steps.append(i)
        if len(loss_steps) == LOSS_EVERY:
            values = []
            for _ in loss_steps:
                loss = loss * 0.99999 + rng.gauss(0, 0.01)
                values.append(float(_f32(loss)))
            pending.append(Loss(t=t, steps=loss_steps, values=values))
            loss_steps = []
        if t >= next_sample:
            pending.append(_sample(t, k, rank, rng))
            k += 1
            next_sample += SAMPLE_S
        if t >= next_write:
            yield pending
            pending = []
            next_write += WRITE_S
    pending.append(End(t=t + 0.1, steps=n_steps, dropped=0, exit_code=0))
    yield pending


def _f32(value: float) -> float:
    """`value` as a float32 loss read back to Python has it."""
    import struct

    return struct.unpack("f", struct.pack("f", value))[0]  # type: ignore[no-any-return]


def write(path: Path, hours: float, session: str = "bench-24h", rank: int | None = None, world: int | None = None,
          data_ms: float = 0.5, close: bool = True) -> tuple[int, float]:
    """Write the record; returns (events, seconds taken). `close=False`: left as a killed run leaves it."""
    began = time.perf_counter()
    writer = RecordWriter(path)
    events = head(path, session, rank, world)
    writer.write_events(events)
    count = len(events)
    for chunk in passes(hours, rank or 0, data_ms):
        writer.write_events(chunk)
        count += len(chunk)
    if close:
        writer.close()
    return count, time.perf_counter() - began
