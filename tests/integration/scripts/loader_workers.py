"""DataLoaders with worker processes of the given start methods, one loader after the other, an optimizer
step per batch.

The workers never step: they must never start an agent or leave a record.
Usage: loader_workers.py CONTEXTS STEPS, CONTEXTS "fork", "spawn" or "fork,spawn" (STEPS steps for each).
One worker a loader: a spawned worker imports torch, ~3 s of CPU each on a 2-core machine.
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    contexts, steps = sys.argv[1].split(","), int(sys.argv[2])
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for context in contexts:
        data = TensorDataset(torch.randn(steps * 8, 4), torch.randn(steps * 8, 1))
        loader = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context=context)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"loader {context} done", flush=True)
