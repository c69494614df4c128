"""A dataset that loads slowly, so the training loop waits for data (the data-wait finding, knob num_workers)."""

from __future__ import annotations

import math

import torch


class SlowDecode(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        s = 0.0
        for k in range(3000):  # ~0.3 ms a sample in CPython: a batch of 16 loads far slower than it trains
            s += math.sqrt(k + i)
        return torch.full((8,), s % 1.0), i % 2
