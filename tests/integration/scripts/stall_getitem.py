"""Two CPU ranks on gloo with DDP; rank STUCK_RANK's dataset blocks forever in __getitem__ at step STUCK_AT.

It stands in for a read from a dead network mount: rank 1 never returns from its
DataLoader's main-process fetch (num_workers=0), so rank 0 waits in DDP's all-reduce.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class D(Dataset):
    def __init__(self, rank: int, stuck_rank: int, stuck_at: int) -> None:
        self.rank, self.stuck_rank, self.stuck_at = rank, stuck_rank, stuck_at

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rank == self.stuck_rank and i >= self.stuck_at * 8:
            print(f"rank {self.rank} blocks in __getitem__", flush=True)
            time.sleep(3600)
        return torch.randn(32), torch.randn(4)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = D(rank, int(os.environ.get("STUCK_RANK", "1")), int(os.environ.get("STUCK_AT", "20")))
    loader = DataLoader(data, batch_size=8, num_workers=0)
    for step, (x, y) in enumerate(loader):
        if step >= steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
