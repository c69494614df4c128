"""Prints the Python bytecodes the hooks run on the training thread a step, held and not, counted by a trace.

    python benchmarks/hook_opcodes.py [--steps 200]

Instructions under callgrind (`hook_instructions.py`) need valgrind to import
torch, which took over 20 minutes on the shared VM at load 10: this counts
what the hooks' own Python runs instead, exactly and whatever the load. A loop
(a small MLP, a DataLoader, SGD; an `Agent` never started, its hooks installed
as `pitstop run` installs them, the held calls taken in by nobody meanwhile)
runs `--steps` plain steps with `sys.settrace` tracing opcodes in pitstop's
frames only (the hooks' code is named `..._hooks.py (pitstop patch; ...)`,
and every module they call is pitstop's): the opcodes a step, and of them the
attribute loads and stores, the calls, and the subscripts. The loss is read in
no step after the first (`--loss never`, natively 9 steps in 10 at ~1 ms) or
in every one (`--loss every`). C code the hooks call (`perf_counter`, a deque's
append, torch's `is_grad_enabled`) counts as the one call opcode. Figures only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

CHILD = r'''
import json, sys, dis
from collections import Counter
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from pitstop.profiling.agent import Agent
from pitstop.profiling._hooks import Hooks
from pitstop.profiling.launch import SessionSettings

steps, loss_mode = int(sys.argv[1]), sys.argv[2]
agent = Agent(SessionSettings(session="bench", record="/nonexistent/records", script="train.py", profile=None))
Hooks(agent).install(torch)
agent.hooks.loss_every = 0.0 if loss_mode == "every" else 3600.0
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
n = 20 + steps
loader = DataLoader(TensorDataset(torch.randn(n * 8, 32), torch.randint(0, 4, (n * 8,))), batch_size=8)
names = dis.opname
counts = Counter()

def opcodes(frame, event, arg):
    if event == "opcode":
        counts[names[frame.f_code.co_code[frame.f_lasti]]] += 1
    return opcodes

def calls(frame, event, arg):
    if "pitstop" in frame.f_code.co_filename:
        frame.f_trace_opcodes = True
        return opcodes
    return None

batches = iter(loader)
def step():
    x, y = next(batches)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

for _ in range(20):  # step 0 and the first held steps, untraced
    step()
held = agent.batching
sys.settrace(calls)
for _ in range(steps):
    step()
sys.settrace(None)
print(json.dumps({"held": held, "still": agent.batching, "counts": counts}))
'''

KINDS = {
    "attribute loads": ("LOAD_ATTR", "LOAD_METHOD"),
    "attribute stores": ("STORE_ATTR",),
    "calls": ("CALL", "CALL_FUNCTION_EX"),  # (3.11: a PRECALL before each CALL, not counted twice)
    "subscripts": ("BINARY_SUBSCR", "STORE_SUBSCR"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    print(f"command: python benchmarks/hook_opcodes.py --steps {args.steps}", flush=True)
    for loss in ("never", "every"):
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.steps), loss], capture_output=True, text=True,
                             timeout=600, cwd=Path(__file__).resolve().parent)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        run = json.loads(out.stdout.strip().splitlines()[-1])
        counts = Counter(run["counts"])
        per = {kind: sum(counts[name] for name in names) / args.steps for kind, names in KINDS.items()}
        total = sum(counts.values()) / args.steps
        parts = ", ".join(f"{kind} {value:.1f}" for kind, value in per.items())
        print(f"loss read {loss} step: {total:.1f} opcodes a step in pitstop's frames ({parts}); "
              f"steps held: {run['held'] and run['still']}")


if __name__ == "__main__":
    main()
