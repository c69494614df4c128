"""A loop with twice as many torch threads as usable cores, beside two busy DataLoader workers (cpu-oversubscribed).

The main process computes with `torch.set_num_threads(2 x usable cores)`;
two workers spend ~15 ms of pure Python on each sample. With --fixed it runs
one thread fewer than the usable cores and one worker: no more threads than cores.

usage: finding_cpu_oversubscribed.py STEPS [--fixed]
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(sys.argv[1])
FIXED = "--fixed" in sys.argv[2:]
USABLE = len(os.sched_getaffinity(0))


class Parsed(Dataset):
    """Samples whose parsing keeps a core busy ~15 ms (pure Python, as a text or JSON decode)."""

    def __len__(self) -> int:
        return 4 * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        end = time.perf_counter() + 0.015
        acc = 0
        while time.perf_counter() < end:
            acc += i
        return torch.full((256,), float(acc % 7)), i % 3


torch.set_num_threads(max(1, USABLE - 1) if FIXED else 2 * USABLE)
torch.manual_seed(0)
loader = DataLoader(Parsed(), batch_size=4, num_workers=1 if FIXED else 2)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
big = torch.randn(512, 512)
for x, y in loader:
    for _ in range(4):
        big = torch.tanh(big @ big) * 0.5  # parallel work for the intra-op threads
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"threads {torch.get_num_threads()}; done")
