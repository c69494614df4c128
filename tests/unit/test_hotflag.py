"""The hooks' one flag (`_hotflag.py`): held steps read none of the agent's switches, and record what they recorded.

A held plain step's hooks read one list (`Agent.hot`), not the agent's
`disabled`, `batching`, `step_open`, `held_base`, `batched_steps`, `probe_due`
and `windows` (each a cold cache line in place: docs/internals.md); the flag follows those switches
wherever they are set, and Dynamo's first trace clears it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitstop.profiling import _dynamo
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings

from .forked import run_forked


@pytest.fixture()
def gate(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A fresh compile gate: Dynamo has not traced (whatever other tests in this process did)."""
    traced = [False]
    monkeypatch.setattr(_dynamo, "_TRACED", traced)
    monkeypatch.setattr(_dynamo, "_HOT", [])
    return traced


def test_the_flag_follows_the_agents_switches_and_the_compile_gate(tmp_path: Path, gate: list[bool]) -> None:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="train.py", profile=None))
    hot = agent.hot
    assert hot[0] is False  # not holding yet
    agent.batching = True
    assert hot[0] is True
    agent.disabled = True
    assert hot[0] is False and agent.batching
    agent.disabled = False
    assert hot[0] is True
    agent.fail("a test", RuntimeError("boom"))  # an internal error switches the agent off: the hooks pass through
    assert hot[0] is False
    agent.disabled = False
    agent.step_open = True
    assert hot[1] is True and agent.step_open
    agent.held_base, agent.batched_steps = 7, 0
    agent.batched_steps += 3  # (as the post-hook counts held steps)
    assert hot[2] == 10 and agent.batched_steps == 3
    agent.held_base = 12  # the held calls taken in at step 12: the held steps counted from there
    assert hot[2] == 15 and agent.held_base == 12
    windows = object()
    agent.probe_due, agent.windows = 5.0, windows  # (on CUDA; profiler windows)
    assert hot[3:5] == [5.0, windows] and agent.probe_due == 5.0 and agent.windows is windows
    assert hot[5:] == [False, True]  # (disabled, batching: read by the hooks' long paths)
    assert hot[0] is True
    _dynamo._open_gate()  # Dynamo begins to trace: no hook may take the short path again
    assert hot[0] is False
    agent.batching = True
    assert hot[0] is False
    other = Agent(SessionSettings(session="unit", record=str(tmp_path / "o"), script="train.py", profile=None))
    other.batching = True
    assert other.hot[0] is False  # an agent made after the gate opened


CHILD = r'''
import json, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from pitstop.profiling.agent import Agent
from pitstop.profiling._hooks import Hooks
from pitstop.profiling.launch import SessionSettings

held = sys.argv[1] == "held"
SWITCHES = {"disabled", "batching", "step_open", "held_base", "batched_steps", "probe_due", "windows"}
reads = []


class Counted(Agent):
    counting = False

    def __getattribute__(self, name):
        if name in SWITCHES and Agent.__getattribute__(self, "counting"):
            reads.append(name)
        return Agent.__getattribute__(self, name)


agent = Counted(SessionSettings(session="unit", record=sys.argv[2], script="train.py", profile=None))
if not held:
    agent.may_batch = lambda: False
Hooks(agent).install(torch)
agent.hooks.loss_every = 3600.0  # the loss of step 0 read, then none: the hooks keep the last one for the end
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
train = DataLoader(TensorDataset(torch.randn(405, 8), torch.randint(0, 3, (405,))), batch_size=10)
for i, (x, y) in enumerate(train):
    agent.counting = i == 20  # one plain step in the middle (the first steps are never held)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
agent.counting = False
last = loss.item()
agent.flush_stamps()
from pitstop.profiling._losses import read_tail
read_tail(agent)
agent.clock.finish(time.perf_counter())
steps = [[t[0], t[4], t[5]] for t in agent._queue if type(t) is tuple]
tail = [[e.step, e.value] for e in agent._queue if type(e).__name__ == "Tail"]
print(json.dumps({"steps": steps, "tail": tail, "last": last, "reads": reads}))
'''


def test_a_held_step_reads_no_switch_and_records_the_same_steps_and_last_loss() -> None:
    outs = run_forked("import torch\nfrom torch import nn\n", [(CHILD, [mode, "/nonexistent/records"])
                                                            for mode in ("held", "direct")])
    held, direct = (json.loads(out.strip().splitlines()[-1]) for out in outs)
    assert held["reads"] == []  # the five hooks of a held step read the one flag, no switch of the agent's
    assert direct["reads"]  # (where the calls are not held, they are read: the count sees them)
    assert held["steps"] == direct["steps"] and len(held["steps"]) == 41  # 40 full batches and a short one
    assert [s[1] for s in held["steps"][-2:]] == [10, 5]
    # The last step's loss (not read at its backward: kept for the run's end) is the loop's last loss.
    assert held["tail"] == direct["tail"] == [[40, pytest.approx(held["last"])]]
