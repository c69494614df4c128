"""A GAN's two optimizers each have their loss: D's (errD_real + errD_fake) and G's, equal to the script's own
Loss_D and Loss_G at the same iterations (pytorch/examples' dcgan logs both; pitstop showed D's alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pitstop.analysis import RunState, findings
from pitstop.analysis._summary import format_summary, status_line, summarize
from pitstop.events import Hello, Loss, Model, Step
from pitstop.profiling._linedecode import decode_line
from pitstop.stepcolumns import encode_loss
from pitstop.tui.view import loss_text

# dcgan's loop, in small: D steps on real then fake (two backward calls), then G on D's verdict of the fake.
CHILD = r'''
import json, sys, time
import torch
from torch import nn
from pitstop.profiling import _losses
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
_losses.read_tail(agent)  # as Agent.stop does: the last iteration's G too
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
    assert len(d) >= 38 and sorted(g) == list(range(40))  # the last iteration's G too, read as the run ends
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


def gan_run(g_bad_from: int | None, d_bad_from: int | None, n: int = 20) -> RunState:
    """A GAN's run of `n` steps, D's and G's loss read at every step, each non-finite from its step (None: never)."""
    run = RunState()
    run.add(Hello(schema=1, pitstop_version="0", session="s", pid=1, ppid=0, host="h", argv=["python", "dcgan.py"],
                  cwd="/", started=100.0, python="3.11"))
    t = 101.0
    for i in range(n):
        t += 0.01
        run.add(Step(t=t, step=i, wall=0.01, data_wait=0.0, samples=16))
        if i == 1:
            run.add(Model(t=t, optimizers=2))
        for optimizer, bad_from, value in ((1, d_bad_from, 0.2084), (2, g_bad_from, 11.746)):
            bad = bad_from is not None and i >= bad_from
            run.add(Loss(t=t, steps=[i], values=[None if bad else value], nonfinite=[i] if bad else [],
                         optimizer=optimizer))
    return run


def test_a_nan_in_gs_loss_alone_is_a_nonfinite_loss_said_to_be_gs() -> None:
    # G's loss NaN from step 12 while D's stays finite: the finding and the summary said nothing before.
    run = gan_run(g_bad_from=12, d_bad_from=None)
    (f,) = [f for f in findings(run) if f.rule == "nonfinite-loss"]
    assert f.title == "Non-finite loss from step 12 (optimizer 2's: a GAN's G)"
    assert ("optimizer 2's loss (a GAN's G: the second optimizer to step) was NaN or inf from step 12 "
            "(8 non-finite steps of those read)") in f.evidence
    assert "optimizer 2's last finite loss before its own: 11.75 at step 11" in f.evidence
    assert f.gain == "every step from step 12 to the last (19: 8 steps) was wasted"  # D's finite loss is not G's
    text = format_summary(summarize(run), [])
    assert "optimizer 2's (a GAN's G) non-finite from step 12 (8 steps)" in text
    assert "loss NaN/inf x8 (optimizer 2's)" in status_line(run)


def test_when_gs_nan_makes_ds_nan_a_step_later_the_first_is_named() -> None:
    # dcgan with NaN planted in errG: G's weights go NaN, so D's loss on G's output is NaN from the next step.
    run = gan_run(g_bad_from=12, d_bad_from=13)
    (f,) = [f for f in findings(run) if f.rule == "nonfinite-loss"]
    assert f.title == "Non-finite loss from step 12 (optimizer 2's: a GAN's G)"
    assert "optimizer 1's loss was NaN or inf at step 13 (7 non-finite steps in all)" in f.evidence
    text = format_summary(summarize(run), [])
    assert ("optimizer 1's 7 non-finite (first at step 13), optimizer 2's (a GAN's G) non-finite from step 12 "
            "(8 steps)") in text
    assert "loss NaN/inf x7, optimizer 2's x8" in status_line(run)
    # D's alone: said to be D's, as a GAN's summary names each optimizer's loss
    (d_only,) = [f for f in findings(gan_run(g_bad_from=None, d_bad_from=13)) if f.rule == "nonfinite-loss"]
    assert d_only.title == "Non-finite loss from step 13 (optimizer 1's)"
    assert "optimizer 1's loss was NaN or inf at step 13 (7 non-finite steps in all)" in d_only.evidence


def test_a_replay_keeps_gs_losses_apart_and_its_nonfinite_count() -> None:
    # A replay's checkpoint (the totals) refilled with the record's events must read as the live run did:
    # refill put G's values among D's step losses.
    live = gan_run(g_bad_from=15, d_bad_from=None)
    replayed = RunState.from_checkpoint(json.loads(json.dumps(live.to_checkpoint())))
    for i in range(20):
        for optimizer, value in ((1, 0.2084), (2, None if i >= 15 else 11.746)):
            replayed.refill(Loss(t=101.0, steps=[i], values=[value], optimizer=optimizer))
    assert dict(replayed.losses) == dict(live.losses) == {i: 0.2084 for i in range(20)}
    assert replayed.other_nonfinite_total == 5 and replayed.other_nonfinite_steps == [15, 16, 17, 18, 19]
    assert [f.title for f in findings(replayed) if f.rule == "nonfinite-loss"] == [
        "Non-finite loss from step 15 (optimizer 2's: a GAN's G)"]


def test_the_tui_header_says_which_loss_is_nonfinite_now() -> None:
    # G's loss NaN from step 12: the header kept showing G's last finite 11.75 as the current loss.
    assert loss_text(gan_run(g_bad_from=12, d_bad_from=None)) == "1st 0.2084 · 2nd NaN/inf"
    assert loss_text(gan_run(g_bad_from=12, d_bad_from=13)) == "1st NaN/inf · 2nd NaN/inf"
    assert loss_text(gan_run(g_bad_from=None, d_bad_from=None)) == "1st 0.2084 · 2nd 11.75"
