"""A plain loop at a chosen pace: writes each step's loss as the script reads it (the truth).

    python loop_loss_pace.py STEPS STEP_MS OUT.json

STEP_MS 0: as fast as a tiny model steps (well under 1 ms here); else each step
also computes for that long (the pace of a larger model).
"""
import json
import sys
import time

import torch

steps, step_ms, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
losses = []
for _ in range(steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    until = time.perf_counter() + step_ms / 1000
    while time.perf_counter() < until:  # the step's own work: a busy wait, as compute is
        pass
with open(out, "w") as f:
    json.dump(losses, f)
print("loss pace done")
