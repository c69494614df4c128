"""Prints the training thread's instructions a step in the hooks: on, off, none and the floor, in one process.

    python benchmarks/hook_instructions.py [--steps 400] [--rounds 2]

`instructions.py` counts a ~1 ms workload in three processes: runs of the same
code differ there by 2,000 to 5,000 instructions a step, more than a cut of one
hook. Here one process under `pitstop run --headless --profile off` and
`valgrind --tool=callgrind --separate-threads=yes --dump-before=getsid` trains a
tiny model (a Linear(8, 2) on batches of 4: torch's own work a step is small
and the same each step) in blocks of `--steps`, switching between them
(`_patchswitch.py`): the agent on, switched off (each hook still called),
"none" (the hot path's patches out, as without pitstop) and "floor" (hooks at
the same five points that only stamp and append). `os.getsid(0)` between blocks
cuts callgrind's count into one part a block; the training thread's part over
its steps is that mode's instructions a step. The loss is read at every step
(`--loss every`) or at none (`--loss never`; natively one ~1 ms step in ten):
the hooks' two paths. The writer thread runs as in any run; its own
instructions are on its own thread, not counted. Needs valgrind; ~3 minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("on", "off", "none", "floor")
WARMUP = 60


def child(steps: int, rounds: int, loss: str) -> None:
    """Under `pitstop run` (and valgrind): the blocks, a getsid call between each (callgrind's parts)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from _patchswitch import PatchSwitch
    from pitstop.profiling import agent as agent_mod

    agent = agent_mod.current()
    if agent is None:
        sys.exit("run this under `pitstop run`")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = WARMUP + steps * rounds * len(MODES) + 10
    batches = iter(DataLoader(TensorDataset(torch.randn(n * 4, 8), torch.randint(0, 2, (n * 4,))), batch_size=4))
    cross_entropy = torch.nn.functional.cross_entropy

    def run(count: int) -> None:
        for _ in range(count):
            x, y = next(batches)
            out = cross_entropy(model(x), y)
            opt.zero_grad()
            out.backward()
            opt.step()

    run(WARMUP)
    agent.hooks.loss_every = 0.0 if loss == "every" else float("inf")
    agent.hooks.loss_due = float("-inf") if loss == "every" else float("inf")
    run(5)
    switch = PatchSwitch(type(model))
    for _ in range(rounds):
        for mode in MODES:
            switch.set("pitstop" if mode in ("on", "off") else mode)
            agent.disabled = mode == "off"
            switch.held.clear()
            os.getsid(0)  # callgrind dumps before each call: the part that follows is this block's
            run(steps)
    os.getsid(0)
    switch.set(True)
    agent.disabled = False


def thread_one(prefix: Path, part: int) -> int:
    """The instructions callgrind counted on thread 1 (the training thread) in one part of the run."""
    files = sorted(prefix.parent.glob(f"{prefix.name}.*.{part}-01"))
    if len(files) != 1:
        raise SystemExit(f"expected one callgrind file of part {part}, thread 1 at {prefix}, found {files}")
    for line in files[0].read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary line in {files[0]}")


def one(tmp: Path, steps: int, rounds: int, loss: str) -> dict[str, list[float]]:
    prefix = tmp / f"cg-{loss}"
    env = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600", PYTHONHASHSEED="0")
    command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--record",
               str(tmp / f"{loss}.jsonl"), "--", "valgrind", "--tool=callgrind", "--separate-threads=yes",
               "--dump-before=getsid", f"--callgrind-out-file={prefix}.%p", sys.executable,
               str(Path(__file__).resolve()), "--child", f"{steps},{rounds},{loss}"]
    subprocess.run(command, check=True, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts: dict[str, list[float]] = {mode: [] for mode in MODES}
    part = 2  # part 1 is everything before the first block
    for _ in range(rounds):
        for mode in MODES:
            counts[mode].append(thread_one(prefix, part) / steps)
            part += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="steps a block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks of each mode")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        steps, rounds, loss = args.child.split(",")
        child(int(steps), int(rounds), loss)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts instructions with callgrind")
    print(f"command: python benchmarks/hook_instructions.py --steps {args.steps} --rounds {args.rounds}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = dict(zip(("every", "never"), pool.map(
                lambda loss: one(Path(tmp), args.steps, args.rounds, loss), ("every", "never"))))
    for loss, counts in runs.items():
        per = {mode: statistics.fmean(values) for mode, values in counts.items()}
        spread = "; ".join(f"{mode} " + ", ".join(f"{v:,.0f}" for v in values) for mode, values in counts.items())
        print(f"loss read {loss} step: instructions a step, {spread}")
        print(f"  on - none {per['on'] - per['none']:+,.0f}, on - off {per['on'] - per['off']:+,.0f}, "
              f"off - none {per['off'] - per['none']:+,.0f}, floor - none {per['floor'] - per['none']:+,.0f}, "
              f"on - floor {per['on'] - per['floor']:+,.0f}")


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.path.insert(0, str(HERE))
    main()
