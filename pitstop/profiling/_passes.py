"""Provides what a stretch of the model's forwards without grad was: an evaluation pass or a rollout.

A rollout (reinforcement learning: the policy acting in an environment, one
forward per environment step, to collect the data the next updates train on)
looks like an evaluation to the step clock: forwards of the root module under
no_grad, in eval mode (stable-baselines3 sets it), between optimizer steps.
Read as evaluation, stable-baselines3's PPO on CartPole showed "eval 39 passes"
and the share rule advised evaluating less often, for the data it trains on.

What the call rests on, all of it seen by the clock without touching the data:
- no DataLoader batch in the stretch: an evaluation iterates a dataset, a
  rollout feeds the model what the environment returned;
- many forwards (`ROLLOUT_FORWARDS` or more: PPO's default rollout is 2,048
  environment steps, an evaluation's forward count is its batches), each of a
  few samples at most (`ROLLOUT_SAMPLES`, the environments stepped together;
  an input whose samples are not known is not a rollout's);
- and either the stretch ended at a backward that no forward of the model fed
  (the updates train on stored transitions, through another method:
  stable-baselines3's `evaluate_actions`), or the forwards took under
  `ROLLOUT_BUSY` of the stretch, the rest being the environment's steps and
  the buffer's copies, not the model. Measured on this 2-core machine under
  load: stable-baselines3 PPO on CartPole, 512-step rollouts of one sample a
  forward, 61-71% of each inside the policy's forwards, ended by a backward;
  nanoGPT's `estimate_loss` (12 samples a forward from `get_batch`, 40
  forwards a pass here, 400 by default) 87-97%, ended by a training forward.
A stretch that fails any of them stays an evaluation pass.
"""

from __future__ import annotations

ROLLOUT_FORWARDS = 64
ROLLOUT_SAMPLES = 16
ROLLOUT_BUSY = 0.8


def is_rollout(forwards: int, most_samples: int | None, busy_s: float, span_s: float, batches: int,
               by_backward: bool) -> bool:
    """Whether a stretch of `forwards` no-grad forwards (the largest held `most_samples`, None where
    one was unknown), `busy_s` of them inside the forwards over `span_s`, fed by `batches` DataLoader
    batches, and ended by a backward that no model forward fed (`by_backward`), was a rollout (see the
    module doc for what each test rests on)."""
    if batches or forwards < ROLLOUT_FORWARDS or most_samples is None or most_samples > ROLLOUT_SAMPLES:
        return False
    return by_backward or (span_s > 0 and busy_s < ROLLOUT_BUSY * span_s)
