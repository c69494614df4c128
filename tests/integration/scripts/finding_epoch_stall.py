"""A loop over a small dataset for several epochs, whose workers take 0.4 s to start (epoch-stall).

The dataset opens its "storage" in each worker (worker_init_fn sleeps 0.4 s,
as opening an LMDB or HDF5 file per worker does). Without persistent_workers
every epoch starts new workers and its first batch waits for them.
With --persistent the workers start once.

usage: finding_epoch_stall.py EPOCHS [--persistent]
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = int(sys.argv[1])
PERSISTENT = "--persistent" in sys.argv[2:]


def open_storage(worker_id: int) -> None:
    time.sleep(0.4)


torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))  # 8 batches of 8: 8 steps an epoch
loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2, persistent_workers=PERSISTENT,
                    worker_init_fn=open_storage)
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(EPOCHS):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)  # compute
print(f"{EPOCHS} epochs; done")
