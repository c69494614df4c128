"""Provides how a fix sets DataLoader arguments where the loader is built: the script's own, or its framework's setting.

A data-wait fix said `DataLoader(..., num_workers=1)` for a Keras `model.fit(x, y)`,
which builds its DataLoader itself and offers no argument for it: the line could
not be applied. Where a framework built the loader (`DataLoaderInfo.framework`),
every fix that sets a DataLoader argument (workers, pin_memory, persistent_workers,
prefetch_factor, batch size, drop_last; the training loader's or the evaluation
loader's) names that framework's own setting, or says there is none and what to
use instead:

* HF Trainer: `TrainingArguments`, which its example scripts (run_clm) take as
  flags: `dataloader_num_workers`, `dataloader_pin_memory`,
  `dataloader_persistent_workers`, `dataloader_prefetch_factor`,
  `dataloader_drop_last` (one set for the training and the evaluation loader),
  `per_device_train_batch_size`, `per_device_eval_batch_size`.
* Keras 3 (torch backend): `fit(batch_size=, validation_batch_size=)`; no worker,
  pinning, prefetch or drop_last setting (`fit(workers=)` is gone); `fit` takes a
  torch DataLoader as it is, or a `keras.utils.PyDataset` with `workers`.
* Lightning: the DataLoader is the script's, built in `train_dataloader()` (or
  `val_dataloader()`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pitstop.events import DataLoaderInfo

# DataLoader argument -> HF TrainingArguments field (transformers 4.36+ has all of them); the
# dataloader_* fields build the training and the evaluation loaders alike.
HF_ARGS = {"num_workers": "dataloader_num_workers", "persistent_workers": "dataloader_persistent_workers",
           "prefetch_factor": "dataloader_prefetch_factor", "pin_memory": "dataloader_pin_memory",
           "drop_last": "dataloader_drop_last", "batch_size": "per_device_train_batch_size"}
HF_EVAL_ARGS = dict(HF_ARGS, batch_size="per_device_eval_batch_size")
# DataLoader argument -> Keras 3 `fit` argument; the others have no setting in Keras.
KERAS_ARGS = {"batch_size": "batch_size"}
KERAS_EVAL_ARGS = {"batch_size": "validation_batch_size"}
# A value a command line takes as it is (`2`, `True`): an expression is left to TrainingArguments.
_LITERAL = re.compile(r"^[\w.]+$")


def loader_fix(dl: DataLoaderInfo | None, args: Sequence[str], role: str = "train", note: str = "") -> str:
    """The line that builds the loader `dl` with `args` ("dataset", "num_workers=4", ...), in the terms of
    whatever built it; `role` "eval" for an evaluation loader; `note` says why, as the line's comment."""
    plain = "DataLoader(" + ", ".join(args) + ")"
    framework = dl.framework if dl is not None else ""
    settings = [(k.strip(), v.strip()) for k, v in (a.split("=", 1) for a in args if "=" in a)]
    why = f"  # {note}" if note else ""
    if framework == "transformers":
        return _hf(settings, role, note)
    if framework == "keras":
        return _keras(plain, settings, role, note)
    if framework in ("lightning", "pytorch_lightning"):
        builder = "val_dataloader()" if role == "eval" else "train_dataloader()"
        return f"{plain}  # {note + '; ' if note else ''}in your LightningDataModule's (or LightningModule's) {builder}"
    return plain + why


def _hf(settings: list[tuple[str, str]], role: str, note: str) -> str:
    names = HF_EVAL_ARGS if role == "eval" else HF_ARGS
    named = [(names[k], v) for k, v in settings if k in names]
    missing = [k for k, _ in settings if k not in names]
    lines = []
    if named:
        flags = " ".join(f"--{k} {v}" for k, v in named if _LITERAL.match(v))
        line = "TrainingArguments(..., " + ", ".join(f"{k}={v}" for k, v in named) + ")"
        line += f"  # {note + '; ' if note else ''}HF Trainer builds the DataLoader"
        if flags:
            line += f"; its example scripts take {flags}"
        if role == "eval" and any(k.startswith("dataloader_") for k, _ in named):
            line += " (dataloader_* set the training loader too)"
        lines.append(line)
    if missing:
        lines.append(f"# HF Trainer builds the DataLoader: TrainingArguments has no setting for {', '.join(missing)} "
                     "(none)")
    return "\n".join(lines)


def _keras(plain: str, settings: list[tuple[str, str]], role: str, note: str) -> str:
    names = KERAS_EVAL_ARGS if role == "eval" else KERAS_ARGS
    values = dict(settings)
    lines = []
    named = [(names[k], v) for k, v in settings if k in names]
    if named and "num_workers" not in values:  # (with workers, the DataLoader below carries the batch size)
        args = ", ".join(f"{k}={v}" for k, v in named)
        call = (f"model.fit(..., validation_data=(x_val, y_val), {args})" if role == "eval"
                else f"model.fit(x, y, ..., {args})")
        lines.append(call + (f"  # {note}" if note else "  # Keras's fit(x, y) builds the DataLoader from it"))
    missing = [k for k, _ in settings if k not in names]
    if "num_workers" in values:
        lines.append("# Keras's fit(x, y) builds this DataLoader itself, with no worker setting (Keras 3 has no "
                     "fit(workers=)):")
        given = f"model.fit(..., validation_data={plain})" if role == "eval" else f"model.fit({plain}, ...)"
        lines.append(f"{given}  # a torch DataLoader of (x, y) batches: fit takes it as it is")
        lines.append("# or a keras.utils.PyDataset whose __init__ calls "
                     f"super().__init__(workers={values['num_workers']}, use_multiprocessing=True)")
    elif missing:
        target = "validation_data=" if role == "eval" else ""
        lines.append(f"# Keras's fit(x, y) builds this DataLoader itself: no setting for {', '.join(missing)} "
                     f"(none in Keras 3); a torch DataLoader, which fit takes as it is, sets them:\n"
                     f"model.fit({target}{plain}, ...)")
    return "\n".join(lines)


# How each framework evaluates less often (its own schedule, not the script's loop).
EVAL_LESS = {
    "transformers": "TrainingArguments(..., eval_steps=2 * yours)  # HF Trainer evaluates every eval_steps: "
                    "half as often (--eval_steps)",
    "keras": "model.fit(..., validation_freq=2)  # Keras evaluates every validation_freq epochs: half as often",
    "lightning": "Trainer(..., check_val_every_n_epoch=2)  # or val_check_interval=2 * yours; limit_val_batches= "
                 "for a subset",
}
EVAL_LESS["pytorch_lightning"] = EVAL_LESS["lightning"]


def eval_less_often(dl: DataLoaderInfo | None) -> str:
    """The line that evaluates half as often, in the terms of the framework that built the evaluation loader."""
    framework = dl.framework if dl is not None else ""
    return EVAL_LESS.get(framework) or ("if step % (2 * EVAL_EVERY) == 0:  # evaluate half as often\n"
                                        "    evaluate(model, val_subset)  # or on a fixed subset between full passes")


__all__ = ["eval_less_often", "loader_fix"]
