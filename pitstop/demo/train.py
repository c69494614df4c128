"""Provides the demo training script: a small CNN on synthetic images with a CPU-heavy transform.

Deliberately slow in the way real runs are slow: every sample goes through a
per-sample augmentation (blur passes, crop, jitter) on the CPU, and the
DataLoader keeps its defaults (`num_workers=0`), so the step waits for data.
`pitstop demo` runs it; so do the tests. It runs on a GPU when there is one.

    python -m pitstop.demo.train --steps 300 [--num-workers 2] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE = 64  # pixels a side after the crop
CLASSES = 10


class SyntheticImages(Dataset):
    """Deterministic fake images whose label is recoverable, so the loss really falls."""

    def __init__(self, size: int, blur_passes: int) -> None:
        self.size = size
        self.blur_passes = blur_passes
        kernel = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        kernel = torch.outer(kernel, kernel)
        self.kernel = (kernel / kernel.sum()).expand(3, 1, 5, 5).contiguous()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        gen = torch.Generator().manual_seed(index)
        label = index % CLASSES
        image = torch.rand(3, IMAGE + 8, IMAGE + 8, generator=gen)
        image[label % 3] += 0.5 * (label / CLASSES)  # the signal the model learns
        # The CPU-heavy part: per-sample blur passes, a crop and a jitter, as a
        # typical hand-written augmentation pipeline would do.
        batch = image.unsqueeze(0)
        for _ in range(self.blur_passes):
            batch = F.conv2d(F.pad(batch, (2, 2, 2, 2), mode="reflect"), self.kernel, groups=3)
        top, left = torch.randint(0, 9, (2,), generator=gen).tolist()
        image = batch[0, :, top : top + IMAGE, left : left + IMAGE]
        image = image * (0.8 + 0.4 * torch.rand(3, 1, 1, generator=gen))
        image = (image - image.mean()) / (image.std() + 1e-6)
        return image.contiguous(), label


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps to run (default 200)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (default 0: the stall)")
    parser.add_argument("--blur-passes", type=int, default=10, help="cost of the per-sample transform")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> float:
    """Train for --steps steps; returns the mean loss of the last 20 steps."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    dataset = SyntheticImages(size=max(args.steps * args.batch_size, 1024), blur_passes=args.blur_passes)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    losses: list[float] = []
    started = time.perf_counter()
    step = 0
    while step < args.steps:
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 50 == 0 or step == args.steps:
                losses.append(loss.item())
                rate = step * args.batch_size / (time.perf_counter() - started)
                print(f"step {step}/{args.steps}  loss {losses[-1]:.3f}  {rate:.0f} samples/s", flush=True)
            if step >= args.steps:
                break
    return sum(losses[-3:]) / max(1, len(losses[-3:]))


if __name__ == "__main__":
    main()
