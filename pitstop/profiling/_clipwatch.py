"""Provides whether the script clips its gradients: `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` called.

The non-finite-loss finding offered `clip_grad_norm_` to pytorch/examples'
FSDP2 example, which calls it every step: a fix the script already has. The
two functions are wrapped (invisibly, `_patch`) in `torch.nn.utils` and in
`torch.nn.utils.clip_grad`, where scripts and frameworks (HF Trainer's
`max_grad_norm`, accelerate's `clip_grad_norm_`) reach them; a call sets a flag
the `model` event carries (`grad_clip`). A name imported before torch's hooks
(`from torch.nn.utils import clip_grad_norm_` ahead of them) is not seen.
"""

from __future__ import annotations

import importlib
from typing import Any

from pitstop.profiling._patch import patch

NAMES = ("clip_grad_norm_", "clip_grad_value_")


def install(hooks: Any) -> None:
    """Wrap the clipping functions; a call sets `hooks.grad_clip`. A torch without them: nothing."""
    def make(original: Any) -> Any:
        def clip(*args: Any, **kwargs: Any) -> Any:
            hooks.grad_clip = True
            return original(*args, **kwargs)

        return clip

    for module_name in ("torch.nn.utils", "torch.nn.utils.clip_grad"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in NAMES:
            if callable(getattr(module, name, None)):
                patch(module, name, make)


__all__ = ["install"]
