"""Prints what each call the hooks make costs warm (back to back) and cold (right after a step's worth of torch work).

    python benchmarks/cold_calls.py [--rounds 2000]

The agent's hooks run between the training step's own torch calls, which
evict the caches (and, in a VM, the TLB) that the hooks' code and data sat in:
in place a call costs several times its tight-loop time. Each call below is
timed alone with perf_counter_ns, once after the call before it (warm) and
once right after a matmul pair of the size of the 1 ms workload's step
(cold); the median of `--rounds` of each. "nothing" is an empty Python
function: the floor of any hook. Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from pitstop.profiling._root import leading_dim


def calls() -> dict[str, Callable[[], Any]]:
    perf = time.perf_counter
    held: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=64)
    batch = (torch.randn(32, 128), torch.randint(0, 10, (32,)))
    tensor_type = torch.Tensor
    x = torch.randn(32, 8, requires_grad=True)
    loss = (x * 2).sum()

    def nothing() -> None:
        pass

    def two_stamps() -> float:
        started = perf()
        return perf() - started

    def stamp_held() -> None:  # what a hook holds for the clock: its stamps in one tuple
        held.append((nothing, 1, perf(), None))

    return {
        "nothing": nothing,
        "two perf_counter stamps": two_stamps,
        "a stamp held (tuple, deque)": stamp_held,
        "leading_dim((x, y))": lambda: leading_dim(batch, tensor_type),
        "x.shape[0] inline": lambda: batch[0].shape[0],
        "loss.item()": loss.item,
        "loss.detach()": loss.detach,
        "tensor.is_cpu": lambda: loss.is_cpu,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    a, b = torch.randn(128, 512), torch.randn(512, 512)
    ns = time.perf_counter_ns
    timed = calls()
    warm: dict[str, list[int]] = {name: [] for name in timed}
    cold: dict[str, list[int]] = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, call in timed.items():
            call()
            t0 = ns()
            call()
            warm[name].append(ns() - t0)
            (a @ b).relu() @ b.t()  # the step's own work between two hook calls
            t0 = ns()
            call()
            cold[name].append(ns() - t0)
    print(f"command: python benchmarks/cold_calls.py --rounds {args.rounds}; load average {os.getloadavg()[0]:.2f}")
    print(f"  {'call':30s} {'warm us':>8s} {'cold us':>8s}  cold / warm")
    for name in timed:
        w, c = statistics.median(warm[name]) / 1e3, statistics.median(cold[name]) / 1e3
        print(f"  {name:30s} {w:8.2f} {c:8.2f}  {c / w:5.1f}x")


if __name__ == "__main__":
    main()
