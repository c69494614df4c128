"""Imports torch past pitstop's import watcher (as a framework that rebuilds sys.meta_path might), then trains.

Each step sleeps 0.1 s so that the agent's late check (2 Hz) hooks torch while most steps are still to come.
Usage: import_past_watcher.py STEPS; prints "past watcher done: N optimizer steps".
"""
import sys
import time

sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_TorchWatcher"]
import torch  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(steps):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.1)
print(f"past watcher done: {steps} optimizer steps")
