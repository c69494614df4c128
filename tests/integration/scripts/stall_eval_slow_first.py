"""A slow first step (SLOW_FIRST_S) and a long evaluation pass (EVAL_BATCHES batches of EVAL_BATCH_S) between
training steps: neither is a stall."""
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class SlowEval(TensorDataset):
    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        time.sleep(float(os.environ.get("EVAL_BATCH_S", "0.5")) / 4)
        return super().__getitem__(i)


def main() -> None:
    slow_first = float(os.environ.get("SLOW_FIRST_S", "6"))
    eval_batches = int(os.environ.get("EVAL_BATCHES", "16"))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(TensorDataset(torch.randn(320, 16), torch.randn(320, 4)), batch_size=8, shuffle=True)
    val = DataLoader(SlowEval(torch.randn(eval_batches * 4, 16), torch.randn(eval_batches * 4, 4)), batch_size=4)
    for epoch in range(2):
        for step, (x, y) in enumerate(train):
            if epoch == 0 and step == 0:
                time.sleep(slow_first)  # a first step that builds things
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.005)
        model.eval()
        with torch.no_grad():
            for x, y in val:
                model(x)
        model.train()
        print(f"epoch {epoch} evaluated", flush=True)


if __name__ == "__main__":
    main()
