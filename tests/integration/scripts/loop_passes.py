"""Evaluations without a DataLoader, and a policy's rollouts: what the script ran, counted by itself.

usage: loop_passes.py MODE STEPS OUT
  estimate  nanoGPT's pattern: model.eval(), no_grad, 4 forwards of batches sliced by hand, at
            iteration 0 (before the first step) and every 5th
  onefwd    a full-batch GNN's: after every 5th step, model.eval(), no_grad, one forward over all
  rollout   stable-baselines3's PPO: STEPS rollouts of 128 environment steps (one no-grad forward of
            one observation each, the environment's work between), then 8 updates on the stored
            transitions through another method than forward
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

MODE, STEPS, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3]


class Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def evaluate(self, x: torch.Tensor) -> torch.Tensor:  # (stable-baselines3's evaluate_actions)
        return self.net(x)


torch.manual_seed(0)
model = Policy()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
steps = evals = rollouts = 0
full = torch.randn(500, 8)


def train_step(x: torch.Tensor, through_forward: bool = True) -> None:
    global steps
    out = model(x) if through_forward else model.evaluate(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps += 1


if MODE == "estimate":
    for it in range(STEPS):
        if it % 5 == 0:
            model.eval()
            with torch.no_grad():
                for _ in range(4):
                    model(full[torch.randint(0, 500, (12,))])
            model.train()
            evals += 1
        train_step(full[torch.randint(0, 500, (12,))])
elif MODE == "onefwd":
    for it in range(1, STEPS + 1):
        train_step(full)
        if it % 5 == 0:
            model.eval()
            with torch.no_grad():
                model(full)
            model.train()
            evals += 1
elif MODE == "rollout":
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        model.eval()
        obs, stored = rng.standard_normal(8).astype(np.float32), []
        with torch.no_grad():
            for _ in range(128):
                action = model(torch.as_tensor(obs)[None]).argmax().item()
                time.sleep(0.0005)  # the environment's step
                obs = (obs * 0.9 + rng.standard_normal(8) * 0.1 + action * 0.01).astype(np.float32)
                stored.append(obs)
        rollouts += 1
        model.train()
        batch = torch.as_tensor(np.stack(stored))
        for i in range(8):
            train_step(batch[i * 16:(i + 1) * 16], through_forward=False)
with open(OUT, "w") as f:
    json.dump({"steps": steps, "evals": evals, "rollouts": rollouts}, f)
print(f"{steps} steps, {evals} evaluations, {rollouts} rollouts")
