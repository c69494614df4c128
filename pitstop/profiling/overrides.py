"""Provides how a tuned config is applied inside the training process, with no code change.

DataLoader knobs are applied where the script builds its DataLoader:
`[dataloader]` to the training loader, `[eval_dataloader]` to evaluation
loaders. Which is which is decided as the loader is built, before any batch:
first by the function that builds it, where its name says (Lightning's
`train_dataloader` / `val_dataloader` hooks, HF Trainer's
`get_train_dataloader` / `get_eval_dataloader`: Lightning builds its validation
loader first, for its sanity check, and a tuned batch size went to it); else a
loader whose sampler shuffles (or is the script's own sampler), or the first
DataLoader the script builds, is a training loader; a sequential one built
after the first is an evaluation loader (most scripts shuffle their training
loader and not their eval loaders). autocast, cudnn.benchmark, channels-last
and CPU threads are applied process-wide when torch is imported. What applied and what did not (and why)
goes into the stream as DataLoaderInfo and Applied events, so a record proves
what a run really used.

The config arrives as `pitstop.config.Config.to_dict()`; it was validated by
the CLI or the tuner before launch, so this module only reads it.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from typing import Any

from pitstop.events import Applied, DataLoaderInfo

DATALOADER_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")
# The functions frameworks (and scripts after them) build their loaders in: Lightning's hooks, HF Trainer's getters.
TRAIN_BUILDERS = frozenset({"train_dataloader", "get_train_dataloader"})
EVAL_BUILDERS = frozenset({"val_dataloader", "test_dataloader", "predict_dataloader", "eval_dataloader",
                           "get_eval_dataloader", "get_test_dataloader"})
BUILDER_DEPTH = 12  # frames looked at above the DataLoader's construction
# Frameworks that build DataLoaders or call the code that does: a fix names their own setting.
FRAMEWORKS = frozenset({"keras", "transformers", "lightning", "pytorch_lightning", "accelerate", "ignite",
                        "deepspeed", "fastai"})
FRAMEWORK_DEPTH = 200  # frames looked at: the whole stack of a Trainer's fit, never an unbounded walk


class Overrides:
    """One process's view of the config it must apply."""

    def __init__(self, agent: Any, torch: Any, config: dict[str, Any] | None) -> None:
        self.agent = agent
        self.torch = torch
        config = config or {}
        self.loader = {k: v for k, v in (config.get("dataloader") or {}).items() if v is not None}
        self.eval_loader = {k: v for k, v in (config.get("eval_dataloader") or {}).items() if v is not None}
        self.compute = {k: v for k, v in (config.get("compute") or {}).items() if v is not None}
        self.channels_last = bool(self.compute.get("channels_last"))
        self.channels_last_params = 0
        self.autocast_applied = False
        self._loaders = 0
        self._signature: inspect.Signature | None = None

    # ---- process-wide knobs ----------------------------------------------------
    def apply_global(self) -> None:
        if not self.compute:
            return
        torch = self.torch
        applied: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        cuda = getattr(torch.version, "cuda", None) is not None and torch.cuda.is_available()
        if "cudnn_benchmark" in self.compute:
            value = bool(self.compute["cudnn_benchmark"])
            if cuda:
                torch.backends.cudnn.benchmark = value
                applied["cudnn_benchmark"] = value
            else:
                skipped["cudnn_benchmark"] = "no CUDA device: cuDNN is not used"
        amp = self.compute.get("amp")
        if amp in ("bf16", "fp16"):
            device = "cuda" if cuda else "cpu"
            dtype = torch.bfloat16 if amp == "bf16" else torch.float16
            if device == "cuda" and amp == "bf16" and not torch.cuda.is_bf16_supported():
                skipped["amp"] = "this GPU does not support bf16"
            elif device == "cpu" and amp == "fp16":
                skipped["amp"] = "fp16 autocast needs CUDA; use bf16 on the CPU"
            else:
                # Autocast for the main thread, for the whole run (what `with
                # torch.autocast(...)` around the loop would do). The weight-cast
                # cache is off: the cache lives until the outermost autocast exits,
                # which never happens here, so it would serve stale weights after
                # the optimizer updates them.
                torch.set_autocast_enabled(device, True)
                torch.set_autocast_dtype(device, dtype)
                torch.set_autocast_cache_enabled(False)
                applied["amp"] = f"{amp} on {device}"
                self.autocast_applied = True
        elif amp == "off":
            applied["amp"] = "off"
        if self.channels_last:
            applied["channels_last"] = "Conv2d weights as they are built"
        threads = self.compute.get("threads")
        if threads:
            # Intra-op threads of this process now; OMP_NUM_THREADS for every process it
            # starts (spawned DataLoader workers, helpers), which read it at their own start.
            # A 2-core machine with one core taken by a neighbour ran a plain loop at
            # 876-1400 ms per step with 2 threads against 33.8 ms quiet: spinning threads
            # wait for a core they do not get.
            torch.set_num_threads(int(threads))
            os.environ["OMP_NUM_THREADS"] = str(int(threads))
            applied["threads"] = int(threads)
        self.agent.emit(Applied(t=time.time(), applied=applied, skipped=skipped))

    def on_conv2d(self, conv: Any) -> None:
        """Channels-last: Conv2d weights in NHWC. Convolutions then produce NHWC
        outputs whatever their input's layout, so the rest of the model follows."""
        if not self.channels_last:
            return
        weight = conv.weight
        weight.data = weight.data.contiguous(memory_format=self.torch.channels_last)
        self.channels_last_params += 1

    # ---- DataLoader knobs ----------------------------------------------------
    def dataloader_kwargs(
        self, original_init: Any, loader: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any], dict[str, str]]:
        """The DataLoader arguments with the config applied, and what applied or not."""
        applied: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        if not self.loader and not self.eval_loader:
            return args, kwargs, applied, skipped
        try:
            if self._signature is None:
                self._signature = inspect.signature(original_init)
            bound = self._signature.bind(loader, *args, **kwargs)
        except (TypeError, ValueError) as err:
            for knob in self.loader:
                skipped[knob] = f"cannot read the DataLoader's arguments: {err}"
            return args, kwargs, applied, skipped
        values = dict(bound.arguments)
        values.pop("self", None)
        extra = values.pop("kwargs", None)  # a subclass signature with **kwargs
        if extra:
            values.update(extra)
        built_in = builder_role()
        if built_in[0] if built_in is not None else self._is_training(values):
            want = dict(self.loader)
        else:
            want = dict(self.eval_loader)
            how = f"built in {built_in[1]}()" if built_in is not None else "sequential, built after the first"
            for knob in self.loader:
                if knob not in want:
                    skipped[knob] = f"an evaluation DataLoader ({how}): [dataloader] sets the training one"
        if not want:
            return args, kwargs, applied, skipped
        cuda = self.torch.cuda.is_available() if getattr(self.torch.version, "cuda", None) else False
        if "batch_size" in want:
            if values.get("batch_sampler") is not None:
                skipped["batch_size"] = "the script passes its own batch_sampler"
                want.pop("batch_size")
            elif values.get("batch_size", 1) is None:
                skipped["batch_size"] = "the DataLoader does not batch (batch_size=None)"
                want.pop("batch_size")
        if "pin_memory" in want and want["pin_memory"] and not cuda:
            skipped["pin_memory"] = "no CUDA device: pinned memory would not be used"
            want.pop("pin_memory")
        workers = want.get("num_workers", values.get("num_workers", 0)) or 0
        for knob in ("persistent_workers", "prefetch_factor"):
            if knob in want and workers == 0 and knob not in values:
                skipped[knob] = "needs num_workers > 0"
                want.pop(knob)
        for knob, value in want.items():
            if values.get(knob) != value:
                applied[knob] = value
            values[knob] = value
        if want.get("num_workers") == 0:
            # Loading in the main process: the script's worker-only arguments would make
            # DataLoader raise ("multiprocessing_context can only be used with ...
            # num_workers > 0"); they have no effect without workers, so they are unset.
            for knob, off in (("persistent_workers", False), ("prefetch_factor", None),
                              ("multiprocessing_context", None)):
                if values.get(knob) not in (None, False) and knob not in want:
                    values[knob] = off
                    applied[knob] = off
        return (), values, applied, skipped

    def _is_training(self, values: dict[str, Any]) -> bool:
        """Training or evaluation loader, from its arguments (see the module docstring)."""
        first = self._loaders == 0
        if values.get("shuffle"):
            return True
        sampler = values.get("batch_sampler") or values.get("sampler")
        if sampler is not None:
            return type(sampler).__name__ != "SequentialSampler" or first
        return first

    def report_dataloader(self, loader: Any, applied: dict[str, Any], skipped: dict[str, str]) -> int:
        """Send the DataLoaderInfo of a loader just built; returns the id it is known by."""
        self._loaders += 1
        loader.__dict__["_pitstop_id"] = self._loaders
        try:
            length = len(loader.dataset)
        except Exception:
            length = None
        sampler = getattr(loader, "batch_sampler", None)
        custom = sampler is not None and type(sampler).__name__ != "BatchSampler"
        self.agent.emit(
            DataLoaderInfo(
                t=time.time(),
                id=self._loaders,
                num_workers=int(loader.num_workers),
                batch_size=loader.batch_size,
                pin_memory=bool(loader.pin_memory),
                persistent_workers=bool(loader.persistent_workers),
                prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
                dataset_len=length,
                batch_sampler=custom,
                overrides=applied,
                skipped=skipped,
                dataset=type(getattr(loader, "dataset", None)).__name__,
                shuffle=_shuffles(loader),
                framework=building_framework(),
            )
        )
        return self._loaders


def building_framework() -> str:
    """The outermost of FRAMEWORKS whose code is on the stack ("" for none): HF Trainer's loader is built
    inside accelerate's prepare, inside transformers' Trainer; the user drives the outer one."""
    found = ""
    frame = sys._getframe(1)
    for _ in range(FRAMEWORK_DEPTH):
        if frame is None:
            break
        top = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if top in FRAMEWORKS:
            found = top
        frame = frame.f_back
    return found


def builder_role() -> tuple[bool, str] | None:
    """(True: training, or False: evaluation; the function's name) where a function building this DataLoader
    is named for one (`TRAIN_BUILDERS`, `EVAL_BUILDERS`), the nearest first; None where none is. Once a loader."""
    frame = sys._getframe(1)
    for _ in range(BUILDER_DEPTH):
        if frame is None:
            return None
        name = frame.f_code.co_name
        if name in TRAIN_BUILDERS:
            return True, name
        if name in EVAL_BUILDERS:
            return False, name
        frame = frame.f_back
    return None


def _shuffles(loader: Any) -> bool | None:
    """Whether a DataLoader's sampler shuffles (RandomSampler, a shuffling DistributedSampler)."""
    sampler = getattr(loader, "sampler", None)
    name = type(sampler).__name__
    if name == "RandomSampler":
        return True
    if name == "SequentialSampler":
        return False
    shuffle = getattr(sampler, "shuffle", None)
    return bool(shuffle) if isinstance(shuffle, bool) else None
