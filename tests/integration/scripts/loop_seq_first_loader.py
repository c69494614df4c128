"""A sequence-first model fed by a DataLoader whose collate_fn stacks along dimension 1: (seq, batch, features).

pytorch/examples' language_translation batches so for nn.Transformer (batch_first=False);
its steps read the padded length (17) as their samples, for batches of 32.
"""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
data = TensorDataset(torch.randn(steps * 8 - 3, 5, 16))  # the last batch holds 5


def collate(items: list) -> torch.Tensor:
    length = 3 + len(items) % 4  # a sequence length that is not the batch's
    return [torch.stack([x[:length] for (x,) in items], 1)]  # (seq, batch, features)


loader = DataLoader(data, batch_size=8, collate_fn=collate)
layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)  # batch_first=False
model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for (x,) in loader:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("seq-first done", tuple(x.shape))
