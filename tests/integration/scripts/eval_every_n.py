"""A plain PyTorch loop whose training loader is slow and whose eval loader, built after it, runs every 10 steps.

Training: batch 16 from a dataset that takes ~2 ms a sample to load, no
workers (the loader, not the model, sets the pace). Evaluation: a loader of
batch 100 built after the training one, iterated under torch.no_grad() at
the top of every 10th iteration (before steps 10, 20, ...), so each pass lies
inside one training step. The script stamps its own optimizer steps with a
plain global post-hook and notes the steps done at each evaluation; it writes
both to OUT.

usage: eval_every_n.py STEPS OUT
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, Dataset, TensorDataset

STEPS, OUT = int(sys.argv[1]), sys.argv[2]
TRAIN_BATCH, EVAL_BATCH, EVAL_EVERY = 16, 100, 10

stamps: list[float] = []
register_optimizer_step_post_hook(lambda *_: stamps.append(time.perf_counter()))


class SlowSamples(Dataset):
    """Random features whose loading costs ~2 ms a sample (a decode, say)."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.002)
        return self.x[i], self.y[i]


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
train_loader = DataLoader(SlowSamples(TRAIN_BATCH * STEPS), batch_size=TRAIN_BATCH, shuffle=True, num_workers=0)
g = torch.Generator().manual_seed(1)
eval_set = TensorDataset(torch.randn(500, 64, generator=g), torch.randint(0, 10, (500,), generator=g))
eval_loader = DataLoader(eval_set, batch_size=EVAL_BATCH)  # built after the training loader

eval_at: list[int] = []


def evaluate() -> float:
    eval_at.append(len(stamps))
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in eval_loader:
            correct += int((model(x).argmax(1) == y).sum())
    model.train()
    return correct / len(eval_set)


for i, (x, y) in enumerate(train_loader):
    if i and i % EVAL_EVERY == 0:
        print(f"step {i}: eval accuracy {evaluate():.3f}")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

with open(OUT, "w") as f:
    json.dump({"optimizer_steps": len(stamps), "eval_at": eval_at, "stamps": stamps, "batch": TRAIN_BATCH}, f)
print(f"{len(stamps)} optimizer steps, evaluation at {eval_at}; done")
