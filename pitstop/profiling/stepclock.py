"""Provides the step clock: where training steps begin and end, and which of them evaluated.

Pure and torch-free (the hooks feed it perf_counter stamps), so every rule here
has a unit test (tests/unit/test_stepclock.py). Its calls come from the hooks:
at once on the training thread, or, between plain steps, held and taken in by
the agent's writer thread at each of its passes, under a lock (`Agent._take_held`);
each method is a few compares and stores.

What it decides:
- Step boundaries: one optimizer's steps (the first one to step; a GAN's second
  optimizer does not add steps), else backward calls, else `pitstop.step()`.
  Backward boundaries are held until it is clear that no optimizer steps
  (`PENDING_MAX` calls or `PENDING_S`): a GAN calls backward twice before its
  first `optimizerD.step()`, and emitting those as steps invented two steps.
  The same holds after optimizer steps were the clock: backward calls that go
  on without one (a loop moving to Keras's own optimizers) become the clock
  (`_loose_backward`).
  A backward inside a running `optimizer.step()` (LBFGS calls its closure ~20
  times a step) belongs to that step and is never a boundary: pytorch/examples'
  time_sequence_prediction, 3 steps of ~100 s each, recorded 23 steps. A step
  that raised (its post-hook never comes) ends at that optimizer's next step,
  or where the hooks see its frame gone (`abandon`).
- The training loader: the one whose batch fed the step (the last fetched before
  the boundary). Data wait and samples count its batches only.
- Evaluation: a step in which another loader gave `EVAL_FORWARDS` or more
  batches, or the model's root module ran `EVAL_FORWARDS` or more forwards
  without grad (or in eval mode) that no backward followed, is marked "eval";
  `eval_s` spans that evidence. Once the training forwards are seen inside
  optimizer steps (a closure), one such forward outside a step is evaluation:
  there the training forward cannot be outside. Batches of the training loader
  that such an evaluation consumed (ignite's evaluator run over the training
  loader: 640 samples a step counted as training) count as evaluation, not as
  the step's samples or data wait. Keras's `model.fit` takes one batch of a
  loader of its own to build the model (`_symbolic_build`): one batch is not
  an evaluation. One forward in eval mode without grad is one (a full-batch
  GNN's). The evaluation in the partial step at the process's end (after the
  last step) is `finish()`'s. Each pass counts (`passes`): an iteration of a
  loader an evaluation took batches of (`on_iter`), or a stretch of evaluating
  forwards that took none.
- Rollouts: a stretch of no-grad forwards that a policy ran to collect its
  training data (`_passes.is_rollout` says what the call rests on) marks its
  step "rollout", counted apart from evaluation.
- The loss of a step: the last loss a backward of that step passed in; where
  several backward calls outside an optimizer step fed one optimizer's step
  (gradient accumulation's micro-steps, also held backward calls that turn out
  to be one optimizer step), their sum (`_combine`: the mean loss where the
  script divides each by their number, as HF Trainer, accelerate, Lightning and
  nanoGPT do). With several optimizers (a GAN), the clock's optimizer's backward
  calls since another optimizer's step, summed (D's errD_real + errD_fake).
- The step's anatomy: forward is from the latest boundary (a batch
  fetched, a backward or an optimizer step ended, an eval stretch closed, the
  step began) to the start of each backward; backward is inside each backward;
  optimizer is inside each optimizer's step (a closure's forward and backward
  inside it count as theirs). Each is summed over the step: gradient
  accumulation's micro-steps, a GAN's two optimizers. What no phase covers is
  "other" (the agent: compute minus the three). With a `marker` (CUDA), each
  stamp also records an opaque token, and the step carries the token pairs that
  bound each phase for a reader to time later (profiling/phases.py). The agent
  sets the marker for the steps it times (`time_next`: one every `_cuda.PROBE_S` on
  CUDA), not for every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (EVAL_FORWARDS, TRAINED_STEPS, Phases: defined with the step's end, still importable from here)
from pitstop.profiling._stepcut import EVAL_FORWARDS, TRAINED_STEPS, Phases, StepCut, StepSink

# Backward calls held before deciding that no optimizer steps in this script.
# nanoGPT accumulates 40 micro-steps per optimizer step by default: fewer would
# invent steps there. 60 s bounds the wait on a slow manual-SGD loop.
PENDING_MAX = 64
PENDING_S = 60.0
# Another optimizer takes over as the clock after this many of its steps in a row
# with none of the clock's between: a later training phase with a new optimizer
# (accelerate's test script trains 8 in turn; pytorch/examples' mnist_forward_forward
# trains each layer with its own, one after the other). A GAN's optimizers alternate
# and never switch. Another optimizer's step is held as a boundary (as backward
# calls are): merged into the clock's next step, a step of its own once it switches.
SWITCH_AFTER = 2
# ...and at once when the clock's optimizer is gone (`alive`: the hooks' weak references): a script
# that builds a new optimizer every step (a learning-rate search, a per-step `SGD(...)`) recorded 1
# step for 192 before, every new one held as another optimizer's step and never emitted.
# Distinct optimizers are counted up to MAX_OPTIMIZERS (the Model event's figure): one per step
# would grow the set, and a Model event each, for the whole run.
MAX_OPTIMIZERS = 64

# Phase indexes of a step's token spans (`Phases.spans`).
FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2


class StepClock(StepCut):
    """The step boundaries of one training thread, from stamps the hooks pass in."""

    def __init__(self, on_step: StepSink, on_eval: Callable[[], None] | None = None,
                 on_new_optimizer: Callable[[], None] | None = None) -> None:
        self.on_step = on_step
        self.on_eval = on_eval
        self.on_new_optimizer = on_new_optimizer  # an optimizer stepped for the first time (after its step)
        self.index = 0  # the step being accumulated now (steps emitted so far)
        self.t_start: float | None = None  # where step 0 starts when nothing else says (torch imported)
        self.t_last: float | None = None  # end of the previous step (or first fetch)
        self.mode: str | None = None  # "optimizer" | "backward" | "manual" once decided
        self.primary: Any = None  # key of the optimizer whose steps are the clock
        self.optimizers: set[Any] = set()
        self.alive: Callable[[Any], bool] | None = None  # whether the optimizer of a key still exists (hooks)
        self._others = 0  # steps in a row of one other optimizer (`_other`) since the primary's last
        self._other: Any = None
        self.train_loader: Any = None
        # loader -> its DataLoader's batch_size (the agent, as each is built), and the dimension of
        # its batches that holds it once told (`batch_of`): 1 for a loader that batches sequence-first.
        self.batch_sizes: dict[Any, int] = {}
        self._batch_dims: dict[Any, int] = {}
        # The most training batches a plain optimizer step (one backward at most) took after step 0,
        # and how many such steps were seen (`_trained`).
        self._batches_max = 0
        self._batches_seen = 0
        self._batches_over = 0  # steps in a row that took more (`_trained`)
        self._step_batches = 0  # the training loader's batches in the step `_measure` measured last
        self._pending: list[list[Any]] = []  # held backward boundaries (see module doc)
        # Phase stamps: `marker()` records a token (a CUDA event) where one is set (the agent,
        # once the loss is seen on CUDA); `_mark` is the latest phase boundary.
        self.marker: Callable[[], Any] | None = None
        self._mark: float | None = None
        self._mark_tok: Any = None
        self._opt_open = False
        # Optimizer steps running now, [key, token] (the pre-hook came, the post-hook not yet),
        # innermost last: a wrapping optimizer (Lookahead) steps an inner one inside its own.
        self._open: list[list[Any]] = []
        self.open_steps = self._open  # (read by the hooks and the sampler; the list is never replaced)
        self.closure = False  # a backward ran inside an optimizer step: training forwards are there
        # Counters the sampler thread reads while no step has ended (events.Progress): a first
        # LBFGS step of ~100 s otherwise looked like a hang. One increment each, nothing else.
        self.batches = 0  # batches fetched, every loader
        self.backwards = 0
        self.grads = 0  # torch.autograd.grad calls (torch.func's grad too): a hand-made update's gradients
        self.closures = 0  # backward calls inside a running optimizer step
        # True while held boundaries are emitted at once, long after they ended (`_release`): no
        # profiler window is driven by them (a window over that burst recorded 0 ops in 0.2 ms).
        self.releasing = False
        self.opened_at = 0.0  # perf_counter stamp of the outermost running optimizer step's start
        self._closure_loss = False  # a backward inside the running optimizer step gave the step a loss
        # Backward calls outside optimizer steps since the last optimizer step (`_loose_backward`),
        # the most one optimizer step took (gradient accumulation), and where the first one ended:
        # (time, the training loader's wait and samples then).
        self._loose = 0
        self._micro_max = 1
        self._first: tuple[float, float, int | None] = (0.0, 0.0, None)
        # Iterations begun per loader (`on_iter`): an evaluation pass is an iteration of a loader
        # whose batches an evaluation took, and two back to back (ignite's evaluator over the
        # training loader, then the validation loader) are two passes in one step.
        self._iters: dict[Any, int] = {}
        self._primary_from = 0  # held boundaries before this index are another optimizer's (`_cut`)
        # The loss of the other optimizer's backward calls merged into the step being emitted (a GAN's G), set
        # by `_cut` for the step's sink to take (and clear); None in every other step.
        self.other_loss: Any = None
        # The evaluation after the last step (`finish`): its passes, and rollouts there.
        self.end_passes = 0
        self.end_rollouts = 0
        self.end_rollout_s = 0.0
        self._reset()

    def _reset(self) -> None:
        # loader -> [wait, samples|None, first start, last end, batches, eval wait, eval samples, eval batches,
        #            its first iteration in this step, its last]
        self._fetch: dict[Any, list[Any]] = {}
        self._last_loader: Any = None
        # the last batch no root forward took yet: (loader, start, wait, samples, iteration)
        self._unused: tuple[Any, ...] | None = None
        self._fwd_samples: int | None = None
        self._seg_t0: float | None = None  # open stretch of eval forwards
        self._seg_n = 0
        self._seg_batches: list[tuple[Any, ...]] = []  # the batches its forwards took
        self._seg_need = EVAL_FORWARDS  # forwards that make it an evaluation
        self._seg_nograd = False  # all its forwards ran without grad: no backward can have come of them
        self._seg_busy = 0.0  # seconds inside its forwards
        self._seg_most: int | None = 0  # the most samples one of its forwards took (None: one unknown)
        self._fwd_t0: float | None = None  # where the latest forward without grad began
        self._fwd_end: float | None = None  # where the latest forward without grad ended
        self._eval_iters: set[tuple[Any, int]] = set()  # (loader, iteration) an evaluation's forwards took batches of
        self._plain_passes = 0  # evaluation stretches that took no DataLoader batch (nanoGPT's estimate_loss)
        self._rollouts = 0  # stretches that were rollouts (`_passes.is_rollout`), and their seconds
        self._rollout_s = 0.0
        self._eval_t0: float | None = None  # evidence of evaluation in this step
        self._eval_t1 = 0.0
        self._eval_told = False
        self._loss: Any = None  # the last loss a backward of this step passed in (opaque: a float or a tensor)
        self._losses: list[Any] = []  # the losses of its backward calls outside optimizer steps (`_step_loss`)
        self._phased = False  # a backward or an optimizer step was stamped in this step
        self._fwd = self._bwd = self._opt = 0.0
        self._spans: list[tuple[int, Any, Any]] | None = [] if self.marker is not None else None

    # ---- inputs ---------------------------------------------------------------
    def on_fetch(self, loader: Any, started: float, waited: float, samples: int | tuple[int, ...] | None) -> None:
        """A batch came out of a DataLoader iterator (`loader` identifies its DataLoader). `samples`:
        the batch's samples, or the shape of its first tensor (`batch_of` reads it)."""
        self.batches += 1
        if samples is not None and type(samples) is not int:
            samples = self.batch_of(loader, samples) if isinstance(samples, tuple) else None
        if self.t_last is None:
            self.t_last = started
        gen = self._iters.get(loader, 0)
        acc = self._fetch.get(loader)
        if acc is None:
            acc = self._fetch[loader] = [0.0, None, started, 0.0, 0, 0.0, 0, 0, gen, gen]
        acc[0] += waited
        if samples is not None:
            acc[1] = samples if acc[1] is None else acc[1] + samples
        acc[3] = self._mark = started + waited
        acc[4] += 1
        acc[9] = gen
        if acc[4] == EVAL_FORWARDS and self.train_loader is not None and loader != self.train_loader:
            self._tell_eval()  # counted at the boundary: it may be a new training loader
        if self.marker is not None:
            self._mark_tok = self.marker()
        self._last_loader = loader
        self._unused = (loader, started, waited, samples, gen)

    def on_iter(self, loader: Any) -> None:
        """An iteration of `loader` gave its first batch (called before that batch's `on_fetch`)."""
        self._iters[loader] = self._iters.get(loader, 0) + 1

    def batch_of(self, loader: Any, shape: tuple[int, ...]) -> int:
        """Samples in a batch of `loader` whose first tensor has `shape`: its batch dimension.

        The leading one, unless the loader batches sequence-first (a collate_fn that stacks
        samples along dimension 1, for a model with batch_first=False: pytorch/examples'
        language_translation read its padded length, 17, for batches of 32). Told once a
        batch holds the DataLoader's batch_size in one of its first two dimensions and not in
        the other; until then, and without a batch_size (a batch_sampler), the leading one.
        """
        dim = self._batch_dims.get(loader)
        if dim is None:
            size = self.batch_sizes.get(loader)
            if size is None or len(shape) < 2 or (shape[0] == size) == (shape[1] == size):
                return shape[0]
            dim = self._batch_dims[loader] = 0 if shape[0] == size else 1
        return shape[dim] if len(shape) > dim else shape[0]

    @property
    def wants_forward_samples(self) -> bool:
        """True until a DataLoader is seen feeding steps: samples then come from the model's input.
        The hooks measure them while `train_loader` is None (never again once a loader fed a step);
        `on_forward` keeps them while this holds."""
        return self.train_loader is None and not self._fetch

    def on_forward(self, training: bool, samples: int | None, now: float, no_grad: bool = False,
                   eval_mode: bool = False) -> None:
        """The model's root module starts a forward; `training`: grad on and train mode. For one that
        does not train, the hooks say which: `no_grad` (grad off), `eval_mode` (`model.eval()`);
        `samples` is then its input's where the hooks know it (no DataLoader fed a step)."""
        unused, self._unused = self._unused, None  # this forward takes the batch in hand
        if not training:
            if self._seg_t0 is None:
                self._seg_t0 = unused[1] if unused is not None else now  # its batch's loading too
                # One forward in eval mode without grad is an evaluation (a full-batch GNN's, over the
                # whole graph: a PyG GCN's 20 evaluations read as training steps 0.66 s longer); one
                # without grad in train mode is not (a target computed under no_grad every step).
                self._seg_need = 1 if (self.closure and not self._open) or (no_grad and eval_mode) \
                    else EVAL_FORWARDS
                self._seg_nograd = no_grad
                self._seg_busy, self._seg_most = 0.0, 0
            elif not no_grad:
                self._seg_nograd = False
            if unused is not None:
                self._seg_batches.append(unused)
            most = self._seg_most
            if most is not None:
                self._seg_most = None if samples is None else max(most, samples)
            self._fwd_t0 = now
            self._seg_n += 1
            if self._seg_n == self._seg_need:
                self._tell_eval()  # (the stretch's evaluation or rollout is decided where it ends)
            return
        if self._seg_t0 is not None:
            # Training resumed where its batch began to load (ignite's next epoch after an
            # evaluator run over the training loader), else here.
            self._close_segment(unused[1] if unused is not None and unused[1] >= self._seg_t0 else now)
        if samples is not None and self.wants_forward_samples:
            self._fwd_samples = samples if self._fwd_samples is None else self._fwd_samples + samples

    def on_forward_end(self, now: float) -> None:
        """A forward of the root module without grad returned (where an evaluation after the last step ends)."""
        self._fwd_end = now
        if self._fwd_t0 is not None:
            self._seg_busy += now - self._fwd_t0
            self._fwd_t0 = None

    def on_backward(self, now: float, loss: Any = None, started: float | None = None, token: Any = None) -> int:
        """A backward call (of `loss`, when it was read) that began at `started` (`token`: the marker's
        token then). Returns the steps emitted (0, 1, or the held ones)."""
        self.backwards += 1
        if loss is not None:
            self._loss = loss
            if not self._open:
                self._losses.append(loss)
            elif not self._closure_loss:  # a closure's first: Lightning's last micro-step runs in its closure
                self._closure_loss = True  # (LBFGS evaluates the same loss ~20 times a step: once counts)
                self._losses.append(loss)
        if started is not None:  # the phases: forward from the latest boundary to here, then backward
            mark = self._mark
            if mark is None:
                mark = self.t_last if self.t_last is not None else started
            if started > mark:
                self._fwd += started - mark
            self._bwd += now - started
            self._phased = True
            self._mark = now
            if self.marker is not None:
                self._spans_to_now((FORWARD, BACKWARD), token)
        if self._seg_t0 is not None:
            if self._seg_nograd:  # no backward came of forwards without grad: the stretch ended before it
                self._close_segment(started if started is not None and started >= self._seg_t0 else now, True)
            else:  # forwards with grad that a backward follows were training (eval-mode fine-tuning)
                self._seg_t0, self._seg_n, self._seg_batches, self._seg_need = None, 0, [], EVAL_FORWARDS
        if self._open:  # a closure's backward: the running optimizer step is the boundary
            self.closure = True
            self.closures += 1
            return 0
        mode = self.mode
        if mode == "optimizer":
            return self._loose_backward(now)
        if mode == "manual":
            return 0
        if mode == "backward":
            self._cut("backward", now)
            return 1
        self._pending.append(self._measure(now))
        self.t_last = now
        self._reset()
        if len(self._pending) >= PENDING_MAX or now - self._pending[0][0] >= PENDING_S:
            return self.flush()
        return 0

    def _loose_backward(self, now: float) -> int:
        """A backward outside an optimizer step while optimizer steps are the clock.

        The first since the last optimizer step is that step's (where it ended is kept); from
        the second on each is held as a boundary, as before the clock decided: the optimizer's
        next step takes them in (gradient accumulation), or, after `PENDING_MAX` of them, or four
        times the most micro-steps an optimizer step took, with no optimizer step, they were
        steps: backward calls are the clock from here. The keras-io guide trains 300 steps with
        torch.optim, then 900 with Keras's own optimizers, which step no torch optimizer:
        pitstop counted 300, and the 900 as one evaluation after the last step.
        """
        loose = self._loose = self._loose + 1
        if loose == 1:  # (one lookup and a tuple: every step of a plain loop comes here)
            acc = self._fetch.get(self.train_loader)
            self._first = (now, acc[0], acc[1]) if acc is not None else (now, 0.0, None)
            return 0
        if loose == 2:  # the first becomes a boundary of its own, now that there is a second
            end, wait, samples = self._first
            loss = self._losses.pop(0) if len(self._losses) >= 2 else None
            start = self.t_last if self.t_last is not None else (self.t_start if self.t_start is not None else end)
            self._pending.append([end, start, wait, samples, 0.0, None, self.train_loader, loss, None, 0])
            self.t_last = end
            step = self._measure(now)
            step[2] -= wait
            if samples is not None and step[3] is not None:
                step[3] -= samples
        else:
            step = self._measure(now)
        self._pending.append(step)
        self.t_last = now
        self._reset()
        if len(self._pending) < max(PENDING_MAX, 4 * self._micro_max):
            return 0
        self.mode = None  # no optimizer steps any more: `flush` makes the held boundaries steps
        return self.flush()

    def flush(self) -> int:
        """The script is ending: held backward boundaries were steps after all (no optimizer came)."""
        if not self._pending or self.mode is not None:
            return 0
        self.mode = "backward"
        held, self._pending = self._pending, []
        self._release(held, "backward")
        return len(held)

    def _release(self, held: list[list[Any]], source: str) -> None:
        """Held boundaries turned out to be steps: emitted now, in order."""
        self.releasing = True
        self._primary_from = 0
        try:
            for step in held:
                self._emit(step, source)
        finally:
            self.releasing = False

    def finish(self, now: float) -> float | None:
        """The process is ending: held boundaries become steps (`flush`); returns the seconds of the
        evaluation in the partial step after the last one (HF Trainer's, Keras's last pass), else None."""
        if self.mode == "optimizer" and self._primary_from:
            # Another optimizer stepped after the clock's last step (a GAN's G of the last iteration): no step
            # of the clock's takes its loss in now, so it is `other_loss` for the agent to read as it ends.
            # dcgan that died right after a NaN in G's loss showed G's loss of the iteration before, finite.
            self.other_loss = self._combine([part[7] for part in self._pending[:self._primary_from]])
        self.flush()
        if self._seg_t0 is not None:  # it ended with its last forward, not at the process's exit
            end = self._fwd_end if self._fwd_end is not None and self._fwd_end >= self._seg_t0 else now
            self._close_segment(end)
        # No step ended: the loader fed last is training's, as a step's would be (`_measure`). A first step
        # stopped in its backward (a DDP rank waiting for a hung peer) read its loader's two iterations (a
        # batch-size probe, the epoch) as another loader's: "eval 2 passes".
        train = self.train_loader if self.train_loader is not None else self._last_loader
        acc = self._fetch.get(train)
        evaluated, eval_s = self._eval_span(acc, now)
        # (HF Trainer's evaluation at its last step and its final `evaluate()` are two passes here)
        self.end_passes = self._pass_count(acc) if evaluated else 0
        self.end_rollouts, self.end_rollout_s = self._rollouts, self._rollout_s
        return eval_s if evaluated else None

    def abandon(self, key: Any) -> None:
        """That optimizer's step raised (its post-hook never came): it and steps opened inside it ended."""
        opened = self._open
        if not opened:  # every pre-hook: no step running (the loop below cost ~1.5 us a step in place)
            return
        if len(opened) == 1 and opened[0][0] == key:  # every post-hook: the one step running ended
            opened.clear()
            self._opt_open = False
            return
        for i, entry in enumerate(opened):
            if entry[0] == key:
                del self._open[i:]
                self._opt_open = bool(self._open)
                return

    def on_optimizer_start(self, key: Any, now: float, token: Any = None) -> None:
        """An optimizer's step() begins (the optimizer's pre-hook); `token`: what the hooks use to see it end."""
        if self._open:
            self.abandon(key)  # still open: its previous step raised
        if not self._open:
            self.opened_at = now
            self._closure_loss = False
        self._open.append([key, token])
        if self._seg_t0 is not None:  # an evaluation between closure steps ends here
            self._close_segment(now)
        self._opt_open = True
        self._mark = now
        if self.marker is not None:
            self._mark_tok = self.marker()

    def on_optimizer_step(self, key: Any, now: float) -> int:
        """An optimizer stepped. Returns how many held backward boundaries merged into this step."""
        opened = self._open
        if key == self.primary and self.mode == "optimizer" and len(opened) == 1 and opened[0][0] == key \
                and self._fast_cut(now):
            return 0
        known = len(self.optimizers)
        merged = self._optimizer_step(key, now)
        if len(self.optimizers) != known and self.on_new_optimizer is not None:
            self.on_new_optimizer()
        return merged

    def _optimizer_step(self, key: Any, now: float) -> int:
        if self._loose:
            self._micro_max = max(self._micro_max, self._loose)
            self._loose = 0
        if self._opt_open:
            self._stamp_optimizer(now)
        self.abandon(key)  # ended; so did any step opened inside it that raised
        if key == self.primary and self.mode == "optimizer":  # every step after the first
            self._others = 0
            self._cut("optimizer", now)
            return 0
        if self.mode == "manual":
            return 0
        if len(self.optimizers) < MAX_OPTIMIZERS:
            self.optimizers.add(key)
        if self.primary is None:
            self.primary = key
        switched = False
        if key != self.primary:
            self._others = self._others + 1 if key == self._other else 1
            self._other = key
            if self._others < SWITCH_AFTER and (self.alive is None or self.alive(self.primary)):
                # Held: the clock's next step takes it in, or it is a new phase's first step.
                self._pending.append(self._measure(now))
                self._primary_from = len(self._pending)  # the clock's own backward calls come after it
                self.t_last = now
                self._reset()
                return 0
            self.primary, switched = key, True
        self._others = 0
        self.mode = "optimizer"
        merged = len(self._pending)
        if switched:  # a new phase: its first steps were steps (held while they could have been a GAN's)
            held, self._pending = self._pending, []
            self._release(held, "optimizer")
            merged = 0
        self._cut("optimizer", now)
        return merged

    def manual(self, samples: int | None, now: float) -> None:
        """`pitstop.step()`: the script marks its steps itself."""
        self.mode = "manual"
        self._pending = []
        self._primary_from = 0
        if samples is not None:
            self._fwd_samples = samples if self._fwd_samples is None else self._fwd_samples + samples
        self._cut("manual", now)
        if self.marker is not None:  # the next step's forward starts here, on the device too
            self._mark_tok = self.marker()

    def time_next(self, marker: Callable[[], Any] | None) -> None:
        """At a step boundary (the agent, as a step ends): the steps from here on are timed with
        `marker` (a token now, where the next forward starts), or, with None, not."""
        self.marker = marker
        self._spans = [] if marker is not None else None
        self._mark_tok = marker() if marker is not None else None

    # ---- phases ---------------------------------------------------------------
    def _stamp_optimizer(self, now: float) -> None:
        # From the later of its start and the end of a backward inside it (a closure's).
        self._opt_open = False
        if self._mark is not None:
            self._opt += now - self._mark
        self._phased = True
        self._mark = now
        if self.marker is not None:
            self._spans_to_now((OPTIMIZER,))

    def _spans_to_now(self, phases: tuple[int, ...], *middle: Any) -> None:
        """A token now; a span per phase between the mark's token, the `middle` ones and it."""
        end = self.marker() if self.marker is not None else None
        tokens = (self._mark_tok, *middle, end)
        spans = self._spans
        if spans is not None:
            if any(t is None for t in tokens):
                self._spans = None  # a phase without its tokens: this step keeps the host clock
            else:
                spans.extend(zip(phases, tokens, tokens[1:]))
        self._mark_tok = end

    # ---- boundaries ------------------------------------------------------------
    def _fast_cut(self, now: float) -> bool:
        """The primary optimizer's step ended a plain training step: cut it in few operations, or False.

        Plain: no evaluation evidence or rollout, no held backward boundaries, no phase tokens, and no
        loader but the training one fed it. Whatever `_cut` would compute here this computes
        the same way (`test_stepclock.py` runs random event streams both ways); anything else
        goes to `_cut`. Per-step Python is what a 1 ms step pays for (docs/internals.md).
        """
        if self._seg_t0 is not None or self._eval_t0 is not None or self._pending or self.marker is not None \
                or self._rollouts:
            return False
        fetched = self._fetch
        train = self.train_loader
        if fetched:
            acc = fetched.get(train) if len(fetched) == 1 else None
            if acc is None:
                return False
            wait = acc[0]
            samples = acc[1] if acc[1] is not None else self._fwd_samples
            if acc[4] > 1 or self._batches_seen < TRAINED_STEPS:  # (once set, one batch is never too many)
                samples = self._trained(acc[4], samples)
            self._fetch = {}
            self._last_loader = None
        else:  # (and no loader last fetched: `_last_loader` is reset with `_fetch`)
            wait = 0.0
            samples = self._fwd_samples
            if samples is None and train is not None:
                samples = 0  # its batch came in an earlier step (fetched one ahead), which counted it
        phased = self._phased
        if self._opt_open:
            if self._mark is not None:
                self._opt += now - self._mark
            phased = True
        self._opt_open = False
        self._open.clear()
        self._others = 0
        self._loose = 0  # (at most one backward came: more would have held a boundary)
        start = self.t_last if self.t_last is not None else (self.t_start if self.t_start is not None else now)
        phases = (self._fwd, self._bwd, self._opt, None) if phased else None
        loss = self._step_loss()
        self._losses.clear()
        self._mark = self.t_last = now
        self._unused = self._fwd_samples = self._fwd_end = self._loss = None
        self._fwd = self._bwd = self._opt = 0.0
        self._phased = False
        index = self.index
        self.index = index + 1
        self.on_step(index, start, now, wait, samples, "optimizer", None, 0.0, train, loss, phases, 0)
        return True
