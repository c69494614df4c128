"""Trains in a `python -c` subprocess (not multiprocessing): pitstop does not measure it, and must say so."""
import subprocess
import sys

TRAIN = """
import sys, time
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps, until = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < until:
    loss = model(torch.randn(256, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    steps += 1
print(f"subprocess trained {steps} steps", flush=True)
"""

seconds = sys.argv[1] if len(sys.argv) > 1 else "4"
child = subprocess.Popen([sys.executable, "-c", TRAIN, seconds])
print(f"training in subprocess {child.pid}", flush=True)
sys.exit(child.wait())
