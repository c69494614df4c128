"""Measures optimizer-step intervals with its own plain hook, to compare with pitstop's."""
import json
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

steps, out = int(sys.argv[1]), sys.argv[2]
stamps: list[float] = []
from torch.optim.optimizer import register_optimizer_step_post_hook

register_optimizer_step_post_hook(lambda *a: stamps.append(time.perf_counter()))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
for x, y in DataLoader(data, batch_size=64):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    time.sleep(0.005)
intervals = [b - a for a, b in zip(stamps, stamps[1:])]
with open(out, "w") as f:
    json.dump({"median": statistics.median(intervals), "steps": len(stamps)}, f)
