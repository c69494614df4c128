"""A single process that deadlocks on its own threading.Lock after STUCK_AT steps (a non-reentrant lock taken twice)."""
import os
import threading

import torch

lock = threading.Lock()


def log_metrics(step: int) -> None:
    with lock:  # the caller already holds it: never returns
        print(f"step {step}", flush=True)


def main() -> None:
    stuck_at = int(os.environ.get("STUCK_AT", "20"))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10_000):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == stuck_at:
            print("taking the lock twice", flush=True)
            with lock:
                log_metrics(step)


if __name__ == "__main__":
    main()
