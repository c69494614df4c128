"""Unit tests of the step clock: boundaries, the training loader, evaluation marks (no torch)."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.profiling.stepclock import EVAL_FORWARDS, MAX_OPTIMIZERS, PENDING_MAX, StepClock

TRAIN, VAL = 1, 2


class Recorder:
    """A clock whose emitted steps are kept as dicts, with a settable time."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.evals = 0
        self.clock = StepClock(self.on_step, self.on_eval)
        self.clock.t_start = 0.0
        self.now = 0.0

    def on_step(self, index: int, start: float, now: float, wait: float, samples: int | None, source: str,
                mark: str | None, eval_s: float, loader: Any, loss: Any, phases: Any = None, passes: int = 0) -> None:
        self.steps.append(dict(index=index, wall=now - start, wait=wait, samples=samples, source=source,
                               mark=mark, eval_s=eval_s, loader=loader, loss=loss, phases=phases, passes=passes))

    def on_eval(self) -> None:
        self.evals += 1

    def tick(self, dt: float) -> float:
        self.now += dt
        return self.now

    def fetch(self, loader: int, wait: float, samples: int | None) -> None:
        started = self.now
        self.clock.on_fetch(loader, started, wait, samples)
        self.now += wait

    def train_step(self, opt: str = "opt", batch: int = 16, wait: float = 0.01, compute: float = 0.1) -> None:
        self.fetch(TRAIN, wait, batch)
        self.clock.on_forward(True, None, self.tick(0.001))
        self.clock.on_backward(self.tick(compute / 2))
        self.clock.on_optimizer_step(opt, self.tick(compute / 2))

    def eval_pass(self, batches: int = 5, batch: int = 100, each: float = 0.05) -> None:
        for _ in range(batches):
            self.fetch(VAL, 0.002, batch)
            self.clock.on_forward(False, None, self.tick(each))


def test_optimizer_steps_are_the_clock() -> None:
    r = Recorder()
    for _ in range(5):
        r.train_step()
    assert [s["index"] for s in r.steps] == [0, 1, 2, 3, 4]
    assert all(s["source"] == "optimizer" and s["mark"] is None and s["loader"] == TRAIN for s in r.steps)
    assert r.steps[2]["wall"] == pytest.approx(0.111)
    assert r.steps[2]["wait"] == pytest.approx(0.01)
    assert r.steps[2]["samples"] == 16


def test_a_batch_shape_counts_its_batch_dimension_the_one_that_holds_the_loaders_batch_size() -> None:
    r = Recorder()
    r.clock.batch_sizes.update({TRAIN: 32, VAL: 32})
    # sequence-first (seq, batch, features): the first batch's sequence is as long as the batch,
    # which tells nothing (the leading dimension, right either way), the next tells dimension 1
    shapes = [(32, 32, 64), (17, 32, 64), (32, 32, 64), (19, 8, 64)]
    for shape in shapes:
        r.fetch(TRAIN, 0.01, shape)  # type: ignore[arg-type]
        r.clock.on_forward(True, None, r.tick(0.001))
        r.clock.on_backward(r.tick(0.05))
        r.clock.on_optimizer_step("opt", r.tick(0.05))
    assert [s["samples"] for s in r.steps] == [32, 32, 32, 8]
    # batch-first: the leading dimension, the short last batch too, whatever the second holds
    for shape in [(32, 17), (8, 32)]:
        r.fetch(VAL, 0.01, shape)  # type: ignore[arg-type]
    assert r.clock.batch_of(VAL, (8, 32)) == 8
    # no batch_size (a batch_sampler), one dimension, or neither dimension holding it: the leading one
    assert r.clock.batch_of(3, (17, 32)) == 17
    assert r.clock.batch_of(TRAIN, (5,)) == 5
    r.clock.batch_sizes[4] = 32
    assert r.clock.batch_of(4, (128, 3, 224)) == 128  # (a collate that concatenated 4 crops a sample)


def test_batches_fetched_and_not_trained_on_do_not_count_as_samples() -> None:
    # pytorch/examples' language_translation ends each epoch with `len(list(train_dl))`: every batch of
    # the training loader fetched again, untrained, in the step that then evaluates (and in a plain one)
    r = Recorder()
    for _ in range(5):
        r.train_step(batch=32)
    for _ in range(100):
        r.fetch(TRAIN, 0.001, 32)
    r.eval_pass()
    r.train_step(batch=32)
    for _ in range(100):
        r.fetch(TRAIN, 0.001, 32)
    r.train_step(batch=32)
    assert [s["samples"] for s in r.steps] == [32] * 7
    assert r.steps[5]["mark"] == "eval" and r.steps[6]["mark"] is None
    assert r.steps[6]["wait"] == pytest.approx(0.11)  # (the time in the DataLoader was data wait all the same)


def test_a_loop_that_trains_on_several_batches_a_step_counts_them_all() -> None:
    r = Recorder()
    for i in range(8):
        for _ in range(4 if i < 6 else 9):  # four batches concatenated into each forward, then nine
            r.fetch(TRAIN, 0.001, 8)
        r.clock.on_forward(True, None, r.tick(0.001))
        r.clock.on_backward(r.tick(0.05))
        r.clock.on_optimizer_step("opt", r.tick(0.05))
    assert [s["samples"] for s in r.steps] == [32] * 6 + [72, 72]  # (9 is not more than 2 x 4 + 1)
    for _ in range(4):  # then 20 a step from now on: two counted short, the rest whole
        for _ in range(20):
            r.fetch(TRAIN, 0.001, 8)
        r.clock.on_forward(True, None, r.tick(0.001))
        r.clock.on_backward(r.tick(0.05))
        r.clock.on_optimizer_step("opt", r.tick(0.05))
    assert [s["samples"] for s in r.steps[8:]] == [72, 72, 160, 160]


def test_an_eval_loader_iterated_between_steps_marks_the_step_and_is_not_counted() -> None:
    r = Recorder()
    for i in range(30):
        r.train_step()
        if i % 10 == 9:
            r.eval_pass(batches=5)
    marked = [s for s in r.steps if s["mark"] == "eval"]
    assert [s["index"] for s in marked] == [10, 20]  # the step after each eval pass holds it
    for s in marked:
        assert s["samples"] == 16  # the eval batches of 100 are not training samples
        assert s["wait"] == pytest.approx(0.01)  # nor is the eval loader's wait
        assert s["eval_s"] == pytest.approx(5 * 0.052, abs=1e-6)  # first eval fetch to the next training batch
        assert s["loader"] == TRAIN
    assert r.evals == 3  # the third pass, after the last step, is told too (a window must stop)
    assert all(s["mark"] is None for s in r.steps if s not in marked)


def test_the_training_loader_is_the_one_whose_batch_fed_the_step_even_when_eval_comes_first() -> None:
    r = Recorder()
    r.eval_pass(batches=2)  # Lightning's sanity check: the val loader is iterated before any step
    r.train_step()
    r.train_step()
    assert r.steps[0]["mark"] == "eval" and r.steps[0]["loader"] == TRAIN and r.steps[0]["samples"] == 16
    assert r.steps[1]["mark"] is None


def test_a_new_loader_each_epoch_becomes_the_training_loader() -> None:
    r = Recorder()
    r.train_step()
    r.fetch(7, 0.01, 16)  # epoch 2 builds a new DataLoader
    r.clock.on_optimizer_step("opt", r.tick(0.1))
    r.fetch(7, 0.01, 16)
    r.clock.on_optimizer_step("opt", r.tick(0.1))
    assert [s["loader"] for s in r.steps] == [TRAIN, 7, 7]
    assert [s["mark"] for s in r.steps] == [None, None, None]


def test_no_grad_forwards_between_steps_are_an_eval_pass_and_one_is_not() -> None:
    r = Recorder()
    c = r.clock
    for i in range(6):
        if i == 3:  # nanoGPT's estimate_loss: many forwards under no_grad, batches sliced by hand
            for _ in range(EVAL_FORWARDS + 3):
                c.on_forward(False, None, r.tick(0.05))
        c.on_forward(False, None, r.tick(0.01))  # a target computed under no_grad every step: training
        c.on_forward(True, 8, r.tick(0.01))
        c.on_backward(r.tick(0.05))
        c.on_optimizer_step("opt", r.tick(0.05))
    assert [s["mark"] for s in r.steps] == [None, None, None, "eval", None, None]
    assert r.steps[3]["eval_s"] == pytest.approx(4 * 0.05 + 0.01 + 0.01, abs=1e-6)  # first no-grad forward to the training one
    assert all(s["samples"] == 8 for s in r.steps)  # no DataLoader: the model input's leading dimension


def test_eval_mode_forwards_that_a_backward_follows_are_training() -> None:
    r = Recorder()
    c = r.clock
    for _ in range(4):  # frozen-BN fine-tuning with gradient accumulation: model.eval(), grad on
        for _ in range(3):
            c.on_forward(False, None, r.tick(0.01))
            c.on_backward(r.tick(0.01))
        c.on_optimizer_step("opt", r.tick(0.01))
    assert [s["mark"] for s in r.steps] == [None] * 4


def test_a_gan_gets_one_step_per_iteration_from_the_first_iteration() -> None:
    r = Recorder()
    c = r.clock
    for _ in range(16):
        r.fetch(TRAIN, 0.01, 64)
        c.on_backward(r.tick(0.01))  # errD_real
        c.on_backward(r.tick(0.01))  # errD_fake
        c.on_optimizer_step("D", r.tick(0.01))
        c.on_backward(r.tick(0.01))  # errG
        c.on_optimizer_step("G", r.tick(0.01))
    assert len(r.steps) == 16
    assert {s["source"] for s in r.steps} == {"optimizer"}
    assert r.steps[0]["wall"] == pytest.approx(0.04)  # fetch + two backwards + D (G's time is the next step's)
    assert c.optimizers == {"D", "G"}


def test_gradient_accumulation_does_not_invent_steps() -> None:
    r = Recorder()
    c = r.clock
    for _ in range(3):  # nanoGPT: 40 micro-steps per optimizer step
        for _ in range(40):
            c.on_forward(True, 12, r.tick(0.01))
            c.on_backward(r.tick(0.01))
        c.on_optimizer_step("opt", r.tick(0.01))
    assert len(r.steps) == 3
    assert r.steps[0]["samples"] == 40 * 12


def test_manual_sgd_steps_are_backward_calls_once_no_optimizer_steps() -> None:
    r = Recorder()
    c = r.clock
    emitted = [c.on_backward(r.tick(0.01)) for _ in range(PENDING_MAX + 10)]
    assert sum(emitted) == PENDING_MAX + 10  # held at first, then all at once, then one each
    assert emitted[: PENDING_MAX - 1] == [0] * (PENDING_MAX - 1)
    assert len(r.steps) == PENDING_MAX + 10
    assert all(s["wall"] == pytest.approx(0.01) for s in r.steps)
    assert {s["source"] for s in r.steps} == {"backward"}


def test_manual_steps() -> None:
    r = Recorder()
    for _ in range(3):
        r.clock.manual(32, r.tick(0.1))
    assert [(s["source"], s["samples"]) for s in r.steps] == [("manual", 32)] * 3


def test_held_backward_steps_are_steps_when_the_script_ends_before_the_decision() -> None:
    r = Recorder()
    for _ in range(20):
        r.clock.on_backward(r.tick(0.01))
    assert r.steps == []
    assert r.clock.flush() == 20
    assert [s["index"] for s in r.steps] == list(range(20))


def test_a_new_optimizer_for_a_later_phase_becomes_the_clock() -> None:
    r = Recorder()
    for _ in range(10):
        r.train_step(opt="phase1")
    for _ in range(10):
        r.train_step(opt="phase2")  # phase 1's optimizer never steps again
    # pytorch/examples' mnist_forward_forward (a layer at a time, each with its own Adam) recorded
    # 99 steps of 100 when the new phase's first step was counted into its second.
    assert len(r.steps) == 20
    assert all(s["wall"] == pytest.approx(0.111) and s["samples"] == 16 for s in r.steps)
    assert [s["index"] for s in r.steps] == list(range(20))


def test_a_new_optimizer_every_step_counts_every_step_once_the_last_one_is_gone() -> None:
    # A script that builds `SGD(...)` each iteration recorded 1 step for 192: each new optimizer
    # stepped once, held as another optimizer's step while the clock's own waited, never emitted.
    r = Recorder()
    alive = {"opt0"}
    r.clock.alive = alive.__contains__
    for i in range(200):
        alive.clear()
        alive.add(f"opt{i}")  # the previous optimizer was freed when the script rebound its name
        r.train_step(opt=f"opt{i}")
    assert len(r.steps) == 200 and r.clock.index == 200
    assert all(s["wall"] == pytest.approx(0.111) and s["samples"] == 16 for s in r.steps)
    assert len(r.clock.optimizers) == MAX_OPTIMIZERS  # counted up to the cap, not one per step
    # Optimizers still alive and stepped in turn stay one step an iteration (a GAN's, with `alive`).
    g = Recorder()
    g.clock.alive = {"D", "G"}.__contains__
    for _ in range(5):
        g.fetch(TRAIN, 0.01, 8)
        g.clock.on_backward(g.tick(0.05))
        g.clock.on_optimizer_step("D", g.tick(0.01))
        g.clock.on_backward(g.tick(0.05))
        g.clock.on_optimizer_step("G", g.tick(0.01))
    assert len(g.steps) == 5


def backward_step(r: Recorder, loss: float, batch: int = 16, wait: float = 0.01, compute: float = 0.1) -> None:
    """An iteration whose parameters something else updates: a batch, a forward, a backward, no optimizer."""
    r.fetch(TRAIN, wait, batch)
    r.clock.on_forward(True, None, r.tick(0.001))
    r.clock.on_backward(r.tick(compute), loss)


def test_backward_calls_that_go_on_without_an_optimizer_step_become_the_clock() -> None:
    # The keras-io guide trains 300 steps with torch.optim, then 900 with Keras's optimizers, which
    # step no torch optimizer: pitstop counted 300, and the 900 as one evaluation after the last step.
    r = Recorder()
    for _ in range(30):
        r.train_step()
    for i in range(100):
        backward_step(r, loss=float(i))
    r.clock.finish(r.now)
    assert len(r.steps) == 130
    later = r.steps[30:]
    assert [s["loss"] for s in later] == [float(i) for i in range(100)]  # each its own loss
    assert all(s["samples"] == 16 and s["wait"] == pytest.approx(0.01) for s in later)
    assert all(s["wall"] == pytest.approx(0.111) for s in later[1:])
    assert r.steps[-1]["source"] == "backward"


def test_gradient_accumulation_after_the_decision_stays_one_step_per_optimizer_step() -> None:
    r = Recorder()
    for step in range(12):  # 8 micro-steps an optimizer step (nanoGPT takes 40)
        for micro in range(8):
            backward_step(r, loss=1.0, batch=4)
        r.clock.on_optimizer_step("opt", r.tick(0.02))
    assert len(r.steps) == 12
    assert all(s["samples"] == 32 and s["wait"] == pytest.approx(0.08) and s["loss"] == pytest.approx(8.0)
               for s in r.steps[1:])
    assert all(s["wall"] == pytest.approx(8 * 0.111 + 0.02) for s in r.steps[1:])
    # ...and 4x its micro-steps with no optimizer step are steps: 64 held, then one a backward.
    for _ in range(70):
        backward_step(r, loss=1.0, batch=4)
    assert len(r.steps) == 12 + 70


def test_optimizers_stepped_in_turn_within_a_step_are_one_step() -> None:
    r = Recorder()
    c = r.clock
    for _ in range(6):  # three optimizers, one after the other in each iteration (a GAN's two, and a third)
        r.fetch(TRAIN, 0.01, 8)
        c.on_backward(r.tick(0.05))
        for opt in ("A", "B", "C"):
            c.on_optimizer_step(opt, r.tick(0.01))
    assert len(r.steps) == 6  # A's; B and C never take over: neither steps twice in a row
    assert all(s["samples"] == 8 for s in r.steps)
    assert all(s["wall"] == pytest.approx(0.09) and s["wait"] == pytest.approx(0.01) for s in r.steps[1:])


def test_a_step_fed_by_a_batch_fetched_ahead_counts_no_samples_of_its_own() -> None:
    r = Recorder()
    r.fetch(TRAIN, 0.01, 8)
    r.fetch(TRAIN, 0.01, 8)  # accelerate fetches one batch ahead
    r.clock.on_optimizer_step("opt", r.tick(0.1))
    r.clock.on_optimizer_step("opt", r.tick(0.1))  # the last batch of the epoch was already fetched
    assert [s["samples"] for s in r.steps] == [16, 0]


def test_a_gan_step_carries_its_clock_optimizers_loss_summed_over_its_backward_calls() -> None:
    r = Recorder()
    c = r.clock
    for i in range(6):
        r.fetch(TRAIN, 0.01, 64)
        c.on_backward(r.tick(0.01), 0.125 + i)  # errD_real
        c.on_backward(r.tick(0.01), 0.0625)  # errD_fake (held in the first iteration: no optimizer stepped yet)
        c.on_optimizer_step("D", r.tick(0.01))
        c.on_backward(r.tick(0.01), 11.75)  # errG
        c.on_optimizer_step("G", r.tick(0.01))
    # D is the clock: step i ends at D's step. G's backward of iteration i is in step i + 1, before
    # that step's own D backwards, and is not D's: each step reads errD_real + errD_fake, dcgan's
    # Loss_D (the last alone, errD_fake, read 0.1511 where the script logged 0.2084).
    assert [s["loss"] for s in r.steps] == [0.1875 + i for i in range(6)]


def test_gradient_accumulation_gives_the_step_the_sum_of_its_micro_steps_losses() -> None:
    # HF Trainer, accelerate, Lightning, nanoGPT: each micro-step's loss divided by the 8 before its backward.
    r = Recorder()
    c = r.clock
    for step in range(3):
        for micro in range(8):
            c.on_backward(r.tick(0.01), (0.5 + step + micro / 100) / 8)
        c.on_optimizer_step("opt", r.tick(0.01))
    # The mean loss of each step's micro-steps, as those scripts log it (the last alone was an eighth of it);
    # step 0's micro-steps were held as backward boundaries until the optimizer stepped, and add up too.
    assert [s["loss"] for s in r.steps] == pytest.approx([0.535, 1.535, 2.535])


def test_a_gpus_micro_step_losses_are_listed_for_one_copy_and_a_closures_are_not_added() -> None:
    r = Recorder()
    c = r.clock
    for step in range(2):
        for micro in range(3):
            c.on_backward(r.tick(0.01), ("tensor", step, micro))  # (tensors are opaque to the clock)
        c.on_optimizer_step("opt", r.tick(0.01))
    c.on_optimizer_start("lbfgs", r.tick(0.01))  # a closure's backward calls: the same loss again and again
    for i in range(3):
        c.on_backward(r.tick(0.01), 1.0 - i / 10)
    c.on_optimizer_step("lbfgs", r.tick(0.01))
    c.on_optimizer_step("opt", r.tick(0.01))
    assert r.steps[0]["loss"] == [("tensor", 0, m) for m in range(3)]
    assert r.steps[1]["loss"] == [("tensor", 1, m) for m in range(3)]
    assert r.steps[2]["loss"] == pytest.approx(0.8)  # the closure's last, not added up


def test_lightnings_accumulation_adds_the_micro_step_its_closure_runs() -> None:
    # Lightning (accumulate_grad_batches=4) runs the last micro-step's forward and backward inside
    # optimizer.step(closure): pitstop summed the other three (0.9424 for 1.2962), and at an epoch's
    # end (two micro-steps) read the closure's alone.
    r = Recorder()
    c = r.clock
    for micro_steps in (4, 4, 2):
        for micro in range(micro_steps - 1):
            c.on_backward(r.tick(0.01), (1.0 + micro) / 4)
        c.on_optimizer_start("sgd", r.tick(0.001))
        c.on_backward(r.tick(0.01), (1.0 + micro_steps - 1) / 4)  # in the closure
        c.on_optimizer_step("sgd", r.tick(0.001))
    assert [s["loss"] for s in r.steps] == pytest.approx([2.5, 2.5, 0.75])


def test_a_held_backward_without_a_loss_leaves_the_last_loss_that_was_read() -> None:
    r = Recorder()
    c = r.clock
    c.on_backward(r.tick(0.01), "first")
    c.on_backward(r.tick(0.01), None)  # a loss pitstop could not read (not a scalar)
    c.on_optimizer_step("opt", r.tick(0.01))
    c.on_optimizer_step("opt", r.tick(0.01))  # a step with no backward at all
    assert [s["loss"] for s in r.steps] == ["first", None]


def test_backward_steps_each_carry_their_own_loss_once_the_held_ones_are_released() -> None:
    r = Recorder()
    c = r.clock
    for i in range(PENDING_MAX + 3):
        c.on_backward(r.tick(0.01), i)
    assert [s["loss"] for s in r.steps] == list(range(PENDING_MAX + 3))


def test_manual_steps_carry_the_loss_of_the_backward_between_them() -> None:
    r = Recorder()
    c = r.clock
    c.manual(None, r.tick(0.1))
    c.on_backward(r.tick(0.01), 2.5)
    c.manual(None, r.tick(0.1))
    c.manual(None, r.tick(0.1))
    assert [s["loss"] for s in r.steps] == [None, 2.5, None]


# ---- closures (LBFGS) ----------------------------------------------------------
def closure_step(r: Recorder, closures: int, each: float, key: str = "lbfgs") -> None:
    """`optimizer.step(closure)`: the pre-hook, `closures` forward+backward calls inside, the post-hook."""
    r.clock.on_optimizer_start(key, r.tick(0.001))
    for _ in range(closures):
        r.clock.on_forward(True, None, r.tick(0.001))
        r.clock.on_backward(r.tick(each), 0.5)
    r.clock.on_optimizer_step(key, r.tick(0.001))


def test_a_slow_first_lbfgs_step_with_twenty_closures_is_one_step() -> None:
    r = Recorder()
    closure_step(r, closures=20, each=3.5)  # 70 s: past the 60 s hold on backward boundaries
    closure_step(r, closures=20, each=0.05)
    closure_step(r, closures=20, each=0.05)
    assert [(s["index"], s["source"]) for s in r.steps] == [(0, "optimizer"), (1, "optimizer"), (2, "optimizer")]
    assert r.steps[0]["wall"] == pytest.approx(70 + 20 * 0.001 + 0.002)


def test_a_first_step_of_more_closures_than_the_hold_is_one_step() -> None:
    r = Recorder()
    closure_step(r, closures=PENDING_MAX + 10, each=0.01)
    closure_step(r, closures=5, each=0.01)
    assert [s["source"] for s in r.steps] == ["optimizer", "optimizer"]


def test_an_optimizer_step_that_raised_ends_at_that_optimizer_s_next_step() -> None:
    r = Recorder()
    r.clock.on_optimizer_start("lbfgs", r.tick(0.001))
    r.clock.on_backward(r.tick(0.1))  # the closure ran, then step() raised: no post-hook
    closure_step(r, closures=3, each=0.1)
    closure_step(r, closures=3, each=0.1)
    assert [s["source"] for s in r.steps] == ["optimizer", "optimizer"]
    assert r.clock.open_steps == []


def test_backward_calls_after_an_abandoned_optimizer_step_are_steps_again() -> None:
    r = Recorder()
    r.clock.on_optimizer_start("opt", r.tick(0.001))
    r.clock.abandon("opt")  # the hooks saw its frame gone: step() raised
    for _ in range(3):  # the script goes on with manual SGD
        r.fetch(TRAIN, 0.01, 16)
        r.clock.on_backward(r.tick(0.1))
    assert r.clock.flush() == 3
    assert [s["source"] for s in r.steps] == ["backward"] * 3


def test_a_no_grad_prediction_between_closure_steps_is_an_evaluation() -> None:
    r = Recorder()
    closure_step(r, closures=4, each=0.1)
    r.clock.on_forward(False, None, r.tick(0.01))  # time_sequence_prediction: one prediction under no_grad
    r.clock.on_forward_end(r.tick(0.5))
    r.tick(2.0)  # plotting it
    closure_step(r, closures=4, each=0.1)
    assert [s["mark"] for s in r.steps] == [None, "eval"]
    assert r.steps[1]["eval_s"] == pytest.approx(2.5 + 0.001)  # to the next optimizer step's start
    r.clock.on_forward(False, None, r.tick(0.01))  # after the last step: in no step
    r.clock.on_forward_end(r.tick(0.4))
    assert r.clock.finish(r.tick(3.0)) == pytest.approx(0.4)


# ---- evaluation over the training loader, before the first and after the last step ----------
def eval_over_train(r: Recorder, batches: int = 10, batch: int = 32, each: float = 0.05) -> None:
    for _ in range(batches):
        r.fetch(TRAIN, 0.002, batch)
        r.clock.on_forward(False, None, r.tick(each))
        r.clock.on_forward_end(r.now)


def test_an_evaluator_run_over_the_training_loader_is_evaluation_not_training_samples() -> None:
    r = Recorder()
    for _ in range(3):
        r.train_step(batch=32)
    eval_over_train(r, batches=10)  # ignite: create_supervised_evaluator(...).run(train_loader)
    r.train_step(batch=32)
    step = r.steps[3]
    assert (step["samples"], step["mark"], step["loader"]) == (32, "eval", TRAIN)
    assert step["wait"] == pytest.approx(0.01)
    assert step["eval_s"] == pytest.approx(10 * 0.052)


def test_an_evaluation_before_the_first_step_is_in_step_0_and_not_its_samples() -> None:
    r = Recorder()
    eval_over_train(r, batches=4)  # the model is watched from the first batch
    r.train_step(batch=32)
    r.train_step(batch=32)
    assert [(s["samples"], s["mark"]) for s in r.steps] == [(32, "eval"), (32, None)]
    assert r.steps[0]["eval_s"] == pytest.approx(4 * 0.052)


def test_an_evaluation_after_the_last_step_is_finish_s_and_none_is_none() -> None:
    r = Recorder()
    r.train_step()
    assert r.clock.finish(r.tick(1.0)) is None
    r.train_step()
    r.eval_pass(batches=4, each=0.05)  # HF Trainer's evaluation at its last step
    r.clock.on_forward_end(r.tick(0.05))
    assert r.clock.finish(r.tick(5.0)) == pytest.approx(4 * 0.052 + 0.05)  # to its last forward's end


def test_one_batch_of_another_loader_without_a_forward_is_not_an_evaluation() -> None:
    r = Recorder()
    r.fetch(VAL, 0.002, 32)  # Keras's _symbolic_build takes one batch of a loader of its own
    for _ in range(3):
        r.train_step()
    assert [s["mark"] for s in r.steps] == [None, None, None]
    assert r.steps[0]["samples"] == 16


def _random_run(seed: int, fast: bool) -> tuple[list[dict[str, Any]], int, float | None, int]:
    """One random stream of hook calls, mostly plain training steps with evaluations, a second
    loader, a second optimizer, steps without a batch and closures mixed in: the clock's output,
    and how many steps the fast cut took."""
    import random

    rng = random.Random(seed)
    r = Recorder()
    fast_cuts = []
    fast_cut = r.clock._fast_cut

    def counted(now: float) -> bool:  # fast=False: every step goes to the general `_cut`
        taken = fast and fast_cut(now)
        fast_cuts.extend([now] if taken else [])
        return taken

    r.clock._fast_cut = counted  # type: ignore[method-assign]
    opened: list[str] = []
    for _ in range(400):
        kind = rng.choices(["step", "fetch", "fwd", "nograd", "bwd", "start", "end", "eval", "manual"],
                           [12, 2, 2, 1, 2, 2, 2, 1, 0.1])[0]
        if kind == "step":  # the plain loop: a batch (sometimes none), forward, backward, the step
            if rng.random() < 0.9:
                r.fetch(rng.choice([TRAIN, TRAIN, TRAIN, VAL]), rng.random() / 100, rng.choice([16, 16, None]))
            r.clock.on_forward(True, rng.choice([None, 8]), r.tick(0.001))
            r.clock.on_backward(r.tick(0.01), rng.random(), r.now - 0.005)
            key = rng.choice(["A", "A", "A", "B"])
            r.clock.on_optimizer_start(key, r.tick(0.001))
            if rng.random() < 0.1:
                r.clock.on_backward(r.tick(0.01), rng.random(), r.now - 0.005)  # a closure's
            r.clock.on_optimizer_step(key, r.tick(0.002))
        elif kind == "fetch":
            r.fetch(rng.choice([TRAIN, VAL, 3]), rng.random() / 100, rng.choice([16, None]))
        elif kind == "fwd":
            r.clock.on_forward(True, rng.choice([None, 8]), r.tick(0.001))
        elif kind == "nograd":
            r.clock.on_forward(False, None, r.tick(0.001))
            r.clock.on_forward_end(r.tick(0.002))
        elif kind == "bwd":
            r.clock.on_backward(r.tick(0.01), rng.choice([None, 1.5]), r.now - 0.004)
        elif kind == "start":
            key = rng.choice(["A", "B"])
            opened.append(key)
            r.clock.on_optimizer_start(key, r.tick(0.001))
        elif kind == "end" and opened:
            r.clock.on_optimizer_step(opened.pop(), r.tick(0.001))
        elif kind == "eval":
            r.eval_pass(rng.randint(1, 3))
        elif kind == "manual" and rng.random() < 0.02:
            r.clock.manual(8, r.tick(0.001))
    return r.steps, r.evals, r.clock.finish(r.tick(0.01)), len(fast_cuts)


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_cut_of_a_plain_step_emits_what_the_general_cut_does(seed: int) -> None:
    *fast, fast_cuts = _random_run(seed, fast=True)
    *general, none = _random_run(seed, fast=False)
    assert fast == general
    assert none == 0 and len(fast[0]) > 20 and fast_cuts > 5


def test_the_fast_cut_takes_the_plain_steps_of_a_training_loop() -> None:
    r = Recorder()
    general = []
    cut = r.clock._cut
    r.clock._cut = lambda source, now: general.append(source) or cut(source, now)  # type: ignore[method-assign]
    for _ in range(10):
        r.fetch(TRAIN, 0.01, 16)
        r.clock.on_forward(True, None, r.tick(0.001))
        r.clock.on_backward(r.tick(0.05), 1.0, r.now - 0.04)
        r.clock.on_optimizer_start("opt", r.tick(0.001))
        r.clock.on_optimizer_step("opt", r.tick(0.02))
    assert general == ["optimizer"] and len(r.steps) == 10  # the first step decides the clock, in `_cut`
    assert r.steps[5]["wall"] == pytest.approx(0.082) and r.steps[5]["wait"] == pytest.approx(0.01)
    assert r.steps[5]["samples"] == 16 and r.steps[5]["phases"][2] == pytest.approx(0.02)


def test_a_gans_last_iteration_leaves_its_second_optimizers_loss_to_be_read_as_the_run_ends() -> None:
    # dcgan that died right after a NaN in errG: G's loss of the last iteration is taken in by no later D step.
    r = Recorder()
    c = r.clock
    for i in range(4):
        r.fetch(TRAIN, 0.01, 64)
        c.on_backward(r.tick(0.01), 0.125)  # errD_real
        c.on_backward(r.tick(0.01), 0.0625)  # errD_fake
        c.on_optimizer_step("D", r.tick(0.01))
        c.on_backward(r.tick(0.01), float(10 + i))  # errG
        c.on_optimizer_step("G", r.tick(0.01))
    assert c.other_loss == 12.0  # iteration 2's G, read as step 3 is emitted
    c.other_loss = None  # (the agent takes it then)
    c.finish(r.tick(0.01))
    assert len(r.steps) == 4 and c.other_loss == 13.0  # iteration 3's, for the agent to file under step 3
