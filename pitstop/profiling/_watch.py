"""Provides the torch import watcher: the agent's hooks go in the moment torch finishes importing.

A post-import hook on sys.meta_path, and a late check for a torch that was
imported where the watcher could not see it (the agent's writer thread asks).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from pitstop.profiling._postimport import PostImport


class _TorchWatcher(PostImport):
    """The agent's: its hooks go in the moment torch finishes importing."""

    def __init__(self, callback: Any) -> None:
        super().__init__("torch", callback)


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
