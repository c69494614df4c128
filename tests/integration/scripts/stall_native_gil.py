"""A single process whose training thread holds the GIL in native code after STUCK_AT steps.

`ctypes.PyDLL` keeps the GIL during the call (`CDLL` would release it), so no
other thread of the process runs: the agent's sampler, stall watch and socket
go silent, and only the front can say it is stuck.
"""
import ctypes
import os
import time

import torch


def main() -> None:
    stuck_at = int(os.environ.get("STUCK_AT", "10"))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    libc = ctypes.PyDLL(None)
    for step in range(10_000):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.2)  # steps spread in time, as a real run's: the front hears them before the hold
        if step == stuck_at:
            print("holding the GIL in native code", flush=True)
            libc.sleep(3600)


if __name__ == "__main__":
    main()
