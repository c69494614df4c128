"""A loop pitstop cannot see (no optimizer, no backward): marked with pitstop.step()."""
import sys
import time

import pitstop
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
for _ in range(steps):
    torch.randn(64, 64) @ torch.randn(64, 64)
    time.sleep(0.01)
    pitstop.step(samples=64)
print("manual step done")
