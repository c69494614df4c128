"""The shape of the agent's hot path: per step the training thread queues one tuple, the writer builds the events."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pitstop import events
from pitstop.events import encode
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling import _writepass
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings


class FakeWriter:
    """The record file as the writer thread sees it: the events written, in order, a line each."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_lines(self, lines: list[str]) -> None:  # the record's lines: a `steps` line a step each here
        self.lines.extend(encode(event) for line in lines for event in decode_events(line.encode()))


def new_agent(tmp_path: Path) -> Agent:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None))
    agent._writer = FakeWriter()  # type: ignore[assignment]  # never started: the writer's pass is called by hand
    return agent


def train(agent: Agent, losses: list[float]) -> None:
    """What the hooks call for each step of a CPU loop: a backward with its loss, then the optimizer's step."""
    optimizer = object()
    for loss in losses:
        started = time.perf_counter()
        agent.clock.on_optimizer_start(id(optimizer), started)
        agent.on_backward(loss, started)
        agent.clock.on_optimizer_step(id(optimizer), time.perf_counter())


def test_per_step_the_training_thread_builds_no_event_and_encodes_nothing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    agent = new_agent(tmp_path)
    built: Counter[str] = Counter()

    def counting(name: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            built[name] += 1
            return original(*args, **kwargs)

        return call

    monkeypatch.setattr(_writepass, "record_lines", counting("record_lines", _writepass.record_lines))
    monkeypatch.setattr(_writepass, "encode_columns", counting("encode_columns", _writepass.encode_columns))
    for kind in (events.Step, events.Loss, events.Note):  # wherever they are built
        monkeypatch.setattr(kind, "__init__", counting(kind.__name__, kind.__init__))
    train(agent, [2.0 - i / 100 for i in range(100)])  # three batches' worth of CPU losses
    assert built == Counter()  # no event built or encoded on the training thread
    assert len(agent._queue) == 100 and all(type(item) is tuple for item in agent._queue)  # one entry a step
    agent._drain()  # the writer thread's pass
    # The steps go to their line as columns: no Step built without a tap; one line for the run, encoded once.
    assert built == Counter({"Loss": 3, "encode_columns": 1})
    assert len(agent._writer.lines) == 100 + 3  # type: ignore[union-attr]


def test_the_writer_hands_its_taps_each_step_and_loss_in_the_queue_order(tmp_path: Path) -> None:
    agent = new_agent(tmp_path)
    seen: list[events.Event] = []
    agent.taps.append(seen.extend)
    train(agent, [2.0 - i / 100 for i in range(40)])
    agent.emit(events.End(t=time.time(), steps=agent.step_index, dropped=0, reason="exit", exit_code=0))
    agent._drain(final=True)
    kinds = [e.kind for e in seen]
    assert kinds == ["step"] * 32 + ["loss"] + ["step"] * 8 + ["loss", "end"]
    assert [e.step for e in seen if type(e) is events.Step] == list(range(40))
    written = [json.loads(line) for line in agent._writer.lines]  # type: ignore[union-attr]
    tapped = [(e.step, round(e.wall * 1e6), round(e.backward_s * 1e6)) for e in seen if type(e) is events.Step]
    assert tapped == [(line["step"], round(line["wall"] * 1e6), round(line["backward_s"] * 1e6))
                      for line in written if line["kind"] == "step"]  # the record's steps, to the microsecond


def test_cpu_losses_reach_the_record_in_batches_after_their_steps_and_before_its_end(tmp_path: Path) -> None:
    agent = new_agent(tmp_path)
    values = [2.0 - i / 100 for i in range(40)]
    values[5] = math.nan
    train(agent, values)
    agent.emit(events.End(t=time.time(), steps=agent.step_index, dropped=0, reason="exit", exit_code=0))
    agent._drain(final=True)
    lines = [json.loads(line) for line in agent._writer.lines]  # type: ignore[union-attr]
    kinds = [line["kind"] for line in lines]
    # the record's order: a loss read while its steps wait for their line follows that line
    assert kinds == ["step"] * 40 + ["loss", "loss", "end"]
    first, second = lines[40], lines[41]
    assert first["steps"] == list(range(32)) and second["steps"] == list(range(32, 40))
    assert first["values"][:5] == values[:5] and first["values"][5] is None and first["nonfinite"] == [5]
    nine = [float(f"{v:.9g}") for v in values]  # the record keeps 9 digits: every float32 loss exactly
    assert first["values"][6:] == nine[6:32] and second["values"] == nine[32:]
    assert [line["step"] for line in lines if line["kind"] == "step"] == list(range(40))


def test_a_steps_micro_step_losses_held_as_tensors_are_read_in_one_copy_and_added_up(tmp_path: Path) -> None:
    import torch

    agent = new_agent(tmp_path)
    agent.torch = torch
    # (a GPU's losses stay tensors until read; these are on the CPU, read by the same path)
    agent._pending_losses = {0: [torch.tensor(0.25), torch.tensor(0.5)], 1: torch.tensor(0.75),
                             2: [torch.tensor(0.125)] * 4}
    agent.flush_losses(block=True)
    losses = [e for e in agent._queue if isinstance(e, events.Loss)]
    assert [(e.steps, e.values) for e in losses] == [([0, 1, 2], [0.75, 0.75, 0.5])]


def test_the_writer_s_lines_are_the_record_s_lines_of_the_same_events(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps written as columns, a run at a time, give the lines `record_lines` gives their events."""
    import random
    from types import SimpleNamespace

    from pitstop.profiling._losses import Tail
    from pitstop.profiling._stepevents import StepEvents
    from pitstop.profiling.record import record_lines

    rng = random.Random(7)
    items: list[Any] = []
    now = 100.0
    for index in range(1300):
        now += 0.001 + rng.random() / 1000
        wall = 0.001 + rng.random() / 1000
        odd = rng.random()
        phases = None if odd < 0.05 and index < 400 else (rng.random() / 1e4, rng.random() / 1e4, rng.random() / 1e4, None)
        mark, eval_s, passes = ("eval", 0.3, rng.choice([0, 1, 2])) if odd > 0.97 else (None, 0.0, 0)
        items.append((index, now, wall, rng.random() / 1e4, rng.choice([32, 32, 32, 7, None]),
                      "backward" if odd < 0.01 else "optimizer",
                      (1000 + index, 2000, 3000) if 200 < index < 260 else None, 4096 * (1 + index // 100), mark,
                      eval_s, rng.choice([3, 3, 3, None, object()]), phases,
                      rng.choice([None, None, rng.random(), float("nan")]), passes))
        if odd > 0.995:
            items.append(events.Note(t=5000.0 + index, level="info", source="unit", message=f"between {index}"))
        elif 0.99 < odd <= 0.995:  # a GPU's losses, read in one copy, queued among the steps
            items.append(events.Loss(t=5000.0 + index, steps=[index - 1, index], values=[1.0, 2.0]))
    items.append(Tail(1299, 0.5))
    items.append(events.End(t=6000.0, steps=1300, dropped=0, reason="exit", exit_code=0))
    monkeypatch.setattr(_writepass, "time", SimpleNamespace(perf_counter=lambda: 1000.0, time=lambda: 5000.0))
    from pitstop.profiling import _losses

    monkeypatch.setattr(_losses, "time", SimpleNamespace(perf_counter=time.perf_counter, time=lambda: 7000.0))

    agent = new_agent(tmp_path)
    written: list[str] = []
    agent._writer.write_lines = written.extend  # type: ignore[union-attr]  # the lines as they are
    agent._queue.extend(items)
    agent._drain(final=True)
    reference = StepEvents(agent.phases)
    made = [event for item in items for event in reference.events(item, 4000.0, True)]
    assert written == record_lines(made)
    assert sum(line.startswith('{"kind":"steps"') for line in written) > 3  # runs cut at notes, 512 steps a line
