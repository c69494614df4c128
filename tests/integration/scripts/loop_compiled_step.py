"""A whole training step under torch.compile (forward, backward, optimizer step), or only `opt.step()`.

Usage: loop_compiled_step.py STEPS step|opt. Compiled with the "eager" backend: Dynamo traces
and breaks graphs exactly as with inductor, without inductor's code generation (seconds, not
a minute, on a CPU). Prints one JSON line: the steps run, the last loss, and what Dynamo
counted (graph breaks and their reasons, graphs compiled).
"""
import json
import sys

import torch
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
what = sys.argv[2] if len(sys.argv) > 2 else "step"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
loader = torch.utils.data.DataLoader(data, batch_size=8)


@torch.compile(backend="eager")
def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


@torch.compile(backend="eager")
def opt_step() -> None:
    opt.step()


done = 0
while done < steps:
    for x, y in loader:
        if done == steps:
            break
        if what == "step":
            loss = train_step(x, y)
        else:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt_step()
        done += 1

from torch._dynamo.utils import counters  # noqa: E402  (imported by torch.compile by now)

print(json.dumps({"steps": done, "loss": round(loss.item(), 6),
                  "breaks": sorted(k.splitlines()[0] for k in counters["graph_break"]),
                  "graph_breaks": sum(counters["graph_break"].values()),
                  "graphs": counters["stats"]["unique_graphs"]}))
