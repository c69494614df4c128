"""The step anatomy's CUDA clock with a fake torch.cuda: events are read lazily, never waited on per step.

No GPU on this machine: a fake GPU timeline stands in. Its events complete
when the fake GPU's progress passes the moment they were recorded at, and, as
CUDA does, `elapsed_time` refuses events the GPU has not reached.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pitstop.events import Event, Note, Step
from pitstop.profiling import _cuda as cuda_module
from pitstop.profiling import phases
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling.record import RecordWriter


class Gpu:
    """The fake device: `launched` is where the host has queued work to (ms), `progress` how far the GPU ran."""

    def __init__(self) -> None:
        self.launched = 0.0
        self.progress = 0.0
        self.records = 0
        self.queries = 0
        self.syncs = 0
        self.fail_record = False


GPU = Gpu()


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: float | None = None

    def record(self) -> None:
        if GPU.fail_record:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        GPU.records += 1
        self.at = GPU.launched

    def query(self) -> bool:
        GPU.queries += 1
        return self.at is not None and GPU.progress >= self.at

    def synchronize(self) -> None:
        GPU.syncs += 1
        assert self.at is not None
        GPU.progress = max(GPU.progress, self.at)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        assert self.at is not None and end.at is not None
        return end.at - self.at


class FakeCuda:
    Event = FakeEvent


class FakeTorch:
    cuda = FakeCuda()


class FakeDevice:
    type = "cuda"


class FakeTensor:
    device = FakeDevice()


@pytest.fixture(autouse=True)
def fresh_gpu() -> None:
    GPU.__init__()  # type: ignore[misc]


@pytest.fixture
def every_step_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe at every step: each step's phases are timed on the GPU (the reader's tests)."""
    monkeypatch.setattr(cuda_module, "PROBE_S", 0.0)


def agent_on_cuda(tmp_path: Path) -> Agent:
    """An agent as the hooks leave it on a GPU machine, writing to a record (its writer thread is driven by hand)."""
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="t.py", profile=None))
    agent.torch, agent.cuda_device = FakeTorch(), True
    agent._writer = RecordWriter(tmp_path / "r.jsonl")
    return agent


def launch(ms: float) -> None:
    """The host queues `ms` of GPU work (a forward, a backward...) and moves on at once."""
    GPU.launched += ms


def train_step(agent: Agent, opt: Any, forward_ms: float = 30.0, backward_ms: float = 50.0,
               optimizer_ms: float = 5.0) -> None:
    """One step as the hooks drive the agent; the GPU work is queued between the stamps."""
    clock = agent.clock
    clock.on_fetch(1, time.perf_counter(), 0.0, 16)
    launch(forward_ms)
    started = time.perf_counter()
    marker = clock.marker
    token = marker() if marker is not None else None
    launch(backward_ms)
    agent.on_backward(None, started, token, FakeTensor())
    clock.on_optimizer_start(id(opt), time.perf_counter())
    launch(optimizer_ms)
    agent.clock.on_optimizer_step(id(opt), time.perf_counter())


def written(tmp_path: Path) -> list[Event]:
    path = tmp_path / "r.jsonl"
    lines = path.read_bytes().splitlines() if path.exists() else []
    return [event for line in lines for event in decode_events(line)]  # `steps` lines hold several


def steps_written(tmp_path: Path) -> list[Step]:
    return [e for e in written(tmp_path) if isinstance(e, Step)]


def test_figures_come_from_the_gpu_once_its_events_are_done_and_from_the_host_before() -> None:
    marker = phases.cuda_marker(FakeEvent, lambda err: None)
    a = marker()
    launch(30.0)
    b = marker()
    launch(50.0)
    c = marker()
    step = (0.002, 0.001, 0.0005, [(0, a, b), (1, b, c)])
    assert phases.pending(step, age=0.1)  # the GPU has not reached them: wait
    GPU.progress = 80.0
    assert not phases.pending(step, age=0.1)
    fwd, bwd, opt, other, clock = phases.figures(step, wall=0.100, data_wait=0.010)
    assert clock == "cuda"
    assert (fwd, bwd, opt) == pytest.approx((0.030, 0.050, 0.0))
    assert other == pytest.approx(0.100 - 0.010 - 0.080)
    assert GPU.syncs == 0


def test_a_step_the_gpu_is_far_behind_on_keeps_its_host_figures() -> None:
    marker = phases.cuda_marker(FakeEvent, lambda err: None)
    a, b = marker(), (launch(30.0), marker())[1]
    step = (0.002, 0.0, 0.0, [(0, a, b)])
    assert not phases.pending(step, age=phases.WAIT_S + 0.1)  # waited long enough: write it
    fwd, _, _, other, clock = phases.figures(step, wall=0.010, data_wait=0.0)
    assert (fwd, clock) == (0.002, "host") and other == pytest.approx(0.008)
    assert phases.figures(None, 0.010, 0.0) is None  # no backward, no optimizer: no phases


def test_the_writer_holds_a_step_until_its_events_are_done_and_never_syncs_per_step(
        tmp_path: Path, every_step_timed: None) -> None:
    agent = agent_on_cuda(tmp_path)
    opt = object()
    train_step(agent, opt)  # step 0: the first backward sees the loss on CUDA and starts the CUDA clock
    assert agent.clock.marker is not None
    for _ in range(4):
        train_step(agent, opt)
    assert GPU.records > 0 and GPU.syncs == 0
    agent._drain()  # the writer's pass: the GPU has run nothing yet
    # Step 0 (no phases) is written; step 1's events are ahead of the GPU: it and all after it wait.
    assert [s.step for s in steps_written(tmp_path)] == [0]
    GPU.progress = GPU.launched - 85.0  # the GPU ran all but the last step (30 + 50 + 5 ms)
    agent._drain()
    assert [s.step for s in steps_written(tmp_path)] == [0, 1, 2, 3]
    GPU.progress = GPU.launched  # the GPU caught up
    agent._drain()
    steps = steps_written(tmp_path)
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    # Its forward started before the CUDA clock did, and a step the GPU did not time has no phases on
    # CUDA (the host's stamps time launches there).
    assert (steps[0].phase_clock, steps[0].forward_s) == (None, None)
    for s in steps[1:]:
        assert s.phase_clock == "cuda"
        assert (s.forward_s, s.backward_s, s.optimizer_s) == pytest.approx((0.030, 0.050, 0.005))
        assert s.other_s is not None and s.other_s >= 0.0
    assert GPU.syncs == 0  # nothing waited for the GPU


def test_the_last_write_at_exit_waits_for_the_gpu(tmp_path: Path, every_step_timed: None) -> None:
    agent = agent_on_cuda(tmp_path)
    opt = object()
    for _ in range(3):
        train_step(agent, opt)
    agent._drain(final=True)  # stop(): the script is ending, one sync is fine
    steps = steps_written(tmp_path)
    assert [s.phase_clock for s in steps] == [None, "cuda", "cuda"]
    assert steps[2].backward_s == pytest.approx(0.050)
    assert GPU.syncs >= 1


def test_a_failing_event_switches_the_cuda_clock_off_and_training_goes_on(
        tmp_path: Path, every_step_timed: None) -> None:
    agent = agent_on_cuda(tmp_path)
    opt = object()
    train_step(agent, opt)
    GPU.fail_record = True
    for _ in range(3):
        train_step(agent, opt)  # raises nothing into the loop
    agent._drain(final=True)
    steps = steps_written(tmp_path)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    assert steps[0].forward_s is None  # the CUDA clock was on, and had not timed it
    assert all(s.phase_clock == "host" and s.forward_s is not None for s in steps[1:])
    assert agent.clock.marker is None and not agent.failed
    notes = [e for e in written(tmp_path) if isinstance(e, Note)]
    assert any("CUDA clock off" in n.message for n in notes)


def test_a_loss_on_the_cpu_keeps_the_host_clock(tmp_path: Path) -> None:
    agent = agent_on_cuda(tmp_path)

    class CpuTensor:
        class device:  # noqa: N801
            type = "cpu"

    agent.on_backward(None, None, None, CpuTensor())
    assert agent.clock.marker is None


def test_between_probes_the_training_thread_makes_no_cuda_call_and_the_steps_carry_no_phases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A probe every hour: step 0 ends the first one's wait, step 1 is timed, none after it.
    monkeypatch.setattr(cuda_module, "PROBE_S", 3600.0)
    agent = agent_on_cuda(tmp_path)
    opt = object()
    train_step(agent, opt)
    train_step(agent, opt)
    after_probe = GPU.records
    assert after_probe > 0 and agent.clock.marker is None
    for _ in range(5):
        train_step(agent, opt)
    assert GPU.records == after_probe  # no CUDA event recorded on a step between probes
    GPU.progress = GPU.launched
    agent._drain(final=True)
    steps = steps_written(tmp_path)
    assert [s.step for s in steps] == list(range(7))
    assert [s.phase_clock for s in steps] == [None, "cuda", None, None, None, None, None]
    assert steps[1].backward_s == pytest.approx(0.050)
    assert agent.may_batch()  # and the hooks hold the plain steps' calls between probes, as on the CPU


def test_probes_come_at_most_every_probe_s_whatever_the_step_time(tmp_path: Path) -> None:
    agent = agent_on_cuda(tmp_path)
    clock, opt = agent.clock, object()
    t = 1000.0

    def step(seconds: float) -> None:  # one step of `seconds`, as the hooks stamp it
        nonlocal t
        clock.on_fetch(1, t, 0.0, 16)
        token = clock.marker() if clock.marker is not None else None
        launch(1.0)
        agent.on_backward(None, t + seconds / 2, token, FakeTensor(), t + seconds * 0.9)
        clock.on_optimizer_start(id(opt), t + seconds * 0.9)
        t += seconds
        clock.on_optimizer_step(id(opt), t)

    for _ in range(200):  # 2 s of 10 ms steps
        step(0.010)
    for _ in range(10):  # 2 s of 200 ms steps: each is a probe
        step(0.200)
    GPU.progress = GPU.launched
    agent._drain(final=True)
    timed = [s.step for s in steps_written(tmp_path) if s.phase_clock == "cuda"]
    fast = [i for i in timed if i < 200]
    assert 19 <= len(fast) <= 21  # one in ~10 steps of 10 ms
    assert all(b - a >= 10 for a, b in zip(fast, fast[1:]))
    assert set(range(201, 210)) <= set(timed)  # 200 ms steps: every one
