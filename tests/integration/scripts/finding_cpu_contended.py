"""A plain CPU loop with torch's default threads (one per core), for a test that runs CPU hogs beside it (cpu-contended).

Each step multiplies 256x256 matrices a few times (parallel work for every
intra-op thread) and steps an SGD optimizer; it prints torch's thread count.

usage: finding_cpu_contended.py STEPS
"""

from __future__ import annotations

import sys

import torch

STEPS = int(sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(256, 256)
for _ in range(STEPS):
    h = x
    for _ in range(6):
        h = torch.tanh(h @ x) * 0.5
    loss = model(h).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"threads {torch.get_num_threads()}; done")
