"""Provides Keras's own optimizer steps to the step clock: on the torch backend they step no torch optimizer.

Keras 3 on torch trains with `loss.backward()` and then `optimizer.apply(grads,
variables)`, its own update (torch ops under no_grad), which no torch optimizer
hook sees. The clock held those backward calls until 64 of them (or 60 s) had
passed without an optimizer step, to tell them from gradient accumulation: on a
busy 2-core machine `model.fit` then showed "first training step not done after
39 s (61 backward, 71 batches fetched, no optimizer step yet)" while 60 steps
were done. `BaseOptimizer.apply` is each step's boundary here, as a torch
optimizer's `step()` is: the clock counts it at once, the first step too.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from pitstop.profiling._patch import patch

_PERF = time.perf_counter
MODULE = "keras.src.optimizers.base_optimizer"


def hook_keras_optimizer(hooks: Any) -> bool:
    """Wrap Keras's `BaseOptimizer.apply` where Keras is imported (called at the first batch and the first
    backward, before the first `apply`); True once wrapped. A `LossScaleOptimizer`'s `apply` calls its inner
    optimizer's: only the outermost running `apply` is a step."""
    module = sys.modules.get(MODULE)
    base = getattr(module, "BaseOptimizer", None) if module is not None else None
    step_now = getattr(hooks, "step_now", None)
    if base is None or step_now is None or not callable(getattr(base, "apply", None)):
        return False
    agent = hooks.agent
    clock = agent.clock
    running: list[int] = []  # the optimizer whose `apply` runs now (at most one: nested ones are its)

    def make(original: Any) -> Any:
        def apply(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if running or agent.disabled:
                return original(optimizer, *args, **kwargs)
            key = hooks.optimizer_keys.of(optimizer)
            try:
                if agent.batching:  # (the held calls first: this step is cut at once)
                    agent.flush_stamps()
                clock.on_optimizer_start(key, _PERF())
            except Exception as err:  # never into the training loop
                agent.fail("the Keras optimizer hook", err)
                return original(optimizer, *args, **kwargs)
            running.append(key)
            try:
                result = original(optimizer, *args, **kwargs)
            except BaseException:
                running.clear()
                clock.abandon(key)  # (raised: no step)
                raise
            running.clear()
            try:
                step_now(optimizer, key, _PERF())
            except Exception as err:
                agent.fail("the Keras optimizer hook", err)
            return result

        return apply

    patch(base, "apply", make)
    return True
