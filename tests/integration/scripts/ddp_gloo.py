"""Two CPU ranks on gloo with DDP; rank 0's DataLoader worker is forked, rank 1's spawned.

Each worker prints its pid, so a test can check that no worker runs an agent.
Rank SLOW_RANK (env) sleeps 30 ms a step, to make a straggler. Rank SLOW_DATA_RANK's
DataLoader worker sleeps 4 ms a sample (32 ms a batch of 8), to make a data straggler.
WORKERS_FORKED=1 (env) forks rank 1's worker too: a spawned worker imports torch again (~2.8 s of CPU),
for a test that is not about how the workers start.
Every rank sleeps STEP_SLEEP_MS (env, default 0) a step, as a step that waits for its GPU
kernels does: time outside collectives that a busy machine's scheduler cannot double.
LOADER_WORKERS=0 (env; default 1) loads in each rank's main process: a test about the job,
not the workers, spares the spawned worker's torch import (~3 s of CPU a job).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


class SlowSamples(TensorDataset):
    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        time.sleep(0.004)
        return super().__getitem__(i)


def report_worker(_: int) -> None:
    print(f"worker pid {os.getpid()}", flush=True)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
    slow_data_rank = int(os.environ.get("SLOW_DATA_RANK", "-1"))
    step_sleep = float(os.environ.get("STEP_SLEEP_MS", "0")) / 1e3
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = (SlowSamples if rank == slow_data_rank else TensorDataset)(torch.randn(steps * 8, 32),
                                                                      torch.randn(steps * 8, 4))
    workers = int(os.environ.get("LOADER_WORKERS", "1"))
    forked = rank == 0 or os.environ.get("WORKERS_FORKED") == "1"
    context = None if workers == 0 else "fork" if forked else "spawn"
    loader = DataLoader(data, batch_size=8, num_workers=workers, multiprocessing_context=context,
                        worker_init_fn=report_worker if workers else None)
    for x, y in loader:
        if rank == slow_rank:
            time.sleep(0.03)
        if step_sleep:
            time.sleep(step_sleep)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} pid {os.getpid()} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
