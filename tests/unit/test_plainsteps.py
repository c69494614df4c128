"""The writer's one-pass take of held plain steps (`_plainsteps.take`) against the clock's own methods."""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from pitstop.profiling import _plainsteps
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.stepclock import StepClock

TRAIN, VAL = 1, 2


def _stream(seed: int, steps: int = 300) -> list[tuple[Any, ...]]:
    """Held hook calls, as (clock method name, its arguments): mostly plain steps as the hooks hold them,
    with another loader, evaluation forwards, a second backward, another optimizer, a short last batch,
    a loss only now and then, and a batch without a shape mixed in."""
    rng = random.Random(seed)
    now = 100.0
    calls: list[tuple[Any, ...]] = []

    def tick(dt: float) -> float:
        nonlocal now
        now += dt * (0.5 + rng.random())
        return now

    for _ in range(steps):
        odd = rng.random() < 0.2
        kind = rng.choice(["val", "eval", "twice", "other", "short", "shapeless", "bwd-first", "iter"]) if odd else ""
        if kind == "val":
            calls.append(("on_fetch", VAL, tick(0.001), 0.002, (32, 8)))
        if kind == "eval":
            calls.append(("on_forward", False, None, tick(0.001), True, True))
            calls.append(("on_forward_end", tick(0.002)))
        if kind == "iter":
            calls.append(("on_iter", TRAIN))
        shape: Any = (16, 8) if kind != "short" else (5, 8)
        if kind == "shapeless":
            shape = rng.choice([None, 16, [1, 2]])
        if kind != "bwd-first":
            calls.append(("on_fetch", TRAIN, tick(0.001), rng.random() / 1000, shape))
        calls.append(("on_forward", True, None, tick(0.001)))
        started = tick(0.002)
        calls.append(("on_backward", tick(0.005), rng.choice([None, None, 1.5, rng.random()]), started, None))
        if kind == "twice":
            started = tick(0.001)
            calls.append(("on_backward", tick(0.005), None, started, None))
        key = "B" if kind == "other" else "A"
        calls.append(("on_optimizer_start", key, tick(0.001), None))
        calls.append(("on_optimizer_step", key, tick(0.002)))
    return calls


class Sink:
    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.steps.append(args)


def _state(clock: StepClock) -> dict[str, Any]:
    return {k: v for k, v in vars(clock).items() if k not in ("on_step", "on_eval", "on_new_optimizer", "alive")}


def _run(calls: list[tuple[Any, ...]], fused: bool, chunk: int, stop_at: int | None = None) -> tuple[Any, ...]:
    """The calls held `chunk` at a time and taken in as the writer does: with the one-pass take, or without."""
    sink = Sink()
    clock = StepClock(sink)
    clock.batch_sizes[TRAIN] = 16
    clock.t_start = 99.0
    held: deque[tuple[Any, ...]] = deque()
    taken = 0
    for at in range(0, len(calls), chunk):
        held.extend((getattr(clock, name), *args) for name, *args in calls[at:at + chunk])
        left = len(held)
        while left > 0:
            if fused:
                n = _plainsteps.take(clock, held, left, stop_at)
                taken += n
                left -= n
                if left <= 0:
                    break
            if stop_at is not None and held[0][0] == clock.on_optimizer_step and clock.index >= stop_at:
                break
            call = held.popleft()
            call[0](*call[1:])
            left -= 1
    return sink.steps, _state(clock), len(held), taken


@pytest.mark.parametrize("seed", range(12))
def test_the_one_pass_take_cuts_the_steps_the_clock_cuts_call_by_call(seed: int) -> None:
    calls = _stream(seed)
    chunk = random.Random(seed).choice([7, 50, 333, 2000])  # a writer's pass may end mid-step
    fused, fused_state, _, taken = _run(calls, True, chunk)
    plain, plain_state, _, none = _run(calls, False, chunk)
    assert none == 0 and taken > len(calls) // 4  # plain steps' calls went the one-pass way
    assert fused == plain  # every step, every figure, the same floats
    assert fused_state == plain_state  # and the clock left as the calls leave it


def test_the_one_pass_take_leaves_a_profiler_window_s_step_to_the_training_thread() -> None:
    calls = _stream(3, steps=100)
    fused, fused_state, held, _ = _run(calls, True, 10_000, stop_at=40)
    plain, plain_state, plain_held, _ = _run(calls, False, 10_000, stop_at=40)
    assert len(fused) == len(plain) == 40 and held == plain_held > 0
    assert fused == plain and fused_state == plain_state


def _agent_queue(tmp_path: Path, calls: list[tuple[Any, ...]]) -> list[Any]:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent.rss_now = 123 << 20
    agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in calls)
    agent._take_held()
    assert not agent.stamps
    return _opened(agent._queue)


def _opened(queue: Any) -> list[Any]:
    """The queue's items, each `PlainRun` as the steps' tuples it stands for."""
    out: list[Any] = []
    for item in queue:
        out.extend(item.tuples() if type(item) is _plainsteps.PlainRun else [item])
    return out


def test_the_agent_s_writer_queues_the_steps_its_clock_queues_call_by_call(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stream(5, steps=200)
    seen: list[int] = []
    take = _plainsteps.take
    monkeypatch.setattr(_plainsteps, "take", lambda *args: seen.append(take(*args)) or seen[-1])
    fused = _agent_queue(tmp_path / "a", calls)
    assert sum(seen) > len(calls) // 4  # (queued by `take` itself: no window, CUDA or trial here)
    monkeypatch.setattr(_plainsteps, "take", lambda *args: 0)
    assert fused == _agent_queue(tmp_path / "b", calls) and len(fused) > 150
