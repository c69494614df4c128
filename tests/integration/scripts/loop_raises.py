"""Prints, trains a little, then raises: pitstop must show the traceback and keep the exit code."""
import torch

print("before the error", flush=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward(); opt.step()
raise ValueError("bad learning rate schedule")
