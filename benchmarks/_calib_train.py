"""Provides the training script behind `benchmarks/calibration.py`'s scenarios: one loop, switched by flags.

Each flag is one known cause of slowness (a per-sample transform of torch ops,
reads that sleep, a float64 model, frequent evaluation, a rank with extra
compute), and each fix a finding can name maps to a flag (`--workers`,
`--dtype`, `--threads`, `--eval-every`, `--straggle`). Under torchrun it trains
DDP on gloo. It prints one line, `CALIB {json}`, with the seconds from the end
of step WARMUP to the end of the last step (evaluation inside that span counts:
it is the loop's time), so every arm is timed the same way whether or not
pitstop watches it.

usage: _calib_train.py [--steps N] [--batch B] [--sample-ops K] [--io-ms MS] [--workers W] ...
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

# Steps 0-2 hold worker start-up and first-touch allocations: pitstop leaves them out too (WARMUP = 3).
WARMUP = 3


class Samples(Dataset):
    """A sample costs `ops` small torch ops (a decode/augment stand-in) and a sleep of `io_ms` (a read)."""

    def __init__(self, n: int, features: int, ops: int, io_ms: float) -> None:
        self.n, self.features, self.ops, self.io_ms = n, features, ops, io_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.io_ms:
            time.sleep(self.io_ms / 1000.0)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.features, generator=g)
        for _ in range(self.ops):
            x = torch.tanh(x * 1.01 + 0.01)
        return x, torch.tensor(i % 10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--sample-ops", type=int, default=0, help="torch ops per sample in the transform")
    p.add_argument("--io-ms", type=float, default=0.0, help="sleep per sample: a read that waits")
    p.add_argument("--preload", action="store_true", help="every sample made once before training (the "
                   "'decode once offline' fix of a data wait that workers cannot pay for)")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--prefetch", type=int, default=0)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: torch's default")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every N training steps (0: never)")
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--straggle", type=int, default=0, help="extra 256x256 matmuls per step on the last rank")
    args = p.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank, world = 0, 1
    if ddp:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    dtype = getattr(torch, args.dtype)
    n = (args.steps + 1) * args.batch
    data: Dataset = Samples(n, args.features, args.sample_ops, args.io_ms)
    if args.preload:
        xs, ys = zip(*(data[i] for i in range(n)))
        data = TensorDataset(torch.stack(xs), torch.stack(ys))
    extra = {"persistent_workers": args.persistent} if args.workers else {}
    if args.workers and args.prefetch:
        extra["prefetch_factor"] = args.prefetch
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True, **extra)
    val = DataLoader(Samples(max(1, args.eval_batches) * args.batch, args.features, args.sample_ops, 0.0),
                     batch_size=args.batch)
    model: nn.Module = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                                     nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                                     nn.Linear(args.hidden, 10)).to(dtype)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scratch = torch.randn(256, 256)
    straggle = args.straggle if rank == world - 1 else 0
    step = 0
    start = time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.to(dtype)), y)
            opt.zero_grad()
            loss.backward()
            h = scratch
            for _ in range(straggle):
                h = torch.tanh(h @ scratch)
            opt.step()
            step += 1
            if step == WARMUP:
                start = time.perf_counter()
            if args.eval_every and step % args.eval_every == 0:
                model.eval()
                with torch.no_grad():
                    for vx, _ in val:
                        model(vx.to(dtype))
                model.train()
            if step >= args.steps:
                break
    seconds = time.perf_counter() - start
    if rank == 0:
        print("CALIB " + json.dumps({"steps": args.steps - WARMUP, "seconds": seconds}), flush=True)
    if ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
