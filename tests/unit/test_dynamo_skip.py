"""pitstop's code hidden from torch.compile (every code object marked, once; a torch without the mark is fine), and the compile gate."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from pitstop.profiling._dynamo import FrameSkip, compiling

from .forked import run_forked


class _Frames:
    """Stands in for torch._C._dynamo.eval_frame: records the code objects marked."""

    class _FrameAction:
        SKIP, DEFAULT = 1, 0

    def __init__(self) -> None:
        self.marked: list[types.CodeType] = []

    def _FrameExecStrategy(self, cur: int, recursive: int) -> tuple[int, int]:  # noqa: N802 (torch's name)
        return (cur, recursive)

    def set_code_exec_strategy(self, code: types.CodeType, strategy: tuple[int, int]) -> None:
        assert strategy == (1, 0)  # its own frame skipped; what it calls compiled as without pitstop
        self.marked.append(code)


def _torch(frames: _Frames) -> Any:
    return types.SimpleNamespace(_C=types.SimpleNamespace(_dynamo=types.SimpleNamespace(eval_frame=frames)))


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    return module


SOURCE = '''
import os
from os.path import join

def outer():
    def inner():
        return [x for x in range(3)]
    return inner

class Clock:
    def step(self):
        return 1
    @property
    def index(self):
        return 2
    @staticmethod
    def helper():
        return 3
'''


def test_every_function_of_the_modules_is_marked_with_its_nested_code_and_nothing_else() -> None:
    frames = _Frames()
    skip = FrameSkip(_torch(frames))
    module = _module("pitstop_fake_mod", SOURCE)
    other = _module("notpitstop_fake_mod", "def f():\n    return 1\n")
    try:
        count = skip.modules(prefix="pitstop_fake_mod")
        names = {code.co_name for code in frames.marked}
        # outer, inner and inner's list comprehension (3.11 compiles it to its own code), and the
        # class's method, property getter and staticmethod; not os.path.join, nor another module's f.
        assert {"outer", "inner", "step", "index", "helper"} <= names
        assert "join" not in names and other.f.__code__ not in frames.marked
        assert count == len(frames.marked)
        again = skip.modules(prefix="pitstop_fake_mod")  # a second pass marks nothing twice
        assert again == count and len(frames.marked) == count
        assert module.outer.__code__ in frames.marked
    finally:
        del sys.modules["pitstop_fake_mod"], sys.modules["notpitstop_fake_mod"]


def test_a_torch_without_the_mark_leaves_everything_as_it_is() -> None:
    skip = FrameSkip(types.SimpleNamespace())
    assert not skip.available and skip.modules() == 0
    assert compiling(types.SimpleNamespace())() is False  # a torch without torch.compiler: never compiling


def test_the_real_torch_has_both_and_eagerly_is_not_compiling() -> None:
    import torch

    from pitstop.profiling.stepclock import StepClock

    assert compiling(torch) is torch.compiler.is_dynamo_compiling and compiling(torch)() is False
    skip = FrameSkip(torch)
    methods = [v for v in vars(StepClock).values() if isinstance(v, types.FunctionType)]
    assert skip.available and skip.modules() >= len(methods) > 20  # the step clock's methods at least


GATE = """
import sys
from pitstop.profiling._dynamo import compile_gate
{before}
gate = compile_gate()
import torch
opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # imports torch._dynamo
model = torch.nn.Linear(2, 2)
seen = [gate[0]]
compiled = torch.compile(model, backend="eager")  # lazy: nothing traced yet
seen.append(gate[0])
{trace}
print(*seen, gate[0])
"""
# Each gate is a fresh process (the gate never shuts again), forked once torch is imported: three imports of
# torch were 7.6 s of the file's 20 s of CPU. `import torch` leaves torch._dynamo unimported (the prelude
# asserts it), and that is all the gate looks at.
PRELUDE = "import torch, sys\nassert 'torch._dynamo' not in sys.modules"
CASES = {  # (imported before the gate is made, what traces)
    "eager": ("", "compiled(torch.zeros(1, 2))"),
    "export": ("", "torch.export.export(model, (torch.zeros(1, 2),), strict=True)"),
    "imported": ("import torch._dynamo", "compiled(torch.zeros(1, 2))"),
}


@pytest.fixture(scope="module")
def gates() -> dict[str, str]:
    """What each case prints: the gate after the optimizer is built, after torch.compile, after the trace."""
    codes = [(GATE.format(before=before, trace=trace), []) for before, trace in CASES.values()]
    return {case: out.strip() for case, out in zip(CASES, run_forked(PRELUDE, codes, timeout=120))}


def test_the_compile_gate_opens_when_dynamo_begins_to_trace_not_at_its_import(gates: dict[str, str]) -> None:
    # Eagerly, with torch._dynamo imported (by the optimizer), the hooks ask nothing: the gate is shut
    # until Dynamo makes the tracer of a frame, before any hook can be traced.
    assert gates["eager"] == "False False True"
    # torch.export's strict capture traces without a compile context (a gate patched there stayed
    # shut, and Dynamo traced the hooks: "does not know how to trace the builtin time.perf_counter").
    assert gates["export"] == "False False True"


def test_the_compile_gate_is_open_where_torch_dynamo_was_imported_before_pitstop_watched(gates: dict[str, str]) -> None:
    assert gates["imported"] == "True True True"
