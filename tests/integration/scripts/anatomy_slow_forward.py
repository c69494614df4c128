"""A loop whose forward is slow (a 20 ms sleep in a module), whose backward takes ~8 ms (a sleep in a custom
autograd Function), with ~5 ms of other work between backward and the optimizer; it writes its own stamps.

    python anatomy_slow_forward.py STEPS OUT.json

OUT.json: {"phases": [[forward, backward, optimizer], ...]} per iteration, from the script's own
perf_counter: forward from the batch in hand to backward's start, as pitstop defines it.
"""
import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FORWARD_S, BACKWARD_S, OTHER_S = 0.020, 0.008, 0.005


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        time.sleep(BACKWARD_S)
        return grad


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(FORWARD_S)
        return SlowBackward.apply(self.lin(x))


steps, out = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
data = TensorDataset(torch.randn(steps * 16, 8), torch.randn(steps * 16, 1))
model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
phases = []
for x, y in DataLoader(data, batch_size=16):
    t0 = time.perf_counter()
    loss = nn.functional.mse_loss(model(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    time.sleep(OTHER_S)  # a stand-in for clipping or logging: neither forward, backward nor optimizer
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    opt.zero_grad()
    phases.append([t1 - t0, t2 - t1, t4 - t3])
with open(out, "w") as f:
    json.dump({"phases": phases}, f)
