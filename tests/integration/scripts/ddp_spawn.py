"""A 2-rank DDP job on gloo whose ranks torch.multiprocessing.spawn starts (pytorch/examples' multigpu.py shape).

    python ddp_spawn.py STEPS PORT

The parent only spawns; each rank builds its model (a Conv2d, wrapped in DDP) and
its DataLoader before its first step, then trains STEPS steps.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train(rank: int, world: int, steps: int, port: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 2)))
    data = TensorDataset(torch.randn(steps * 8 * world, 1, 8, 8), torch.randint(0, 2, (steps * 8 * world,)))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        done += 1
    print(f"rank {rank} trained {done} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    steps, port = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(train, args=(2, steps, port), nprocs=2)
