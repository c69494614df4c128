"""The writer's work a run of steps at a time: held plain steps cut as columns, queued runs taken at once, and
the timing columns rounded with numpy, each against the step-by-step way it replaced."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy  # noqa: F401  (imported, as torch imports it: the vector path is taken)
import pytest

from pitstop import stepcolumns
from pitstop.events import Loss, Step
from pitstop.profiling import _plainsteps, _stepevents, _writepass
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.stepcolumns import decode_steps, encode_columns

TRAIN, VAL = 1, 2


def _stream(seed: int, steps: int, odd: float) -> list[tuple[Any, ...]]:
    """Held hook calls (clock method name, arguments): plain steps of a ~1 ms loop, a CPU loss one step
    in ten, and an odd step now and then (an evaluation, a second backward, another loader, another
    optimizer, a short batch, a GPU loss: a tensor's stand-in)."""
    rng = random.Random(seed)
    now = 100.0
    calls: list[tuple[Any, ...]] = []

    def tick(dt: float) -> float:
        nonlocal now
        now += dt * (0.5 + rng.random())
        return now

    for i in range(steps):
        kind = rng.choice(["val", "eval", "twice", "other", "short", "tensor"]) if rng.random() < odd else ""
        if kind == "val":
            calls.append(("on_fetch", VAL, tick(1e-4), 2e-4, (32, 8)))
        if kind == "eval":
            calls.append(("on_forward", False, None, tick(1e-4), True, True))
            calls.append(("on_forward_end", tick(2e-4)))
        calls.append(("on_fetch", TRAIN, tick(1e-4), rng.random() / 1e4, (5, 8) if kind == "short" else (16, 8)))
        calls.append(("on_forward", True, None, tick(1e-4)))
        started = tick(2e-4)
        loss: Any = 2.0 - i / 1e3 if i % 10 == 0 else None
        calls.append(("on_backward", tick(3e-4), object() if kind == "tensor" else loss, started, None))
        if kind == "twice":
            started = tick(1e-4)
            calls.append(("on_backward", tick(3e-4), None, started, None))
        key = "B" if kind == "other" else "A"
        calls.append(("on_optimizer_start", key, tick(1e-4), None))
        calls.append(("on_optimizer_step", key, tick(2e-4)))
    return calls


def _held(tmp_path: Path, calls: list[tuple[Any, ...]], chunk: int) -> tuple[list[Any], dict[str, Any]]:
    """The agent's queue and clock after the writer took the calls in, `chunk` calls a pass."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent.rss_now = 123 << 20
    clock = agent.clock
    for at in range(0, len(calls), chunk):
        agent.stamps.extend((getattr(clock, name), *args) for name, *args in calls[at:at + chunk])
        agent._take_held()
    state = {k: v for k, v in vars(clock).items() if k not in ("on_step", "on_eval", "on_new_optimizer", "alive")}
    return list(agent._queue), state


@pytest.mark.parametrize(("seed", "odd", "chunk"), [(1, 0.0, 5_000), (2, 0.01, 2_501), (3, 0.05, 997), (4, 0.3, 333)])
def test_plain_steps_cut_a_run_at_a_time_queue_what_the_clock_queues_call_by_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, odd: float, chunk: int) -> None:
    calls = _stream(seed, 1_500, odd)
    runs: list[int] = []
    run = _plainsteps._run
    monkeypatch.setattr(_plainsteps, "_run", lambda stamps, k, *rest: (
        runs.append(k) if (got := run(stamps, k, *rest)) is not None else None) or got)
    fused, fused_state = _held(tmp_path / "a", calls, chunk)
    assert sum(runs) > 1_500 * (1 - 12 * odd) - 20  # most steps went a run at a time
    monkeypatch.setattr(_plainsteps, "take", lambda *args: 0)  # every call through its clock method
    plain, plain_state = _held(tmp_path / "b", calls, chunk)
    assert len(fused) == len(plain) > 1_400
    assert fused == plain  # every step, every figure, the same floats
    assert fused_state == plain_state  # and the clock left as the calls leave it


def _columns(rng: random.Random, n: int) -> dict[str, list[Any]]:
    """Step columns as the writer builds them, with what the vector path must hand back to the loop:
    columns of None, of 0.0, with a None among floats, and figures that round on a half."""
    t0 = 1.78e9 + rng.random()
    walls = [rng.choice([1e-3 * (0.5 + rng.random()), 0.0015, 2.5e-6]) for _ in range(n)]
    times = [t0 + sum(walls[:i + 1]) for i in range(n)]
    phase = rng.choice(["all", "none", "some"])

    def figure() -> float | None:
        if phase == "none" or (phase == "some" and rng.random() < 0.2):
            return None
        return rng.choice([rng.random() * 3e-4, 0.0, 5.5e-6])

    forward, backward, optimizer = ([figure() for _ in range(n)] for _ in range(3))
    wait = [rng.choice([rng.random() * 1e-4, 0.0]) for _ in range(n)] if rng.random() < 0.8 else [0.0] * n
    other = [None if None in (f, b, o) else max(0.0, w - d - f - b - o)  # type: ignore[operator]
             for w, d, f, b, o in zip(walls, wait, forward, backward, optimizer)]
    columns = {name: [getattr(Step, name, None)] * n for name in stepcolumns._FIELDS}
    columns.update(step=list(range(7, 7 + n)), t=times, wall=walls, data_wait=wait, forward_s=forward,
                   backward_s=backward, optimizer_s=optimizer, other_s=other, samples=[32] * n,
                   source=["optimizer"] * n, eval_s=[0.0] * n, phase_clock=["host"] * n)
    return columns


@pytest.mark.parametrize("seed", range(16))
def test_the_timing_columns_rounded_with_numpy_write_the_line_the_loop_writes(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    columns = _columns(rng, rng.choice([16, 40, 512]))
    with_numpy = encode_columns(columns)
    monkeypatch.setattr(stepcolumns, "imported_numpy", lambda: None)
    assert with_numpy == encode_columns(columns)  # byte for byte
    steps = decode_steps(json.loads(with_numpy) | {"kind": None})
    assert [s.step for s in steps] == columns["step"]


def test_the_vector_path_is_taken_where_numpy_is_imported_and_never_imports_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    columns = _columns(random.Random(1), 64)
    rounded: list[int] = []
    vector = stepcolumns._timing_vector
    monkeypatch.setattr(stepcolumns, "_timing_vector", lambda *args: rounded.append(1) or vector(*args))
    encode_columns(columns)
    assert rounded == [1]
    monkeypatch.delitem(sys.modules, "numpy")
    encode_columns(columns)  # a process that has not imported numpy: the loop, and numpy still not imported
    assert rounded == [1] and "numpy" not in sys.modules


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_time_that_is_not_finite_fails_the_line_with_numpy_as_without(bad: float,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    columns = _columns(random.Random(2), 32)
    columns["wall"][5] = bad  # the writer then writes the run step by step and drops that one
    with pytest.raises((ValueError, OverflowError)):
        encode_columns(columns)
    monkeypatch.setattr(stepcolumns, "imported_numpy", lambda: None)
    with pytest.raises((ValueError, OverflowError)):
        encode_columns(columns)


def test_a_queued_run_taken_at_once_keeps_each_loss_after_its_step(tmp_path: Path) -> None:
    """The writer takes a run of queued steps at once; a `Loss` event still follows the step that completed it,
    and an event in the queue still ends the run."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    lines: list[str] = []
    agent._writer = type("W", (), {"write_lines": staticmethod(lines.extend)})()  # type: ignore[assignment]
    seen: list[Any] = []
    agent.taps.append(seen.extend)
    calls = _stream(5, 400, 0.0)
    clock = agent.clock
    agent.stamps.extend((getattr(clock, name), *args) for name, *args in calls)
    agent._take_held()
    agent.note("info", "unit", "between two runs")
    runs: list[int] = []
    take_run = _writepass._take_run
    _writepass._take_run = lambda queue, *rest: (runs.append(len(queue)) or take_run(queue, *rest))  # type: ignore
    try:
        agent._drain()
    finally:
        _writepass._take_run = take_run
    kinds = [type(e).__name__ for e in seen]
    assert kinds.count("Step") == 400 and kinds.count("Note") == 1
    losses = [e for e in seen if isinstance(e, Loss)]
    assert [len(loss.steps) for loss in losses] == [32]  # 40 losses, one in ten steps: 32 gathered so far
    at = seen.index(losses[0])
    assert seen[at - 1].step == losses[0].steps[-1]  # right after the step whose loss completed it
    assert runs and runs[0] == 401  # the 400 steps taken as one run, the note after them


@pytest.mark.parametrize("seed", range(4))
def test_the_columns_summed_with_numpy_are_the_loop_s_floats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             seed: int) -> None:
    rows, _ = _held(tmp_path, _stream(seed, 600, 0.05), 5_000)
    made = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="train.py", profile=None))._steps
    steps = [row for row in rows if type(row) is tuple]
    with_numpy = made.columns(steps, 1.78e9)
    monkeypatch.setattr(_stepevents, "imported_numpy", lambda: None)
    assert with_numpy == made.columns(steps, 1.78e9)  # every time and other, the same float
    assert len(with_numpy["step"]) > 500 and min(with_numpy["other_s"]) >= 0.0


def test_a_queue_of_steps_and_events_in_turn_is_looked_at_a_few_items_a_step(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run is looked for from the queue's head: were the whole queue copied at each, a queue of 20,000
    steps, an event after each two, would cost the writer 200 million items looked at, not ~100,000."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent._writer = type("W", (), {"write_lines": staticmethod(lambda lines: None)})()  # type: ignore[assignment]
    phases = (1e-4, 2e-4, 3e-4, None)
    for i in range(10_000):  # two steps, then an event
        for j in (2 * i, 2 * i + 1):
            agent._queue.append((j, 100.0 + j / 1e3, 1e-3, 0.0, 16, "optimizer", None, None, None, 0.0, TRAIN,
                                 phases, None, 0))
        agent._queue.append(Loss(t=0.0, steps=[2 * i], values=[1.0]))
    looked: list[int] = []
    islice = _writepass.islice
    monkeypatch.setattr(_writepass, "islice", lambda it, start, stop: looked.append(stop) or islice(it, start, stop))
    agent._drain()
    assert not agent._queue
    assert len(looked) >= 10_000 and sum(looked) < 20 * 10_000  # a few items a run
