"""A small training script for tuner tests: a CPU-heavy per-sample transform, and switchable failures."""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Heavy(Dataset):
    """Each sample costs `work` iterations of pure-Python arithmetic (a decode/augment stand-in)."""

    def __init__(self, n: int, work: int, crash_in_workers: bool, hang_in_workers: bool,
                 io_ms: float = 0.0) -> None:
        self.n = n
        self.work = work
        self.io_ms = io_ms
        self.crash_in_workers = crash_in_workers
        self.hang_in_workers = hang_in_workers

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        in_worker = get_worker_info() is not None
        if in_worker and self.crash_in_workers:
            raise ValueError("this dataset cannot load in a worker process")
        if in_worker and self.hang_in_workers:
            time.sleep(3600)
        if self.io_ms:
            time.sleep(self.io_ms / 1000.0)  # reading the sample from disk or network
        acc = 0
        for k in range(self.work):
            acc = (acc + k * i) % 1000003
        g = torch.Generator().manual_seed(i)
        x = torch.randn(32, generator=g) + acc * 1e-9
        return x, (x.sum() > 0).long()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--work", type=int, default=60000)
    parser.add_argument("--io-ms", type=float, default=0.0, help="per-sample read latency")
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="a sleep in each training step: the accelerator's time, which no worker shortens")
    parser.add_argument("--step-sleeps", type=int, default=1, help="how many sleeps --step-ms is cut into")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--oom-above", type=int, default=0, help="raise an OOM for batches larger than this")
    parser.add_argument("--nan-with-autocast", action="store_true")
    parser.add_argument("--crash-in-workers", action="store_true")
    parser.add_argument("--hang-in-workers", action="store_true")
    parser.add_argument("--forever", action="store_true", help="loop over epochs with no end")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=64, help="model width: wider makes batch size matter")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads; 0: torch's default")
    parser.add_argument("--by-hand", action="store_true",
                        help="update the weights by hand, without torch.optim: building an optimizer imports "
                             "torch._dynamo, 2.7 s of CPU in every trial of a test that is not about the optimizer")
    args = parser.parse_args()

    # One intra-op thread by default: on the 2-core CI machine two OpenMP threads spin
    # against the DataLoader workers, and a 0.1 ms matmul then takes 50-100 ms at random.
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = Heavy(args.n, args.work, args.crash_in_workers, args.hang_in_workers, args.io_ms)
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.persistent)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                          nn.ReLU(), nn.Linear(args.hidden, 2))
    opt = None if args.by_hand else torch.optim.SGD(model.parameters(), lr=0.05)
    epoch = 0
    while args.forever or epoch < args.epochs:
        for x, y in loader:
            if args.oom_above and x.shape[0] > args.oom_above:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {x.shape[0] * 2} MiB (batch {x.shape[0]})"
                )
            loss = nn.functional.cross_entropy(model(x), y)
            if args.nan_with_autocast and torch.is_autocast_enabled("cpu"):
                loss = loss * float("nan")
            if opt is None:
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.05 * p.grad
                        p.grad = None
            else:
                opt.zero_grad()
                loss.backward()
                opt.step()
            for _ in range(args.step_sleeps if args.step_ms else 0):
                time.sleep(args.step_ms / 1000.0 / args.step_sleeps)
        epoch += 1


if __name__ == "__main__":
    main()
