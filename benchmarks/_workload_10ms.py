"""A CPU training loop of ~10 ms steps that times its own iterations (used by overhead.py).

    python _workload_10ms.py STEPS OUT.json

Writes the per-iteration times it measured itself, so plain and instrumented
runs are timed by the same clock in the same way. `_overhead_ab.py` imports
`build` so both parts of overhead.py train the same model on the same data.
"""
import json
import sys
import time
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, TensorDataset

WIDTH = 1200  # ~10 ms a step on one core of the 2-core dev VM (7.7 ms at 1024)


def build(steps: int, width: int = WIDTH, batch: int = 64,
          features: int = 256) -> tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.set_num_threads(1)  # leave the second core to pitstop's threads and the OS: less noise
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(steps * batch, features), torch.randint(0, 10, (steps * batch,)))
    return model, opt, DataLoader(data, batch_size=batch, shuffle=True)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main(build: Callable[[int], tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]] = build) -> None:
    """Train STEPS steps of `build`'s loop and write each step's time to OUT.json (`_workload_1ms` too)."""
    steps, out = int(sys.argv[1]), sys.argv[2]
    model, opt, loader = build(steps)
    times: list[float] = []
    last = time.perf_counter()
    for x, y in loader:
        train_step(model, opt, x, y)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    with open(out, "w") as handle:
        json.dump(times, handle)


if __name__ == "__main__":
    main()
