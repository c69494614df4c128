"""A loop that leaks every step, over epochs whose workers take 0.4 s to start (memory-creep and epoch-stall).

Two findings from one run, each with its own cause:
- memory-creep: each step keeps its 256 x 512 hidden activations "for later
  logging" (`kept.append(hidden)`), so host RSS grows by ~0.5 MiB a step,
  steadily, to the end. With --no-leak it keeps `hidden.sum().item()` (the fix).
- epoch-stall: the dataset opens its "storage" in each worker (worker_init_fn
  sleeps 0.4 s, as opening an LMDB or HDF5 file per worker does); without
  persistent_workers every epoch starts new workers and its first batch waits
  for them. With --persistent the workers start once (the fix).
A 12 ms sleep stands for compute so that the run lasts several seconds: host
RSS is read every ~0.5 s, and the creep needs 8 readings over 200 steps.

usage: finding_creep_and_stall.py EPOCHS [--no-leak] [--persistent]
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = int(sys.argv[1])
LEAK = "--no-leak" not in sys.argv[2:]
PERSISTENT = "--persistent" in sys.argv[2:]


def open_storage(worker_id: int) -> None:
    time.sleep(0.4)


# One intra-op thread: with torch's default two on the 2-core machine, the OpenMP threads spin
# against the neighbours' load, and this step took ~250 ms instead of ~2 ms at load 5 (30 s of CPU a run).
torch.set_num_threads(1)
torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 256), torch.randint(0, 4, (256,)))  # 32 batches of 8: 32 steps an epoch
loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2, persistent_workers=PERSISTENT,
                    worker_init_fn=open_storage)
model = torch.nn.Linear(256, 512)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kept: list[object] = []
for epoch in range(EPOCHS):
    for x, _ in loader:
        hidden = model(x.repeat(32, 1))  # 256 x 512 floats: 512 KiB
        loss = hidden.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(hidden.detach().clone() if LEAK else hidden.sum().item())
        time.sleep(0.012)  # compute
print(f"{EPOCHS} epochs, kept {len(kept)} items; done")
