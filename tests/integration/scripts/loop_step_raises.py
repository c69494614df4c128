"""An optimizer step that raises (its closure fails after its backward), caught; then manual SGD steps.

The optimizer's pre-hook fired and its post-hook never does: pitstop must not
count the backward calls that follow as inside that step. The script prints
its manual steps ("STEPS n").

usage: loop_step_raises.py STEPS
"""

from __future__ import annotations

import sys

import torch
from torch import nn

STEPS = int(sys.argv[1])
torch.manual_seed(0)
model = nn.Linear(8, 1)
x, y = torch.randn(64, 8), torch.randn(64, 1)
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)


def closure() -> torch.Tensor:
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    raise FloatingPointError("the closure gave up")  # step() raises: no post-hook


try:
    optimizer.step(closure)
except FloatingPointError:
    pass
done = 0
for _ in range(STEPS):  # manual SGD from here on
    model.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
    done += 1
print(f"STEPS {done}")
