"""Unit tests of the step clock's anatomy: forward, backward and optimizer summed per step (no torch)."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.profiling.stepclock import BACKWARD, FORWARD, OPTIMIZER

from .test_stepclock import TRAIN, VAL, Recorder


class Loop(Recorder):
    """A Recorder that stamps phases as the hooks do: backward's start and end, the optimizer's pre- and post-hook."""

    def fetch(self, loader: int, wait: float, samples: int | None) -> None:
        started = self.now  # the hook stamps after the batch came: a marker's token is recorded then
        self.now += wait
        self.clock.on_fetch(loader, started, wait, samples)

    def backward(self, forward: float, backward: float) -> None:
        started = self.tick(forward)
        token = self._token()
        self.clock.on_backward(self.tick(backward), None, started, token)

    def optimizer(self, key: str, seconds: float) -> None:
        self.clock.on_optimizer_start(key, self.now)
        self.clock.on_optimizer_step(key, self.tick(seconds))

    def _token(self) -> Any:
        marker = self.clock.marker
        return marker() if marker is not None else None

    def phases(self, i: int) -> tuple[float, float, float]:
        found = self.steps[i]["phases"]
        assert found is not None, self.steps[i]
        return found[0], found[1], found[2]


def test_a_plain_step_splits_into_forward_backward_optimizer_and_the_rest() -> None:
    r = Loop()
    for _ in range(3):
        r.fetch(TRAIN, 0.010, 16)
        r.backward(forward=0.030, backward=0.050)
        r.tick(0.004)  # clipping, logging: no phase
        r.optimizer("opt", 0.006)
        r.tick(0.002)  # zero_grad at the loop's end: no phase
    fwd, bwd, opt = r.phases(1)
    assert (fwd, bwd, opt) == pytest.approx((0.030, 0.050, 0.006))
    step = r.steps[1]
    compute = step["wall"] - step["wait"]
    assert compute - (fwd + bwd + opt) == pytest.approx(0.006)  # what "other" will be: 4 + 2 ms


def test_gradient_accumulation_sums_every_micro_step_and_leaves_the_fetches_out() -> None:
    r = Loop()
    for _ in range(2):
        for _ in range(4):  # four micro-batches per optimizer step
            r.fetch(TRAIN, 0.020, 8)
            r.backward(forward=0.010, backward=0.015)
        r.optimizer("opt", 0.005)
    assert len(r.steps) == 2
    assert r.phases(1) == pytest.approx((0.040, 0.060, 0.005))
    assert r.steps[1]["wait"] == pytest.approx(0.080)


def test_a_gan_counts_both_optimizers_and_the_generator_forward_after_the_clock_s_optimizer() -> None:
    r = Loop()
    for _ in range(3):
        r.fetch(TRAIN, 0.001, 16)
        r.backward(forward=0.020, backward=0.010)  # errD_real
        r.backward(forward=0.015, backward=0.010)  # netG(noise), netD(fake.detach()), errD_fake
        r.optimizer("D", 0.003)  # the first to step: the clock's optimizer (the step ends here)
        r.backward(forward=0.012, backward=0.020)  # errG: forward from optimizerD's end
        r.optimizer("G", 0.004)
    assert len(r.steps) == 3
    # Step 1 holds the generator's half of iteration 0, then iteration 1's discriminator half.
    assert r.phases(1) == pytest.approx((0.012 + 0.020 + 0.015, 0.020 + 0.010 + 0.010, 0.004 + 0.003))


def test_held_backward_calls_become_one_optimizer_step_with_their_phases_summed() -> None:
    r = Loop()
    r.fetch(TRAIN, 0.001, 16)
    r.backward(forward=0.010, backward=0.020)
    r.backward(forward=0.005, backward=0.020)  # held: is this a step? not yet known
    r.optimizer("opt", 0.007)
    assert len(r.steps) == 1
    assert r.phases(0) == pytest.approx((0.015, 0.040, 0.007))


def test_without_an_optimizer_each_backward_is_a_step_with_its_own_phases() -> None:
    r = Loop()
    for i in range(3):
        r.fetch(TRAIN, 0.001, 16)
        r.backward(forward=0.010 * (i + 1), backward=0.020)
    assert r.clock.flush() == 3
    assert [r.phases(i) for i in range(3)] == [pytest.approx((0.010 * (i + 1), 0.020, 0.0)) for i in range(3)]


def test_an_eval_pass_in_the_step_is_no_phase_and_the_step_is_marked() -> None:
    r = Loop()
    r.fetch(TRAIN, 0.001, 16)
    r.backward(forward=0.010, backward=0.010)
    r.optimizer("opt", 0.001)
    for _ in range(3):  # an eval pass on the held batch, no loader: no-grad forwards of the root module
        r.clock.on_forward(False, None, r.tick(0.050))
    r.tick(0.050)
    r.clock.on_forward(True, None, r.now)  # training resumes: the eval stretch closes here
    r.backward(forward=0.010, backward=0.010)
    r.optimizer("opt", 0.001)
    step = r.steps[1]
    assert step["mark"] == "eval"
    fwd, bwd, opt = r.phases(1)
    assert (fwd, bwd, opt) == pytest.approx((0.010, 0.010, 0.001))  # the 200 ms of eval forwards are not forward
    assert step["wall"] - (fwd + bwd + opt) == pytest.approx(0.200)


def test_an_eval_loader_between_steps_is_no_forward_either() -> None:
    r = Loop()
    r.fetch(TRAIN, 0.001, 16)
    r.backward(forward=0.010, backward=0.010)
    r.optimizer("opt", 0.001)
    r.eval_pass(batches=4)
    r.fetch(TRAIN, 0.001, 16)
    r.backward(forward=0.010, backward=0.010)
    r.optimizer("opt", 0.001)
    assert r.steps[1]["mark"] == "eval"
    assert r.phases(1) == pytest.approx((0.010, 0.010, 0.001))


def test_manual_steps_cut_the_phases_where_the_script_marks_its_steps() -> None:
    r = Loop()
    for _ in range(3):
        r.fetch(TRAIN, 0.001, 16)
        r.backward(forward=0.010, backward=0.020)
        r.optimizer("opt", 0.003)
        r.tick(0.005)
        r.clock.manual(None, r.now)  # pitstop.step()
    # The first optimizer step came before the first pitstop.step(): steps 0 and 1 split it.
    assert [s["source"] for s in r.steps] == ["optimizer", "manual", "manual", "manual"]
    assert r.phases(3) == pytest.approx((0.010, 0.020, 0.003))
    assert r.steps[3]["wall"] == pytest.approx(0.001 + 0.010 + 0.020 + 0.003 + 0.005)


def test_a_manual_loop_without_backward_has_no_phases() -> None:
    r = Loop()
    for _ in range(3):
        r.fetch(TRAIN, 0.001, 16)
        r.clock.on_forward(False, None, r.tick(0.010))  # inference
        r.clock.manual(None, r.tick(0.001))
    assert [s["phases"] for s in r.steps] == [None, None, None]


def test_a_closure_s_forward_and_backward_inside_the_optimizer_are_not_counted_twice() -> None:
    r = Loop()
    for _ in range(2):
        r.fetch(TRAIN, 0.001, 16)
        r.clock.on_optimizer_start("lbfgs", r.tick(0.001))  # LBFGS: step(closure) runs forward and backward inside
        r.backward(forward=0.010, backward=0.020)
        r.clock.on_optimizer_step("lbfgs", r.tick(0.004))
    fwd, bwd, opt = r.phases(1)
    assert (fwd, bwd, opt) == pytest.approx((0.010, 0.020, 0.004))
    assert fwd + bwd + opt <= r.steps[1]["wall"] - r.steps[1]["wait"] + 1e-12


def test_with_a_marker_each_phase_is_bounded_by_the_tokens_of_its_stamps() -> None:
    r = Loop()
    tokens: list[float] = []

    def marker() -> float:
        tokens.append(r.now)
        return r.now  # a token that says when it was recorded

    r.fetch(TRAIN, 0.001, 16)
    r.clock.marker = marker  # set mid-step (the agent does at the first backward)
    r.backward(forward=0.010, backward=0.020)
    r.optimizer("opt", 0.003)
    assert r.steps[0]["phases"][3] is None  # the step's forward had no token: it keeps the host clock
    r.fetch(TRAIN, 0.002, 16)
    r.backward(forward=0.010, backward=0.020)
    r.tick(0.004)
    r.optimizer("opt", 0.003)
    spans = r.steps[1]["phases"][3]
    assert [phase for phase, _, _ in spans] == [FORWARD, BACKWARD, OPTIMIZER]
    timed = [end - start for _, start, end in spans]
    assert timed == pytest.approx([0.010, 0.020, 0.003])  # the same spans as the host stamps
    r.eval_pass(batches=2)  # tokens at the eval fetches too, but no span of the step is theirs
    r.fetch(TRAIN, 0.001, 16)
    r.backward(forward=0.010, backward=0.020)
    r.optimizer("opt", 0.003)
    assert [end - start for _, start, end in r.steps[2]["phases"][3]] == pytest.approx([0.010, 0.020, 0.003])


def test_a_failed_token_leaves_that_step_on_the_host_clock() -> None:
    r = Loop()
    n = iter(range(1, 100))
    # Five tokens a step (fetch, backward start and end, optimizer start and end); step 1's 3rd fails.
    r.clock.marker = lambda: None if (i := next(n)) == 8 else float(i)
    for _ in range(3):
        r.fetch(TRAIN, 0.001, 16)
        r.backward(forward=0.010, backward=0.020)
        r.optimizer("opt", 0.003)
    assert r.steps[1]["phases"][3] is None  # its backward's end token failed
    assert r.steps[1]["phases"][:3] == pytest.approx((0.010, 0.020, 0.003))  # the host figures stand
    assert [phase for phase, _, _ in r.steps[2]["phases"][3]] == [FORWARD, BACKWARD, OPTIMIZER]


def test_forward_starts_at_the_latest_batch_fetched() -> None:
    r = Loop()
    r.fetch(TRAIN, 0.001, 16)
    r.fetch(VAL, 0.030, 100)  # a batch of another loader after the training batch: it is the boundary
    r.backward(forward=0.010, backward=0.020)
    r.optimizer("opt", 0.003)
    assert r.phases(0) == pytest.approx((0.010, 0.020, 0.003))
