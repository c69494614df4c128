"""A plain CPU loop with torch's default threads (one per core), for a test that runs CPU hogs beside it (cpu-contended).

Each step multiplies 256x256 matrices a few times (parallel work for every
intra-op thread) and steps an SGD optimizer; it prints torch's thread count.

With GO (a path), it creates GO.ready once torch is imported and its model and
optimizer are built, and starts its first step when GO exists: a test starts
its CPU hogs there, before the first step, and not 10 s of imports earlier.

usage: finding_cpu_contended.py STEPS [GO]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

STEPS = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(256, 256)
if len(sys.argv) > 2:
    go = Path(sys.argv[2])
    Path(f"{go}.ready").touch()
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
for _ in range(STEPS):
    h = x
    for _ in range(6):
        h = torch.tanh(h @ x) * 0.5
    loss = model(h).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"threads {torch.get_num_threads()}; done")
