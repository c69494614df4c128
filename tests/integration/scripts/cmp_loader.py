"""A loop whose loader waits ~20 ms a batch (storage latency) against ~30 ms of compute: workers hide the wait.

With --num-workers 0 every step waits for its batch (~50 ms a step, 40% of it
waiting); with 2 workers a batch is ready every ~10 ms and the step is ~30 ms.
Sleeps stand for the storage and the compute, so the difference holds on a busy
machine, where the demo's CPU-bound loading competes with the model for the same
cores. The workers' margin is wide because each wake-up from a sleep waits for a
core: with 30 ms reads against 20 ms of compute (15 ms a batch from 2 workers),
the data-wait finding still fired on the 2-worker run at load 8-15.

usage: cmp_loader.py STEPS [--num-workers N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

BATCH = 8


class Remote(Dataset):
    """Each batch's first sample pays the batch's ~20 ms of storage latency."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % BATCH == 0:
            time.sleep(0.02)
        return torch.full((16,), float(i % 3)), i % 3


parser = argparse.ArgumentParser()
parser.add_argument("steps", type=int)
parser.add_argument("--num-workers", type=int, default=0)
args = parser.parse_args()
# One intra-op thread: with torch's default two on the 2-core machine, the OpenMP threads spin
# against the neighbours' load, and this script's Linear(16, 3) step took 70 ms instead of < 1 ms
# at load 7 (its data wait fell to 5%, under data-wait-moderate's band).
torch.set_num_threads(1)
torch.manual_seed(0)
loader = DataLoader(Remote(BATCH * args.steps), batch_size=BATCH, num_workers=args.num_workers)
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.03)  # compute
print("done")
