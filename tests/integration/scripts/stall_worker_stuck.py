"""A DataLoader worker that blocks forever in __getitem__ at sample STUCK_AT: the main process waits on its queue."""
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i >= int(os.environ.get("STUCK_AT", "160")):
            time.sleep(3600)  # a read from a dead mount, in the worker
        return torch.randn(16), torch.randn(4)


def main() -> None:
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Slow(), batch_size=8, num_workers=1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
