"""Provides how a fix sets DataLoader arguments where the loader is built: the script's own, or its framework's setting.

A data-wait fix said `DataLoader(..., num_workers=1)` for a Keras `model.fit(x, y)`,
which builds its DataLoader itself and offers no argument for it: the line could
not be applied. Where a framework built the loader (`DataLoaderInfo.framework`),
the fix names that framework's own setting, or says there is none and what to
use instead:

* HF Trainer: `TrainingArguments(dataloader_num_workers=...)`, which its example
  scripts (run_clm) take as `--dataloader_num_workers`.
* Keras 3 (torch backend): `fit(workers=)` is gone; `fit` takes a torch DataLoader,
  or a `keras.utils.PyDataset` with `workers` and `use_multiprocessing`.
* Lightning: the DataLoader is the script's, built in `train_dataloader()`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pitstop.events import DataLoaderInfo

# DataLoader argument -> HF TrainingArguments field (transformers 4.36+ has all four).
HF_ARGS = {"num_workers": "dataloader_num_workers", "persistent_workers": "dataloader_persistent_workers",
           "prefetch_factor": "dataloader_prefetch_factor", "pin_memory": "dataloader_pin_memory",
           "batch_size": "per_device_train_batch_size"}


def loader_fix(dl: DataLoaderInfo | None, args: Sequence[str]) -> str:
    """The line that builds the training loader with `args` ("dataset", "num_workers=4", ...), in the terms
    of whatever built it."""
    plain = "DataLoader(" + ", ".join(args) + ")"
    framework = dl.framework if dl is not None else ""
    settings = [a.split("=", 1) for a in args if "=" in a]
    if framework == "transformers":
        named = [(HF_ARGS[k], v) for k, v in settings if k in HF_ARGS]
        flags = " ".join(f"--{k} {v}" for k, v in named)
        return ("TrainingArguments(..., " + ", ".join(f"{k}={v}" for k, v in named) + ")"
                f"  # HF Trainer builds the DataLoader; its example scripts take {flags}")
    if framework == "keras":
        workers = dict(settings).get("num_workers", "N")
        return ("# Keras's fit(x, y) builds this DataLoader itself, with no worker setting (Keras 3 has no "
                "fit(workers=)):\n"
                f"model.fit({plain}, ...)  # a torch DataLoader of (x, y) batches: fit takes it as it is\n"
                f"# or a keras.utils.PyDataset whose __init__ calls super().__init__(workers={workers}, "
                "use_multiprocessing=True)")
    if framework in ("lightning", "pytorch_lightning"):
        return f"{plain}  # in your LightningDataModule's (or LightningModule's) train_dataloader()"
    return plain


__all__ = ["loader_fix"]
