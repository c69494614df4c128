"""Provides the synthetic records the replay benchmarks read: one process's lines, and the one function that writes them.

A process at 10 ms steps for `hours`: a Loss line every 32 steps as the agent
batches them, a Sample at 2 Hz with one GPU and the main process plus 4
DataLoader workers, a profiler window every 500 steps as the default schedule
takes them (its 5 marked steps and the one after). Lines are formatted
directly (encoding millions of Steps through pitstop.events would take
minutes); the first step line is checked to decode to the event
pitstop.events builds, so the shapes follow the schema.

Every line of a record file goes through `write_record`: the record format is
the reader's business, and a change of it changes that one function.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pitstop.events import (
    SCHEMA_VERSION,
    Copies,
    DataLoaderInfo,
    End,
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
    decode,
    encode,
)

STEP_S = 0.010
SAMPLE_S = 0.5
LOSS_EVERY = 32
PROFILE_EVERY, PROFILE_FIRST, PROFILE_ACTIVE = 500, 50, 5  # the CLI's default schedule
T0 = 1_700_000_000.0
GIB = 1 << 30
CHUNK_LINES = 10_000


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


def write_record(path: Path, lines: Iterable[str]) -> int:
    """Write `lines` as the record file `path`; returns how many. The one place a record's lines are written."""
    count = 0
    chunk: list[str] = []
    with open(path, "w", buffering=1 << 20) as out:
        for line in lines:
            chunk.append(line)
            if len(chunk) >= CHUNK_LINES:
                out.write("\n".join(chunk) + "\n")
                count += len(chunk)
                chunk = []
        if chunk:
            out.write("\n".join(chunk) + "\n")
            count += len(chunk)
    return count


def _step_line(t: float, i: int, wall: float, wait: float, mark: str | None, alloc: int, rss: int) -> str:
    mark_json = "null" if mark is None else f'"{mark}"'
    return (f'{{"kind":"step","t":{t!r},"step":{i},"wall":{wall!r},"data_wait":{wait!r},"samples":64,'
            f'"source":"optimizer","mem_allocated":{alloc},"mem_reserved":{6 * GIB},"mem_peak":{5 * GIB},'
            f'"host_rss":{rss},"mark":{mark_json},"eval_s":0.0,"loader":1}}')


def _sample(t: float, k: int, pid: int) -> Sample:
    gpu = Gpu(index=0, name="NVIDIA H100 80GB HBM3", util=90.0 + k % 10, mem_used=40 * GIB + k % 7 * 1000,
              mem_total=80 * GIB, power_w=500.0 + k % 50, power_limit_w=700.0, temp_c=60.0 + k % 5,
              sm_clock_mhz=1980.0, pcie_tx_kbs=1200.0, pcie_rx_kbs=5300.0 + k % 100)
    procs = [Proc(pid=pid, role="main", cpu=99.0 + k % 3, rss=3 * GIB + k % 11 * 4096)]
    procs += [Proc(pid=pid + 1 + w, role="worker", cpu=40.0 + (k + w) % 20, rss=GIB, loader=1) for w in range(4)]
    return Sample(t=t, gpus=[gpu], procs=procs, system_cpu=35.0 + k % 9, alloc_retries=0, ooms=0)


def _profile(t: float, start: int) -> ProfileWindow:
    ops = [OpStat(name=f"aten::op_{n}", calls=20 * (n + 1), self_us=1000.0 / (n + 1), total_us=2000.0 / (n + 1),
                  device_self_us=900.0 / (n + 1)) for n in range(20)]
    kernels = [KernelStat(name=f"sm90_xmma_gemm_kernel_{n}", calls=10 * (n + 1), total_us=800.0 / (n + 1),
                          mean_us=80.0 / (n + 1) ** 2) for n in range(20)]
    return ProfileWindow(t=t, step_start=start, step_end=start + PROFILE_ACTIVE, device="cuda", duration_s=0.06,
                         ops=ops, kernels=kernels, copies=Copies(h2d_bytes=64 << 20, h2d_us=3000.0, h2d_count=10),
                         syncs_per_step={"aten::item": 1.0},
                         phases_ms={"data": 0.3, "forward": 3.1, "backward": 5.2, "optimizer": 1.1})


def _loader(t: float, loader_id: int, eval_loader: bool) -> DataLoaderInfo:
    return DataLoaderInfo(t=t, id=loader_id, num_workers=4, batch_size=64, pin_memory=True,
                          persistent_workers=not eval_loader, prefetch_factor=2,
                          dataset_len=50_000 if eval_loader else 1_281_167, dataset="ImageNet",
                          shuffle=not eval_loader)


def head(who: Process, record: str) -> list[str]:
    """The lines a process writes before its first step."""
    hello = Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session=who.session, pid=who.pid, ppid=1,
                  host=who.host, argv=["python", "train.py"], cwd="/tmp", started=T0, python="3.11",
                  script="train.py", record=record, rank=who.rank, world_size=who.world_size,
                  local_rank=None if who.rank is None else who.rank % 8)
    events = [hello,
              Runtime(t=T0 + 0.1, torch_version="2.5.0", cuda_version="12.4", device_type="cuda",
                      device_names=["NVIDIA H100 80GB HBM3"], cpu_count=32, usable_cpus=32),
              _loader(T0 + 0.2, 1, eval_loader=False),
              Model(t=T0 + 0.3, conv2d=53, optimizers=1, autocast=True, cudnn_benchmark=True)]
    return [encode(event) for event in events]


def record_lines(who: Process, hours: float, record: str = "") -> Iterator[str]:
    """Every line of one process's record of `hours` at ~10 ms steps, End last.

    The walls come from one seed for every process: in DDP every rank waits for
    the slowest in the all-reduce, so the ranks' walls are the same; a rank that
    waits longer for its data (`who.data_wait`) shows it in its data wait only.
    """
    n_steps = int(hours * 3600 / STEP_S)
    rng = random.Random(13)
    yield from head(who, record)
    t = T0 + 1.0
    next_sample = t + SAMPLE_S
    k = 0
    losses: list[int] = []
    window_end = -1
    loaders = 1
    for i in range(n_steps):
        wall = STEP_S * (0.9 + 0.2 * rng.random())
        t += wall
        mark = None
        if i >= PROFILE_FIRST and (i - PROFILE_FIRST) % PROFILE_EVERY == 0:
            window_end = i + PROFILE_ACTIVE
        if i < window_end:
            mark = "profiled"
        elif i == window_end:
            mark = "after-profile"
            yield encode(_profile(t - 0.001, i - PROFILE_ACTIVE))
        if who.loader_every and i and i % who.loader_every == 0:
            loaders += 1
            yield encode(_loader(round(t, 6), loaders, eval_loader=True))
        wait = round(wall * who.data_wait, 6)
        line = _step_line(round(t, 6), i, round(wall, 6), wait, mark, 4 * GIB + (i % 97) * 4096,
                          3 * GIB + (i % 89) * 4096)
        if i == 0:
            _check(line, Step(t=round(t, 6), step=i, wall=round(wall, 6), data_wait=wait, samples=64,
                              mem_allocated=4 * GIB, mem_reserved=6 * GIB, mem_peak=5 * GIB, host_rss=3 * GIB,
                              mark=mark, loader=1))
        yield line
        losses.append(i)
        if len(losses) == LOSS_EVERY:
            values = [round(2.5 * 0.9999 ** s, 6) for s in losses]
            yield encode(Loss(t=round(t, 6), steps=losses, values=values))
            losses = []
        if t >= next_sample:
            yield encode(_sample(round(t, 6), k, who.pid))
            k += 1
            next_sample += SAMPLE_S
    yield encode(End(t=t + 0.1, steps=n_steps, dropped=0, exit_code=0))


def _check(line: str, expected: Step) -> None:
    got = decode(line)
    if got != expected:
        raise SystemExit(f"the synthetic step line does not decode to the schema's Step:\n{got}\n{expected}")
