"""A loop whose loader (no workers) sleeps 3 ms a batch against 6 sleeps of 3 ms of compute: a 1/7 (~14%) data wait.

Under the 20% of the data-wait finding and over data-wait-moderate's 10.5%;
data-wait-moderate says what it is worth. Sleeps stand for loading and compute,
and every sleep is the same length, so the share holds on a busy machine: each
wake-up waits for a core, and the wait adds to loading and compute in the same
proportion as the sleeps (one in seven). With one 4 ms load against one 20 ms
compute sleep (16.7% quiet) the data-wait finding fired instead at load 8-15:
the load's wake-up delays weighed the short loading sleep as much as the long one.

usage: finding_data_wait_moderate.py STEPS
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(sys.argv[1])
BATCH = 8
SLEEP_S = 0.003
COMPUTE_SLEEPS = 6


class Decoded(Dataset):
    """The first sample of each batch pays the batch's decoding (one sleep, not eight)."""

    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % BATCH == 0:
            time.sleep(SLEEP_S)
        return torch.full((16,), float(i % 3)), i % 3


# One intra-op thread: with torch's default two on the 2-core machine, the OpenMP threads spin
# against the neighbours' load, and this script's Linear(16, 3) step took 70 ms instead of < 1 ms
# at load 7 (its data wait fell to 5%, under data-wait-moderate's band).
torch.set_num_threads(1)
torch.manual_seed(0)
loader = DataLoader(Decoded(), batch_size=BATCH)  # in order: each batch starts at a multiple of BATCH
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    for _ in range(COMPUTE_SLEEPS):
        time.sleep(SLEEP_S)  # compute
print("done")
