"""A loop whose loader (no workers) costs ~4 ms a batch against ~20 ms of compute: a ~15% data wait.

Under the 20% of the data-wait finding; data-wait-moderate says what it is worth.
Sleeps stand for loading and compute, so the share holds on a busy machine.

usage: finding_data_wait_moderate.py STEPS
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(sys.argv[1])
BATCH = 8


class Decoded(Dataset):
    """The first sample of each batch pays the batch's ~4 ms of decoding (one sleep, not eight)."""

    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % BATCH == 0:
            time.sleep(0.004)
        return torch.full((16,), float(i % 3)), i % 3


torch.manual_seed(0)
loader = DataLoader(Decoded(), batch_size=BATCH)  # in order: each batch starts at a multiple of BATCH
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)  # compute
print("done")
