"""Unit tests of the step clock's evaluation passes and rollouts: each pass counted, rollouts told apart (no torch)."""

from __future__ import annotations

import pytest

from pitstop.profiling._passes import ROLLOUT_FORWARDS, is_rollout

from .test_stepclock import TRAIN, VAL, Recorder

TRAIN_EVAL = 3  # another loader over the training data (a second DataLoader, or ignite's evaluator's)


def loader_pass(r: Recorder, loader: int, batches: int = 4, each: float = 0.01) -> None:
    """One iteration of `loader` whose batches evaluating forwards take (eval mode, no grad)."""
    r.clock.on_iter(loader)
    for _ in range(batches):
        r.fetch(loader, 0.001, 32)
        r.clock.on_forward(False, None, r.tick(0.0001), True, True)
        r.clock.on_forward_end(r.tick(each))


def test_back_to_back_evaluations_are_one_pass_each() -> None:
    # ignite's mnist: after each epoch its evaluator runs over the training loader, then the
    # validation loader; both lie in the next epoch's first step (2 passes there, not 1) and,
    # after the last epoch, after the last step (2 in End, not 1)
    r = Recorder()
    c = r.clock
    for epoch in range(2):
        c.on_iter(TRAIN)
        for _ in range(3):
            r.train_step()
        loader_pass(r, TRAIN)
        loader_pass(r, VAL)
    assert [s["mark"] for s in r.steps] == [None, None, None, "eval", None, None]
    assert r.steps[3]["passes"] == 2
    assert r.steps[3]["samples"] == 16  # (the evaluator's batches of the training loader are not the step's)
    assert c.finish(r.tick(0.01)) is not None
    assert c.end_passes == 2


def test_evaluations_after_the_last_step_over_new_loaders_are_one_pass_each() -> None:
    # HF run_clm: an evaluation at the last step and the final trainer.evaluate(), each a new DataLoader
    r = Recorder()
    c = r.clock
    for _ in range(3):
        r.train_step()
    loader_pass(r, VAL)
    loader_pass(r, VAL + 10)
    c.finish(r.tick(0.01))
    assert c.end_passes == 2
    assert c.end_rollouts == 0


def test_one_forward_in_eval_mode_without_grad_is_an_evaluation_and_one_in_train_mode_is_not() -> None:
    # a full-batch GCN: every 10th epoch model.eval(), no_grad, one forward over the whole graph
    r = Recorder()
    c = r.clock
    for epoch in range(1, 21):
        c.on_forward(True, 2000, r.tick(0.001))
        c.on_backward(r.tick(0.05))
        c.on_optimizer_step("opt", r.tick(0.01))
        if epoch % 10 == 0:
            c.on_forward(False, 2000, r.tick(0.001), True, True)
            c.on_forward_end(r.tick(0.03))
        else:  # a target computed under no_grad in train mode: training's
            c.on_forward(False, 2000, r.tick(0.001), True, False)
            c.on_forward_end(r.tick(0.001))
    assert [s["index"] for s in r.steps if s["mark"] == "eval"] == [10]
    assert r.steps[10]["passes"] == 1
    assert r.steps[10]["eval_s"] == pytest.approx(0.031)
    assert c.finish(r.tick(0.01)) == pytest.approx(0.03)  # the 20th epoch's, after the last step: to its end
    assert c.end_passes == 1


def test_evaluation_without_a_loader_before_the_first_step_is_counted() -> None:
    # nanoGPT's estimate_loss at iteration 0: eval mode, no_grad, batches sliced by get_batch
    r = Recorder()
    c = r.clock
    for _ in range(40):
        c.on_forward(False, 12, r.tick(0.0005), True, True)
        c.on_forward_end(r.tick(0.01))
    for _ in range(3):
        c.on_forward(True, 12, r.tick(0.001))
        c.on_backward(r.tick(0.05))
        c.on_optimizer_step("opt", r.tick(0.01))
    assert [(s["mark"], s["passes"]) for s in r.steps] == [("eval", 1), (None, 0), (None, 0)]
    assert r.steps[0]["samples"] == 12


def rollout(r: Recorder, forwards: int, env_s: float, samples: int = 1, model_s: float = 0.001) -> None:
    """A policy acting: one forward of `samples` observations under no_grad per environment step."""
    for _ in range(forwards):
        r.clock.on_forward(False, samples, r.tick(env_s), True, True)
        r.clock.on_forward_end(r.tick(model_s))


def test_a_policy_rollout_is_a_rollout_and_counted_apart_from_evaluation() -> None:
    # stable-baselines3 PPO: 512 environment steps, one forward of one observation each, then
    # 4 epochs x 8 minibatches of updates on the stored transitions (no forward of the root module)
    r = Recorder()
    c = r.clock
    for _ in range(3):
        rollout(r, 512, env_s=0.0005)
        for _ in range(32):  # (with the pre-hook's call, as the hooks make it: the fast cut's path)
            c.on_backward(r.tick(0.002))
            c.on_optimizer_start("adam", r.tick(0.0001))
            c.on_optimizer_step("adam", r.tick(0.001))
    marks = [s["mark"] for s in r.steps]
    assert marks == (["rollout"] + [None] * 31) * 3
    first = r.steps[0]
    # from its first forward to the first update's backward (the hooks give where that began)
    assert first["passes"] == 1 and first["eval_s"] == pytest.approx(512 * 0.0015, abs=0.003)
    assert r.evals == 3  # (the profiler windows are told as for an evaluation: neither is training)
    assert c.finish(r.tick(0.01)) is None


def test_a_rollout_ended_by_a_training_forward_is_told_by_its_time_outside_the_model() -> None:
    r = Recorder()
    c = r.clock
    rollout(r, 200, env_s=0.002, samples=4)  # the environment's work: 2/3 of the stretch
    c.on_forward(True, 64, r.tick(0.001))  # an update whose forward is the root's
    c.on_backward(r.tick(0.01))
    c.on_optimizer_step("opt", r.tick(0.01))
    rollout(r, 200, env_s=0.0001, samples=12)  # nanoGPT's estimate_loss: the model's time
    c.on_forward(True, 12, r.tick(0.001))
    c.on_backward(r.tick(0.01))
    c.on_optimizer_step("opt", r.tick(0.01))
    assert [(s["mark"], s["passes"]) for s in r.steps] == [("rollout", 1), ("eval", 1)]


@pytest.mark.parametrize("forwards, most, batches, by_backward, busy, expected", [
    (ROLLOUT_FORWARDS, 1, 0, True, 0.99, True),
    (ROLLOUT_FORWARDS - 1, 1, 0, True, 0.1, False),  # few forwards: an evaluation's batches
    (512, 17, 0, True, 0.1, False),  # large batches: a dataset's
    (512, None, 0, True, 0.1, False),  # samples not known
    (512, 1, 3, True, 0.1, False),  # DataLoader batches: a dataset's
    (512, 8, 0, False, 0.5, True),  # the environment's time
    (512, 8, 0, False, 0.95, False),  # the model's time, ended by a forward of it
])
def test_what_a_rollout_rests_on(forwards: int, most: int | None, batches: int, by_backward: bool, busy: float,
                                 expected: bool) -> None:
    assert is_rollout(forwards, most, busy, 1.0, batches, by_backward) is expected


def test_batches_fetched_before_a_first_step_that_never_ended_are_not_an_evaluation() -> None:
    # pytorch/examples' ddp-tutorial-series: each epoch begins with `len(next(iter(self.train_data))[0])`,
    # a batch-size probe, then iterates the loader again; rank 0, stopped while it waited in its first
    # backward's all-reduce for a hung rank 1, ended with "eval 2 passes": the training loader's two
    # iterations, read as another loader's since no step had named the training one.
    r = Recorder()
    c = r.clock
    c.on_iter(TRAIN)
    r.fetch(TRAIN, 0.01, 32)  # the probe: one batch, its iterator dropped
    c.on_iter(TRAIN)
    r.fetch(TRAIN, 0.01, 32)  # the epoch's first batch
    c.on_forward(True, None, r.tick(0.001))  # training's forward; its backward never returns
    assert c.finish(r.tick(30.0)) is None
    assert c.end_passes == 0
    # An evaluation before that first step still counts (eval mode, no grad, over another loader).
    r = Recorder()
    c = r.clock
    loader_pass(r, VAL)
    c.on_iter(TRAIN)
    r.fetch(TRAIN, 0.01, 32)
    c.on_forward(True, None, r.tick(0.001))
    assert c.finish(r.tick(30.0)) is not None
    assert c.end_passes == 1
