"""Provides the hooks' invisibility to torch.compile: pitstop's code is never traced or compiled by Dynamo.

A script that compiles a function which calls pitstop's hooks (a whole training
step under `@torch.compile`: its forward, `loss.backward()`, `opt.step()`) had
Dynamo trace the hooks as if they were the script's code: it printed warnings
into the script's stderr ("Dynamo does not know how to trace the builtin
`time.perf_counter`", `sys._getframe`, `gc.get_objects`), broke graphs inside
them and compiled their remains: 16 graph breaks and 9 graphs for the script's
own 4 and 2, and an optimizer step that ran eagerly where torch compiles it.

Two places, two means, both free in eager mode:
- where Dynamo *inlines* a hook into the graph it traces (the optimizer hooks
  inside `Optimizer.step`, the root module's `__call__` inside a compiled
  function), the hook asks `torch.compiler.is_dynamo_compiling()` first: Dynamo
  folds it to True, so the hook traces as nothing at all (the original alone);
  eagerly it returns False. It is asked only once Dynamo has begun to trace
  in this process (`compile_gate`, a one-item list read first): before that
  no hook can be traced, and a script that never compiles pays no Python call
  for it (five a step, each a frame with the caches cold from the step's work);
- where Dynamo would *compile a frame* of pitstop's (a hook that runs eagerly
  at a graph break, `loss.backward()` in a compiled step), every code object
  of pitstop's is marked SKIP for its own frame (torch's `set_code_exec_strategy`,
  the mark `torch._dynamo.eval_frame.skip_code` sets): the frame runs as plain
  Python and measures the step; the calls it makes (the original, and the
  script's code under it) are compiled or not exactly as without pitstop.

A compiled optimizer step is therefore not seen by the optimizer hooks: such a
run's steps are counted at each backward call (the summary says so).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

_TRACED = [False]  # [True] once Dynamo began to trace a frame in this process (`compile_gate`)
_WATCHED = [False]  # the gate's watch is set up (once a process; a fork inherits it)
_HOT: list[list[Any]] = []  # the agents' hooks flags (`_hotflag.py`): cleared as the gate opens


def on_trace(flag: list[Any]) -> None:
    """Clear `flag[0]` as Dynamo begins to trace (now, if it did): the hooks' short path is never traced."""
    _HOT.append(flag)
    if _TRACED[0]:
        flag[0] = False


def traced() -> bool:
    """Whether Dynamo began to trace in this process."""
    return _TRACED[0]


def _open_gate() -> None:
    _TRACED[0] = True
    for flag in _HOT:
        flag[0] = False


def compile_gate() -> list[bool]:
    """A one-item list, [True] once Dynamo may trace: every hook reads it before it asks `compiling()`.

    Every frame Dynamo traces, whatever asked for it (`torch.compile`, a model's
    `compile()`, `torch._dynamo.optimize`, `torch.export` strict: its capture
    makes no compile context of its own), is traced by an `InstructionTranslator`
    made first (`torch._dynamo.convert_frame.trace_frame`); the hooks it inlines
    come later. Its constructor is patched, once `torch._dynamo` has imported
    (every torch optimizer's constructor imports it), to set the gate. Dynamo
    then reads the gate as True (and guards on it: it never turns back). A torch
    without that class, or a `torch._dynamo` imported before pitstop could
    watch: the gate is set at once, and the hooks ask `compiling()` always."""
    if not _WATCHED[0]:
        _WATCHED[0] = True
        if "torch._dynamo" in sys.modules:
            _open_gate()
        else:
            from pitstop.profiling._postimport import after_import

            after_import("torch._dynamo", _watch_tracers)
    return _TRACED


def _watch_tracers(dynamo: Any) -> None:
    from pitstop.profiling._patch import patch

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(tracer: Any, *args: Any, **kwargs: Any) -> None:
            if not _TRACED[0]:
                _open_gate()
            original(tracer, *args, **kwargs)

        return __init__

    try:
        patch(dynamo.symbolic_convert.InstructionTranslator, "__init__", make)
    except Exception:  # a torch that traces otherwise: asked always
        _open_gate()


def _never() -> bool:
    return False


def compiling(torch: Any) -> Callable[[], bool]:
    """The function a hook asks first: True only while Dynamo traces it (folded), else False."""
    found = getattr(getattr(torch, "compiler", None), "is_dynamo_compiling", None)
    return found if callable(found) else _never


class FrameSkip:
    """Marks pitstop's code objects so that Dynamo never compiles their frames."""

    def __init__(self, torch: Any) -> None:
        self._mark: Callable[[types.CodeType], None] | None = None
        self._done: set[int] = set()  # id() of the code objects marked (they live as long as their modules)
        try:
            frames = torch._C._dynamo.eval_frame
            strategy = frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.DEFAULT)
            set_strategy = frames.set_code_exec_strategy
        except Exception:  # a torch without it (before 2.6): nothing compiles pitstop's frames that it knew of
            return

        def mark(code: types.CodeType) -> None:
            set_strategy(code, strategy)

        self._mark = mark

    @property
    def available(self) -> bool:
        return self._mark is not None

    def code(self, code: types.CodeType) -> None:
        """Mark one code object and the code nested in it (closures, comprehensions)."""
        mark = self._mark
        if mark is None or id(code) in self._done:
            return
        self._done.add(id(code))
        mark(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self.code(const)

    def modules(self, prefix: str = "pitstop") -> int:
        """Mark every function of the loaded modules under `prefix` (methods, properties, nested code);
        returns how many code objects are marked in all."""
        if self._mark is None:
            return 0
        for name, module in list(sys.modules.items()):
            if module is None or not (name == prefix or name.startswith(prefix + ".")):
                continue
            for value in list(vars(module).values()):
                self._value(value, name)
        return len(self._done)

    def _value(self, value: Any, module: str) -> None:
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            for part in (value.fget, value.fset, value.fdel):
                if part is not None:
                    self._value(part, module)
            return
        if isinstance(value, types.FunctionType):
            if value.__module__ == module:
                self.code(value.__code__)
            return
        if isinstance(value, type) and value.__module__ == module:
            for item in list(vars(value).values()):
                self._value(item, module)
