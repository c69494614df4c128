"""Prints the instructions the agent adds to a training step on the training thread, counted by valgrind.

    python benchmarks/instructions.py [--steps 1000] [--workload _workload_1ms]

A timing on a shared 2-core VM moves by +-5 us between processes (overhead.py,
hotpath.py): too coarse to tell a cut of 1-2 us. Instructions do not move with
the machine's load. Two processes run the workload under `pitstop run
--headless --profile off` inside `valgrind --tool=callgrind
--separate-threads=yes --dump-before=getsid`: 200 steps of warm-up with the
agent on, then N steps with the agent on, or switched off (`disabled`: every
hook passes straight through). The child calls `os.getsid(0)` (nothing else
in the process does) just before and after the N steps, so callgrind's second
part holds exactly them: the training thread's instructions per step, on and
off, and their difference, the agent's. Its threads' own work (the writer, the
sampler) is not in it.

Under valgrind a step takes ~50x longer, so what the hooks do by the clock
(a loss read every 10 ms: `_losses.LOSS_EVERY_S`) happens at every step there
and at about one step in ten natively: the figure is high by that much.
Instructions are not time either: the same instructions cost more where they
miss the caches (hooks run once a step, between ~1 ms of torch's work), so the
figure in microseconds, at the workload's own rate (its instructions per step
over its median step, measured natively here), is a floor of the hooks' own
execution, not a timing. Needs valgrind; ~5 minutes on 2 cores.
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

HERE = Path(__file__).resolve().parent
WARMUP = 200


def child(steps: int, mode: str, workload: str) -> None:
    """Under `pitstop run` (and valgrind): warm-up with the agent on, then `steps` with it on or off."""
    import importlib

    from pitstop.profiling import agent as agent_mod

    module = importlib.import_module(workload)  # (its `build` sets torch to one thread)
    agent = agent_mod.current()
    if agent is None:
        sys.exit("run this under `pitstop run`")
    model, opt, loader = module.build(WARMUP + steps + 10)
    batches = iter(loader)

    def run(n: int) -> None:
        for _ in range(n):
            x, y = next(batches)
            module.train_step(model, opt, x, y)

    run(WARMUP)
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


def one(tmp: Path, steps: int, mode: str, workload: str) -> int:
    prefix = tmp / f"cg-{mode}-{steps}"
    env = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600", PYTHONHASHSEED="0")
    command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--record",
               str(tmp / f"{mode}-{steps}.jsonl"), "--", "valgrind", "--tool=callgrind", "--separate-threads=yes",
               "--dump-before=getsid", f"--callgrind-out-file={prefix}.%p", sys.executable, str(Path(__file__).resolve()),
               "--child", f"{steps},{mode}", "--workload", workload]
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
        steps, mode = args.child.split(",")
        child(int(steps), mode, args.workload)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts instructions with callgrind")
    steps = args.steps
    print(f"command: python benchmarks/instructions.py --steps {steps} --workload {args.workload}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(("on", "off"), pool.map(lambda m: one(Path(tmp), steps, m, args.workload), ("on", "off"))))
    per_step = {mode: counts[mode] / steps for mode in ("on", "off")}
    added = per_step["on"] - per_step["off"]
    step_s = native_step_s(args.workload)
    rate = per_step["off"] / step_s / 1e9  # instructions per ns, the workload's own
    print(f"training thread, instructions per step over {steps} steps: agent off {per_step['off']:,.0f}, "
          f"on {per_step['on']:,.0f}")
    print(f"  added by the agent: {added:,.0f} instructions a step ({added / per_step['off']:.2%} of the step's)")
    print(f"  at the workload's own rate ({rate:.2f} instructions/ns; median step {step_s * 1e3:.3f} ms natively): "
          f"{added / rate / 1e3:.1f} us a step, a floor (cache misses cost more)")


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.insert(0, str(HERE))
    main()
