"""No optimizer at all: parameters updated by hand; pitstop falls back to backward calls."""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
w = torch.randn(16, 1, requires_grad=True)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(steps):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w.data -= 0.01 * w.grad
        w.grad = None
print("manual sgd done")
