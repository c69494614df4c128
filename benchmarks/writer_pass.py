"""Prints the agent's writer thread's CPU a step: held plain steps taken in, the queue drained to a record.

    python benchmarks/writer_pass.py [--steps 20000] [--per-pass 200] [--no-stall-tap] [--no-numpy] [--windows]
                                     [--no-samples] [--plain]
    PYTHONPATH=.:.venv/lib/python3.11/site-packages \
      valgrind --tool=callgrind --dump-before=getsid python -S benchmarks/writer_pass.py --steps 5000 --no-samples

No torch and no training: an `Agent` (never started) is given, pass after pass, what
the hooks hold for `--per-pass` plain steps of a ~1 ms loop (200: beside the agent on
2 cores such a loop runs ~2.3 ms steps, ~215 a pass; a batch of the training
loader, a training forward, a backward with a CPU loss one step in ten, the
optimizer's two hooks: the tuples `_hooks.py`, `_backhook.py`, `_loaderhook.py`
and `_root.py` append) and the first two calls of the step in flight as the pass
comes (a real pass finds one), then takes them in (`Agent._take_held`) and drains its queue into a
compressed record, as a default run writes it (`--plain`: a `.jsonl` one) (`Agent._drain`), with
the stall watch's tap as in every run, the sampler's reading every other pass (its 1 Hz: read
by `Sampler.read`, outside the time taken; `--no-samples` leaves it out),
and numpy imported as torch imports it (the writer rounds its columns with numpy
where the process has it: `stepcolumns.py`; `--no-numpy` leaves it out). `--windows` gives the
agent profiler windows as a default run has them (`--profile 500:5:50`), idle, the next far ahead.
It prints the thread's own CPU time a step (`time.thread_time`), split into the
take and the rest. Under callgrind the passes alone are part 2 (the script calls
`os.getsid(0)` before and after them): its instructions over the steps are the
writer's instructions a step (with `--no-samples`: the sampler's readings fall in that part
too, and move by thousands of instructions a step between runs), which do not move with the machine's load (`-S`
with `PYTHONPATH` picks one checkout over the editable install). Figures only.

What it leaves out of a real run: the live stream to `pitstop run` (the parent reads the
agent's socket: `publish` was 0.4-1.1 us a step of the writer's CPU in `pitstop run --headless`
of the 1 ms workload), the slow readings (RSS, the blind check: ~0.3 us a step), and the
training itself: there the writer's work meets caches the step's work evicted and a training
thread that wants the GIL back, and the same take and drain cost ~1.5-2x what they cost here
(docs/internals.md, "The writer's runs"); `hotpath.py`'s steady figure is the real run's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from pitstop.profiling._stallwatch import StallWatch
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.record import RecordWriter

LOADER, OPTIMIZER, SHAPE = 7, 12345, (32, 128)


def hold(agent: Any, n: int, perf: Any = time.perf_counter) -> None:
    """What the hooks hold for n plain steps, in their shapes: the step in flight at the pass before
    finished, n - 1 more, and the next one's batch and forward (in flight as the pass comes)."""
    clock, stamps = agent.clock, agent.stamps
    on_fetch, on_forward, on_backward = clock.on_fetch, clock.on_forward, clock.on_backward
    on_start, on_step = clock.on_optimizer_start, clock.on_optimizer_step
    t = perf()
    if not agent.__dict__.setdefault("_bench_in_flight", False):  # (the first pass: no step in flight yet)
        agent._bench_in_flight = True
        stamps.append((on_fetch, LOADER, t, 1e-5, SHAPE))
        stamps.append((on_forward, True, None, t + 2e-5))
    for i in range(n):
        stamps.append((on_backward, t + 4e-4, 1.0 + i * 1e-3 if i % 10 == 0 else None, t + 2e-4, None))
        stamps.append((on_start, OPTIMIZER, t + 5e-4, None))
        stamps.append((on_step, OPTIMIZER, t + 9e-4))
        t = perf()
        stamps.append((on_fetch, LOADER, t, 1e-5, SHAPE))
        stamps.append((on_forward, True, None, t + 2e-5))
    agent.batched_steps += n


def prime(agent: Any) -> None:
    """Three steps told to the clock at once, as the hooks do before they hold calls."""
    clock = agent.clock
    clock.batch_sizes[LOADER] = SHAPE[0]
    t = time.perf_counter()
    for _ in range(3):
        clock.on_fetch(LOADER, t, 1e-5, SHAPE)
        clock.on_forward(True, None, t + 2e-5)
        agent.on_backward(1.0, t + 2e-4, None, None, t + 4e-4)
        clock.on_optimizer_start(OPTIMIZER, t + 5e-4, None)
        clock.on_optimizer_step(OPTIMIZER, t + 9e-4)
        t += 1e-3
    agent._drain()
    if not agent.may_batch():
        raise SystemExit("the clock does not hold plain steps after three: not the agent this benchmark knows")
    agent.batching = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--per-pass", type=int, default=200, help="steps a writer pass finds (0.5 s of ~2.3 ms steps)")
    parser.add_argument("--no-stall-tap", action="store_true", help="without the stall watch's tap")
    parser.add_argument("--no-numpy", action="store_true", help="without numpy imported (a process without torch)")
    parser.add_argument("--windows", action="store_true", help="idle profiler windows, as in a default run")
    parser.add_argument("--no-samples", action="store_true", help="without the sampler's reading every other pass")
    parser.add_argument("--plain", action="store_true", help="an uncompressed record (`--record NAME.jsonl`)")
    args = parser.parse_args()
    if not args.no_numpy:
        import numpy  # noqa: F401  (as `import torch` does: the writer uses it where it is imported)
    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent(SessionSettings(session="bench", record=str(Path(tmp) / "records"), script="train.py",
                                      profile=None))
        agent._writer = RecordWriter(Path(tmp) / ("run.jsonl" if args.plain else "run.jsonl.gz"))
        sampler = None
        if not args.no_samples:
            from pitstop.profiling.sampler import Sampler

            sampler = Sampler(agent)
        if args.windows:
            from pitstop.profiling.windows import ProfilerWindows

            agent.windows = ProfilerWindows(every=500, active=5, first=10**9, trace_dir=None, device_type="cpu",
                                            emit=agent.emit, note=lambda level, message: None,
                                            profiler_factory=lambda: None)
        prime(agent)
        if not args.no_stall_tap:
            watch = StallWatch(agent)
            if hasattr(agent, "step_taps"):
                agent.step_taps.append(watch.feed_steps)
            else:  # (a checkout from before the step taps: the stall watch fed events)
                agent.taps.append(watch.feed)  # type: ignore[attr-defined]
        passes = args.steps // args.per_pass
        steps = passes * args.per_pass
        total = took = 0.0
        os.getsid(0)  # callgrind (`--dump-before=getsid`): the passes alone are part 2
        for done in range(passes):
            hold(agent, args.per_pass)
            if sampler is not None and done % 2:
                agent.emit(sampler.read())
            c0 = time.thread_time()
            agent._take_held()
            c1 = time.thread_time()
            agent._drain()
            total += time.thread_time() - c0
            took += c1 - c0
        os.getsid(0)
        agent._writer.close()
    print(f"writer CPU: {total / steps * 1e6:.2f} us a step over {steps} steps in passes of {args.per_pass} "
          f"(taking the held calls in {took / steps * 1e6:.2f}, the rest {(total - took) / steps * 1e6:.2f}); "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
