"""An LBFGS loop whose first step is slow: its 20 closure calls sleep 0.2 s each (4 s), as a real
model's first LBFGS step can take minutes (pytorch/examples' time_sequence_prediction: ~100 s).

Each step fetches one batch from a DataLoader, then `optimizer.step(closure)`; later steps do not sleep.

usage: first_step_lbfgs.py [STEPS]
"""

from __future__ import annotations

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SLEEP_S = 0.2
torch.manual_seed(0)
x = torch.linspace(-3, 3, 64).unsqueeze(1)
data = TensorDataset(x, torch.sin(2 * x))
model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
# No tolerance: each step runs all its iterations, one closure call each: 20 calls.
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=20, tolerance_grad=0.0, tolerance_change=0.0)
criterion = nn.MSELoss()
batches = iter(DataLoader(data, batch_size=64))
for i in range(STEPS):
    try:
        inputs, target = next(batches)
    except StopIteration:
        batches = iter(DataLoader(data, batch_size=64))
        inputs, target = next(batches)
    calls = 0

    def closure() -> torch.Tensor:
        global calls
        calls += 1
        if i == 0:
            time.sleep(SLEEP_S)
        optimizer.zero_grad()
        loss = criterion(model(inputs), target)
        loss.backward()
        return loss

    optimizer.step(closure)
    print(f"step {i}: {calls} closure calls", flush=True)
print("done")
