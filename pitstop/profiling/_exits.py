"""Provides how the training process ends, as far as it can be seen from inside it.

An uncaught exception (sys.excepthook, chained), `sys.exit(code)` (wrapped,
invisibly, through `_patch`), else a clean exit with 0. A bare
`raise SystemExit(n)` outside sys.exit is not seen (docs/events.md). The agent
installs the watch in `start()` and gives it back in `stop()`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class ExitWatch:
    """The outcome of this process (`End.reason`, `End.exit_code`), watched through sys.excepthook and sys.exit."""

    def __init__(self) -> None:
        self.outcome: tuple[str, int | None] = ("exit", 0)
        self._excepthook: Any = None  # the hook ours chains to, while ours is installed
        self._exit_patch: Any = None  # the sys.exit wrapper (pitstop.profiling._patch.Patch)

    def install(self, warn: Callable[[str], None]) -> None:
        """Chain our excepthook and wrap sys.exit; a part that cannot be watched is told through `warn`."""
        self._excepthook = sys.excepthook
        sys.excepthook = self._on_uncaught
        watch = self

        def exit_code(code: Any = None) -> None:
            if code is None or isinstance(code, int):
                watch.outcome = ("exit", code or 0)
            else:  # a message: Python prints it and exits with 1
                watch.outcome = ("exit", 1)

        try:
            from pitstop.profiling._patch import patch

            def make(original: Any) -> Any:
                def exit(*args: Any, **kwargs: Any) -> Any:
                    try:
                        exit_code(*args, **kwargs)
                    except Exception:  # never in the way of the script's exit
                        pass
                    return original(*args, **kwargs)

                return exit

            self._exit_patch = patch(sys, "exit", make)
        except Exception as err:
            warn(f"exit codes from sys.exit not recorded: {err}")

    def _on_uncaught(self, kind: Any, value: Any, tb: Any) -> None:
        # Chained, never replacing the script's own hook: the record learns that the
        # process is dying of an exception (exit code 1), the traceback prints as usual.
        if not issubclass(kind, KeyboardInterrupt):
            self.outcome = ("exception", 1)
        else:
            self.outcome = ("interrupted", 130)
        self._excepthook(kind, value, tb)

    def keep_interrupt(self) -> None:
        """After a Ctrl-C that nothing caught, make sure the process still ends by SIGINT (exit code 130).

        CPython ends such a process by SIGINT after finalizing, on a flag that any
        PyRun_* evaluation clears. A Ctrl-C 0.1 s into a script, while the agent's
        threads still imported psutil and NVML's modules, ended it with exit code 1
        under pitstop and 130 without. Raising KeyboardInterrupt once more through
        PyRun_SimpleString sets the flag again (its traceback is not printed twice).
        """
        if self.outcome != ("interrupted", 130) or not hasattr(sys, "excepthook"):
            return
        try:
            import ctypes

            hook, sys.excepthook = sys.excepthook, lambda *exc: None
            try:
                ctypes.pythonapi.PyRun_SimpleString(b"raise KeyboardInterrupt")
            finally:
                sys.excepthook = hook
        except Exception:  # noqa: BLE001 - no ctypes, no pythonapi: the exit code is Python's own
            pass

    def uninstall(self) -> None:
        """sys.excepthook and sys.exit as they were, unless someone wrapped ours since (then ours stays, inert)."""
        if sys.excepthook == self._on_uncaught:
            sys.excepthook = self._excepthook
        done = self._exit_patch
        if done is not None and sys.exit is done.wrapper:
            from pitstop.profiling._patch import unpatch

            unpatch(done)
        self._exit_patch = None
