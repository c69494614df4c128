"""A loop that leaks: it keeps every step's hidden activations "for later logging" (memory-creep).

Each step keeps a 512 KiB tensor alive (`kept.append(hidden)`), so host RSS
grows by ~0.5 MiB a step, steadily, to the end. A sleep stands for compute so
the run lasts several seconds: host RSS is read every ~0.5 s.
With --no-leak it keeps `hidden.sum().item()` instead (the fix): RSS stays flat.

usage: finding_memory_creep.py STEPS [--no-leak]
"""

from __future__ import annotations

import sys
import time

import torch

STEPS = int(sys.argv[1])
LEAK = "--no-leak" not in sys.argv[2:]

torch.manual_seed(0)
model = torch.nn.Linear(256, 512)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept: list[object] = []
for step in range(STEPS):
    x = torch.randn(256, 256)
    hidden = model(x)  # 256 x 512 floats: 512 KiB
    loss = hidden.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(hidden.detach().clone() if LEAK else hidden.sum().item())
    time.sleep(0.012)
print(f"{STEPS} steps, kept {len(kept)} items; done")
