"""Training through torch.distributed.rpc's distributed autograd, in one process (an RPC world of 1).

Usage: loop_rpc_autograd.py STEPS. As pytorch/examples' RPC parameter server trains: the backward
is `dist_autograd.backward(context_id, [loss])` and the update a `DistributedOptimizer`; no
Tensor.backward and no torch optimizer's `step()` ever runs in this process.
"""
import os
import socket
import sys

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import nn
from torch.distributed.optim import DistributedOptimizer

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
with socket.socket() as s:  # a free port for the RPC world's store
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
rpc.init_rpc("trainer", rank=0, world_size=1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = DistributedOptimizer(torch.optim.SGD, [rpc.RRef(p) for p in model.parameters()], lr=0.05)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8 * steps, 16), torch.randn(8 * steps, 1)),
                                   batch_size=8)
for x, y in data:
    with dist_autograd.context() as context_id:
        loss = nn.functional.mse_loss(model(x), y)
        dist_autograd.backward(context_id, [loss])
        opt.step(context_id)
rpc.shutdown()
print(f"rpc done: {steps} steps, last loss {loss.item():.4f}")
