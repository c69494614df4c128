"""Prints where the agent's microseconds per step go on the training thread, call by call.

    python benchmarks/hotpath.py [--pairs 300] [--workload _workload_1ms]

Runs the ~1 ms workload under `pitstop run --headless --profile off`, its record compressed
as a default run's (the writer's CPU includes the compression). The loop
times each call it makes into torch with perf_counter_ns: the batch
(`next(it)`: the DataLoader hook), the model's forward (the root module's
`__call__` hook), the loss, `zero_grad`, `backward` (the `Tensor.backward`
wrapper) and `opt.step()` (the optimizer pre- and post-hooks). Each round
runs four 25-step blocks in one process, in a rotating order: the agent on,
switched off (`disabled`: every hook is still called and passes straight
through), "none": the hot path's patches taken out (the originals of
`__next__`, `Tensor.backward` and the model's `__call__` back in place, torch's
global optimizer hooks emptied), as without pitstop, and "floor": in their
place, hooks at the same five points that only stamp their times and append
them to a deque (`_patchswitch.py`): the least a Python hook there costs this
machine, before any of pitstop's work. A call's cost is its mean
time on minus its mean time without pitstop (and on minus off: the hooks' work
alone), so what each hook adds is measured in place, with the caches cold from
the step's own work, not in a tight loop. "step" is
the whole iteration (the calls plus the loop). Each figure comes with a
bootstrap 90% interval over the rounds; then the median step on minus the
median step without pitstop, and on minus off (a preempted step moves a mean, not it); the training thread's
own CPU time per step (`time.thread_time`: what it spent running, whatever
else the shared machine ran meanwhile, but not its waits for the GIL) and the
whole process's (the agent's threads too); and the agent's threads' CPU over 3,000 steps in a
row with the agent on, and over as long idle. Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _patchswitch import PatchSwitch

HERE = Path(__file__).resolve().parent
CALLS = ("next", "forward", "loss", "zero_grad", "backward", "step", "total")
BLOCK = 25
STEADY = 3000  # steps in a row with the agent on, for its threads' CPU per step (`steady`)
MODES = ("none", "off", "on", "floor")  # without pitstop's hot-path patches, the agent switched off, on; stamps only


def child(pairs: int, out: str) -> None:
    """Under `pitstop run`: the timed loop, in rotating blocks of each mode; writes each block's per-call sums."""
    import importlib

    import torch

    from pitstop.profiling import agent as agent_mod

    workload = importlib.import_module(os.environ.get("PITSTOP_HOTPATH_WORKLOAD", "_workload_1ms"))
    agent = agent_mod.current()
    if agent is None:
        sys.exit("run this under `pitstop run`")
    model, opt, loader = workload.build(200 + len(MODES) * BLOCK * pairs + STEADY + 10)
    batches = iter(loader)
    ns = time.perf_counter_ns
    cpu, thread_cpu = time.process_time_ns, time.thread_time_ns

    def block(n: int) -> list[int]:
        """Per-call sums of the block's steps, the thread's and the process's CPU time, then each step's total."""
        sums = [0] * (len(CALLS) + 2)
        totals = []
        c0, tc0 = cpu(), thread_cpu()
        for _ in range(n):
            t0 = ns()
            x, y = next(batches)
            t1 = ns()
            out = model(x)
            t2 = ns()
            loss = torch.nn.functional.cross_entropy(out, y)
            t3 = ns()
            opt.zero_grad()
            t4 = ns()
            loss.backward()
            t5 = ns()
            opt.step()
            t6 = ns()
            for i, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6), (t0, t6))):
                sums[i] += b - a
            totals.append(t6 - t0)
        sums[-2], sums[-1] = thread_cpu() - tc0, cpu() - c0
        return sums + totals

    block(200)  # warm-up: step 0 (the model found, the reports) and the first blocks' caches
    agent._drain()  # (the warm-up's steps written: the threads' clocks below count the blocks' own)
    switch = PatchSwitch(type(model))
    blocks: dict[str, Any] = {mode: [] for mode in MODES}
    threads = {t.name: time.pthread_getcpuclockid(t.ident) for t in threading.enumerate()
               if t.name.startswith("pitstop-") and t.ident is not None}
    before = {name: time.clock_gettime_ns(clock) for name, clock in threads.items()}
    for i in range(pairs):
        for name in MODES[i % len(MODES):] + MODES[:i % len(MODES)]:
            switch.set("pitstop" if name in ("on", "off") else name)
            agent.disabled = name == "off"
            blocks[name].append(block(BLOCK))
            switch.held.clear()
    switch.set(True)
    agent.disabled = False
    deadline = time.monotonic() + 10
    while (agent.stamps or agent._queue) and time.monotonic() < deadline:  # the writer's pass: all written
        time.sleep(0.05)
    blocks["threads"] = {name: time.clock_gettime_ns(clock) - before[name] for name, clock in threads.items()}
    blocks["steady"] = steady(agent, threads, model_step=lambda: block(1))
    Path(out).write_text(json.dumps(blocks))


def steady(agent: Any, threads: dict[str, int], model_step: Any, steps: int = STEADY) -> dict[str, Any]:
    """The agent's threads' CPU over `steps` steps in a row with the agent on, then over as long idle.

    The rounds' figure divides each thread's CPU over the whole rotation by the `on` steps
    alone, where three blocks in four have no step the agent sees and its threads still
    pass (2 Hz) and sample (1 Hz): not a figure per step. Here the steps run on their own,
    and the same wall time idle gives what the threads spend with no step to take."""
    def spent() -> dict[str, int]:
        return {name: time.clock_gettime_ns(clock) for name, clock in threads.items()}

    def drained() -> None:
        deadline = time.monotonic() + 10
        while (agent.stamps or agent._queue) and time.monotonic() < deadline:
            time.sleep(0.05)

    drained()
    start, t0 = spent(), time.perf_counter()
    for _ in range(steps):
        model_step()
    drained()
    busy, wall = spent(), time.perf_counter() - t0
    time.sleep(wall)
    idle = spent()
    return {"steps": steps, "wall_s": wall, "busy": {name: busy[name] - start[name] for name in threads},
            "idle": {name: idle[name] - busy[name] for name in threads}}


def interval(off: list[list[int]], on: list[list[int]], i: int, rounds: int = 1000) -> tuple[float, float, float]:
    """Mean us per step `on` minus `off` for column i, with a bootstrap 90% interval over the rounds."""
    def diff(idx: list[int]) -> float:
        return sum(on[j][i] - off[j][i] for j in idx) / (len(idx) * BLOCK) / 1e3

    n = len(off)
    rng = random.Random(0)
    values = sorted(diff([rng.randrange(n) for _ in range(n)]) for _ in range(rounds))
    return diff(list(range(n))), values[int(0.05 * rounds)], values[int(0.95 * rounds) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="rounds of four 25-step blocks: none, off, on, floor")
    parser.add_argument("--workload", default="_workload_1ms", help="workload module in benchmarks/")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.pairs, args.child)
        return
    print(f"command: python benchmarks/hotpath.py --pairs {args.pairs} --workload {args.workload}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "blocks.json"
        env = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600", PITSTOP_HOTPATH_WORKLOAD=args.workload)
        subprocess.run([sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--record",
                        str(Path(tmp) / "run.jsonl.gz"), str(Path(__file__).resolve()), "--pairs", str(args.pairs),
                        "--child", str(out)], check=True, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        blocks = json.loads(out.read_text())
    none, off, on, floor = blocks["none"], blocks["off"], blocks["on"], blocks["floor"]
    steps = len(off) * BLOCK
    print(f"{args.pairs} rounds of four {BLOCK}-step blocks; per step, mean over {steps} steps each way "
          f"(floor: stamps only, the least these five hooks can cost):")
    print(f"  {'call':10s} {'none us':>8s} {'off us':>8s} {'on us':>8s} {'on-none':>8s}  90% interval"
          f"   {'on-off':>7s}  90% interval   {'floor-none':>10s}  90% interval")
    for i, name in enumerate(CALLS):
        means = [statistics.fmean(b[i] for b in mode) / BLOCK / 1e3 for mode in (none, off, on)]
        whole, low, high = interval(none, on, i)
        work, wlow, whigh = interval(off, on, i)
        least, flow, fhigh = interval(none, floor, i)
        print(f"  {name:10s} {means[0]:8.1f} {means[1]:8.1f} {means[2]:8.1f} {whole:8.1f}  {low:.1f}..{high:.1f}"
              f"   {work:7.1f}  {wlow:.1f}..{whigh:.1f}   {least:10.1f}  {flow:.1f}..{fhigh:.1f}")
    # The typical step (overhead.py's figure): a preempted step moves a block's mean, not the median.
    from overhead import bootstrap, median_us

    first = len(CALLS) + 2  # each block's step totals (ns) follow its sums
    steps_of = {mode: [[t / 1e9 for t in b[first:]] for b in blocks[mode]] for mode in MODES}
    for base, top, label in (("none", "on", "on - without pitstop"), ("off", "on", "on - off"),
                             ("none", "floor", "floor - without pitstop")):
        low, high = bootstrap(steps_of[base], steps_of[top], rounds=300, figure=median_us)
        added = median_us([t for b in steps_of[top] for t in b], [t for b in steps_of[base] for t in b])
        print(f"  median step: {added:+.1f} us {label} ({low:.1f}..{high:.1f})")
    for column, label in ((len(CALLS), "training thread's CPU time"), (len(CALLS) + 1, "process CPU time (every thread)")):
        for base, top, name in ((none, on, "on - without pitstop"), (off, on, "on - off"),
                                (none, floor, "floor - without pitstop")):
            added, low, high = interval(base, top, column)
            print(f"  {label}: {added:+.1f} us per step {name} ({low:.1f}..{high:.1f})")
    # The writer's work follows the steps the agent saw, whichever block it ran in (off - on cancels
    # it). Over the rounds its own clock also runs through the three blocks in four the agent saw no
    # step in: that figure, over the `on` steps, overstates a step's (`steady` has the steps alone).
    spent = "; ".join(f"{name} {ns / 1e3 / steps:.1f}" for name, ns in sorted(blocks["threads"].items()))
    print(f"  the agent's threads' own CPU time over the rounds, us per `on` step (their idle passes in the "
          f"other blocks too): {spent}")
    run = blocks["steady"]
    n, wall = run["steps"], run["wall_s"]
    spent = "; ".join(f"{name} {ns / 1e3 / n:.1f} (idle {run['idle'][name] / 1e3 / n:.1f})"
                      for name, ns in sorted(run["busy"].items()))
    print(f"  the agent's threads' own CPU time over {n} steps in a row ({wall:.2f} s), us per step "
          f"(and over as long idle, per step's share): {spent}")


if __name__ == "__main__":
    main()
