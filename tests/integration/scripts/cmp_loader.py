"""A loop whose loader waits ~30 ms a batch (storage latency) against ~20 ms of compute: workers hide the wait.

With --num-workers 0 every step waits for its batch (~50 ms a step); with 2
workers two batches load at once and the step is ~20 ms. Sleeps stand for the
storage and the compute, so the difference holds on a busy machine, where the
demo's CPU-bound loading competes with the model for the same cores.

usage: cmp_loader.py STEPS [--num-workers N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

BATCH = 8


class Remote(Dataset):
    """Each batch's first sample pays the batch's ~30 ms of storage latency."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % BATCH == 0:
            time.sleep(0.03)
        return torch.full((16,), float(i % 3)), i % 3


parser = argparse.ArgumentParser()
parser.add_argument("steps", type=int)
parser.add_argument("--num-workers", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(0)
loader = DataLoader(Remote(BATCH * args.steps), batch_size=BATCH, num_workers=args.num_workers)
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)  # compute
print("done")
