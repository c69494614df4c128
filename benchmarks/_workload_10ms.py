"""A CPU training loop of ~10 ms steps that times its own iterations (used by overhead.py).

    python _workload_10ms.py STEPS OUT.json
Writes the per-iteration times it measured itself, so plain and instrumented
runs are timed by the same clock in the same way.
"""
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)  # leave the second core to pitstop's threads and the OS: less noise
steps, out = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data = TensorDataset(torch.randn(steps * 64, 256), torch.randint(0, 10, (steps * 64,)))
times: list[float] = []
last = time.perf_counter()
for x, y in DataLoader(data, batch_size=64, shuffle=True):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    now = time.perf_counter()
    times.append(now - last)
    last = now
with open(out, "w") as handle:
    json.dump(times, handle)
