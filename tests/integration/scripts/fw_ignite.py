"""pytorch-ignite: create_supervised_trainer, and an evaluator over the training and validation loaders each epoch.

usage: fw_ignite.py EPOCHS BATCH OUT
"""
from __future__ import annotations

import json
import sys

import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.metrics import Accuracy, Loss
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, BATCH, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
TRAIN, VAL = 20 * BATCH, 10 * BATCH

steps = 0


def count(*_: object) -> None:
    global steps
    steps += 1


register_optimizer_step_post_hook(count)
torch.manual_seed(0)
x = torch.randn(TRAIN + VAL, 64)
y = (x[:, :4].sum(dim=1) > 0).long()
train_loader = DataLoader(TensorDataset(x[:TRAIN], y[:TRAIN]), batch_size=BATCH, shuffle=True)
val_loader = DataLoader(TensorDataset(x[TRAIN:], y[TRAIN:]), batch_size=BATCH)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
trainer = create_supervised_trainer(model, optimizer, nn.CrossEntropyLoss())
evaluator = create_supervised_evaluator(model, metrics={"acc": Accuracy(), "loss": Loss(nn.CrossEntropyLoss())})
eval_s: list[float] = []  # ignite's own timer of each evaluator run (State.times["COMPLETED"])
trained = 0


@trainer.on(Events.ITERATION_COMPLETED)
def samples(engine: object) -> None:
    global trained
    trained += len(trainer.state.batch[0])


@trainer.on(Events.EPOCH_COMPLETED)
def evaluate(engine: object) -> None:
    for loader in (train_loader, val_loader):
        evaluator.run(loader)
        eval_s.append(evaluator.state.times["COMPLETED"])


trainer.run(train_loader, max_epochs=EPOCHS)
with open(OUT, "w") as f:
    json.dump({"optimizer_steps": steps, "trained_samples": trained, "eval_s": eval_s,
               "total_s": trainer.state.times["COMPLETED"]}, f)
print(f"{steps} optimizer steps, {trained} training samples, evaluator runs {[round(s, 3) for s in eval_s]} s; done")
