"""A GAN's two optimizers each have their loss: D's (errD_real + errD_fake) and G's, equal to the script's own
Loss_D and Loss_G at the same iterations (pytorch/examples' dcgan logs both; pitstop showed D's alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pitstop.analysis import RunState
from pitstop.analysis._summary import format_summary, summarize
from pitstop.events import Hello, Loss, Model, Step
from pitstop.profiling._linedecode import decode_line
from pitstop.stepcolumns import encode_loss

# dcgan's loop, in small: D steps on real then fake (two backward calls), then G on D's verdict of the fake.
CHILD = r'''
import json, sys, time
import torch
from torch import nn
from pitstop.profiling.agent import Agent
from pitstop.profiling._hooks import Hooks
from pitstop.profiling.launch import SessionSettings

agent = Agent(SessionSettings(session="unit", record=sys.argv[1], script="dcgan.py"))
Hooks(agent).install(torch)
agent.hooks.loss_every = 0.0  # every step's loss read (as in a tune trial)
torch.manual_seed(0)
netD, netG = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid()), nn.Linear(4, 8)
optD, optG = torch.optim.Adam(netD.parameters(), 1e-3), torch.optim.Adam(netG.parameters(), 1e-3)
bce = nn.BCELoss()
logged = []
for i in range(40):
    real = torch.randn(16, 8)
    netD.zero_grad()
    errD_real = bce(netD(real).view(-1), torch.ones(16))
    errD_real.backward()
    fake = netG(torch.randn(16, 4))
    errD_fake = bce(netD(fake.detach()).view(-1), torch.zeros(16))
    errD_fake.backward()
    optD.step()
    netG.zero_grad()
    errG = bce(netD(fake).view(-1), torch.ones(16))
    errG.backward()
    optG.step()
    logged.append([i, (errD_real + errD_fake).item(), errG.item()])  # the script's Loss_D, Loss_G
agent.clock.finish(time.perf_counter())
agent.flush_losses(block=True)
d = {t[0]: t[12] for t in agent._queue if type(t) is tuple and t[12] is not None}
g = {}
for e in agent._queue:
    if type(e).__name__ == "Loss" and e.optimizer == 2:
        g.update(zip(e.steps, e.values))
print(json.dumps({"logged": logged, "d": d, "g": g}))
'''


def test_each_optimizer_of_a_gan_has_the_loss_the_script_logs(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "rec")], capture_output=True, text=True,
                         timeout=300, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    d = {int(k): v for k, v in seen["d"].items()}
    g = {int(k): v for k, v in seen["g"].items()}
    assert len(d) >= 38 and len(g) >= 38  # (the last iteration's G is held into a step that never ends)
    for i, loss_d, loss_g in seen["logged"]:
        if i in d:
            assert abs(d[i] - loss_d) < 1e-5 * max(1.0, abs(loss_d)), (i, d[i], loss_d)
        if i in g:
            assert abs(g[i] - loss_g) < 1e-5 * max(1.0, abs(loss_g)), (i, g[i], loss_g)


def test_the_summary_shows_each_optimizers_loss() -> None:
    run = RunState()
    run.add(Hello(schema=1, pitstop_version="0", session="s", pid=1, ppid=0, host="h", argv=["python", "dcgan.py"],
                  cwd="/", started=100.0, python="3.11"))
    t = 101.0
    for i in range(10):
        t += 0.01
        run.add(Step(t=t, step=i, wall=0.01, data_wait=0.0, samples=16))
    run.add(Model(t=t, optimizers=2))
    run.add(Loss(t=t, steps=[9], values=[0.2084]))
    run.add(Loss(t=t, steps=[8], values=[11.746], optimizer=2))
    text = format_summary(summarize(run), [])
    assert "last 0.2084 from the first optimizer to step (its backward calls' losses summed: a GAN's D" in text
    assert "; 11.75 from the second at step 8 (a GAN's G)" in text
    assert run.last_loss() == 0.2084  # G's never taken for the step's loss


def test_a_records_loss_line_keeps_whose_loss_it_is() -> None:
    # The record's compact `loss` line (`step0`) left the field out: dcgan's Loss_G read back as its Loss_D.
    for optimizer in (1, 2):
        line = encode_loss(Loss(t=1.0, steps=[4, 5], values=[1.0389, 1.1483], optimizer=optimizer))
        back = decode_line(line.encode())
        assert isinstance(back, Loss) and back.optimizer == optimizer and back.steps == [4, 5]
    assert '"optimizer"' not in encode_loss(Loss(t=1.0, steps=[4], values=[0.5]))  # the common line as before
