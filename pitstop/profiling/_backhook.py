"""Provides the `Tensor.backward` wrapper: the loss caught, backward's start and end stamped (the step's anatomy).

Where the hooks hold their calls (`_hotflag.py`) a backward in a step whose loss
is not read (one ~1 ms step in ten is: `_losses.LOSS_EVERY_S`) holds its two
stamps and keeps the tensor for the run's last loss (`_losses.read_tail`), and
nothing else; the long path reads the loss and tells the clock at once where it must.
"""

from __future__ import annotations

import time
from typing import Any

_PERF = time.perf_counter


def backward_wrapper(hooks: Any) -> Any:
    """The maker of the wrapper of `Tensor.backward` (distributed autograd's too: `Hooks._hook_dist_autograd`)."""
    agent = hooks.agent
    clock = agent.clock
    perf = _PERF
    stamps = agent.stamps
    on_backward = clock.on_backward
    scalers = hooks.scalers
    compiling, dynamo = hooks.compiling, hooks.dynamo
    hot = agent.hot  # [holding, step_open, the held step, probe_due, windows, disabled, batching] (`_hotflag.py`)

    def make(original: Any) -> Any:
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if hot[0]:  # holding (the agent on, batching, Dynamo not tracing): no check needed
                started = perf()
                step = hot[2]  # (`held_base + batched_steps`)
            else:
                if hot[5]:  # (`disabled`)
                    if not agent.dormant or (dynamo[0] and compiling()):
                        return original(tensor, *args, **kwargs) if args or kwargs else original(tensor)
                    agent.wake()  # a child process's first backward: its agent starts now
                    if hot[5]:
                        return original(tensor, *args, **kwargs)
                elif dynamo[0] and compiling():  # traced by torch.compile (compiled autograd): the original alone
                    return original(tensor, *args, **kwargs)
                started = perf()
                step = hot[2] if hot[6] else clock.index
            # Whether this step's losses are read: decided at its first backward, so that a step's
            # micro-steps are all read or none (`_losses.LOSS_EVERY_S`).
            if step != hooks.loss_step:
                hooks.loss_step = step
                hooks.loss_read = read = started >= hooks.loss_due
                if read:
                    hooks.loss_due = started + hooks.loss_every
                    hooks.loss_tail = None
            if hot[0] and not hooks.loss_read:  # holding, the loss not read: two stamps held, the tail kept
                # (`loss.backward()` passed on as a plain call: unpacking the empty *args and **kwargs
                # was half the wrapper's own cost, 0.24 us of 0.49 in a tight loop)
                result = original(tensor, *args, **kwargs) if args or kwargs else original(tensor)
                now = perf()
                # Kept for the run's end (`read_tail`), as below.
                if step == hooks.tail_step:
                    hooks.tail_parts += 1
                else:
                    hooks.tail_step, hooks.tail_parts = step, 1
                hooks.loss_tail = None if args or kwargs else tensor
                if hot[0] and not hot[1]:
                    stamps.append((on_backward, now, None, started, None))
                elif not hot[5]:
                    hand(None, started, None, tensor, now)
                return result
            # The long path (inline: a Python call is ~as much as the rest of a held step's backward).
            marker = clock.marker  # set on CUDA: a timing event where backward begins, too
            token = marker() if marker is not None else None
            scale = None
            if scalers and hooks.loss_read and hooks.capture_loss:
                # A GradScaler's scaled loss: its scale, taken before backward frees what the graph saved.
                scale = hooks.scale_of(tensor)
            result = original(tensor, *args, **kwargs) if args or kwargs else original(tensor)
            if hot[0] or not hot[5]:
                now = perf()
                loss = None
                if not hooks.loss_read:
                    # Kept for the run's end (`read_tail`) until the next backward: the script's own
                    # `loss` holds it past the next forward, and a plain backward freed what its graph
                    # saved. Not where backward was told to keep the graph (`retain_graph`, any argument).
                    if step == hooks.tail_step:
                        hooks.tail_parts += 1
                    else:
                        hooks.tail_step, hooks.tail_parts = step, 1
                    hooks.loss_tail = None if args or kwargs else tensor
                elif hooks.capture_loss:
                    try:
                        if tensor.is_cpu:
                            # The value is there: read now (no sync). Not held for the writer
                            # thread to read: the tensor holds its graph, and what a custom
                            # autograd Function kept on its ctx. Without a gradient argument
                            # backward() itself refused a tensor of more than one element.
                            if not args or tensor.numel() == 1:
                                loss = tensor.item() if scale is None else tensor.item() / scale.item()
                        elif tensor.numel() == 1:  # on a GPU: kept for one batched async copy
                            # (divided now, on the stream: the scaler's update changes its scale in place)
                            loss = tensor.detach() if scale is None else tensor.detach() / scale
                    except Exception:
                        loss = None
                if (hot[0] or hot[6]) and not hot[1]:  # held (`hot[1]`: `step_open`)
                    stamps.append((on_backward, now, loss, started, None))
                else:
                    hand(loss, started, token, tensor, now)
            return result

        return backward

    def hand(loss: Any, started: float, token: Any, tensor: Any, now: float) -> None:
        """The backward call held for the clock, or told to it at once."""
        try:
            if (hot[0] or hot[6]) and not hot[1]:  # (`hot[1]`: `step_open`)
                stamps.append((on_backward, now, loss, started, None))
            else:
                if hot[6]:  # a closure's backward: the clock must know the step first
                    agent.flush_stamps()
                if clock.open_steps:  # inside an optimizer's step (a closure's), or one raised
                    hooks._abandon_raised()
                if agent.first_backward:  # finds the model, picks the phases' clock
                    agent.on_backward(loss, started, token, tensor, now)
                else:
                    on_backward(now, loss, started, token)
        except Exception as err:  # never into the training loop
            agent.fail("the backward hook", err)

    return make
