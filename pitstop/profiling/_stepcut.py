"""Provides how the step clock closes a step: its data wait, samples, evaluation or rollout mark,
loss and phases, measured and handed on (`StepClock`'s base; its state is set in `StepClock`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pitstop.profiling._passes import is_rollout

# No-grad forwards of the root module in one stretch that make an eval pass: one
# such forward a step is a training pattern (a target computed under no_grad).
EVAL_FORWARDS = 2
# Plain optimizer steps after step 0 that set how many training batches a step takes, before
# a step that took far more counts the samples of as many only (`StepClock._trained`).
TRAINED_STEPS = 3

# on_step(index, start, now, data_wait, samples, source, mark, eval_s, loader, loss, phases, passes):
# mark "eval" (evaluation passes in the step; eval_s their seconds, passes their count) or "rollout"
# (a policy's rollouts: eval_s and passes are theirs), else None.
StepSink = Callable[[int, float, float, float, "int | None", str, "str | None", float, Any, Any, Any, int], None]
# A step's anatomy as the clock hands it on: (forward, backward, optimizer) seconds and the
# token spans [(phase, start token, end token)] that bound them, or None where a phase had
# no token (the marker came mid-step, or a marker call failed): that step keeps the host clock.
Phases = tuple[float, float, float, "list[tuple[int, Any, Any]] | None"]


class StepCut:
    """The step clock's end of a step, as a base of `StepClock` (whose `__init__` and `_reset` set the
    state read here): inherited methods are found through the same per-type method cache, so a step
    makes no extra call. The plain step's `_fast_cut` stays with the clock."""

    def _evidence(self, t0: float) -> None:
        if self._eval_t0 is None or t0 < self._eval_t0:
            self._eval_t0 = t0
        self._tell_eval()

    def _tell_eval(self) -> None:
        if not self._eval_told:
            self._eval_told = True
            if self.on_eval is not None:
                self.on_eval()

    def _close_segment(self, now: float, by_backward: bool = False) -> None:
        """The stretch of forwards without grad ended at `now`: an evaluation pass, a rollout, or nothing.
        `by_backward`: a backward ended it, which no forward of the model fed since (stored data)."""
        t0 = self._seg_t0 if self._seg_t0 is not None else now
        batches = self._seg_batches
        if self._seg_n >= self._seg_need:
            if is_rollout(self._seg_n, self._seg_most, self._seg_busy, now - t0, len(batches), by_backward):
                self._rollouts += 1
                self._rollout_s += now - t0
            else:
                self._evidence(t0)
                self._eval_t1 = max(self._eval_t1, now)
                if not batches:
                    self._plain_passes += 1
                for loader, _, waited, samples, gen in batches:  # evaluation's batches, not training's
                    self._eval_iters.add((loader, gen))
                    acc = self._fetch.get(loader)
                    if acc is not None:
                        acc[5] += waited
                        acc[6] += samples or 0
                        acc[7] += 1
            # The evaluation (or rollout) is nobody's forward: the next forward starts here.
            if self._mark is None or now > self._mark:
                self._mark = now
                if self.marker is not None:
                    self._mark_tok = self.marker()
        self._seg_t0, self._seg_n, self._seg_batches, self._seg_need = None, 0, [], EVAL_FORWARDS

    def _measure(self, now: float) -> list[Any]:
        """This step as [end, start, wait, samples, eval_s, mark, loader, loss, phases, passes] (`StepSink`)."""
        if self._seg_t0 is not None:
            self._close_segment(now)
        fetched = self._fetch
        train = self.train_loader
        if (train is None or train not in fetched) and self._last_loader is not None:
            train = self._last_loader  # the batch that fed this step (a new loader each epoch, too)
        self.train_loader = train
        acc = fetched.get(train)
        wait = acc[0] - acc[5] if acc is not None else 0.0
        samples = acc[1] - acc[6] if acc is not None and acc[1] is not None else None
        self._step_batches = acc[4] - acc[7] if acc is not None else 0
        if samples is None:
            samples = self._fwd_samples
        if samples is None and acc is None and train is not None:
            # No batch of the training loader in this step: its batch was fetched in an
            # earlier one (accelerate's loaders fetch one ahead), which counted it.
            samples = 0
        mark, eval_s, passes = self._judged(acc, now)
        start = self.t_last if self.t_last is not None else (self.t_start if self.t_start is not None else now)
        phases = (self._fwd, self._bwd, self._opt, self._spans) if self._phased else None
        self._mark = now
        return [now, start, wait, samples, eval_s, mark, train, self._step_loss(), phases, passes]

    def _judged(self, acc: list[Any] | None, now: float) -> tuple[str | None, float, int]:
        """(mark, seconds, count) of what the step held besides training: evaluation passes, else rollouts."""
        evaluated, eval_s = self._eval_span(acc, now)
        if evaluated:
            return "eval", eval_s, self._pass_count(acc)
        if self._rollouts:
            return "rollout", self._rollout_s, self._rollouts
        return None, 0.0, 0

    def _pass_count(self, acc: list[Any] | None) -> int:
        """Evaluation passes in this step: each iteration of a loader that gave an evaluation's batches
        (another loader's, or the training loader's that evaluating forwards took), and each stretch of
        evaluating forwards that took no DataLoader batch. At least one: evidence was seen."""
        iters = set(self._eval_iters)
        for loader, a in self._fetch.items():
            if a is not acc and a[4] >= EVAL_FORWARDS:
                iters.update((loader, gen) for gen in range(a[8], a[9] + 1))
        return max(1, len(iters) + self._plain_passes)

    def _step_loss(self) -> Any:
        """The step's loss: the last a backward passed in, or, where several backward calls outside
        an optimizer step fed one optimizer's step (gradient accumulation), their sum (`_combine`)."""
        return self._loss if len(self._losses) < 2 else self._combine(self._losses)

    def _combine(self, losses: list[Any]) -> Any:
        """One step's loss from its parts' (in order), None where none was read.

        Where one optimizer trains, their sum: HF Trainer, accelerate, Lightning and nanoGPT
        divide each micro-step's loss by the k micro-steps before its backward, so the sum is
        the mean loss they log (the last alone read 0.17 for accelerate's 0.69 at k = 4). Where
        several do (a GAN's), `_cut` passes the clock's optimizer's parts only. Floats add up here; tensors (a GPU's) are listed, and
        added up when read (`_losses.flush`): adding them here would launch a kernel.
        """
        present = [loss for loss in losses if loss is not None]
        if len(present) < 2:
            return present[-1] if present else None
        if all(type(loss) is float for loss in present):
            return sum(present)
        if any(type(loss) is float for loss in present):
            return present[-1]  # (a float and a tensor: a loss moved between devices; not added up)
        return [part for loss in present for part in (loss if type(loss) is list else [loss])]

    def _eval_span(self, acc: list[Any] | None, now: float) -> tuple[bool, float]:
        """(evaluated, seconds): the stretch from the first evidence of evaluation to its last."""
        fetched = self._fetch
        if self._eval_t0 is None and (not fetched or (len(fetched) == 1 and acc is not None)):
            return False, 0.0  # no evidence and no other loader: every training step, without the lists below
        others = [a for k, a in self._fetch.items() if a is not acc and (a[4] >= EVAL_FORWARDS or a[7])]
        if self._eval_t0 is None and not others:
            return False, 0.0
        starts = [a[2] for a in others]
        ends = [a[3] for a in others]
        if self._eval_t0 is not None:
            starts.append(self._eval_t0)
        if self._eval_t1:
            ends.append(self._eval_t1)
        return True, max(0.0, max(ends, default=now) - min(starts))

    def _trained(self, batches: int, samples: int | None) -> int | None:
        """The samples a plain optimizer step trained on, of the `samples` its `batches` of the training loader held.

        All of them, unless the step took more than twice as many batches as any plain step
        before it (and one more), once `TRAINED_STEPS` such steps set that: then as many as the
        most that one took, the rest fetched and not trained on. pytorch/examples'
        language_translation ends each epoch with `len(list(train_dl))`, 100 batches more in
        the step that then evaluates: 3,232 samples counted for its 32, and a summary of
        1,917 samples/s at 39.7 steps/s. A loop that concatenates several batches into each
        forward takes as many every step; one that begins to take more at some point has
        its first two such steps counted short, and from the third on each whole. Gradient
        accumulation (a backward a batch) holds its micro-steps (`_pending`) and is not
        judged here.
        """
        if self.index == 0:
            return samples
        most = self._batches_max
        if self._batches_seen >= TRAINED_STEPS and batches > 2 * most + 1:
            self._batches_over += 1
            if self._batches_over < TRAINED_STEPS:
                return round(samples * most / batches) if samples is not None else None
        self._batches_over = 0  # (that many such steps in a row: the loop takes that many from now on)
        if batches > most:
            self._batches_max = batches
        self._batches_seen += 1
        return samples

    def _cut(self, source: str, now: float) -> None:
        step = self._measure(now)
        if source == "optimizer" and not self._pending and self._step_batches:
            step[3] = self._trained(self._step_batches, step[3])
        if self._pending:  # held backward boundaries were one optimizer step after all
            for held in self._pending:
                step[1] = min(step[1], held[1])
                step[2] += held[2]
                if held[3] is not None:
                    step[3] = held[3] if step[3] is None else step[3] + held[3]
                _merge_mark(step, held)
            # The loss of the clock's optimizer: its backward calls since another optimizer's step (a GAN's
            # D: errD_real + errD_fake, the script's Loss_D; the last alone read errD_fake, 0.1511 for 0.2084).
            # Where it had none since, the last loss of the step (another optimizer's).
            parts = [*(held[7] for held in self._pending), step[7]]
            own = self._combine(parts[self._primary_from:])
            present = [loss for loss in parts if loss is not None]
            step[7] = own if own is not None else (present[-1] if present else None)
            if own is not None and self._primary_from:
                # ...and the other optimizer's, held since the clock's previous step (a GAN's G: errG, the
                # script's Loss_G of the iteration before): read as this step is emitted (`Agent._on_step`).
                self.other_loss = self._combine(parts[:self._primary_from])
            for held in reversed(self._pending):
                step[8] = _sum_phases(held[8], step[8])
            self._pending = []
            self._primary_from = 0
        self.t_last = now
        self._reset()
        self._emit(step, source)

    def _emit(self, step: list[Any], source: str) -> None:
        end, start, wait, samples, eval_s, mark, loader, loss, phases, passes = step
        index = self.index
        self.index = index + 1
        self.on_step(index, start, end, wait, samples, source, mark, eval_s, loader, loss, phases, passes)


def _merge_mark(step: list[Any], held: list[Any]) -> None:
    """A held part's evaluation or rollouts into its step's (evaluation over rollouts where both came)."""
    if held[5] is None:
        return
    if step[5] == held[5]:
        step[4] += held[4]
        step[9] += held[9]
    elif step[5] is None or held[5] == "eval":
        step[4], step[5], step[9] = held[4], held[5], held[9]


def _sum_phases(a: Phases | None, b: Phases | None) -> Phases | None:
    """Two parts of one step (held backward boundaries merged): phases summed, spans joined in order."""
    if a is None or b is None:
        return a if b is None else b
    spans = a[3] + b[3] if a[3] is not None and b[3] is not None else None
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], spans)
