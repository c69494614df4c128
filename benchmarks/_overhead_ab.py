"""The agent's cost inside one process (used by overhead.py).

    pitstop run --headless benchmarks/_overhead_ab.py PAIRS PERIODS OUT.json

Runs `_workload_10ms` under `pitstop run` with the profiler schedule
overhead.py gives it (`--profile 100:5:50`: a window of 5 steps every 100, the
first after step 50; the default is every 500).

Phase 1 alternates two arms in PAIRS pairs of 25-step blocks (~0.25 s), in
ABBA order, so the drift of a shared machine cancels pair by pair:
  plain    as without pitstop on the training thread: the hot path's patches
           taken out (`_patchswitch.py`: the DataLoader's `__next__`, `backward`,
           the model's `__call__`, the optimizer hooks) and the agent switched
           off (`disabled`: the sampler skips its samples, nothing is encoded,
           written or sent);
  agent    the always-on agent, profiler windows paused (`agent.windows` None).
Phase 2 runs PERIODS schedule periods (`every` steps each) with the windows on,
starting on the schedule's grid, so step 0 of each period opens a window.

Writes every step time, and the agent's index of the first timed step so that
overhead.py can read the marks the agent stamped on them in the record.

PITSTOP_AB_WORKLOAD names another workload module with the same `build` and
`train_step` (gpu_acceptance.py: `_workload_gpu`). Every arm runs in this process, so the process-to-process spread of a small
VM (memory layout, which core) cannot enter. The first window's one-off set-up
(Kineto loads once per process) is paid in the warm-up.
"""
import importlib
import json
import os
import sys
import time

from _patchswitch import PatchSwitch

from pitstop.profiling import agent as agent_mod

# The workload module: `_workload_10ms` (CPU), or `_workload_gpu` for gpu_acceptance.py.
_workload = importlib.import_module(os.environ.get("PITSTOP_AB_WORKLOAD", "_workload_10ms"))
build, train_step = _workload.build, _workload.train_step

BLOCK = 25


def main() -> None:
    pairs, periods, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    agent = agent_mod.current()
    if agent is None or agent.windows is None or agent.windows.every is None:
        sys.exit("run this under `pitstop run` with scheduled profiler windows (the default)")
    windows = agent.windows
    every = windows.every
    warmup = windows.first + every  # holds the first window
    model, opt, loader = build(warmup + 2 * BLOCK * pairs + every * (periods + 1))
    batches = iter(loader)

    def run(n: int) -> list[float]:
        times = []
        last = time.perf_counter()
        for _ in range(n):
            x, y = next(batches)
            train_step(model, opt, x, y)
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return times

    if agent.step_index != 0:
        sys.exit("the agent counted steps before the workload started")
    run(warmup)
    time.sleep(1.0)  # let the warm-up window's aggregation finish
    blocks: dict[str, list[list[float]]] = {"plain": [], "agent": []}
    agent.windows = None
    switch = PatchSwitch(type(model))
    for i in range(pairs):
        for name in ("plain", "agent") if i % 2 == 0 else ("agent", "plain"):
            switch.set(name == "agent")
            agent.disabled = name == "plain"
            blocks[name].append(run(BLOCK))
    switch.set(True)
    agent.disabled = False
    run((windows.first - agent.step_index) % every)  # onto the grid (the plain arm counted no steps)
    agent.windows = windows
    before, skipped = windows.windows, windows.skipped
    first_step = agent.step_index  # the agent's index of timed[0]: overhead.py reads its marks in the record
    timed = run(every * periods)
    time.sleep(1.0)  # the last window's tables are emitted off-thread
    with open(out, "w") as handle:
        json.dump({"blocks": blocks, "windowed": timed, "first_step": first_step, "every": every,
                   "active": windows.active, "windows": windows.windows - before,
                   "skipped": windows.skipped - skipped}, handle)


if __name__ == "__main__":
    main()
