"""An LBFGS loop like pytorch/examples' time_sequence_prediction: `optimizer.step(closure)`, then a prediction under no_grad.

The first step calls its closure 80 times, more than the step clock holds
backward calls before it decides that no optimizer steps (64): before the
clock knew a closure's backward belongs to its step, those were 64 steps.
The script counts its own `optimizer.step` calls and closure calls, and times
each prediction; it writes them to OUT.

usage: loop_lbfgs.py STEPS OUT
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn

STEPS, OUT = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
x = torch.linspace(-3, 3, 256).unsqueeze(1)
y = torch.sin(2 * x) + 0.1 * torch.randn_like(x)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
# No tolerance: every step runs all its iterations (one closure call each, and one to begin).
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=80, tolerance_grad=0.0, tolerance_change=0.0)
criterion = nn.MSELoss()
closures = [0] * STEPS
predict_s: list[float] = []
for i in range(STEPS):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        closures[i] += 1
        return loss

    optimizer.step(closure)
    t0 = time.perf_counter()
    with torch.no_grad():  # predict beyond the data, as time_sequence_prediction does
        pred = model(torch.linspace(-6, 6, 4096).unsqueeze(1))
    predict_s.append(time.perf_counter() - t0)
    print(f"step {i}: {closures[i]} closure calls, prediction mean {pred.mean().item():.4f}")
with open(OUT, "w") as f:
    json.dump({"optimizer_steps": STEPS, "closures": closures, "predict_s": predict_s}, f)
print("done")
