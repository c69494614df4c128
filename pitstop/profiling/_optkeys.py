"""Provides the keys the step clock knows optimizers by: a number each optimizer object gets once, never reused.

The clock knew optimizers by `id()`, which CPython reuses: an optimizer built
where a freed one lived was taken for it. An Optuna sweep in one process
(6 trials, a new model and SGD each) read as 5 models of 6, and 6 SGDs built
and freed in turn in a loop here had 4 distinct ids. Each optimizer gets the
next number at its first step; a finalizer forgets its id when it is freed,
so the next optimizer at that address gets a number of its own. On the hot
path a key costs one dict lookup: `keys.serials.get(id(optimizer)) or keys.new(optimizer)`.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any


class OptimizerKeys:
    """id() of each live optimizer -> its number (1, 2, ...), forgotten as the optimizer is freed."""

    def __init__(self) -> None:
        self.serials: dict[int, int] = {}
        self._next = itertools.count(1)  # from 1: a key is never falsy, so `get(...) or new(...)` works

    def new(self, optimizer: Any) -> int:
        """The number of an optimizer not seen before (or seen, where it cannot be weakly referenced)."""
        address = id(optimizer)
        key = self.serials.get(address)
        if key is not None:
            return key
        key = next(self._next)
        self.serials[address] = key
        try:
            # Runs before the object's memory is freed: no new optimizer can have its address yet.
            weakref.finalize(optimizer, self._forget, address, key).atexit = False
        except TypeError:  # not weakly referenceable: known by its address, as before, for the whole run
            pass
        return key

    def of(self, optimizer: Any) -> int:
        """The key of `optimizer`."""
        return self.serials.get(id(optimizer)) or self.new(optimizer)

    def _forget(self, address: int, key: int) -> None:
        if self.serials.get(address) == key:
            del self.serials[address]


__all__ = ["OptimizerKeys"]
