"""Two CPU ranks on gloo with DDP that train until the file named by STOP_FILE (env) exists.

Every step rank 0 looks for the file and all ranks agree through an
all-reduce of one flag, so they stop at the same step and none hangs in a
collective its peer never joins. MAX_STEPS (argv[1], default 5000) bounds
the run if nobody writes the file. Each step sleeps 10 ms: ~60-90 steps/s,
slow enough for a scraper to see the counter move.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    max_steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    stop_file = os.environ.get("STOP_FILE", "")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    print(f"rank {rank} pid {os.getpid()} started", flush=True)
    for i in range(max_steps):
        flag = torch.tensor([1.0 if rank == 0 and stop_file and os.path.exists(stop_file) else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            break
        x, y = torch.randn(8, 32), torch.randn(8, 4)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)
    print(f"rank {rank} pid {os.getpid()} done after {i} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
