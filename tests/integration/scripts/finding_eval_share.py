"""A loop that evaluates every 10 steps on a slow validation loader (eval-share).

Training steps take ~20 ms; each evaluation pass loads 4 batches at ~150 ms each,
so evaluation is more than half of the wall time.

usage: finding_eval_share.py STEPS
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

STEPS = int(sys.argv[1])


class SlowValidation(Dataset):
    """Validation samples whose batch of 25 costs ~150 ms to load (a decode, say)."""

    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i % 25 == 0:
            time.sleep(0.15)
        return torch.ones(32) * (i % 4), i % 4


torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(16 * STEPS, 32), torch.randint(0, 4, (16 * STEPS,))), batch_size=16,
                   shuffle=True)
val = DataLoader(SlowValidation(), batch_size=25)
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for i, (x, y) in enumerate(train):
    if i and i % 10 == 0:
        with torch.no_grad():
            hits = sum(int((model(vx).argmax(1) == vy).sum()) for vx, vy in val)
        print(f"step {i}: {hits} of 100 right")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)  # compute
print("done")
