"""A first step that hangs in its forward or its first backward says where it is, not "no backward yet".

A DDP rank whose peer never came waits in the all-reduce that DDP's hook runs inside
backward; the first-step line read "1 batch fetched, no backward yet", since the
backward counter moves only when a call returns. The sampler reads the training
thread's stack while no step has ended: the agent's backward wrapper (its start)
and torch's `Module._call_impl` (its module) say what runs. A real torch loop in a
child process (the hooks patch torch in the process they run in), its training on
a thread that waits inside a forward, then inside a backward, while the main thread
reads what the sampler would send.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pitstop.analysis import progress_text
from pitstop.events import Progress

CHILD = r'''
import json, sys, threading
import torch
from torch import nn
from pitstop.profiling.agent import Agent
from pitstop.profiling._hooks import Hooks
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.sampler import Sampler

agent = Agent(SessionSettings(session="unit", record=sys.argv[1], script="train.py", profile=None))
Hooks(agent).install(torch)
sampler = Sampler(agent)
gate = {"forward": (threading.Event(), threading.Event()), "backward": (threading.Event(), threading.Event())}

def held(where):
    inside, leave = gate[where]
    inside.set()
    assert leave.wait(60)

class Wait(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # as DDP's all-reduce hook waits for a peer
        held("backward")
        return grad

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4))

    def forward(self, x):
        y = self.inner(x)
        held("forward")
        return Wait.apply(y)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)

def train():
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    opt.step()

thread = threading.Thread(target=train)
out = {"before": sampler.read_progress().__dict__}
thread.start()
for where in ("forward", "backward"):
    inside, leave = gate[where]
    assert inside.wait(60)
    out[where] = sampler.read_progress().__dict__
    leave.set()
thread.join(60)
print(json.dumps(out))
'''


def test_the_sampler_says_which_forward_and_which_backward_a_first_step_waits_in(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "records")], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["before"]["forward"] is None and seen["before"]["backward_s"] is None
    # Inside Net.forward (the outermost module: its Sequential has returned), no backward yet.
    assert seen["forward"]["forward"] == "Net" and seen["forward"]["backward_s"] is None
    # Inside the first backward: it runs, none has returned, and no forward is on the stack.
    backward = seen["backward"]
    assert backward["backward_s"] is not None and backward["backward_s"] >= 0.0
    assert backward["backwards"] == 0 and backward["forward"] is None


def test_the_first_step_line_says_what_runs() -> None:
    assert progress_text(Progress(batches=1, backwards=0, closures=0, backward_s=302.0)) == (
        "backward running for 5m02s, 1 batch fetched, no optimizer step yet")
    assert progress_text(Progress(batches=0, backwards=3, closures=0, backward_s=40.0)) == (
        "backward running for 40 s, 3 backward done before it, no optimizer step yet")
    assert progress_text(Progress(batches=2, backwards=0, closures=0, forward="GPT")) == (
        "GPT.forward running, 2 batches fetched, no backward yet")
    assert progress_text(Progress(batches=0, backwards=0, closures=0, forward="GPT")) == (
        "GPT.forward running, no batch fetched, no backward yet")
    # An optimizer step running says so first, as before (LBFGS's closures run backward inside it).
    assert progress_text(Progress(batches=0, backwards=2, closures=2, optimizer_s=3.0, optimizer="LBFGS",
                                  backward_s=1.0)).startswith("LBFGS step running for 3 s")
