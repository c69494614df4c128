"""The hooks hold plain steps' calls for the clock: the steps it emits are the ones it emits when it takes each call at once.

A real torch loop in a child process (the hooks patch torch in the process they
run in): an epoch of training batches (the last one short), an evaluation pass
over another loader without grad, a second optimizer's step, a closure's step
(LBFGS), a loop without a DataLoader and profiler windows, run twice: with calls
held (the default) and with `may_batch` refusing. Every step's index, samples,
source and loss must be the same, and each run's profiler windows must span the
steps their schedule names and have profiled their work (whether a window is skipped because the previous
one's tables are still being built depends on a thread: not compared).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .forked import run_forked

# What every run imports first: one import for the three runs, each forked from it.
PRELUDE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
"""
CHILD = r'''
import json, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from pitstop.profiling.agent import Agent
from pitstop.profiling._hooks import Hooks
from pitstop.profiling.launch import SessionSettings

held = sys.argv[1] != "direct"
agent = Agent(SessionSettings(session="unit", record=sys.argv[2], script="train.py",
                              profile={"every": 25, "active": 3, "first": 0}))
if not held:
    agent.may_batch = lambda: False
Hooks(agent).install(torch)
agent.hooks.loss_every = 0.0  # every step's loss read (as in a tune trial): the runs compare them
marked = []  # the steps a CUDA marker was called in
if sys.argv[1] == "cuda":  # as on a GPU: the hooks hold plain steps between probes, which a marker times
    import pitstop.profiling._cuda as cuda_module
    cuda_module.PROBE_S = 0.02  # a few probes in this short run
    agent.cuda_device = True
    def marker():
        marked.append(agent.clock.index)
        return object()
    agent.phases.marker = agent.clock.marker = marker
flushes = []
flush = agent.flush_stamps
def counted(*args):
    flushes.append(len(agent.stamps))
    flush(*args)
agent.flush_stamps = counted
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
other = torch.optim.SGD(model[0].parameters(), lr=0.01)
lbfgs = torch.optim.LBFGS(model.parameters(), max_iter=3)
train = DataLoader(TensorDataset(torch.randn(205, 8), torch.randint(0, 3, (205,))), batch_size=10)
val = DataLoader(TensorDataset(torch.randn(30, 8), torch.randint(0, 3, (30,))), batch_size=7)
for epoch in range(4):
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        for x, y in val:
            model(x)
    if epoch == 3:  # (once another optimizer stepped, or a closure ran, nothing is held any more)
        other.step()
        x, y = torch.randn(12, 8), torch.randint(0, 3, (12,))
        def closure():
            lbfgs.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss
        lbfgs.step(closure)
    for _ in range(30):  # no DataLoader: the model's input gives the samples
        x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
agent.flush_stamps()
agent.windows.close()
agent.clock.finish(time.perf_counter())
steps = [[t[0], t[4], t[5], t[8] == "profiled", t[12]] for t in agent._queue if type(t) is tuple]
timed = [t[0] for t in agent._queue if type(t) is tuple and t[11] is not None and t[11][3]]
windows = [[e.step_start, e.step_end, sum(op.calls for op in e.ops if op.name == "aten::addmm")]
           for e in agent._queue if type(e).__name__ == "ProfileWindow"]
print(json.dumps({"steps": steps, "held": sum(flushes), "windows": windows, "timed": timed, "marked": marked}))
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each mode's run: every call taken at once ("direct", what the others are compared with), calls held
    ("held"), and held as on a GPU ("cuda").

    One interpreter imports torch, and each run is a child forked from it: each had been a torch import
    and nine profiler windows of its own (11.6 s of CPU at load 19 for two of them)."""
    root = tmp_path_factory.mktemp("held")
    modes = ("direct", "held", "cuda")
    outs = run_forked(PRELUDE, [(CHILD, [mode, str(root / mode)]) for mode in modes])
    return {mode: json.loads(out.strip().splitlines()[-1]) for mode, out in zip(modes, outs)}


@pytest.fixture(scope="module")
def direct(runs: dict[str, dict]) -> dict:
    return runs["direct"]


def test_steps_are_the_same_whether_the_hooks_hold_their_calls_or_not(runs: dict[str, dict], direct: dict) -> None:
    held = runs["held"]
    # the calls were held (and were not): how many depends on how long each window's tables took
    assert held["held"] > 50 and direct["held"] == 0
    assert [s[:3] + s[4:] for s in held["steps"]] == [s[:3] + s[4:] for s in direct["steps"]]
    steps = held["steps"]
    assert len(steps) == 4 * (21 + 30)  # the other optimizers' steps (SGD on a layer, LBFGS) are not the clock's
    assert [s[1] for s in steps[:21]] == [10] * 20 + [5]  # the short last batch
    for run_ in (held, direct):  # windows of 3 steps from step 1, every 25
        # How many windows run depends on the machine (one is skipped while the previous one's tables are
        # still being built: a busy machine let 4 of 9 run), what a window covers does not.
        windows = run_["windows"]
        assert windows and windows[0][:2] == [1, 4], windows  # the first: nothing before it holds it back
        assert all(start % 25 == 1 and start < end <= start + 3 for start, end, _ in windows), windows
        profiled = [s[0] for s in run_["steps"] if s[3]]
        assert profiled == [i for start, end, _ in windows for i in range(start, end)], (profiled, windows)
        # ...and each profiled what those steps ran: two Linear forwards a step (started on time)
        assert all(calls == 2 * (end - start) for start, end, calls in windows), windows


def test_on_cuda_the_hooks_hold_the_steps_between_probes_and_only_probes_are_timed(
        runs: dict[str, dict], direct: dict) -> None:
    cuda = runs["cuda"]
    assert cuda["held"] > 50  # plain steps' calls held, as on the CPU
    assert [s[:3] + s[4:] for s in cuda["steps"]] == [s[:3] + s[4:] for s in direct["steps"]]
    steps, timed, marked = len(cuda["steps"]), cuda["timed"], cuda["marked"]
    # Probes every 0.02 s of a run of ~1 ms steps: a few of its steps carry CUDA tokens, and
    # the marker is called in those steps only (~5 tokens a step), never between them.
    assert 2 <= len(timed) < steps, timed
    # (the token a probe takes where the step before it ends is counted in the probe's step, and the
    # run may end right after a probe was set: its token then names the step that never came)
    assert set(marked) <= set(timed) | {0, steps}, (sorted(set(marked) - set(timed)), timed)
    assert len(marked) <= 8 * (len(timed) + 1)


class Windows:
    """Profiler windows idle until `wake_step`; the steps whose `on_step` ran, and on which thread."""

    def __init__(self, wake_step: int) -> None:
        import threading

        self.wake_step, self.idle, self.mark = wake_step, True, None
        self.stepped: list[tuple[int, bool]] = []
        self._main = threading.main_thread

    def on_step(self, index: int) -> None:
        import threading

        self.stepped.append((index, threading.current_thread() is self._main()))

    def on_eval(self) -> None:
        pass


def test_the_writer_takes_in_held_steps_but_never_one_a_window_starts_at(tmp_path: Path) -> None:
    import threading
    import time

    from pitstop.profiling.agent import Agent
    from pitstop.profiling.launch import SessionSettings

    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="train.py", profile=None))
    agent.windows = windows = Windows(wake_step=4)
    clock, key, t = agent.clock, 7, time.perf_counter()
    for _ in range(2):  # steps 0 and 1, taken at once: the clock learns its optimizer
        clock.on_optimizer_start(key, t)
        clock.on_optimizer_step(key, t)
    assert agent.may_batch()
    for _ in range(4):  # steps 2..5 held, as the hooks hold them; 4 is where a window starts
        agent.stamps.append((clock.on_optimizer_start, key, t, None))
        agent.stamps.append((clock.on_optimizer_step, key, t))
    agent.stamps.append((clock.on_optimizer_start, key, t, None))  # step 6 began: half a step
    writer = threading.Thread(target=agent._take_held)  # a pass of the writer thread
    writer.start()
    writer.join()
    assert clock.index == 4 and windows.stepped[-2:] == [(2, False), (3, False)]  # 2 and 3 on the writer
    assert len(agent.stamps) == 4  # 4's end (and what follows) wait for the training thread
    agent.flush_stamps()
    assert clock.index == 6 and windows.stepped[-2:] == [(4, True), (5, True)]
    assert clock.open_steps and agent.held_base == 6  # step 6 runs; the hooks count held steps from here
    windows.wake_step = 100
    agent.stamps.append((clock.on_optimizer_step, key, t))
    writer = threading.Thread(target=agent._take_held)
    writer.start()
    writer.join()
    assert clock.index == 7 and not agent.stamps and windows.stepped[-1] == (6, False)
