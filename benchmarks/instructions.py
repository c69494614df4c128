"""Prints the instructions the agent adds to a training step on the training thread, counted by valgrind.

    python benchmarks/instructions.py [--steps 1000] [--workload _workload_1ms]

A timing on a shared 2-core VM moves by +-5 us between processes (overhead.py,
hotpath.py): too coarse to tell a cut of 1-2 us. Instructions do not move with
the machine's load. Three processes run the workload inside `valgrind
--tool=callgrind --separate-threads=yes --dump-before=getsid`, two of them
under `pitstop run --headless --profile off`: 200 steps of warm-up, then N
steps with the agent on, or switched off (`disabled`: every hook is still
called and passes straight through), or without pitstop at all. The child
calls `os.getsid(0)` (nothing else in the process does) just before and after
the N steps, so callgrind's second part holds exactly them: the training
thread's instructions per step. On against off is the hooks' work; on against
no pitstop is all pitstop adds to the thread, the hooks' calls too. The agent's
threads' own work (the writer, the sampler) is not in it.

Under valgrind a step takes ~50x longer, and the hooks read the loss by the
clock (one step every `_losses.LOSS_EVERY_S`, 10 ms: natively one ~1 ms step
in ten): the child stretches that interval by the slowdown it measures in its
warm-up, so that the loss is read in about as many steps as natively.
Instructions are not time either: the same instructions cost more where they
miss the caches (hooks run once a step, between ~1 ms of torch's work), so the
figure in microseconds, at the workload's own rate (its instructions per step
over its median step, measured natively here), is a floor of the hooks' own
execution, not a timing. Needs valgrind; ~10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pitstop.profiling._losses import LOSS_EVERY_S

HERE = Path(__file__).resolve().parent
WARMUP = 200
MODES = ("on", "off", "none")  # the agent on, switched off (its hooks still called), no pitstop at all


def child(steps: int, mode: str, workload: str, native_step_s: float) -> None:
    """Under `pitstop run` (and valgrind): warm-up with the agent on, then `steps` with it on or off."""
    import importlib

    from pitstop.profiling import agent as agent_mod

    module = importlib.import_module(workload)  # (its `build` sets torch to one thread)
    agent = agent_mod.current()
    if agent is None and mode != "none":
        sys.exit("run this under `pitstop run`")
    model, opt, loader = module.build(WARMUP + steps + 10)
    batches = iter(loader)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(batches)
            module.train_step(model, opt, x, y)

    run(WARMUP // 2)
    started = time.perf_counter()
    run(WARMUP // 2)
    if agent is not None:
        # The loss is read once every LOSS_EVERY_S (10 ms): natively one ~1 ms step in ten, under
        # valgrind's ~50x slower steps every one. Stretched by the slowdown, as often as natively.
        slow_step_s = (time.perf_counter() - started) / (WARMUP // 2)
        agent.hooks.loss_every = LOSS_EVERY_S * max(1.0, slow_step_s / native_step_s)
        agent._drain()
        agent.disabled = mode == "off"
    os.getsid(0)  # callgrind dumps before each call (`--dump-before=getsid`): its second part is the steps
    run(steps)
    os.getsid(0)


def training_thread_instructions(out_prefix: Path) -> int:
    """The instructions callgrind counted on thread 1 (the training thread) in the second part of one run."""
    files = sorted(out_prefix.parent.glob(out_prefix.name + ".*.2-01"))
    if len(files) != 1:
        raise SystemExit(f"expected one callgrind file of part 2, thread 1 at {out_prefix}.*.2-01, found {files}")
    for line in files[0].read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary line in {files[0]}")


def one(tmp: Path, steps: int, mode: str, workload: str, native_step_s: float) -> int:
    prefix = tmp / f"cg-{mode}-{steps}"
    env = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600", PYTHONHASHSEED="0")
    pitstop = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--record",
               str(tmp / f"{mode}-{steps}.jsonl"), "--"]
    command = ([] if mode == "none" else pitstop) + ["valgrind", "--tool=callgrind", "--separate-threads=yes",
               "--dump-before=getsid", f"--callgrind-out-file={prefix}.%p", sys.executable, str(Path(__file__).resolve()),
               "--child", f"{steps},{mode},{native_step_s}", "--workload", workload]
    subprocess.run(command, check=True, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return training_thread_instructions(prefix)


def native_step_s(workload: str, steps: int = 2000) -> float:
    """The workload's median step without pitstop, natively: converts its instructions to a rate."""
    import importlib

    sys.path.insert(0, str(HERE))
    module = importlib.import_module(workload)
    model, opt, loader = module.build(steps + 10)
    batches = iter(loader)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        x, y = next(batches)
        module.train_step(model, opt, x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[200:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps counted, each way")
    parser.add_argument("--workload", default="_workload_1ms", help="workload module in benchmarks/")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        steps, mode, native = args.child.split(",")
        child(int(steps), mode, args.workload, float(native))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts instructions with callgrind")
    steps = args.steps
    print(f"command: python benchmarks/instructions.py --steps {steps} --workload {args.workload}", flush=True)
    step_s = native_step_s(args.workload)
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(MODES, pool.map(lambda m: one(Path(tmp), steps, m, args.workload, step_s), MODES)))
    per_step = {mode: counts[mode] / steps for mode in MODES}
    added = per_step["on"] - per_step["off"]
    whole = per_step["on"] - per_step["none"]
    rate = per_step["off"] / step_s / 1e9  # instructions per ns, the workload's own
    print(f"training thread, instructions per step over {steps} steps: without pitstop {per_step['none']:,.0f}, "
          f"agent off {per_step['off']:,.0f}, on {per_step['on']:,.0f}")
    print(f"  at the workload's own rate ({rate:.2f} instructions/ns; median step {step_s * 1e3:.3f} ms natively), "
          f"a floor (cache misses cost more):")
    for label, figure in (("the agent on against off (the hooks' work)", added),
                          ("pitstop against no pitstop (the hooks' calls too)", whole)):
        print(f"  {label}: {figure:+,.0f} instructions a step ({figure / per_step['none']:.2%} of the step's), "
              f"{figure / rate / 1e3:.1f} us")


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.insert(0, str(HERE))
    main()
