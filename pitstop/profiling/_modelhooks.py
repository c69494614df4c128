"""Provides the model facts the hooks learn: constructor wrappers (Conv2d, GradScaler, DataParallel,
DDP, autocast), a GradScaler's skipped steps, and the model's parameter dtype."""

from __future__ import annotations

import weakref
from typing import Any

from pitstop.profiling._patch import patch


def wrap_init(agent: Any, cls: Any, on_init: Any) -> None:
    """Call `on_init(obj)` after each `cls.__init__` (never raising into the script)."""

    def make(original: Any) -> Any:
        def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
            original(obj, *args, **kwargs)
            if not agent.disabled or agent.dormant:  # (a spawned rank builds its model before its first step)
                try:
                    on_init(obj)
                except Exception as err:
                    agent.note("warn", "hooks", f"{cls.__name__} hook: {err}", once=f"init-{cls.__name__}")

        return __init__

    patch(cls, "__init__", make)


def hook_constructors(hooks: Any) -> None:
    """Count and note the model's parts as the script builds them (`Model` event facts)."""
    agent = hooks.agent
    torch = hooks.torch
    nn = torch.nn

    def on_conv(conv: Any) -> None:
        hooks.conv2d += 1
        hooks.overrides.on_conv2d(conv)

    wrap_init(agent, nn.Conv2d, on_conv)

    def on_scaler(scaler: Any) -> None:
        # torch turns a GradScaler off where it cannot work (no CUDA): only an
        # enabled one counts as "the script scales its loss".
        is_enabled = getattr(scaler, "is_enabled", None)
        if is_enabled is None or is_enabled():
            hooks.grad_scaler = True
            try:
                hooks.scalers.append(weakref.ref(scaler))
            except TypeError:
                pass

    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is not None:
        wrap_init(agent, scaler, on_scaler)
        if callable(getattr(scaler, "_maybe_opt_step", None)):
            hook_scaler_step(hooks, scaler)

    def on_dp(_: Any) -> None:
        hooks.data_parallel = True

    wrap_init(agent, nn.DataParallel, on_dp)

    def on_ddp(_: Any) -> None:
        hooks.ddp = True

    wrap_init(agent, nn.parallel.DistributedDataParallel, on_ddp)
    if hooks.overrides is not None and hooks.overrides.autocast_applied:
        hooks.autocast = True  # a config's autocast is on for the whole run

    def make_enter(original_enter: Any) -> Any:
        def __enter__(ctx: Any) -> Any:
            if getattr(ctx, "_enabled", True):
                hooks.autocast = True
            return original_enter(ctx)

        return __enter__

    patch(torch.autocast, "__enter__", make_enter)


def hook_scaler_step(hooks: Any, scaler_type: type) -> None:
    """A GradScaler skips the optimizer's step where the gradients overflowed (the first steps of
    float16 training, then now and then): no optimizer hook runs, and the clock took the step's
    backward for a micro-step of the next (26 steps recorded for 30, 4 skipped). The scaler's
    `_maybe_opt_step` runs once per `scaler.step(opt)`: where the steps counted did not move
    across it, the optimizer did not step, and the clock is told of the step it skipped."""
    agent = hooks.agent
    clock = agent.clock
    compiling, dynamo = hooks.compiling, hooks.dynamo

    def counted() -> int:
        """Optimizer steps counted so far on the training thread (held ones too)."""
        return agent.held_base + agent.batched_steps if agent.batching else clock.index

    def make(original: Any) -> Any:
        def _maybe_opt_step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if agent.disabled or (dynamo[0] and compiling()):
                return original(scaler, optimizer, *args, **kwargs)
            before = counted()
            result = original(scaler, optimizer, *args, **kwargs)
            try:
                primary = clock.primary
                if counted() == before and (primary is None or primary == hooks.optimizer_keys.of(optimizer)) \
                        and clock.mode in (None, "optimizer") and hooks.scaler_skipped is not None:
                    hooks.scaler_skipped(optimizer)
            except Exception as err:  # never into the training loop
                agent.fail("the GradScaler hook", err)
            return result

        return _maybe_opt_step

    patch(scaler_type, "_maybe_opt_step", make)


def model_dtype(root_watch: Any) -> str | None:
    """The dtype most of the root module's parameters have ("float64" after `model.double()`), or None.

    Autocast only touches float32 ops: the advice rules must know a model
    that trains in float64 (1.9-5x slower than float32 per step on a CPU here)
    or already in a half type. One pass over the parameters, at the first step.
    """
    root = root_watch.module() if root_watch is not None else None
    if root is None:
        return None
    try:
        counts: dict[str, int] = {}
        for p in root.parameters():
            if p.is_floating_point():
                name = str(p.dtype).removeprefix("torch.")
                counts[name] = counts.get(name, 0) + p.numel()
    except Exception:
        return None
    return max(counts, key=counts.__getitem__) if counts else None
