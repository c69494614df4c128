"""Takes pitstop's hot-path patches out of a process under `pitstop run`, and puts them back (hotpath.py, overhead.py).

With them out, the training thread runs as without pitstop: the originals of
`_BaseDataLoaderIter.__next__`, `Tensor.backward` and the model's `__call__` in
place, torch's global optimizer-step hooks emptied. Switched at block
boundaries, so that one process measures the agent on against no pitstop at all
(the agent merely `disabled` still has every hook called, passing through).

"Floor" puts in their place the least any hook of this design could do: each
wrapper stamps its times and appends them, as one tuple, to a bounded deque
(the DataLoader's two stamps, the forward's one, backward's two, one for each
optimizer hook), and nothing else: no loss, no samples, no checks, no step
clock. What the floor costs in place is what Python hooks at these five points
cost this machine before they do any of pitstop's work.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from pitstop.profiling._patch import _MISSING, patches


class PatchSwitch:
    """Takes the hot path's patches out (as without pitstop) and puts them back, in place."""

    def __init__(self, model_class: type) -> None:
        from torch.optim import optimizer

        self.hot = [done for done in patches() if isinstance(done.owner, type) and (
            done.name in ("__next__", "backward") or (done.name == "__call__" and done.owner is model_class))]
        names = sorted(f"{getattr(d.owner, '__name__', d.owner)}.{d.name}" for d in self.hot)
        if len(self.hot) != 3:
            raise SystemExit(f"expected the DataLoader's, backward's and the model's patches, found {names}")
        self.dicts = (optimizer._global_optimizer_pre_hooks, optimizer._global_optimizer_post_hooks)
        self.hooks = [dict(d) for d in self.dicts]
        if not all(self.hooks):
            raise SystemExit("pitstop's optimizer hooks are not registered")
        self.held: deque[tuple[Any, ...]] = deque(maxlen=4096)  # the floor's stamps
        self.floor = self._floor()
        self.mode = "pitstop"

    def _floor(self) -> dict[str, Any]:
        """The floor's wrappers, by patched name, and its two optimizer hooks."""
        perf, held = time.perf_counter, self.held
        originals = {done.name: done.original for done in self.hot}
        next_, backward, call = originals["__next__"], originals["backward"], originals["__call__"]

        def __next__(it: Any) -> Any:
            started = perf()
            batch = next_(it)
            held.append((started, perf() - started))
            return batch

        def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
            held.append((perf(),))
            return call(module, *args, **kwargs) if kwargs else call(module, *args)

        def tensor_backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            started = perf()
            result = backward(tensor, *args, **kwargs) if args or kwargs else backward(tensor)
            held.append((started, perf()))
            return result

        def optimizer_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            held.append((id(optimizer), perf()))

        return {"__next__": __next__, "__call__": forward, "backward": tensor_backward, "hook": optimizer_hook}

    def set(self, patched: bool | str) -> None:
        """True or "pitstop": pitstop's patches; False or "none": none; "floor": the floor's."""
        mode = patched if isinstance(patched, str) else "pitstop" if patched else "none"
        if mode == self.mode:
            return
        self.mode = mode
        for done in self.hot:
            if mode == "pitstop":
                setattr(done.owner, done.name, done.wrapper)
            elif mode == "floor":
                setattr(done.owner, done.name, self.floor[done.name])
            elif done.replaced is _MISSING:
                delattr(done.owner, done.name)
            else:
                setattr(done.owner, done.name, done.replaced)
        for live, kept in zip(self.dicts, self.hooks):
            live.clear()
            if mode == "pitstop":
                live.update(kept)
            elif mode == "floor":
                live[-1] = self.floor["hook"]
