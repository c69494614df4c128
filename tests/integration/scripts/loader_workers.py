"""A DataLoader with 2 workers of a given start method ("fork" or "spawn"), and an optimizer step per batch.

The workers never step: they must never start an agent or leave a record.
Usage: loader_workers.py CONTEXT STEPS.
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    context, steps = sys.argv[1], int(sys.argv[2])
    data = TensorDataset(torch.randn(steps * 8, 4), torch.randn(steps * 8, 1))
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context=context)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loader {context} done")
