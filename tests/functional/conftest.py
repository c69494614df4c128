"""Provides the functional tests' fake event sources, deterministic runs and Pilot helpers."""

from __future__ import annotations

import asyncio
import os
import queue
import time
from collections.abc import Callable, Iterator

from pitstop.analysis import StreamBatch
from pitstop.errors import TransportError
from pitstop.streams import Answer, Replies
from pitstop.events import (
    DataLoaderInfo,
    Event,
    Gpu,
    Hello,
    KernelStat,
    OpStat,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
)

# Snapshots print wall-clock times: pin the zone so they do not depend on the machine.
os.environ["TZ"] = "UTC"
time.tzset()

FIXED = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC: the frozen clock of every snapshot
STREAM = "pid:4242@host"
GIB = 1 << 30


def hello(pid: int = 4242, rank: int | None = None, script: str = "train.py", started: float = FIXED,
          record: str | None = None) -> Hello:
    return Hello(
        schema=1, pitstop_version="0.1.0", session="s1", pid=pid, ppid=1, host="host",
        argv=["python", script], cwd="/work", started=started, python="3.11.9",
        rank=rank, script=script, record=record,
    )


def runtime(cuda: bool = True, t: float = FIXED + 0.5) -> Runtime:
    if cuda:
        return Runtime(t=t, torch_version="2.4.0", cuda_version="12.1", device_type="cuda",
                       device_names=["NVIDIA A100-SXM4-40GB"], cpu_count=16, usable_cpus=16)
    return Runtime(t=t, torch_version="2.4.0+cpu", cuda_version=None, device_type="cpu",
                   cpu_count=8, usable_cpus=8, unavailable={"gpu": "no CUDA device (CPU build of torch)"})


def steps(n: int, *, start: int = 0, t0: float = FIXED + 1.0, wall: float = 0.1, wait_frac: float = 0.1,
          samples: int | None = 64, cuda: bool = True) -> list[Step]:
    """n steps of `wall` seconds each, `wait_frac` of it waiting for data, with a slow ramp in memory."""
    out = []
    t = t0
    for i in range(start, start + n):
        # A deterministic wobble so charts are not flat lines.
        w = wall * (1.0 + 0.15 * ((i * 7) % 5 - 2) / 2)
        t += w
        out.append(Step(
            t=t, step=i, wall=w, data_wait=w * wait_frac, samples=samples,
            mem_allocated=(2 * GIB + (i % 10) * 50 * (1 << 20)) if cuda else None,
            mem_reserved=(3 * GIB) if cuda else None,
            mem_peak=(2 * GIB + 9 * 50 * (1 << 20)) if cuda and i >= 9 else None,
            host_rss=int(1.5 * GIB) + i * (1 << 20),
        ))
    return out


def sample(t: float, *, cuda: bool = True, workers: int = 2, util: float = 55.0) -> Sample:
    procs = [Proc(pid=4242, role="main", cpu=98.0, rss=int(1.6 * GIB))]
    procs += [Proc(pid=5000 + w, role="worker", cpu=40.0 + 10 * w, rss=300 * (1 << 20)) for w in range(workers)]
    if not cuda:
        return Sample(t=t, gpu_unavailable="NVML not available: no NVIDIA driver", procs=procs, system_cpu=35.0)
    gpu = Gpu(index=0, name="NVIDIA A100-SXM4-40GB", util=util, mem_used=int(5.5 * GIB), mem_total=40 * GIB,
              power_w=210.0, power_limit_w=400.0, temp_c=61.0,
              unavailable={"gpm": "GPM needs Hopper or newer: NVML says this GPU does not support GPM"})
    return Sample(t=t, gpus=[gpu], procs=procs, system_cpu=35.0, alloc_retries=0, ooms=0)


def profile_window(t: float, step_start: int = 20, k: int = 5) -> ProfileWindow:
    ops = [
        OpStat("aten::convolution", 400, 120_000.0, 380_000.0, 310_000.0),
        OpStat("aten::addmm", 300, 45_000.0, 60_000.0, 52_000.0),
        OpStat("aten::copy_", 150, 30_000.0, 31_000.0, 8_000.0),
        OpStat("aten::batch_norm", 200, 22_000.0, 90_000.0, 40_000.0),
        OpStat("Optimizer.step#SGD.step", 5, 15_000.0, 70_000.0, None),
    ]
    kernels = [
        KernelStat("sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_nhwckrsc_nchw", 200, 210_000.0, 1050.0),
        KernelStat("ampere_sgemm_128x64_tn", 300, 50_000.0, 166.7),
        KernelStat("void at::native::vectorized_elementwise_kernel<4>", 900, 20_000.0, 22.2),
    ]
    # Host milliseconds per step in each phase, as profiling/_aggregate.phases gives them.
    phases = {"data": 9.0, "forward": 38.0, "backward": 41.0, "optimizer": 7.0, "other": 5.0}
    return ProfileWindow(t=t, step_start=step_start, step_end=step_start + k, device="cuda",
                         duration_s=0.9, ops=ops, kernels=kernels, phases_ms=phases)


def run_events(*, cuda: bool = True, n_steps: int = 120, wait_frac: float = 0.1, workers: int = 2,
               profiles: int = 1, rank: int | None = None, pid: int = 4242, wall: float = 0.1) -> list[Event]:
    """A deterministic run: hello, runtime, loader, steps with samples every 5 steps, profiler windows."""
    events: list[Event] = [hello(pid=pid, rank=rank), runtime(cuda)]
    events.append(DataLoaderInfo(t=FIXED + 0.8, id=0, num_workers=workers, batch_size=64, pin_memory=cuda,
                                 persistent_workers=False, prefetch_factor=2 if workers else None))
    all_steps = steps(n_steps, wait_frac=wait_frac, cuda=cuda, wall=wall)
    for i, s in enumerate(all_steps):
        events.append(s)
        if i % 5 == 4:
            events.append(sample(s.t + 0.01, cuda=cuda, workers=workers))
    for w in range(profiles):
        at = all_steps[min(len(all_steps) - 1, 30 + 40 * w)]
        events.append(profile_window(at.t + 0.02, step_start=at.step - 5))
    events.sort(key=lambda e: getattr(e, "t", getattr(e, "started", 0.0)))
    return events


def rank_stream(rank: int) -> str:
    return f"pid:{4242 + rank}@host"


def job_batches(*, slow_rank: int = 1, ranks: int = 2, gone_rank: int | None = None,
                n_steps: int = 120) -> list[StreamBatch]:
    """A torchrun-like job: one stream per rank; `slow_rank` computes 2.5x longer per step.

    Data wait stays the same share on every rank, so the extra time is compute. A
    `gone_rank` stops after 40 steps and its stream closes without an End event.
    """
    out = []
    for r in range(ranks):
        events = run_events(rank=r, pid=4242 + r, wall=0.25 if r == slow_rank else 0.1,
                            wait_frac=0.1 * (0.4 if r == slow_rank else 1.0),
                            n_steps=40 if r == gone_rank else n_steps, profiles=0)
        out.append(StreamBatch(rank_stream(r), events))
        if r == gone_rank:
            out.append(StreamBatch(rank_stream(r), [], closed=True))
    return out


class FakeSource:
    """A source the test feeds: `push` a batch, `finish` to end it; records commands."""

    def __init__(self, live: bool = True, label: str = "train.py (pid 4242)",
                 batches: list[StreamBatch] | None = None, error: BaseException | None = None) -> None:
        self.live = live
        self.label = label
        self.commands: list[str] = []
        self.closed = False
        self._queue: queue.Queue[StreamBatch | None] = queue.Queue()
        self._error = error
        for batch in batches or []:
            self._queue.put(batch)

    def push(self, events: list[Event], stream: str = STREAM) -> None:
        self._queue.put(StreamBatch(stream, list(events)))

    def finish(self) -> None:
        self._queue.put(None)

    def batches(self) -> Iterator[StreamBatch]:
        while True:
            if self._error is not None and self._queue.empty():
                raise self._error
            item = self._queue.get()
            if item is None:
                return
            yield item

    def command(self, name: str) -> Replies:
        if not self.live:
            raise TransportError("replay: cannot send commands to a recorded run")
        self.commands.append(name)
        return Replies(name, (Answer("pid 4242", f"ok: {name} requested"),))

    def close(self) -> None:
        self.closed = True
        self.finish()


def replay_source(events: list[Event], stream: str = "run.jsonl") -> FakeSource:
    source = FakeSource(live=False, label="replay: run.jsonl", batches=[StreamBatch(stream, events)])
    source.finish()
    return source


async def wait_for(pilot: object, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Let the app run until `predicate()` holds; fail with a clear message after `timeout` s.

    Generous: a passing test never waits it out, and at load 9-13 on 2 cores a Textual app took
    more than the 5 s this was (issue 13: test_replay_overview failed 3 of 7 reruns).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")
        await pilot.pause(0.02)  # type: ignore[attr-defined]


def screen_text(app: object) -> str:
    """Everything on the visible screen as plain text (what a person would read)."""
    from textual.app import App

    assert isinstance(app, App)
    return _plain(app)


def _plain(app: object) -> str:
    from textual.app import App

    assert isinstance(app, App)
    lines = []
    # The compositor's render of the current screen, line by line, without styles.
    for strip in app.screen._compositor.render_strips():
        lines.append("".join(segment.text for segment in strip))
    return "\n".join(lines)


def run(coro: object) -> None:
    """Run a Pilot coroutine from a sync test (pytest-asyncio is not required)."""
    asyncio.run(coro)  # type: ignore[arg-type]
