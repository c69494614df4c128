"""Steps of 10 ms that become SLOW_MS (30 ms: 3x) after SLOW_AT steps, for STEPS steps in all: a slowdown, not a stall."""
import os
import time

import torch


def main() -> None:
    slow_at = int(os.environ.get("SLOW_AT", "80"))
    steps = int(os.environ.get("STEPS", "200"))
    slow_s = float(os.environ.get("SLOW_MS", "30")) / 1000
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(0.010 if step < slow_at else slow_s)  # the script's own line where the time goes
        opt.step()
    print(f"done {steps} steps", flush=True)


if __name__ == "__main__":
    main()
