"""Trains STEPS steps with no signal handler of its own, as most scripts do: a Ctrl-C at any moment ends it.

Says "sig_startup: importing torch" on stderr before its `import torch` and
"sig_startup: stepping" before its first step (tests wait on these lines);
writes `trained` in SIG_DIR only if it trained all its steps.
"""
import os
import sys
import time
from pathlib import Path

print("sig_startup: importing torch", file=sys.stderr, flush=True)
import torch  # noqa: E402

out = Path(os.environ["SIG_DIR"])
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("sig_startup: stepping", file=sys.stderr, flush=True)
steps = int(os.environ.get("STEPS", "3000"))
for step in range(steps):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.01)
(out / "trained").write_text(f"{steps}\n")
