"""The agent's lifecycle (construct, then start, then stop) and what its step path asks torch (no torch)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.events import End, Event, Hello, Sample, Step
from pitstop.profiling import _cuda as cuda_module
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.record import iter_record, record_files
from pitstop.profiling.sampler import Sampler


@pytest.fixture
def rundir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    # Short: a Unix socket path must fit in 108 bytes, and pytest's tmp_path may not.
    path = Path(f"/tmp/pst-agent-{tmp_path.name[-20:]}-{id(tmp_path) % 10_000}")
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def settings(tmp_path: Path) -> SessionSettings:
    return SessionSettings(session="unit", record=str(tmp_path / "records"), script="train.py", profile=None)


def pitstop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pitstop-") and t.is_alive()]


def pyproject_version() -> str:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    return next(line.split("=", 1)[1].strip().strip('"') for line in text.splitlines() if line.startswith("version"))


def record_of(tmp_path: Path) -> list[Event]:
    files = record_files(tmp_path / "records")
    assert len(files) == 1
    return list(iter_record(files[0]))


def test_constructing_an_agent_opens_binds_starts_and_replaces_nothing(tmp_path: Path, rundir: Path) -> None:
    hook, exit_ = sys.excepthook, sys.exit
    before = pitstop_threads()
    agent = Agent(settings(tmp_path))
    agent.manual_step(16)  # the step clock works before start(): steps wait in the queue
    assert not (tmp_path / "records").exists()
    assert not rundir.exists() or list(rundir.iterdir()) == []
    assert pitstop_threads() == before
    assert sys.excepthook is hook and sys.exit is exit_
    agent.stop()  # never started: nothing to end, nothing written
    assert not (tmp_path / "records").exists()


def test_start_then_stop_writes_a_whole_record_and_gives_everything_back(tmp_path: Path, rundir: Path) -> None:
    hook, exit_ = sys.excepthook, sys.exit
    agent = Agent(settings(tmp_path))
    agent.start()
    try:
        assert {t.name for t in pitstop_threads()} >= {"pitstop-writer", "pitstop-sampler", "pitstop-stall"}
        assert agent.server is not None and agent.server.path.exists()  # live viewers can connect
        assert sys.excepthook is not hook and sys.exit is not exit_
        for _ in range(3):
            agent.manual_step(16)
    finally:
        agent.stop()
    events = record_of(tmp_path)
    assert isinstance(events[0], Hello) and events[0].script == "train.py"
    assert events[0].pitstop_version == pyproject_version()  # pitstop/_version.py, the one place
    assert [e.step for e in events if isinstance(e, Step)] == [0, 1, 2]
    assert [(e.steps, e.reason, e.exit_code) for e in events if isinstance(e, End)] == [(3, "exit", 0)]
    assert not [t for t in pitstop_threads() if t.name in ("pitstop-writer", "pitstop-sampler", "pitstop-stall")]
    assert not agent.server.path.exists()
    assert sys.excepthook is hook and sys.exit is exit_
    written = record_files(tmp_path / "records")[0].read_bytes()
    agent.stop()  # again (atexit runs it too): nothing more is written
    agent.start()  # an agent is started once
    assert record_files(tmp_path / "records")[0].read_bytes() == written


def test_the_exit_code_of_sys_exit_ends_the_record(tmp_path: Path, rundir: Path) -> None:
    agent = Agent(settings(tmp_path))
    agent.start()
    try:
        with pytest.raises(SystemExit):
            sys.exit(3)
    finally:
        agent.stop()
    assert [(e.reason, e.exit_code) for e in record_of(tmp_path) if isinstance(e, End)] == [("exit", 3)]


class FakeCuda:
    """torch.cuda as the agent sees it on a GPU machine, counting what it is asked."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.initialized = False
        self.stats_devices: list[Any] = []

    def is_initialized(self) -> bool:
        self.calls["is_initialized"] += 1
        return self.initialized

    def current_device(self) -> int:
        return 1  # the rank's device, set by the script on the training thread

    def memory_allocated(self, device: Any = None) -> int:
        self.calls["memory_allocated"] += 1
        return 1000

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict[str, Any]:
        self.calls["memory_stats_as_nested_dict"] += 1
        return {"allocated_bytes": {"all": {"current": 1000, "peak": 2000}}, "num_ooms": 0}

    def memory_reserved(self, device: Any = None) -> int:
        self.calls["memory_reserved"] += 1
        return 4000

    def max_memory_allocated(self, device: Any = None) -> int:
        self.calls["max_memory_allocated"] += 1
        return 2000

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        self.calls["memory_stats"] += 1
        self.stats_devices.append(device)
        return {"reserved_bytes.all.current": 4000, "allocated_bytes.all.peak": 2000,
                "num_alloc_retries": 2, "num_ooms": 0}


class FakeTorch:
    def __init__(self) -> None:
        self.cuda = FakeCuda()


class FakeHooks:
    """The parts of `_hooks.Hooks` the step path calls, counted."""

    def __init__(self, torch: FakeTorch, agent: Agent | None = None) -> None:
        self.torch = torch
        self.agent = agent
        self.calls: Counter[str] = Counter()

    def cuda_ready(self) -> bool:
        self.calls["cuda_ready"] += 1
        return self.torch.cuda.is_initialized()

    def report_model(self) -> None:
        self.calls["report_model"] += 1
        if self.agent is not None:  # as Hooks.report_model: the Model event counts the optimizers
            self.agent._model_optimizers = len(self.agent.clock.optimizers)

    def report_rank(self) -> None:
        self.calls["report_rank"] += 1


def queued_steps(agent: Agent) -> list[Step]:
    return [agent._step_event(item, 0.0) for item in agent._queue if type(item) is tuple]


def test_the_training_thread_asks_torch_only_for_the_allocated_bytes_and_once_a_probe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(settings(tmp_path))  # never started: the writer thread's tick is called by hand
    torch = FakeTorch()
    hooks = FakeHooks(torch)
    agent.torch, agent.hooks, agent.cuda_device = torch, hooks, True  # what the hooks set on a GPU machine
    for _ in range(50):  # the script has not touched CUDA (yet): CPU steps on a GPU machine
        agent.manual_step(8)
    assert hooks.calls["cuda_ready"] == 0  # not asked per step
    assert hooks.calls["report_model"] == hooks.calls["report_rank"] == 1  # at the first step only
    assert all(s.mem_allocated is None for s in queued_steps(agent))

    torch.cuda.initialized = True  # the script initialised CUDA
    agent._read_slow()  # the writer thread's tick (2 Hz) sees it
    assert hooks.calls["cuda_ready"] == 1 and agent.cuda_mem
    agent.manual_step(8)  # the first CUDA step learns the training thread's device
    agent._read_slow()
    for _ in range(20):
        agent.manual_step(8)
    steps = queued_steps(agent)[50:]
    # 21 steps in well under PROBE_S: one read, at the first CUDA step; every step carries it.
    assert torch.cuda.calls["memory_stats_as_nested_dict"] == 1
    assert torch.cuda.calls["memory_allocated"] == 0  # (flattens and sorts the whole statistics)
    assert torch.cuda.calls["memory_reserved"] == torch.cuda.calls["max_memory_allocated"] == 0
    assert torch.cuda.calls["memory_stats"] == 1 and torch.cuda.stats_devices == [1]
    assert all(s.mem_allocated == 1000 for s in steps)
    assert (steps[0].mem_reserved, steps[0].mem_peak) == (None, None)  # before the writer's first read
    assert all((s.mem_reserved, s.mem_peak) == (4000, 2000) for s in steps[1:])
    assert hooks.calls["report_model"] == 1
    monkeypatch.setattr(cuda_module, "PROBE_S", 0.0)  # a probe at every step from here:
    agent.manual_step(8)  # this step ends by deciding one,
    agent.manual_step(8)  # which reads them at its end, and so on
    agent.manual_step(8)
    assert torch.cuda.calls["memory_stats_as_nested_dict"] == 3


def test_the_sampler_reports_allocator_retries_of_the_training_device(tmp_path: Path) -> None:
    agent = Agent(settings(tmp_path))
    torch = FakeTorch()
    agent.torch, agent.hooks, agent.cuda_device = torch, FakeHooks(torch), True
    torch.cuda.initialized = True
    agent._read_slow()
    agent.manual_step(8)
    agent._read_slow()
    sample = Sampler(agent).read()  # on the sampler thread, whose own CUDA device is device 0
    assert isinstance(sample, Sample) and sample.alloc_retries == 2 and sample.ooms == 0
    assert torch.cuda.stats_devices == [1]


def test_the_model_is_reported_once_at_step_0_and_again_only_when_another_optimizer_appears(tmp_path: Path) -> None:
    agent = Agent(settings(tmp_path))
    hooks = FakeHooks(FakeTorch(), agent)
    agent.hooks = hooks
    generator, discriminator = object(), object()
    for _ in range(5):
        agent.clock.on_optimizer_step(id(discriminator), time.perf_counter())
    assert hooks.calls["report_model"] == 1  # step 0 (its optimizer already counted)
    agent.clock.on_optimizer_step(id(generator), time.perf_counter())  # GAN's second optimizer: the Model event now says 2
    agent.clock.on_optimizer_step(id(discriminator), time.perf_counter())
    assert hooks.calls["report_model"] == 2 and agent._model_optimizers == 2


def test_a_forked_child_keeps_the_hooks_view_of_which_optimizers_live(tmp_path: Path) -> None:
    # The clock is re-initialised in place after a fork; the hooks set `alive` once, at install:
    # lost, a hogwild child building an optimizer every step would count 1 step again.
    from pitstop.profiling import _children

    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="t.py", profile=None))
    agent.hooks = SimpleNamespace()
    alive = {"opt"}.__contains__
    agent.clock.alive = alive
    agent.clock.grads = 7
    _children.reset_after_fork(agent)
    assert agent.clock.alive is alive and agent.clock.grads == 0 and agent.dormant
