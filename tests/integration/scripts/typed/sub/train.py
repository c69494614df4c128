"""Trains a tiny model on helpers.data with required arguments; prints them, so a rerun shows what it got."""

from __future__ import annotations

import argparse
import os

import torch

from helpers.data import SlowDecode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    # HF_HUB_OFFLINE as transformers' scripts read it: a rerun without it would download
    print(f"train.py steps={args.steps} tag={args.tag} offline={os.environ.get('HF_HUB_OFFLINE', '-')}", flush=True)
    if os.environ.get("TYPED_SAY_ONLY"):
        # A rerun that shows only what it got (its arguments, variables, directory and imports):
        # the training after this line, building torch.optim.SGD included, is ~3 s of CPU it needs not.
        return
    # One intra-op thread: beside a neighbour's test on the 2 cores, torch's 2 threads stretched
    # the 1 ms compute to 68 ms, and the data wait (the finding these tests read) fell to 17%.
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    if args.dtype == "float64":
        model = model.double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(SlowDecode(16 * args.steps), batch_size=16)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(next(model.parameters()).dtype)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
