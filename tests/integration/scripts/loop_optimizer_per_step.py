"""A new optimizer built every iteration (a per-step `SGD(...)`): pitstop must count every iteration."""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = nn.Linear(8, 1)
data = TensorDataset(torch.randn(steps * 16, 8), torch.randn(steps * 16, 1))
for x, y in DataLoader(data, batch_size=16):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # the previous one is freed here
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
print("optimizer per step done")
