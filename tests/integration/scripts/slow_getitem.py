"""A training loop whose dataset spends its time in one known line (for `pitstop profile --data`)."""

from __future__ import annotations

import math
import sys

import torch


class SlowDecode(torch.utils.data.Dataset):  # type: ignore[misc]
    def __len__(self) -> int:
        return 10**7

    def decode(self, i: int) -> float:
        s = 0.0
        for k in range(4000):
            s += math.sqrt(k + i)  # THE SLOW LINE
        return s

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((8,), self.decode(i) % 1.0), i % 2


def main() -> None:
    workers = int(sys.argv[1])
    model = torch.nn.Linear(8, 2)
    # The weights updated by hand: building a torch.optim optimizer imports torch._dynamo (2.7 s of CPU),
    # and the tests that sample this loop are about its dataset.
    loader = torch.utils.data.DataLoader(SlowDecode(), batch_size=16, num_workers=workers)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for weight in model.parameters():
                weight -= 0.1 * weight.grad
                weight.grad = None
        if step == 2:
            print("training", flush=True)  # the workers are up and loading


if __name__ == "__main__":
    main()
