"""K-fold cross-validation without a DataLoader: a new model and optimizer for each fold.

Usage: loop_kfold.py FOLDS STEPS_PER_FOLD. Each fold trains its own model on batches of 32
sliced from a tensor, then evaluates it on its held-out slice (4 forwards under no_grad);
the previous fold's model is freed when the next is built.
"""
import sys

import torch
from torch import nn

folds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
torch.manual_seed(0)
x, y = torch.randn(folds * steps * 32, 16), torch.randn(folds * steps * 32, 1)
for fold in range(folds):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    for i in range(steps):
        j = (fold * steps + i) * 32
        loss = nn.functional.mse_loss(model(x[j:j + 32]), y[j:j + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        held = sum(nn.functional.mse_loss(model(x[k:k + 32]), y[k:k + 32]).item() for k in range(0, 128, 32))
    print(f"fold {fold}: last loss {loss.item():.4f}, held-out {held / 4:.4f}")
print("kfold done")
