"""Resumes as torch.distributed.checkpoint does: the optimizer's state is made by a step at learning rate 0.

`get_optimizer_state_dict` and `set_optimizer_state_dict` (and pytorch/examples' FSDP2 checkpointer,
directly) call `_init_optim_state`, which steps a fresh optimizer once with zero gradients: here
twice before the first training step. A save mid-run finds the state there and steps nothing.
"""
import sys

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = nn.Linear(8, 1)
saved = get_optimizer_state_dict(model, torch.optim.Adam(model.parameters(), lr=0.01))  # the "checkpoint"
opt = torch.optim.Adam(model.parameters(), lr=0.01)
set_optimizer_state_dict(model, opt, saved)  # resumed from it
data = TensorDataset(torch.randn(steps * 16, 8), torch.randn(steps * 16, 1))
for i, (x, y) in enumerate(DataLoader(data, batch_size=16)):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if i == steps // 2:
        get_optimizer_state_dict(model, opt)  # a checkpoint mid-run
print("checkpoint resume done")
