"""A small training loop that runs until a file appears (a test's way to let it train while it looks).

usage: train_until_stopped.py STOP_FILE
"""

from __future__ import annotations

import os
import sys

import torch

stop = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16), torch.randn(32, 1)
step = 0
while not os.path.exists(stop):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"trained {step} steps", flush=True)
