"""The module tune_relative.py imports from its own directory (as real projects import their own package)."""

from __future__ import annotations

import torch


def augment(x: torch.Tensor) -> torch.Tensor:
    return x * 1.0 + 0.01
