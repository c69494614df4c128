"""Keras 3 on the torch backend: model.fit on a tiny dense model, with validation data, then model.evaluate.

usage: fw_keras.py EPOCHS STEPS_PER_EPOCH BATCH OUT
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

EPOCHS, STEPS, BATCH, OUT = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


class Counts(keras.callbacks.Callback):
    """The training batches keras ran, and the time of each validation pass."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0
        self.val: list[float] = []
        self._t0 = 0.0

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.batches += 1

    def on_test_begin(self, logs: object = None) -> None:
        self._t0 = time.perf_counter()

    def on_test_end(self, logs: object = None) -> None:
        self.val.append(time.perf_counter() - self._t0)


keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(STEPS * BATCH, 16)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
xv = rng.normal(size=(4 * BATCH, 16)).astype("float32")
yv = (xv.sum(axis=1, keepdims=True) > 0).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
counts = Counts()
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, validation_data=(xv, yv), callbacks=[counts], verbose=0, shuffle=True)
model.evaluate(xv, yv, batch_size=BATCH, callbacks=[counts], verbose=0)  # one more pass, right after the last
with open(OUT, "w") as f:
    json.dump({"batches": counts.batches, "val_s": counts.val}, f)
print(f"{counts.batches} training batches, evaluation passes {counts.val}; done")
