"""A ResNet-like GPU workload for issue 15: the demo's synthetic images through their per-sample CPU transform, a DataLoader
left at its defaults, and a GradScaler built as AMP-ready scripts do.

Slow in the ways `pitstop tune` fixes: the transform runs in the main process
(num_workers=0), batches are copied from pageable memory, the maths is fp32
with cudnn.benchmark off and NCHW tensors. tests/gpu and
benchmarks/gpu_acceptance.py run it, plainly and under `pitstop run|tune`.

    python conv_train.py [--steps N] [--batch 64] [--workers 0] [--pin-memory] [--report FILE] ...

Options for the tests: --no-scaler (GradScaler.step reads its inf check with
.item(): a sync per step), --item-every K (a logging .item() every K steps, 0:
none), --pageable-extra (one more H2D copy a step, from pageable memory),
--sync-debug (torch.cuda.set_sync_debug_mode("error") after the warm-up: any
host-device sync raises), --fp16-overflow (features scaled past fp16's range
before a normalisation: NaN under fp16 autocast only).
--report FILE writes the samples/s the script measured itself after --warmup
steps (a synchronize before each clock read), so plain and `--config` runs are
timed the same way.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

# The demo's images: a class in their colour, a blur/crop/jitter transform per sample on the CPU.
from pitstop.demo.train import CLASSES, SyntheticImages


class Block(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNetLike(nn.Module):
    def __init__(self, width: int, overflow: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        chans = [width, width * 2, width * 4]
        layers: list[nn.Module] = []
        cin = width
        for i, cout in enumerate(chans):
            layers += [Block(cin, cout, 1 if i == 0 else 2), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, CLASSES)
        self.overflow = overflow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)
        if self.overflow:
            # Past fp16's largest value (65504) in half precision only: the norm is inf and
            # the features NaN; fp32 and bf16 keep the range and the normalisation undoes it.
            features = F.normalize(features * 1e5, dim=1) * 10.0
        return self.head(features)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--blur-passes", type=int, default=6, help="cost of the per-sample CPU transform")
    parser.add_argument("--width", type=int, default=64, help="channels of the first stage")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu")
    parser.add_argument("--no-scaler", action="store_true")
    parser.add_argument("--item-every", type=int, default=50)
    parser.add_argument("--pageable-extra", action="store_true")
    parser.add_argument("--sync-debug", action="store_true")
    parser.add_argument("--fp16-overflow", action="store_true")
    parser.add_argument("--warmup", type=int, default=10, help="steps before --sync-debug and --report start")
    parser.add_argument("--report", metavar="FILE")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    cuda = device.type == "cuda"
    dataset = SyntheticImages(max(args.steps * args.batch, 1024), args.blur_passes)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        pin_memory=args.pin_memory)
    model = ResNetLike(args.width, args.fp16_overflow).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Built enabled, as scripts that may run under fp16 autocast do; a no-op scale in fp32.
    scaler = torch.amp.GradScaler(device.type, enabled=cuda and not args.no_scaler)
    step = 0
    samples = 0
    started = 0.0
    while step < args.steps:
        for images, labels in loader:
            if step == args.warmup:
                if cuda:
                    torch.cuda.synchronize()
                samples, started = 0, time.perf_counter()
                if args.sync_debug and cuda:
                    torch.cuda.set_sync_debug_mode("error")
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            if args.pageable_extra:  # a tensor made on the CPU each step, never pinned
                images = images + torch.zeros(images.shape[0], 1, 1, 1).to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            samples += images.shape[0]
            step += 1
            if args.item_every and step % args.item_every == 0:
                print(f"step {step}/{args.steps}  loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
    if args.sync_debug and cuda:
        torch.cuda.set_sync_debug_mode("default")
    if cuda:
        torch.cuda.synchronize()
    if args.report and step > args.warmup:
        seconds = time.perf_counter() - started
        with open(args.report, "w") as handle:
            json.dump({"samples": samples, "seconds": seconds, "samples_per_s": samples / seconds,
                       "steps": step - args.warmup, "device": device.type}, handle)


if __name__ == "__main__":
    main()
