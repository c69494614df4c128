"""Models trained one after another (a sweep's trials) read as such, and the non-finite-loss finding fits the script."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.analysis import RunState, findings
from pitstop.analysis._models import model_spans
from pitstop.analysis._summary import format_summary, summarize
from pitstop.events import Loss, Model, Step


def _sweep(trials: list[tuple[int, float, int]], losses: dict[int, float | None] | None = None) -> RunState:
    """A run training one model per trial, each (steps, step wall, batch); its Model event is written as the
    step holding the new optimizer's first step ends (as the agent does)."""
    run = RunState()
    t, i = 1000.0, 0
    for n, (steps, wall, batch) in enumerate(trials, 1):
        for k in range(steps):
            t += wall
            run.add(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=batch))
            if k == 0:
                run.add(Model(t=t + 0.0001, optimizers=n))
            i += 1
    if losses:
        run.add(Loss(t=t, steps=list(losses), values=list(losses.values()),
                     nonfinite=[k for k, v in losses.items() if v is None]))
    return run


def test_a_sweep_reads_as_its_models_in_turn_with_figures_each() -> None:
    run = _sweep([(80, 0.01, 32), (40, 0.02, 64), (60, 0.04, 128)])
    spans = model_spans(run, 3)
    assert [(m.first_step, m.last_step, m.steps) for m in spans] == [(0, 79, 80), (80, 119, 40), (120, 179, 60)]
    assert [round(m.step_p50_s or 0, 3) for m in spans] == [0.01, 0.02, 0.04]
    text = format_summary(summarize(run), [])
    assert "models      3 trained one after another (a new optimizer each); the figures above mix them:" in text
    assert "2: steps 80-119 (40), p50 20.0 ms, 3,200 samples/s" in text


def test_a_sweeps_loss_line_says_it_is_the_last_models_not_a_gans_first_optimizers() -> None:
    run = _sweep([(80, 0.01, 32), (40, 0.02, 64), (60, 0.04, 128)], losses={179: 0.5})
    text = format_summary(summarize(run), [])
    assert "loss        last 0.5 (model 3's, the last of 3 trained in turn)" in text
    assert "GAN" not in text


def test_optimizers_that_start_together_are_one_training() -> None:
    # A GAN: the discriminator's optimizer steps first, the generator's a step later; they alternate after.
    run = _sweep([(1, 0.01, 32), (99, 0.01, 32)])
    assert model_spans(run, 3) == []
    assert "models" not in format_summary(summarize(run), [])


def _nonfinite(run: RunState):  # type: ignore[no-untyped-def]
    return next(f for f in findings(run) if f.rule == "nonfinite-loss")


def test_a_trial_that_diverged_wastes_its_own_steps_when_the_next_is_finite_at_once() -> None:
    losses: dict[int, float | None] = {k: 2.3 for k in range(0, 60)}
    losses.update({k: None for k in range(60, 80)})  # trial 1 diverges at step 60
    losses.update({k: 2.3 for k in range(80, 120)})  # trial 2 is finite from its first step
    f = _nonfinite(_sweep([(80, 0.01, 32), (40, 0.01, 64)], losses))
    assert f.gain == ("steps 60-79 (20) of model 1 were wasted: its loss stayed non-finite; the next model's was "
                      "finite from step 80")
    assert "until the loss is finite again" not in (f.gain or "")
    assert "in model 1 of 2 trained one after another (steps 0-79)" in f.evidence


def test_a_loss_non_finite_from_the_first_step_points_at_uninitialised_parameters_not_clipping() -> None:
    # pytorch/examples' FSDP2 example: NaN from step 0, its parameters left uninitialised after to_empty().
    run = _sweep([(50, 0.01, 32)], {k: None for k in range(50)})
    f = _nonfinite(run)
    assert f.title == "Non-finite loss from the first step (step 0)"
    assert "to_empty" in f.cause and "clip_grad_norm_" not in f.fix
    assert "for m in model.modules():" in f.fix
    assert f.gain == "every step from step 0 to the last (49: 50 steps) was wasted"


def test_a_loss_that_became_finite_again_says_when() -> None:
    losses: dict[int, float | None] = {k: 2.0 for k in range(50)}
    losses.update({20: None, 21: None})
    f = _nonfinite(_sweep([(50, 0.01, 32)], losses))
    assert f.gain == "the steps from 20 until the loss was finite again at step 22 were wasted"
    assert "clip_grad_norm_" in f.fix


def test_the_report_shows_the_models_in_turn(tmp_path: Path) -> None:
    from pitstop.events import Hello
    from pitstop.profiling.record import RecordWriter
    from pitstop.report._data import load, overview

    path = tmp_path / "sweep.jsonl"
    writer = RecordWriter(path)
    writer.write(Hello(schema=1, pitstop_version="0.1.0", session="s", pid=1, ppid=0, host="h", argv=["sweep.py"],
                       cwd="/", started=999.0, python="3.12", script="sweep.py", record=str(path)))
    t, i = 1000.0, 0
    for n, (steps, wall) in enumerate([(60, 0.01), (60, 0.03)], 1):
        for k in range(steps):
            t += wall
            writer.write(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=32))
            if k == 0:
                writer.write(Model(t=t + 0.0001, optimizers=n))
            i += 1
    writer.close()
    rows = dict((label, text) for label, text in overview(load(path)) if label)
    assert rows["models"].startswith("2 trained one after another")


def test_a_script_that_clips_already_is_not_told_to_clip() -> None:
    losses: dict[int, float | None] = {k: 2.0 for k in range(40)}
    losses.update({k: None for k in range(40, 50)})
    run = _sweep([(50, 0.01, 32)], losses)
    assert "torch.nn.utils.clip_grad_norm_(model.parameters()" in _nonfinite(run).fix
    run.add(Model(t=2000.0, optimizers=1, grad_clip=True))  # the agent saw clip_grad_norm_ called
    fix = _nonfinite(run).fix
    assert "clips its gradients already" in fix and "clip_grad_norm_(model.parameters()" not in fix


def test_a_call_of_clip_grad_norm_is_seen_through_either_module() -> None:
    import torch
    import torch.nn.utils.clip_grad as clip_grad

    from pitstop.profiling import _clipwatch
    from pitstop.profiling._patch import unpatch

    class Hooks:
        grad_clip = False

    hooks = Hooks()
    # A test before this one in the same worker may have left an agent's hooks in: a patch is made
    # once per (module, name), so this test's would wrap nothing and report to that agent.
    from pitstop.profiling._patch import patches as _patches

    for done in _patches():
        if done.name in _clipwatch.NAMES:
            unpatch(done)
    before = {(m.__name__, n): getattr(m, n) for m in (torch.nn.utils, clip_grad) for n in _clipwatch.NAMES}
    _clipwatch.install(hooks)
    try:
        p = torch.nn.Parameter(torch.ones(3))
        p.grad = torch.full((3,), 10.0)
        norm = clip_grad.clip_grad_norm_([p], max_norm=1.0)
        assert hooks.grad_clip and float(norm) == pytest.approx(17.32, rel=1e-3)
        assert float(p.grad.norm()) == pytest.approx(1.0, rel=1e-3)  # it still clips
    finally:
        from pitstop.profiling._patch import patches

        for done in patches():
            if done.name in _clipwatch.NAMES:
                unpatch(done)
    assert {(m.__name__, n): getattr(m, n) for m in (torch.nn.utils, clip_grad) for n in _clipwatch.NAMES} == before
