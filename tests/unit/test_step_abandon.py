"""An optimizer step that raised is told from one still running by torch's step wrapper on the stack."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pitstop.profiling._hooks import Hooks
from pitstop.profiling.stepclock import StepClock


class Closing(torch.optim.Optimizer):
    """An optimizer that calls its closure inside its step, as LBFGS does."""

    def __init__(self, params: Any) -> None:
        super().__init__(params, {})

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        return closure()


def hooks_with_clock(first_token: bool) -> tuple[Hooks, StepClock, Closing]:
    clock = StepClock(lambda *step: None)
    failed: list[str] = []
    hooks = Hooks.__new__(Hooks)
    hooks.agent = SimpleNamespace(clock=clock, fail=lambda where, err: failed.append(where))  # type: ignore[assignment]
    hooks.step_code = None
    optimizer = Closing([torch.nn.Parameter(torch.zeros(1))])

    def pre_hook(opt: Any, args: Any, kwargs: Any) -> None:  # what the agent's pre-hook hands the clock
        import sys

        token = sys._getframe(1) if first_token else None
        hooks.step_code = sys._getframe(1).f_code
        clock.on_optimizer_start(id(opt), time.perf_counter(), token)

    optimizer.register_step_pre_hook(pre_hook)
    return hooks, clock, optimizer


@pytest.mark.parametrize("first_token", [True, False], ids=["frame token", "no token"])
def test_a_closure_s_step_is_running_and_a_step_that_raised_is_ended(first_token: bool) -> None:
    hooks, clock, optimizer = hooks_with_clock(first_token)
    seen: list[int] = []

    def closure() -> None:
        hooks._abandon_raised()  # a closure's backward: the step runs
        seen.append(len(clock.open_steps))
        raise FloatingPointError("the closure gave up")

    with pytest.raises(FloatingPointError):
        optimizer.step(closure)
    assert seen == [1] and len(clock.open_steps) == 1  # no post-hook came
    hooks._abandon_raised()  # the next backward, outside any step
    assert clock.open_steps == []
