"""Trains as a preemptible job does: SIGTERM saves a checkpoint and exits 7, SIGUSR1 is noted and training goes on.

SIG_DIR gets: `ready` once the handlers are installed (tests wait on it),
`checkpoint` from the SIGTERM handler, a line in `usr1` and in `int` per
SIGUSR1 / SIGINT with the step it came at, and `steps` at a normal end. A
`finish` file in SIG_DIR ends the loop; a SIGINT ends it INT_GRACE_S later
(the time a second, duplicated SIGINT would need to show). With SIG_DEFAULT_TERM
set, SIGTERM keeps its default action (the process dies of it).
"""
import os
import signal
import sys
import time
from pathlib import Path

import torch

out = Path(os.environ["SIG_DIR"])
grace = float(os.environ.get("INT_GRACE_S", "2"))
step = 0
interrupted_at: float | None = None


def on_term(signum, frame):
    (out / "checkpoint").write_text(f"step {step}\n")
    sys.exit(7)


def note(name: str):
    def handler(signum, frame):
        global interrupted_at
        with open(out / name, "a") as f:
            f.write(f"{step}\n")
        if name == "int" and interrupted_at is None:
            interrupted_at = time.monotonic()
    return handler


if not os.environ.get("SIG_DEFAULT_TERM"):  # else SIGTERM kills it, as it kills most scripts
    signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, note("usr1"))
signal.signal(signal.SIGINT, note("int"))
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
(out / "ready").write_text(f"{os.getpid()}\n")
while not (out / "finish").exists():
    if interrupted_at is not None and time.monotonic() - interrupted_at > grace:
        break
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    time.sleep(0.01)
(out / "steps").write_text(f"{step}\n")
