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
    for kind in (events.Step, events.Loss, events.Note):  # wherever they are built
        monkeypatch.setattr(kind, "__init__", counting(kind.__name__, kind.__init__))
    train(agent, [2.0 - i / 100 for i in range(100)])  # three batches' worth of CPU losses
    assert built == Counter()  # no event built or encoded on the training thread
    assert len(agent._queue) == 100 and all(type(item) is tuple for item in agent._queue)  # one entry a step
    agent._drain()  # the writer thread's pass
    assert built["Step"] == 100 and built["Loss"] == 3 and built["record_lines"] == 1  # encoded once, all


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
