"""A run that never takes its first step: its dataset's __init__ reads an index that does not return
(standing in for a read from a dead network mount), after torch is imported."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


def read_index() -> list[int]:
    time.sleep(3600)  # the read that does not return
    return list(range(64))


class Mounted(Dataset):
    def __init__(self) -> None:
        self.index = read_index()

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randn(16)


def main() -> None:
    # The data first: the optimizer's construction imports torch._dynamo, seconds on a loaded machine
    # before the hang itself is reached.
    data = DataLoader(Mounted(), batch_size=8)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in data:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
