"""Takes pitstop's hot-path patches out of a process under `pitstop run`, and puts them back (hotpath.py, overhead.py).

With them out, the training thread runs as without pitstop: the originals of
`_BaseDataLoaderIter.__next__`, `Tensor.backward` and the model's `__call__` in
place, torch's global optimizer-step hooks emptied. Switched at block
boundaries, so that one process measures the agent on against no pitstop at all
(the agent merely `disabled` still has every hook called, passing through).
"""

from __future__ import annotations

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
        self.patched = True

    def set(self, patched: bool) -> None:
        if patched == self.patched:
            return
        self.patched = patched
        for done in self.hot:
            if patched:
                setattr(done.owner, done.name, done.wrapper)
            elif done.replaced is _MISSING:
                delattr(done.owner, done.name)
            else:
                setattr(done.owner, done.name, done.replaced)
        for live, kept in zip(self.dicts, self.hooks):
            live.clear()
            if patched:
                live.update(kept)
