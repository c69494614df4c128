"""Two CPU ranks on gloo with DDP; rank SLOW_RANK's optimizer step does EXTRA_MATMULS extra matmuls.

A mild compute straggler: the extra work sits inside `optimizer.step()` on
one rank only, as a per-rank EMA, logging or a clipping done on one rank does.
Usage: torchrun --nproc_per_node 2 ddp_slow_optimizer.py [STEPS]
"""
import os
import sys

import torch
import torch.distributed as dist


class ExtraWorkSGD(torch.optim.SGD):
    """SGD that first does `extra` matmuls of a 256x256 matrix (the work only one rank does)."""

    def __init__(self, params, lr: float, extra: int) -> None:
        super().__init__(params, lr=lr)
        self.extra = extra
        self.scratch = torch.randn(256, 256)

    def step(self, closure=None):
        x = self.scratch
        for _ in range(self.extra):
            x = torch.tanh(x @ self.scratch)
        return super().step(closure)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
    extra = int(os.environ.get("EXTRA_MATMULS", "8"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10)))
    opt = ExtraWorkSGD(model.parameters(), lr=0.01, extra=extra if rank == slow_rank else 0)
    for _ in range(steps):
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} pid {os.getpid()} done {steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
