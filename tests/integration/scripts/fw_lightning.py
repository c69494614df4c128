"""A PyTorch Lightning Trainer on the CPU: fit (validating every few steps), validate, predict.

Tiny model, synthetic data, no logger, no checkpoints. The script counts its
own optimizer steps with a plain global post-hook (the reference pitstop's
steps are compared with) and notes how many steps were done when each
validation pass began; it writes both to OUT (one file per rank:
OUT.rank<N>.json).

usage: fw_lightning.py MAX_STEPS STRATEGY DEVICES OUT
"""

from __future__ import annotations

import json
import os
import sys

import lightning as L
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, TensorDataset

MAX_STEPS, STRATEGY, DEVICES, OUT = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
BATCH = 8
VAL_EVERY = 10  # training batches between validation passes

optimizer_steps = 0


def _count(*_: object) -> None:
    global optimizer_steps
    optimizer_steps += 1


register_optimizer_step_post_hook(_count)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y), sync_dist=True)

    def predict_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).argmax(1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Passes(L.Callback):
    """Optimizer steps done when each validation pass of fit began (the sanity check included)."""

    def __init__(self) -> None:
        self.at: list[int] = []

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self.at.append(optimizer_steps)


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 32, generator=g), torch.randint(0, 4, (n,), generator=g))


train_loader = DataLoader(data(BATCH * MAX_STEPS * DEVICES * 2, 0), batch_size=BATCH, shuffle=True)
val_loader = DataLoader(data(64, 1), batch_size=16)  # built after the training loader, as scripts do
predict_loader = DataLoader(data(48, 2), batch_size=16)

passes = Passes()
trainer = L.Trainer(
    accelerator="cpu",
    devices=DEVICES,
    strategy=STRATEGY,
    max_steps=MAX_STEPS,
    val_check_interval=VAL_EVERY,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[passes],
)
model = Tiny()
trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader)
fit_steps = optimizer_steps
trainer.validate(model, dataloaders=val_loader, verbose=False)
predictions = trainer.predict(model, dataloaders=predict_loader)
assert predictions is not None
predicted = sum(len(p) for p in predictions)

rank = trainer.global_rank
result = {
    "rank": rank,
    "pid": os.getpid(),
    "optimizer_steps": optimizer_steps,
    "fit_steps": fit_steps,
    "global_step": trainer.global_step,
    "val_at": passes.at,
    "predicted": predicted,
    "batch": BATCH,
}
with open(f"{OUT}.rank{rank}.json", "w") as f:
    json.dump(result, f)
print(f"rank {rank}: {optimizer_steps} optimizer steps, validation at {passes.at}, {predicted} predicted; done")
