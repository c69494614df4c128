"""The training loader is the one whose batches fed the steps: advice and figures are about it."""

from __future__ import annotations

import pytest

from pitstop.analysis import RunState, findings, format_summary, summarize
from pitstop.events import DataLoaderInfo, End, Proc, Runtime, Sample, Step


def _run(eval_every: int = 10) -> RunState:
    run = RunState()
    run.add(Runtime(t=0.0, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=8, usable_cpus=8))
    run.add(DataLoaderInfo(t=0.1, id=1, num_workers=4, batch_size=64, pin_memory=False, persistent_workers=False,
                           prefetch_factor=2, dataset="TokenSet", shuffle=True))
    # The eval loader is built after the training one, as real scripts do.
    run.add(DataLoaderInfo(t=0.2, id=2, num_workers=0, batch_size=100, pin_memory=False, persistent_workers=False,
                           prefetch_factor=None, dataset="TokenSet", shuffle=False))
    t = 1.0
    for i in range(60):
        evaluating = i % eval_every == 0 and i > 0
        wall = 5.0 if evaluating else 0.1
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.06, samples=64, loader=1,
                     mark="eval" if evaluating else None, eval_s=4.9 if evaluating else 0.0))
        procs = [Proc(pid=10, role="main", cpu=90.0, rss=1)]
        procs += [Proc(pid=20 + k, role="worker", cpu=50.0, rss=1, loader=1) for k in range(4)]
        if evaluating:
            procs += [Proc(pid=40, role="worker", cpu=100.0, rss=1, loader=2)]
        run.add(Sample(t=t, procs=procs, system_cpu=50.0))
    return run


def test_data_wait_advice_names_the_training_loader_not_the_eval_loader_built_last() -> None:
    found = {f.rule: f for f in findings(_run())}
    f = found["data-wait"]
    text = "\n".join(f.evidence) + f.fix
    assert "training DataLoader (TokenSet, batch_size=64, num_workers=4)" in text
    assert "batch_size=100" not in text
    assert "DataLoader(dataset, batch_size=64, num_workers=9," in f.fix  # more than the 4 it has
    assert "its 4 workers use 2.00 cores together" in f.evidence  # the eval loader's worker is apart


def test_eval_steps_are_kept_out_of_step_statistics_and_their_evaluation_out_of_throughput() -> None:
    run = _run()
    s = summarize(run)
    assert run.eval_steps == 5 and run.train_steps == 55
    assert s.step_p95_s is not None and s.step_p95_s < 0.2  # the 5 s eval steps do not enter p95
    assert s.samples_per_s is not None and abs(s.samples_per_s - 640.0) < 1e-6  # 64 per 0.1 s step
    assert run.loader_role(1) == "train" and run.loader_role(2) == "eval"


def test_the_training_part_of_an_eval_step_counts_in_throughput_and_data_wait() -> None:
    # ignite restarts its training DataLoader's workers after each evaluation: ~8 s in the step
    # marked eval, left out with it, and a run of 167 samples/s read 2,920 with a data wait of 21%.
    run = RunState()
    t = 0.0
    for i in range(60):
        restart = i % 20 == 0 and i > 0
        wall = 0.1 + (1.0 + 8.0 if restart else 0.0)  # a 1 s evaluation, then 8 s of worker start-up
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.05 + (8.0 if restart else 0.0), samples=64, loader=1,
                     mark="eval" if restart else None, eval_s=1.0 if restart else 0.0))
    s = summarize(run)
    seconds = 55 * 0.1 + 2 * (0.1 + 8.0)  # steps 3..59: 55 plain, 2 with a restart (their evaluation left out)
    assert s.samples_per_s == pytest.approx(57 * 64 / seconds)  # 272 samples/s, not 640
    assert s.data_wait_frac == pytest.approx((57 * 0.05 + 16.0) / seconds)
    assert s.measured_steps == 55 and s.step_p50_s == pytest.approx(0.1)  # step figures: plain steps only
    # The same from the whole-stream totals, once the step deque dropped its oldest steps.
    small = RunState(max_steps=20)
    for step in run.steps:
        small.add(step)
    assert summarize(small).samples_per_s == pytest.approx(s.samples_per_s)


def test_an_evaluation_after_the_last_step_is_one_more_pass_with_its_time() -> None:
    run = _run()
    run.add(End(t=400.0, steps=60, dropped=0, eval_s=3.5))  # HF Trainer's evaluation at its last step
    s = summarize(run)
    assert (s.eval_passes, s.eval_s) == (6, 5 * 4.9 + 3.5)
    assert "eval        6 passes, 28.0 s" in format_summary(s)
    quiet = _run()
    quiet.add(End(t=400.0, steps=60, dropped=0))  # none after the last step
    assert (summarize(quiet).eval_passes, summarize(quiet).eval_s) == (5, 5 * 4.9)
