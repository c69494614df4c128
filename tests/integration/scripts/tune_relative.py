"""A training script written the way real ones are: relative paths, a module beside it, checkpoints as it goes.

Run from its project folder: reads config/train.json and data/samples.pt,
"downloads" data/extra.pt when it is missing, imports tune_relhelper from its
own directory, and every few steps saves out/ckpt.pt (torch.save), appends to
out/log.txt and replaces out/last.json atomically.
"""

from __future__ import annotations

import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import tune_relhelper


class Samples(Dataset):
    def __init__(self, x: torch.Tensor, io_ms: float) -> None:
        self.x = x
        self.io_ms = io_ms

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.io_ms / 1000.0)  # reading the sample from disk
        x = tune_relhelper.augment(self.x[i])
        return x, (x.sum() > 0).long()


def main() -> None:
    with open("config/train.json") as f:
        cfg = json.load(f)
    if not os.path.exists("data/extra.pt"):
        print("downloading data/extra.pt", flush=True)
        torch.save(torch.zeros(4), "data/extra.pt")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = Samples(torch.load("data/samples.pt"), cfg["io_ms"])
    loader = DataLoader(data, batch_size=cfg["batch"], shuffle=True)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs("out", exist_ok=True)
    step = 0
    while True:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % cfg["save_every"] == 0:
                torch.save(model.state_dict(), "out/ckpt.pt")
                with open("out/log.txt", "a") as log:
                    log.write(f"step {step} loss {loss.item():.4f}\n")
                with open("out/last.json.tmp", "w") as f:
                    json.dump({"step": step}, f)
                os.replace("out/last.json.tmp", "out/last.json")


if __name__ == "__main__":
    main()
