"""Provides post-import hooks: a callback right after a module finishes executing."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any


class PostImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after the module `name` finishes executing (a post-import hook).

    It stays first on sys.meta_path until the module has executed: transformers,
    datasets and accelerate call `importlib.util.find_spec("torch")` long before
    they import it, and a watcher that left at that first lookup patched a spec
    the real import never used (Hugging Face's run_clm.py recorded 0 of its 40
    steps). Every lookup gets a spec whose loader runs the callback after
    `exec_module`; only the one the import system executes ever fires.
    """

    def __init__(self, name: str, callback: Any) -> None:
        self.name = name
        self.callback = callback
        self._busy = threading.local()  # our own lookup below must not come back here

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # the loader is as it was (the module's __loader__ keeps it)
                except AttributeError:
                    pass
            self.done()
            self.callback(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def done(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def after_import(name: str, callback: Any) -> None:
    """`callback(module)` right after the module `name` executes: now, where it already has."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        sys.meta_path.insert(0, PostImport(name, callback))
