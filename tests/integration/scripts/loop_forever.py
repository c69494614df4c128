"""Trains until killed: for attach, ls, profile-on-demand and SIGKILL tests."""
import time

import torch

model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("started", flush=True)
while True:
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.01)
