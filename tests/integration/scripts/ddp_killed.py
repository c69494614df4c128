"""Two CPU ranks on gloo with DDP; rank KILL_RANK (env, default 1) SIGKILLs itself at step KILL_AT (default 10).

A copy of ddp_gloo.py's loop without DataLoader workers: the point is a rank
that dies without a chance to say goodbye (no atexit, no End event), as under
the kernel's OOM killer.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    kill_rank = int(os.environ.get("KILL_RANK", "1"))
    kill_at = int(os.environ.get("KILL_AT", "10"))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(steps * 8, 32), torch.randn(steps * 8, 4))
    for i, (x, y) in enumerate(DataLoader(data, batch_size=8)):
        if rank == kill_rank and i == kill_at:
            # The agent's writer flushes every 0.5 s; 1.5 s lets steps 0..9 reach the
            # record, so the test can check what was measured before the death.
            time.sleep(1.5)
            print(f"rank {rank} pid {os.getpid()} kills itself at step {i}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} pid {os.getpid()} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
