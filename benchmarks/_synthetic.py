"""Provides the synthetic records the replay benchmarks read: one process's events, and the one function that writes them.

A process at ~10 ms steps for `hours` on one GPU: a Loss every 32 steps as the
agent batches them, a Sample at 2 Hz with the main process plus 4 DataLoader
workers, a profiler window every 500 steps as the default schedule takes them
(its 5 marked steps and the one after). The figures carry a real loop's noise
(measured on `_workload_10ms.py` under `pitstop run`: phases jittering by tens
of microseconds, a few percent of steps with a hiccup, a float32 loss): noise
is what costs bytes once compressed, so a too-regular synthetic record would
flatter the record's size.

Every record file is written by `write_record`, through the agent's own
`RecordWriter.write_events` in the passes its writer thread makes (every
0.5 s): compressed blocks, `steps` lines, losses to 9 digits, as a real run of
that length leaves them; the agent's socket sends a viewer the same lines.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Process:
    """Who writes a record: its Hello's fields, and how its data wait behaves."""

    session: str
    pid: int = 1000
    rank: int | None = None
    world_size: int | None = None
    host: str = "bench"
    data_wait: float = 0.05  # data wait as a share of the step's wall
    loader_every: int | None = None  # steps between the DataLoaders a script builds anew (one per epoch)
    # A job over several nodes (Hello.job ...): one front per node, so one session per node.
    job: str | None = None
    node_rank: int | None = None
    nodes: int | None = None
    local_world_size: int | None = None


def write_record(path: Path, events: Iterable[Event], close: bool = True) -> int:
    """Write `events` as the record file `path`, as the agent's writer does; returns how many.

    The one place a synthetic record is written. `close=False` leaves its last
    block open, as a run killed with SIGKILL leaves it.
    """
    writer = RecordWriter(path)
    count = 0
    pending: list[Event] = []
    next_write = T0 + 1.0 + WRITE_S
    for event in events:
        pending.append(event)
        if type(event) is Step and event.t >= next_write:
            writer.write_events(pending)
            count += len(pending)
            pending = []
            next_write += WRITE_S
    writer.write_events(pending)
    count += len(pending)
    if close:
        writer.close()
    return count


def _sample(t: float, k: int, pid: int, rng: random.Random) -> Sample:
    gpu = Gpu(index=0, name="NVIDIA H100 80GB HBM3", util=float(rng.randint(85, 100)),
              mem_used=40 * GIB + rng.randrange(1 << 20), mem_total=80 * GIB,
              power_w=round(rng.uniform(450, 650), 1), power_limit_w=700.0, temp_c=float(rng.randint(55, 70)),
              sm_clock_mhz=1980.0, pcie_tx_kbs=float(rng.randint(1000, 1400)),
              pcie_rx_kbs=float(rng.randint(5000, 5600)))
    procs = [Proc(pid=pid, role="main", cpu=round(rng.uniform(95, 102), 1), rss=3 * GIB + k % 11 * 4096)]
    procs += [Proc(pid=pid + 1 + w, role="worker", cpu=round(rng.uniform(30, 60), 1), rss=GIB, loader=1)
              for w in range(4)]
    return Sample(t=round(t, 6), gpus=[gpu], procs=procs, system_cpu=round(rng.uniform(30, 45), 1), alloc_retries=0,
                  ooms=0, cpu_wait=round(rng.uniform(0, 0.05), 3))


def _profile(t: float, start: int) -> ProfileWindow:
    ops = [OpStat(name=f"aten::op_{n}", calls=20 * (n + 1), self_us=1000.0 / (n + 1), total_us=2000.0 / (n + 1),
                  device_self_us=900.0 / (n + 1)) for n in range(20)]
    kernels = [KernelStat(name=f"sm90_xmma_gemm_kernel_{n}", calls=10 * (n + 1), total_us=800.0 / (n + 1),
                          mean_us=80.0 / (n + 1) ** 2) for n in range(20)]
    return ProfileWindow(t=round(t, 6), step_start=start, step_end=start + PROFILE_ACTIVE, device="cuda",
                         duration_s=0.06, ops=ops, kernels=kernels,
                         copies=Copies(h2d_bytes=64 << 20, h2d_us=3000.0, h2d_count=10),
                         syncs_per_step={"aten::item": 1.0},
                         phases_ms={"data": 0.3, "forward": 3.1, "backward": 5.2, "optimizer": 1.1})


def _loader(t: float, loader_id: int, eval_loader: bool) -> DataLoaderInfo:
    return DataLoaderInfo(t=t, id=loader_id, num_workers=4, batch_size=64, pin_memory=True,
                          persistent_workers=not eval_loader, prefetch_factor=2,
                          dataset_len=50_000 if eval_loader else 1_281_167, dataset="ImageNet",
                          shuffle=not eval_loader)


def head(who: Process, record: str) -> list[Event]:
    """The events a process records before its first step."""
    hello = Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session=who.session, pid=who.pid, ppid=1,
                  host=who.host, argv=["python", "train.py"], cwd="/tmp", started=T0, python="3.11",
                  script="train.py", record=record, rank=who.rank, world_size=who.world_size,
                  local_rank=None if who.rank is None else who.rank % 8, job=who.job,
                  launcher="torchrun" if who.job else None, node=who.host if who.job else None,
                  node_rank=who.node_rank, nodes=who.nodes, local_world_size=who.local_world_size)
    return [hello,
            Runtime(t=T0 + 0.1, torch_version="2.5.0", cuda_version="12.4", device_type="cuda",
                    device_names=["NVIDIA H100 80GB HBM3"], cpu_count=32, usable_cpus=32),
            _loader(T0 + 0.2, 1, eval_loader=False),
            Model(t=T0 + 0.3, conv2d=53, optimizers=1, autocast=True, cudnn_benchmark=True)]


def _f32(value: float) -> float:
    """`value` as a float32 loss read back to Python has it."""
    return struct.unpack("f", struct.pack("f", value))[0]  # type: ignore[no-any-return]


def _step(**fields: object) -> Step:
    """A Step built as the record reader builds one (the frozen dataclass's __init__ is most of the time here)."""
    step = object.__new__(Step)
    step.__dict__.update(fields)
    return step


def record_events(who: Process, hours: float, record: str = "") -> Iterator[Event]:
    """Every event of one process's record of `hours` at ~10 ms steps, End last.

    The phases come from one seed for every process: in DDP every rank waits for
    the slowest in the all-reduce, so the ranks' computes are alike; a rank that
    waits longer for its data (`who.data_wait`) shows it in its data wait.
    """
    n_steps = int(hours * 3600 / STEP_S)
    rng = random.Random(13)  # the job's shared pace
    own = random.Random(1000 + (who.rank or 0))  # this process's data wait, loss and sampler readings
    yield from head(who, record)
    t = T0 + 1.0
    next_sample = t + SAMPLE_S
    k = 0
    losses: list[int] = []
    window_end = -1
    loaders = 1
    loss = 2.5
    gauss = rng.gauss
    for i in range(n_steps):
        forward, backward, optimizer = gauss(0.0031, 4e-5), gauss(0.0052, 6e-5), gauss(0.0011, 2e-5)
        other = rng.uniform(5e-5, 2e-4) + (rng.uniform(5e-4, 3e-3) if rng.random() < 0.02 else 0.0)
        compute = forward + backward + optimizer + other
        wait = max(0.0, own.gauss(1.0, 0.1)) * compute * who.data_wait / (1 - who.data_wait)
        wall = compute + wait
        t += wall
        mark = None
        if i >= PROFILE_FIRST and (i - PROFILE_FIRST) % PROFILE_EVERY == 0:
            window_end = i + PROFILE_ACTIVE
        if i < window_end:
            mark = "profiled"
        elif i == window_end:
            mark = "after-profile"
            yield _profile(t - 0.001, i - PROFILE_ACTIVE)
        if who.loader_every and i and i % who.loader_every == 0:
            loaders += 1
            yield _loader(round(t, 6), loaders, eval_loader=True)
        yield _step(t=round(t, 6), step=i, wall=round(wall, 6), data_wait=round(wait, 6), samples=64,
                    source="optimizer", mem_allocated=4 * GIB, mem_reserved=6 * GIB, mem_peak=5 * GIB,
                    host_rss=3 * GIB + k % 89 * 4096, mark=mark, eval_s=0.0, loader=1, forward_s=round(forward, 6),
                    backward_s=round(backward, 6), optimizer_s=round(optimizer, 6), other_s=round(other, 6),
                    phase_clock="cuda")
        losses.append(i)
        if len(losses) == LOSS_EVERY:
            values = []
            for _ in losses:
                loss = loss * 0.99999 + own.gauss(0, 0.01)
                values.append(_f32(loss))
            yield Loss(t=round(t, 6), steps=losses, values=values)
            losses = []
        if t >= next_sample:
            yield _sample(t, k, who.pid, own)
            k += 1
            next_sample += SAMPLE_S
    yield End(t=round(t + 0.1, 6), steps=n_steps, dropped=0, exit_code=0)
