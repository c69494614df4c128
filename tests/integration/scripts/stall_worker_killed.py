"""A DataLoader worker killed with SIGKILL mid-run (as the OOM killer does): the script sends it at step KILL_AT."""
import os
import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset


class D(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.001)
        return torch.randn(16), torch.randn(4)


def main() -> None:
    kill_at = int(os.environ.get("KILL_AT", "20"))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(D(), batch_size=8, num_workers=1, prefetch_factor=2)
    it = iter(loader)
    for step in range(1_000):
        x, y = next(it)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == kill_at:
            worker = it._workers[0].pid
            print(f"killing worker {worker}", flush=True)
            os.kill(worker, signal.SIGKILL)


if __name__ == "__main__":
    main()
