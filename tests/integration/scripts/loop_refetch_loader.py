"""Each epoch ends with `len(list(loader))`: every batch of the training loader fetched again, not trained on.

pytorch/examples' language_translation averages its epoch's loss so; pitstop counted those
batches in the samples of the step around them (3,232 for 32).
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(epochs):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    print(f"epoch {epoch}: mean loss {total / len(list(loader)):.4f}")
print("refetch done")
