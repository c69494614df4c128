"""The writer's columns with numpy where the process imported it: the steps' times and other seconds summed,
the timing columns rounded to microseconds, each against the loop it replaced (which runs without numpy)."""

from __future__ import annotations

import json
import math
import random
import sys
import types
from collections import deque
from pathlib import Path
from typing import Any

import numpy  # (imported, as torch imports it: the vector path is taken)
import pytest

from pitstop import stepcolumns
from pitstop.events import Step
from pitstop.profiling import _losses, _stepevents, _writepass
from pitstop.profiling._plainsteps import PlainRun
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.windows import ProfilerWindows
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


def _held(tmp_path: Path, calls: list[tuple[Any, ...]]) -> list[Any]:
    """The agent's queue once its writer took the held calls in."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent.rss_now = 123 << 20
    agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in calls)
    agent._take_held()
    out: list[Any] = []
    for item in agent._queue:  # (the writer's take queues its plain steps as runs: their tuples)
        out.extend(item.tuples() if type(item) is PlainRun else [item])
    return out


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


@pytest.mark.parametrize("seed", range(4))
def test_the_columns_summed_with_numpy_are_the_loop_s_floats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             seed: int) -> None:
    rows = _held(tmp_path, _stream(seed, 600, 0.05))
    made = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="train.py", profile=None))._steps
    steps = [row for row in rows if type(row) is tuple]
    with_numpy = made.columns(steps, 1.78e9)
    monkeypatch.setattr(_stepevents, "imported_numpy", lambda: None)
    assert with_numpy == made.columns(steps, 1.78e9)  # every time and other, the same float
    assert len(with_numpy["step"]) > 500 and min(with_numpy["other_s"]) >= 0.0


class _Lines:
    """The record's lines as the writer hands them over, byte for byte."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_lines(self, lines: list[str]) -> None:
        self.lines.extend(lines)


def _written(tmp_path: Path, calls: list[tuple[Any, ...]], runs: bool, monkeypatch: pytest.MonkeyPatch,
             windows: bool = False) -> tuple[list[str], list[Any], int]:
    """The lines and the step taps' columns of one writer pass over the held calls: taken by the writer
    (`runs`: its plain steps queued as runs) or by the training thread (a tuple a step), and the items
    the queue held. `windows`: profiler windows as in a default run, the next one far ahead."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent.rss_now = 123 << 20
    if windows:
        agent.windows = ProfilerWindows(every=500, active=5, first=100_000, trace_dir=None, device_type="cpu",
                                        emit=agent.emit, note=lambda level, message: None,
                                        profiler_factory=lambda: None)
    agent._writer = _Lines()  # type: ignore[assignment]
    tapped: list[Any] = []
    agent.step_taps.append(tapped.append)
    agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in calls)
    agent._take_stamps(writer=runs)
    queued = len(agent._queue)
    clock = types.SimpleNamespace(perf_counter=lambda: 300.0, time=lambda: 1.78e9 + 300.0)
    monkeypatch.setattr(_writepass, "time", clock)  # (the same offset from perf_counter to wall time,
    monkeypatch.setattr(_losses, "time", clock)  # and the same time on the losses' events)
    agent._drain()
    monkeypatch.undo()
    return agent._writer.lines, tapped, queued  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed,numpy_on,windows", [(0, True, False), (1, True, True), (2, False, False),
                                                    (3, True, True)])
def test_the_writer_s_runs_of_plain_steps_write_the_lines_a_tuple_a_step_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, numpy_on: bool, windows: bool) -> None:
    calls = _stream(seed, 1200, 0.03)
    if not numpy_on:
        monkeypatch.setattr(_stepevents, "imported_numpy", lambda: None)
    runs, run_taps, run_items = _written(tmp_path / "a", calls, True, monkeypatch, windows)
    if not numpy_on:
        monkeypatch.setattr(_stepevents, "imported_numpy", lambda: None)
    tuples, tuple_taps, steps = _written(tmp_path / "b", calls, False, monkeypatch, windows)
    assert runs == tuples  # byte for byte: every step's figures, the losses, the lines' cuts
    assert run_taps == tuple_taps  # and the stall watch's columns
    assert sum(json.loads(line).get("n", 0) for line in runs) > 1000
    assert run_items < steps // 10  # the writer queued its takes as runs, not a tuple a step


def test_a_full_queue_counts_the_steps_of_a_run_it_drops(tmp_path: Path) -> None:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent._queue = deque(maxlen=2)
    agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in _stream(4, 40, 0.0))
    agent._take_stamps(writer=True)  # step 0 told at once, then one run of the plain steps
    for _ in range(2):
        agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in _stream(5, 10, 0.0)[5:])
        agent._take_stamps(writer=True)
    runs = [item for item in agent._queue if type(item) is PlainRun]
    assert len(runs) == 2 and agent.dropped == 40  # the first run's steps and step 0: all counted


def test_the_writer_leaves_the_step_in_flight_held_and_queues_every_plain_step_in_runs(tmp_path: Path) -> None:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    calls = [(getattr(agent.clock, name), *args) for name, *args in _stream(6, 62, 0.0)]
    agent.stamps.extend(calls[:5 * 30 + 2])  # a pass finds 30 steps and the next one's batch and forward
    agent._take_stamps(writer=True)
    assert len(agent.stamps) == 2  # the step in flight: held for the next pass, which takes it whole
    agent.stamps.extend(calls[5 * 30 + 2:5 * 61 + 3])
    agent._take_stamps(writer=True)
    assert len(agent.stamps) == 3
    steps = [item for item in agent._queue if type(item) is tuple]
    assert [row[0] for row in steps] == [0]  # step 0 alone is told at once; every later step in a run
    assert sum(len(item) for item in agent._queue if type(item) is PlainRun) == 60
    agent._take_stamps(writer=True)  # no call came since (a hang, a long checkpoint): the held ones go in
    assert not agent.stamps and agent.clock.backwards == 62


def _plain_run(rng: random.Random, n: int) -> PlainRun:
    """A run of n plain steps of a ~1 ms loop: stamps as the hooks take them, some columns shared."""
    run = PlainRun(rng.randrange(1, 10**6), 1e5, rng.choice([1, None, "other"]), rng.choice([None, 123 << 20]))
    now = run.start
    waits = rng.choice([lambda: 0.0, lambda: rng.random() / 1e4, lambda: 1e-4])
    samples = rng.choice([lambda: 32, lambda: rng.choice([32, 5, None])])
    for i in range(n):
        started = now + rng.random() / 1e5
        waited = waits()
        b_start = started + waited + rng.choice([-1e-5, 3e-4])  # (a backward begun before the batch: 0.0)
        b_end = b_start + rng.random() / 1e3
        o_start = b_end + rng.random() / 1e4
        now = o_start + rng.choice([2e-4, rng.random() / 1e3])
        loss = 2.0 - i / 1e3 if i % 7 == 0 else None
        if loss is not None:
            run.losses.append(i)
        run.rows.append((now, started, waited, samples(), b_start, b_end, o_start, loss))
    return run


@pytest.mark.parametrize("n", [16, 200, 512, 530, 1040, 1100])
def test_a_plain_run_s_lines_from_its_arrays_are_its_columns_lines(n: int) -> None:
    rng = random.Random(n)
    for _ in range(4):
        run = _plain_run(rng, n)
        seconds: dict[str, Any] = {}
        columns = _stepevents.plain_columns(run, 1.78e9 - 1e5, seconds)
        lines = _stepevents.plain_lines(run, seconds)
        assert lines == _writepass.steps_lines(columns, seconds)  # byte for byte
        assert sum(json.loads(line)["n"] for line in lines) == n


def test_a_plain_run_the_arrays_cannot_take_goes_to_the_columns() -> None:
    rng = random.Random(9)
    for n, taken in ((15, False), (513, False), (528, True)):  # (a line of fewer than 16 steps: the loop's)
        run = _plain_run(rng, n)
        seconds: dict[str, Any] = {}
        _stepevents.plain_columns(run, 0.0, seconds)
        assert (_stepevents.plain_lines(run, seconds) is not None) == taken
    run = _plain_run(rng, 40)
    end, *rest = run.rows[3]
    run.rows[3] = (math.inf, *rest)
    seconds = {}
    with numpy.errstate(invalid="ignore"):
        _stepevents.plain_columns(run, 0.0, seconds)
    assert _stepevents.plain_lines(run, seconds) is None  # (the drain then writes the run a step at a time)


def test_a_pass_over_one_run_writes_the_lines_a_tuple_a_step_writes(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stream(8, 700, 0.0)  # step 0 and a few in the first pass; the rest, one run, in the second
    written = []
    for runs in (True, False):
        agent = Agent(SessionSettings(session="unit", record=str(tmp_path / f"r{runs}"), script="train.py",
                                      profile=None))
        agent.rss_now = 123 << 20
        agent._writer = _Lines()  # type: ignore[assignment]
        tapped: list[Any] = []
        agent.step_taps.append(tapped.append)
        clock = types.SimpleNamespace(perf_counter=lambda: 900.0, time=lambda: 1.78e9 + 900.0)
        monkeypatch.setattr(_writepass, "time", clock)
        monkeypatch.setattr(_losses, "time", clock)
        for second, part in enumerate((calls[:5 * 20 + 3], calls[5 * 20 + 3:])):
            agent.stamps.extend((getattr(agent.clock, name), *args) for name, *args in part)
            agent._take_stamps(writer=runs)
            if runs and second:
                assert [type(item) for item in agent._queue] == [PlainRun]
            agent._drain()
        monkeypatch.undo()
        written.append((agent._writer.lines, tapped))  # type: ignore[attr-defined]
    assert written[0] == written[1]
    assert sum(json.loads(line).get("n", 0) for line in written[0][0]) == 700  # (the last one cut at its optimizer step)
