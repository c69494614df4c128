"""Trains a few steps, then exports the model with torch.export, non-strict and strict; prints what it got."""
import json

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(320, 8), torch.randint(0, 2, (320,)))
for x, y in torch.utils.data.DataLoader(data, batch_size=32):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
graphs = {}
for strict in (False, True):
    exported = torch.export.export(model, (torch.randn(4, 8),), strict=strict)
    graphs["strict" if strict else "non-strict"] = [node.op for node in exported.graph.nodes]
print(json.dumps({"loss": round(loss.item(), 4), "graphs": graphs}))
