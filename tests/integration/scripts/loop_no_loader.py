"""Batches sliced from a memory-mapped array: no DataLoader, an optimizer."""
import sys
import tempfile

import numpy as np
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
path = tempfile.mktemp(suffix=".npy")
arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(steps * 32, 17))
arr[:] = np.random.default_rng(0).standard_normal(arr.shape, dtype=np.float32)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(steps):
    batch = torch.from_numpy(np.array(arr[i * 32 : (i + 1) * 32]))
    loss = torch.nn.functional.mse_loss(model(batch[:, :16]), batch[:, 16:])
    opt.zero_grad(); loss.backward(); opt.step()
print("no loader done")
