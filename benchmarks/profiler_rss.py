"""Prints host RSS over 200 profiler windows and the step-time cost of windows every 50 steps.

    python benchmarks/profiler_rss.py [--windows 200] [--keep-cycles]

Part 1 runs `--windows` windows of 2 steps each, back to back (each next window
opens as soon as the previous one is aggregated), on a small CPU MLP, and prints
RSS at windows 1, 50, 100, 150, 200 with the least-squares slope in MiB per 100
windows over windows 20.. (the first ones pay one-off allocations).
`--keep-cycles` turns off the explicit freeing of the event tree, to show what
it buys. Part 2 alternates blocks of steps with no windows and with windows
every 50 steps (active=5) in the same process and prints the ratio of median
(and mean) step times. Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # silence Kineto's per-session lines, as the agent does
import torch  # noqa: E402

from pitstop.profiling import _aggregate  # noqa: E402
from pitstop.profiling.windows import ProfilerWindows  # noqa: E402

MiB = 1024 * 1024


class Workload:
    """A 3-layer MLP with SGD and one .item() per step: ~1-2 ms a step on one core."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(64, 256)
        self.y = torch.randint(0, 10, (64,))

    def step(self) -> None:
        loss = torch.nn.functional.cross_entropy(self.model(self.x), self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        loss.item()


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / MiB


def slope_per_100(xs: list[int], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    den = sum((x - mx) ** 2 for x in xs)
    return 100.0 * num / den if den else 0.0


def rss_over_windows(n: int) -> None:
    work = Workload()
    done = threading.Semaphore(0)
    notes: list[str] = []
    emitted: list[int] = []

    def emit(ev: Any) -> None:
        emitted.append(len(ev.ops))  # keep only a number: the benchmark must not hold the events
        done.release()

    w = ProfilerWindows(every=None, active=2, first=0, trace_dir=None, device_type="cpu", emit=emit,
                        note=lambda lvl, msg: notes.append(f"{lvl}: {msg}"))
    for _ in range(20):  # warm-up outside any window
        work.step()
    marks = {1, 50, 100, 150, 200, n}
    xs: list[int] = []
    ys: list[float] = []
    step = 0
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        w.request()
        for _ in range(4):  # the step that opens it, the 2 recorded steps, the one that stops it
            work.step()
            w.on_step(step)
            step += 1
        if not done.acquire(timeout=60):
            print(f"window {i} not emitted within 60 s; notes: {notes}")
            return
        r = rss_mib()
        if i >= 20:
            xs.append(i)
            ys.append(r)
        if i in marks:
            print(f"  window {i:4d}: RSS {r:8.1f} MiB")
    w.close()
    elapsed = time.perf_counter() - t0
    print(f"  slope over windows 20..{n}: {slope_per_100(xs, ys):+.2f} MiB per 100 windows "
          f"({n} windows in {elapsed:.1f} s, {statistics.fmean(emitted):.0f} ops per table)")
    if notes:
        print("  notes:", *notes, sep="\n    ")


def overhead(blocks: int, block_steps: int) -> None:
    work = Workload()
    for _ in range(50):
        work.step()
    times: dict[str, list[float]] = {"none": [], "every 50": []}
    step = 0
    windows = 0

    def count(_: Any) -> None:
        nonlocal windows
        windows += 1

    for b in range(2 * blocks):
        mode = "none" if b % 2 == 0 else "every 50"
        w = None
        if mode != "none":
            w = ProfilerWindows(every=50, active=5, first=step + 10, trace_dir=None, device_type="cpu",
                                emit=count, note=lambda lvl, msg: print(f"  note {lvl}: {msg}"))
        for _ in range(block_steps):
            t = time.perf_counter()
            work.step()
            if w is not None:
                w.on_step(step)
            times[mode].append(time.perf_counter() - t)
            step += 1
        if w is not None:
            w.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    print(f"  median step: none {med['none'] * 1e3:.3f} ms, every 50 {med['every 50'] * 1e3:.3f} ms, "
          f"ratio {med['every 50'] / med['none']:.3f}")
    print(f"  mean step:   none {mean['none'] * 1e3:.3f} ms, every 50 {mean['every 50'] * 1e3:.3f} ms, "
          f"ratio {mean['every 50'] / mean['none']:.3f}  ({windows} windows, {blocks} blocks of "
          f"{block_steps} steps each way)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=6, help="0: RSS only (as overhead.py runs it)")
    ap.add_argument("--block-steps", type=int, default=200)
    ap.add_argument("--keep-cycles", action="store_true", help="do not free the event tree explicitly")
    args = ap.parse_args()
    torch.set_num_threads(1)  # steadier step times on a shared 2-core box
    if args.keep_cycles:
        _aggregate.release = lambda events: None  # type: ignore[assignment]
        ProfilerWindows._drop = staticmethod(lambda prof: None)  # type: ignore[method-assign]
    print(f"torch {torch.__version__}, pid {os.getpid()}, threads 1"
          + (", event-tree freeing OFF" if args.keep_cycles else ""))
    print(f"RSS over {args.windows} windows (active=2, back to back):")
    rss_over_windows(args.windows)
    if args.blocks:
        print("step time, windows every 50 steps (active=5) vs none, alternating blocks:")
        overhead(args.blocks, args.block_steps)


if __name__ == "__main__":
    main()
