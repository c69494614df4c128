"""Provides the rules about shares of the time: evaluation, a moderate data wait, CPU threads fighting for cores."""

from __future__ import annotations

import math

from pitstop.analysis import format as fmt
from pitstop.analysis._context import MIN_STEPS, Context, Finding, describe_loader
from pitstop.analysis._loaderfix import eval_less_often, loader_fix
from pitstop.analysis._rules_loop import CPU_SATURATED, DATA_WAIT_FRAC, worker_advice
from pitstop.analysis._workers import MIN_GAIN

# Evaluation over 15% of the training time is worth a line (a common recipe, one
# validation pass per epoch on a tenth of the data, costs 5-10%); from 30% the
# run spends a third of its time not training.
EVAL_SHARE = 0.15
EVAL_SHARE_MEDIUM = 0.30
# One pass may be the final evaluation, which no schedule change removes.
EVAL_MIN_PASSES = 2

# A data wait over 10% of the step is a stall worth more than 1.11x: a peer profiler called a run
# input-bound at 13% while pitstop, under its 20% threshold, said nothing. "Over 10%" as the evidence
# shows it, in whole percent: a wait shown as "10%" (0.1000...02 after summing) does not fire.
DATA_WAIT_MODERATE_FRAC = 0.105

# Threads beyond the usable cores by at least half a core, with the machine's CPUs at
# CPU_SATURATED (85%) or more: then the threads are really waiting for each other.
OVERSUBSCRIBED_EXCESS = 0.5


def training_time(first_t: float, first_step_start: float | None, last_t: float, eval_s: float) -> float:
    """Seconds from the first training step's start to the run's last event: what evaluating less often shortens.

    The set-up before the first step (imports, the dataset, the model) is not: calibration's
    frequent-eval, 40 steps with 8 evaluation batches every 2, spent 18 s of a 31 s run before its
    first step on a loaded machine, and its evaluation read 19% of the run where it took 48% of
    its training loop. Passes before the first step (nanoGPT's estimate at iteration 0) are in
    `eval_s`: the span is never shorter than the evaluation it holds.
    """
    start = first_step_start if first_step_start is not None and first_step_start >= first_t else first_t
    return max(last_t - start, min(eval_s, last_t - first_t))


def eval_share(ctx: Context) -> Finding | None:
    """Evaluation passes take a large share of the run's wall time.

    A policy's rollouts are not in `eval_passes` or `eval_s` (`RunState.rollouts`): they collect the
    data it trains on, and stable-baselines3's PPO was told to "evaluate half as often" for them."""
    run = ctx.run
    if run.eval_passes < EVAL_MIN_PASSES or run.first_t is None or run.last_t is None:
        return None
    elapsed = training_time(run.first_t, run.first_step_start, run.last_t, run.eval_s)
    if elapsed <= 0 or run.eval_s <= 0:
        return None
    share = run.eval_s / elapsed
    if share < EVAL_SHARE:
        return None
    per_pass = run.eval_s / run.eval_passes
    # (a step that holds an evaluation trained too: GCN's loop evaluates after every step)
    train_between = (run.train_steps + run.eval_train_steps) / run.eval_passes
    evidence = [
        f"{run.eval_passes} evaluation passes took {run.eval_s:.1f} s, {share:.0%} of the training's {elapsed:.0f} s "
        f"({fmt.duration(per_pass)} each)",
        f"one pass every ~{train_between:.0f} training step{'s' if round(train_between) != 1 else ''}"
        + (f" ({train_between * ctx.wall_mean:.1f} s of training at the mean step)" if ctx.wall_mean else ""),
    ]
    evals = [d for d in run.dataloaders.values() if run.loader_role(d.id) == "eval"]
    fix = eval_less_often(evals[0] if evals else None)
    if not (evals and evals[0].framework):  # (a framework's evaluation loop runs under no_grad already)
        fix += "\nwith torch.inference_mode():  # no autograd bookkeeping in evaluation"
    for dl in evals[:1]:
        evidence.append(describe_loader(dl, role="evaluation"))
        if dl.num_workers == 0:
            # Twice its batch where the loader says it (evaluation keeps no activations for backward); a loader
            # that batches in its sampler (Keras's fit: batch_size None) read "batch_size=2" before.
            batch = [f"batch_size={dl.batch_size * 2}"] if dl.batch_size else []
            fix += "\n" + loader_fix(dl, ["val_set", *batch, "num_workers=2"],
                                    role="eval", note="eval loads in workers")
    return Finding(
        rule="eval-share",
        title="Evaluation takes a large share of the run",
        severity="medium" if share >= EVAL_SHARE_MEDIUM else "low",
        evidence=evidence,
        cause="evaluation runs often, on much data, or slowly (no workers, autograd on): the model is not training meanwhile",
        fix=fix,
        gain=f"evaluating half as often gives back ~{share / 2:.0%} of the training time",
        knob=None,
    )


def data_wait_moderate(ctx: Context) -> Finding | None:
    """A data wait under the data-wait threshold, graded by the gain at stake (never beside data-wait)."""
    if ctx.n < MIN_STEPS or ctx.data_frac is None:
        return None
    frac = ctx.data_frac
    if frac < DATA_WAIT_MODERATE_FRAC or frac > DATA_WAIT_FRAC:
        return None  # above DATA_WAIT_FRAC the data-wait finding speaks
    assert ctx.wall_mean is not None and ctx.wait_mean is not None and ctx.compute_mean is not None
    # The mean step if the wait were hidden entirely: 1 / (1 - frac), as the figures quoted show.
    hidden = fmt.speedup(ctx.wall_mean, ctx.compute_mean)
    dl = ctx.loader()
    evidence = [f"data wait: {fmt.share(ctx.wait_mean, ctx.wall_mean)} of the mean step, over {ctx.n} steps: "
                f"under the {DATA_WAIT_FRAC:.0%} of a data-bound run, still worth up to "
                f"{fmt.ratio(ctx.wall_mean / ctx.compute_mean)}"]
    workers = dl.num_workers if dl is not None else 0
    if dl is not None:
        evidence.append(f"{describe_loader(dl)}: persistent_workers={dl.persistent_workers}, "
                        f"prefetch_factor={dl.prefetch_factor}")
    # The worker model's count, not "one more": minGPT's adder (11% wait, 2 cores, the model on both)
    # was told num_workers=1 and "up to 1.12x", and 1 worker measured x0.9.
    advice = worker_advice(ctx)
    assert advice is not None
    facts, chosen = advice
    pays = chosen.workers > workers and chosen.gain(facts.wall) >= MIN_GAIN
    s = ctx.run
    busy = s.system_cpu_sum / s.system_cpu_n if s.system_cpu_n else None
    if busy is not None and busy >= CPU_SATURATED and not ctx.cuda:
        evidence.append(f"the machine's CPUs are {busy:.0f}% busy and training computes on them")
    if facts.cpu is not None:
        evidence.append(f"the step takes {fmt.duration(facts.cpu)} of CPU per mean step of "
                        f"{fmt.duration(facts.wall)} ({facts.cpu / facts.wall:.2f} cores), {facts.cores:.1f} "
                        "core(s) free")
    if pays:
        args = [f"num_workers={chosen.workers}", "persistent_workers=True",
                f"prefetch_factor={max(4, (dl.prefetch_factor or 2) if dl else 2)}"]
        if ctx.cuda:
            args.append("pin_memory=True")
        fix = loader_fix(dl, ["dataset", "...", *args])
        word = "at most " if chosen.bound else "~"  # a bound: CPU unread, or a contended machine
        gain = (f"{word}{fmt.speedup(facts.wall, chosen.step)} in the mean step with {chosen.workers} "
                f"worker{'s' if chosen.workers != 1 else ''} ({chosen.stop})")
        knob: str | None = "num_workers"
    else:
        fix = ("# make each batch cheaper to load (lighter transforms, work done once offline);\n"
               "# no worker count is suggested: the measurement says workers would not pay here")
        more = (f"{chosen.named()} would give "
                f"{fmt.speedup(facts.wall, chosen.step)} by the measurement ({chosen.stop}), under the "
                f"{fmt.ratio(MIN_GAIN)} that workers' own costs can eat" if chosen.workers > workers
                else f"more than the {workers} worker(s) there are would not help ({chosen.stop})")
        gain = f"at most {hidden} in the mean step if loading cost nothing; no worker fix: {more}"
        knob = None
    return Finding(
        rule="data-wait-moderate",
        title="The step waits a little for data",
        severity="low",
        evidence=evidence,
        cause="the DataLoader is not always ready when the step asks: too few workers, or too little prefetch to "
              "absorb slow batches",
        fix=fix,
        gain=gain,
        knob=knob,
    )


def cpu_oversubscribed(ctx: Context) -> Finding | None:
    """torch's intra-op threads plus the workers' busy cores exceed the usable cores, and the CPUs are saturated.

    Needs `Runtime.torch_threads` (torch.get_num_threads(); the latest Runtime
    holds what the script set before its first step): older records do not
    carry it, and then the rule says nothing.
    DataLoader workers run with one torch thread each (torch sets it in every
    worker), so they count for the cores they were measured to use.
    """
    rt = ctx.run.runtime
    threads = rt.torch_threads if rt is not None else None
    usable = ctx.usable_cpus()
    s = ctx.run
    if not threads or not usable or ctx.n < MIN_STEPS:
        return None
    # Readings while the measured steps ran: start-up (imports, dataset set-up) leaves the CPUs idle.
    start = ctx.steps[0].t - ctx.steps[0].wall
    during = [x.system_cpu for x in s.samples if x.system_cpu is not None and x.t >= start]
    if not during:
        return None
    busy = sum(during) / len(during)
    dl = ctx.loader()
    cpu = ctx.loader_worker_cpu(dl) if dl is not None and dl.num_workers else None
    worker_cores = cpu[1] / 100.0 if cpu is not None else 0.0
    demand = threads + worker_cores
    if demand - usable < OVERSUBSCRIBED_EXCESS or busy < CPU_SATURATED:
        return None
    main = s.cpu_main_sum / s.cpu_main_n / 100.0 if s.cpu_main_n else None
    suggest = max(1, usable - math.ceil(worker_cores))
    evidence = [
        f"torch runs {threads} intra-op threads and the DataLoader workers use {worker_cores:.2f} cores: "
        f"{demand:.1f} cores wanted, {usable} usable",
        f"the machine's CPUs are {busy:.0f}% busy" + (f"; the main process gets {main:.2f} cores" if main is not None else ""),
    ]
    return Finding(
        rule="cpu-oversubscribed",
        title="More CPU threads than cores",
        severity="medium",
        evidence=evidence,
        cause=("intra-op threads wait for cores the workers hold: a parallel op ends with its slowest thread, "
               "and threads that spin while they wait burn the cores the workers need"),
        fix=(f"torch.set_num_threads({suggest})  # usable cores minus the workers' share\n"
             f"# or, before Python starts: OMP_NUM_THREADS={suggest}"),
        gain="not estimated from this run: measure the step with the thread count above against the current one",
        knob=None,
    )
