"""Provides the rules about the training loop itself: data stalls, host-bound steps, copies, syncs."""

from __future__ import annotations

import math

from pitstop.analysis import format as fmt
from pitstop.analysis._context import MIN_GPU_SAMPLES, MIN_STEPS, Context, Finding, describe_loader
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, other_cores, run_delay
from pitstop.analysis._loaderfix import loader_fix
from pitstop.analysis._stats import median_and_spread
from pitstop.analysis._workers import MIN_GAIN, LoaderFacts, WorkerPlan, plan
from pitstop.events import Sample

# Above 20% of the step spent blocked on the DataLoader the loader, not the
# model, sets the pace: a healthy loader with prefetching keeps this near 0-5%.
DATA_WAIT_FRAC = 0.20
# At half of the step waiting, the run is at best half as fast as it could be.
DATA_WAIT_HIGH = 0.50
# Mean NVML utilisation under 60% means the GPU sits idle 40% of the time;
# a well fed GPU training step reads 85-100%.
GPU_UTIL_LOW = 60.0
GPU_UTIL_VERY_LOW = 30.0
# Ops that make the host wait for the GPU. aten::item calls
# aten::_local_scalar_dense, so the rate is the max over names, never the sum.
SYNC_OPS = (
    "aten::item",
    "aten::_local_scalar_dense",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
)
# One sync per step is the classic `total += loss.item()`: it stops the CPU
# from queueing the next step while the GPU still runs this one.
SYNCS_PER_STEP = 1.0
SYNCS_PER_STEP_HIGH = 5.0
# Pageable copies costing over 5% of the step make the finding medium, else low.
PAGEABLE_MEDIUM_FRAC = 0.05


# Mean machine CPU (percent) from which a CPU-only run counts as saturated (data-wait-moderate's caution).
CPU_SATURATED = 85.0
MIN_CPU_SAMPLES = 2  # readings of the main process's CPU while it trains, for its CPU per step


def _training_samples(ctx: Context) -> list[Sample]:
    """Sampler readings while it trains: each covers the time since the one before, so the first
    after the first step still holds the imports and the set-up, and is left out."""
    run = ctx.run
    if run.first_step_t is None:
        return []
    return [s for s in run.samples if s.t > run.first_step_t][1:]


def cpu_per_step(ctx: Context, workers: int) -> float | None:
    """Core-seconds of CPU a mean step takes: the main process's, plus its loader's workers'; None unread.

    The CPU used, not the time its threads waited for a core: that wait counts
    torch's spinning intra-op threads too (sleeping reads beside 1.7 busy cores
    read as 528 ms of CPU in a 318 ms step, and a worker, which measured x1.41,
    as no gain). Where it waited (`contended`), a CPU-bound loader starved on a
    busy machine uses 0.3 of a core and reads as waiting on I/O, so `_workers`
    then holds the workers to the usable cores and states the gain as a bound.
    With workers, the workers' CPU counts only when the main process
    did not wait for a core: then theirs is unknown, and their low CPU no sign of
    I/O (2 CPU-bound workers beside 2 hogs read as waiting on I/O, and 8 workers
    were suggested and tuned).
    """
    wall = ctx.wall_mean
    if wall is None:
        return None
    samples = _training_samples(ctx)
    mains = [p.cpu / 100.0 for s in samples for p in s.procs if p.role == "main" and p.cpu is not None]
    if len(mains) < MIN_CPU_SAMPLES:
        return None
    cores = sum(mains) / len(mains)
    if workers:
        if contended(ctx):
            return None
        cpu = ctx.loader_worker_cpu(ctx.loader())
        if cpu is None:
            return None
        cores += cpu[1] / 100.0
    return cores * wall


def contended(ctx: Context) -> bool:
    """The main process's threads waited for a core (run delay) while it trained: the free cores are a guess."""
    waited = run_delay(ctx.run, ctx.run.first_step_t) if ctx.run.first_step_t is not None else None
    return waited is not None and waited >= CONTENDED_WAIT_CORES


def free_cores(ctx: Context) -> float | None:
    """Cores left to this run: the usable ones minus the median other processes kept busy while it trained."""
    usable = ctx.usable_cpus()
    if usable is None:
        return None
    cpus = ctx.run.runtime.cpu_count if ctx.run.runtime is not None else None
    others = [o for s in _training_samples(ctx) if (o := other_cores(s, cpus)) is not None]
    if not others:
        return float(usable)
    return max(1.0, min(float(usable), (cpus or usable) - median_and_spread(others)[0]))


def loader_facts(ctx: Context) -> LoaderFacts | None:
    """The worker model's inputs from this run (`_workers.LoaderFacts`), or None without measured steps."""
    if ctx.wall_mean is None or ctx.compute_mean is None or ctx.wait_mean is None:
        return None
    dl = ctx.loader()
    workers = dl.num_workers if dl is not None else 0
    cores = free_cores(ctx)
    # A batch takes `load` seconds in one process. Without workers the main process
    # loads it during the wait; with W the loader hands over one batch per step when
    # it sets the pace, so each worker takes W steps per batch.
    load = ctx.wait_mean if not workers else workers * ctx.wall_mean
    # Steps per worker start: workers start once per DataLoader when persistent (as the fix
    # asks), before its first batch: with one DataLoader that is in the warm-up, outside the mean
    # step; a script that builds one per trial (an Optuna sweep) starts them for each.
    loaders = {s.loader for s in ctx.steps if s.loader is not None}
    steps_per_start = ctx.run.train_steps / len(loaders) if len(loaders) > 1 else None
    return LoaderFacts(
        wall=ctx.wall_mean, compute=ctx.compute_mean, load=load, workers=workers,
        cores=cores,
        cpu=cpu_per_step(ctx, workers) if cores is not None else None,
        steps_per_start=steps_per_start or None,
        contended=contended(ctx),
        usable=ctx.usable_cpus(),
        threads=ctx.run.runtime.torch_threads if ctx.run.runtime is not None else None,
    )


def worker_advice(ctx: Context) -> tuple[LoaderFacts, WorkerPlan] | None:
    """The loader's facts and the workers to name for them; None without measured steps."""
    facts = loader_facts(ctx)
    return (facts, plan(facts)) if facts is not None else None


def data_wait(ctx: Context) -> Finding | None:
    """The DataLoader cannot keep up: name the workers the measurement says pay, or say why none do."""
    if ctx.n < MIN_STEPS or ctx.data_frac is None or ctx.data_frac <= DATA_WAIT_FRAC:
        return None
    advice = worker_advice(ctx)
    assert advice is not None and ctx.wall_mean is not None and ctx.wait_mean is not None
    facts, chosen = advice
    wall, compute, wait = facts.wall, facts.compute, ctx.wait_mean  # means: the share is of sums
    evidence = [f"data wait: {fmt.share(wait, wall)} of the mean step, over {ctx.n} steps"]
    dl = ctx.loader()
    usable = ctx.usable_cpus()
    current = facts.workers
    if dl is not None:
        evidence.append(
            f"{describe_loader(dl)}: pin_memory={dl.pin_memory}, "
            f"persistent_workers={dl.persistent_workers}, prefetch_factor={dl.prefetch_factor}"
        )
    else:
        evidence.append("no torch DataLoader seen: the wait is in another iterator")
    if usable is not None:
        evidence.append(f"{usable} usable CPU cores" + (f", {facts.cores:.1f} free of other processes' load"
                                                        if facts.cores is not None and facts.cores < usable else ""))
    cpu = ctx.loader_worker_cpu(dl) if current else None
    if cpu is not None:
        evidence.append(f"its {cpu[0]} worker{'s' if cpu[0] != 1 else ''} use {cpu[1] / 100:.2f} cores together")
    evidence.append(_cpu_line(ctx, facts))

    worker_gain = chosen.gain(wall)
    more = chosen.workers > current
    pays = more and worker_gain >= MIN_GAIN
    cuda = ctx.cuda
    args = ["dataset"]
    if dl is not None and dl.batch_size is not None:
        args.append(f"batch_size={dl.batch_size}")
    cheaper = ("\n# make each sample cheaper: decode/resize once offline, lighter transforms, "
               "GPU augmentation")
    hidden = fmt.speedup(wall, max(compute, 1e-4))
    if pays:
        args.append(f"num_workers={chosen.workers}")
        if cuda:
            args.append("pin_memory=True")
        args.append("persistent_workers=True")
        args.append(f"prefetch_factor={max(4, (dl.prefetch_factor or 2) if dl else 2)}")
        fix = loader_fix(dl, args)
        if chosen.threads:
            fix += (f"\ntorch.set_num_threads({chosen.threads})  # {chosen.workers} loading workers and "
                    f"{facts.threads} intra-op threads would not fit {facts.usable or int(facts.cores or 1)} "
                    "cores: a thread without one stalls every op")
        if cuda:
            fix += "\nx = x.to(device, non_blocking=True)  # overlaps the copy with compute"
        word = "at most" if chosen.bound else "~"
        gain = (f"{word}{' ' if chosen.bound else ''}{fmt.speedup(wall, chosen.step)} in the mean step with "
                f"{chosen.workers} worker{'s' if chosen.workers != 1 else ''} ({chosen.stop})")
        if chosen.bound:
            gain += ("; a bound, not a prediction: the machine was contended (its threads waited for a core), "
                     "so the cores workers would get are unknown" if facts.contended and facts.cpu is not None
                     else "; a bound, not a prediction: let `pitstop tune` measure it")
        knob: str | None = "num_workers,threads" if chosen.threads else "num_workers"
    else:
        if current:
            # Keep the workers there are, never more than the free cores (workers-oversubscribed says why).
            keep = min(current, max(1, usable - 1)) if usable is not None else current
            fix = loader_fix(dl, [*args, f"num_workers={keep}"]) + cheaper
        else:
            # Named, so the fix says which loader it is about (an eval loader may be built after it).
            fix = (f"# the training DataLoader ({f'{dl.dataset}, ' if dl.dataset else ''}batch_size={dl.batch_size})"
                   + cheaper) if dl is not None else cheaper.lstrip("\n")
        # Unread CPU holds the workers to the free cores; whether more fit is for the tuner to measure.
        unread = facts.cpu is None and more
        # Threads that waited for a core: the cores this run got are not the cores workers would get
        # (more threads of its own take a larger share beside the other processes, and 2 threads
        # spinning for one core burn CPU 1 thread does not), so the floors' figure is no ground to
        # hold the count back, nor a number to show. super_resolution beside other work: "1 worker
        # with torch.set_num_threads(1) would give 0.65x", and it measured x1.7 beside hogs; beside
        # one hog (0.79 cores busy) the floors said 1.01x on this run's cores, and it measured x2.15.
        shared = facts.contended and more and not unread
        knobs = "num_workers,threads" if chosen.threads else "num_workers"
        if shared:
            why = (f"its threads waited for a core while other processes ran, and what {chosen.named()} would "
                   f"give moves with their load, so this run cannot say: `pitstop tune --knobs {knobs}` measures it")
        elif more:
            why = (f"{chosen.named()} would give "
                   f"{fmt.speedup(wall, chosen.step)} by the measurement ({chosen.stop}), under the "
                   f"{fmt.ratio(MIN_GAIN)} that workers' own costs (intra-op threads losing a core, "
                   "each batch carried across processes) can eat")
        else:
            why = f"more than the {current} worker(s) there are would not help ({chosen.stop})"
        if unread:
            why += "; `pitstop tune --knobs num_workers` measures what more workers give"
        gain = (f"at most {hidden} in the mean step if each batch got cheaper to load (down to its compute); "
                f"no worker fix: {why}")
        knob = knobs if shared else "num_workers" if current or unread else None
    cause = (
        "the training loop waits for the next batch: the DataLoader produces batches "
        "slower than the model consumes them"
        + (" (num_workers=0 loads every batch in the main process)" if current == 0 else "")
    )
    return Finding(
        rule="data-wait",
        title="The DataLoader cannot keep up",
        severity="high" if ctx.data_frac >= DATA_WAIT_HIGH else "medium",
        evidence=evidence,
        cause=cause,
        fix=fix,
        gain=gain,
        knob=knob,
    )


def _cpu_line(ctx: Context, facts: LoaderFacts) -> str:
    """The CPU a step takes against the cores free for it: the evidence of the worker count."""
    if facts.cpu is None:
        return "the CPU the loading takes was not read: workers are held to the free cores, one kept for the model"
    who = "the main process" if not facts.workers else f"the main process and its {facts.workers} worker(s)"
    line = (f"{who} used {fmt.duration(facts.cpu)} of CPU per mean step of {fmt.duration(facts.wall)} "
            f"({facts.cpu / facts.wall:.2f} cores)")
    if not facts.workers:
        line += ": while it waits for data it holds no core, so its loading moves to workers"
        if facts.cpu < 0.5 * facts.load and not facts.contended:  # under half a core over the wait, model's CPU included
            line += ", and the loading mostly waits (on I/O): workers beyond the cores still help"
    return line


def low_gpu_util(ctx: Context) -> Finding | None:
    """The GPU idles while the data is on time: the host cannot queue work fast enough."""
    if not ctx.cuda or len(ctx.gpu_samples) < MIN_GPU_SAMPLES or ctx.n < MIN_STEPS:
        return None
    util = ctx.gpu_util_mean()
    if util is None or util >= GPU_UTIL_LOW:
        return None
    if ctx.data_frac is None or ctx.data_frac > DATA_WAIT_FRAC:
        return None  # a data stall explains the idle GPU; data-wait says so
    evidence = [
        f"GPU busy {util:.0f}% on average over {len(ctx.gpu_samples)} samples "
        f"while data wait is only {ctx.data_frac:.0%} of step time",
        f"step p50 {fmt.duration(ctx.wall_p50)} over {ctx.n} steps",
    ]
    s = ctx.run
    if s.cpu_main_n:
        evidence.append(f"main process at {s.cpu_main_sum / s.cpu_main_n:.0f}% of one core")
    dl = ctx.loader()
    batch = dl.batch_size if dl is not None else None
    bigger = f"batch_size={batch * 2}" if batch else "batch_size=2x your batch"
    fix = (
        loader_fix(dl, ["dataset", bigger, "..."], note="scale the learning rate with the batch") + "\n"
        "model = torch.compile(model)  # fuses ops: fewer kernel launches per step\n"
        '# or: torch.compile(model, mode="reduce-overhead")  # CUDA graphs, for small fixed shapes'
    )
    return Finding(
        rule="low-gpu-util",
        title="The GPU idles: the step is host-bound",
        severity="high" if util < GPU_UTIL_VERY_LOW else "medium",
        evidence=evidence,
        cause=(
            "the CPU cannot queue kernels as fast as the GPU runs them: Python and "
            "launch overhead per op dominate, typical of small batches and many small ops"
        ),
        fix=fix,
        gain=(
            f"the GPU is idle ~{100 - util:.0f}% of the time; hiding the host overhead "
            f"could make steps up to {100 / max(util, 1.0):.1f}x faster (less in practice)"
        ),
        knob="batch_size",
    )


def pageable_copies(ctx: Context) -> Finding | None:
    """Host-to-device copies from pageable memory: they cannot overlap compute."""
    pageable = count = nbytes = 0
    us = 0.0
    steps = 0
    spans = []
    for w in ctx.run.profiles:
        c = w.copies
        if c is None or c.h2d_pageable <= 0:
            continue
        pageable += c.h2d_pageable
        count += max(c.h2d_count, c.h2d_pageable)
        nbytes += c.h2d_bytes
        us += c.h2d_us
        steps += max(1, w.step_end - w.step_start)
        spans.append(f"{w.step_start}-{w.step_end - 1}")
    if pageable <= 0:
        return None
    share = pageable / count
    per_step_ms = us * share / steps / 1e3
    evidence = [
        f"{pageable} of {count} host-to-device copies in profiled steps {', '.join(spans[-3:])} "
        f"came from pageable memory ({nbytes / (1 << 20):.1f} MiB, {per_step_ms:.2f} ms per step)"
    ]
    dl = ctx.loader()
    if dl is not None:
        evidence.append(f"DataLoader pin_memory={dl.pin_memory}")
    wall = ctx.wall_mean
    frac = per_step_ms / 1e3 / wall if wall else None
    saved = fmt.share(per_step_ms / 1e3, wall) + " of the mean step" if wall else f"{per_step_ms:.2f} ms per step"
    gain = f"up to {saved} once the copy overlaps compute"
    return Finding(
        rule="pageable-h2d",
        title="Host-to-device copies from pageable memory",
        severity="medium" if frac is not None and frac >= PAGEABLE_MEDIUM_FRAC else "low",
        evidence=evidence,
        cause=(
            "a copy from pageable memory goes through a staging buffer and blocks the "
            "host, so it cannot run while the GPU computes"
        ),
        fix=(
            loader_fix(dl, ["dataset", "...", "pin_memory=True"]) + "\n"
            "x = x.to(device, non_blocking=True)\n"
            "y = y.to(device, non_blocking=True)"
        ),
        gain=gain,
        knob="pin_memory",
    )


def host_syncs(ctx: Context) -> Finding | None:
    """The loop forces the host to wait for the GPU at least once per step."""
    rates: dict[str, float] = {}
    windows = [
        w for w in ctx.run.profiles if w.device == "cuda" or (ctx.cuda and w.syncs_per_step)
    ]
    if not windows:
        return None
    for w in windows:
        for name in SYNC_OPS:
            rate = w.syncs_per_step.get(name)
            if rate is not None and math.isfinite(rate):
                rates[name] = max(rates.get(name, 0.0), rate)
    if not rates:
        return None
    top_name, top = max(rates.items(), key=lambda kv: kv[1])
    if top < SYNCS_PER_STEP:
        return None
    listed = ", ".join(f"{k} {v:.1f}/step" for k, v in sorted(rates.items(), key=lambda kv: -kv[1]))
    last = windows[-1]
    evidence = [f"{top_name} runs {top:.1f} times per step (profiled steps {last.step_start}-"
                f"{last.step_end - 1})", f"host syncs seen: {listed}"]
    util = ctx.gpu_util_mean()
    gain = f"removes ~{top:.0f} GPU stall(s) per step"
    if util is not None:
        gain += f"; the GPU is idle ~{100 - util:.0f}% now, part of which these syncs cause"
    if ctx.wall_p50 is not None:
        gain += f"; largest for short steps (p50 {fmt.duration(ctx.wall_p50)})"
    return Finding(
        rule="host-sync",
        title="The loop waits for the GPU every step",
        severity="high" if top >= SYNCS_PER_STEP_HIGH else "medium",
        evidence=evidence,
        cause=(
            ".item(), .cpu(), .tolist(), print(tensor) or a Python `if` on a GPU tensor "
            "blocks the host until the GPU catches up, so it cannot queue the next step ahead"
        ),
        fix=(
            "running = running + loss.detach()  # instead of total += loss.item()\n"
            "if step % 100 == 0:  # read rarely\n"
            "    print(running.item() / 100)\n"
            "    running.zero_()"
        ),
        gain=gain,
        knob=None,
    )
