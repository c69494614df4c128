"""A GradScaler (on the CPU) that skips the optimizer's step at the iterations listed: their gradients overflow.

Usage: loop_scaler_skips.py STEPS [I,J,...]. Each listed iteration multiplies its loss by 1e36, so
the scaled loss and its gradients are inf and `scaler.step(opt)` does not step (as the first steps
of float16 training do). The losses are scaled by 65536 before backward.
"""
import sys

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
overflow = {int(a) for a in sys.argv[2].split(",")} if len(sys.argv) > 2 else set()
skipped = 0
for i in range(steps):
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    scaler.scale(loss * (1e36 if i in overflow else 1.0)).backward()
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    skipped += scaler.get_scale() < before
print(f"scaler done: {steps} iterations, {skipped} skipped, last loss {loss.item():.4f}")
