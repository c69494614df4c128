"""Imports transformers before torch (Hugging Face's run_clm.py does), then trains a few optimizer steps."""
import sys

import transformers  # noqa: F401  (looks torch up with find_spec before anything imports it)

import torch  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
model = torch.nn.Linear(8, 1)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for _ in range(steps):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"transformers first done: {steps} optimizer steps")
