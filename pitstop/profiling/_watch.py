"""Provides the torch import watcher: the agent's hooks go in the moment torch finishes importing.

A post-import hook on sys.meta_path, and a late check for a torch that was
imported where the watcher could not see it (the agent's writer thread asks).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import time
from typing import Any


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Runs a callback right after `torch` finishes executing (a post-import hook).

    It stays first on sys.meta_path until torch has executed: transformers,
    datasets and accelerate call `importlib.util.find_spec("torch")` long before
    they import it, and a watcher that left at that first lookup patched a spec
    the real import never used (Hugging Face's run_clm.py recorded 0 of its 40
    steps). Every lookup gets a spec whose loader runs the callback after
    `exec_module`; only the one the import system executes ever fires.
    """

    def __init__(self, callback: Any) -> None:
        self.callback = callback
        self._busy = threading.local()  # our own lookup below must not come back here

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch" or getattr(self._busy, "on", False):
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
                    del loader.exec_module  # the loader is torch's again (torch.__loader__ keeps it)
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


_install_lock = threading.Lock()


def _install_once(agent: Any, torch: Any) -> bool:
    """Install the hooks unless they are already in (the watcher and the late check can race)."""
    with _install_lock:
        if agent.hooks is not None or getattr(agent, "_hooks_installing", False):
            return False
        agent._hooks_installing = True
    try:
        from pitstop.profiling._hooks import Hooks

        Hooks(agent).install(torch)
    except Exception as err:
        agent.note("error", "hooks", f"torch hooks not installed: {type(err).__name__}: {err}")
    return True


def install_when_torch_imported(agent: Any) -> None:
    if "torch" in sys.modules:
        _install_once(agent, sys.modules["torch"])
        return
    sys.meta_path.insert(0, _TorchWatcher(lambda torch: _install_once(agent, torch)))


def install_late(agent: Any) -> bool:
    """Hooks for a torch imported past the watcher (the agent's writer thread asks, 2 Hz).

    True when they were installed now. A torch still executing its import is
    left alone: the watcher (or the next check) installs them once it is done.
    """
    if agent.hooks is not None or getattr(agent, "_hooks_installing", False):
        return False
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return False
    if not hasattr(torch, "optim"):  # a stand-in module, or torch cut short by an import error
        return False
    try:
        if not _install_once(agent, torch):
            return False
    except Exception as err:  # the writer thread goes on without hooks
        agent._hooks_installing = True  # not again
        agent.note("error", "hooks", f"torch hooks not installed late: {err}")
        return False
    since = time.time() - agent.hello.started if agent.hello is not None else 0.0
    agent.note("warn", "hooks", "torch was imported before pitstop could hook it; hooks installed "
               f"late at {since:.1f} s (steps before then are not counted)", once="late-hooks")
    return True
