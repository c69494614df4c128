"""Looks torch up with importlib.util.find_spec before importing it, as transformers, datasets and accelerate do."""
import importlib.util
import sys

assert importlib.util.find_spec("torch") is not None
assert importlib.util.find_spec("torch") is not None  # a second lookup, as libraries repeat them

import torch  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(steps):
    x = torch.randn(16, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"find_spec first done: {steps} optimizer steps")
