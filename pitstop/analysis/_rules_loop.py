"""Provides the rules about the training loop itself: data stalls, host-bound steps, copies, syncs."""

from __future__ import annotations

import math

from pitstop.analysis import format as fmt
from pitstop.analysis._context import MIN_GPU_SAMPLES, MIN_STEPS, Context, Finding, describe_loader
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, run_delay
from pitstop.analysis._loaderfix import loader_fix

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


# Mean machine CPU (percent) from which a CPU-only run has no idle core for workers.
CPU_SATURATED = 85.0
# A batch whose loading keeps under half a core busy waits on I/O (storage, the
# network, a remote store): workers then share cores, up to 1 / that share per core
# (a loader sleeping 3 ms a sample measured 0.06 of a core per batch).
IO_BOUND_CORES = 0.5
IO_MIN_CORES = 0.125  # at most 8 workers per free core, however idle they look
MIN_CPU_SAMPLES = 2  # readings of the main process's CPU while it trains, for the I/O bound above


def loading_cores(ctx: Context, workers: int) -> float | None:
    """At most how much of a core one batch's loading keeps busy while it is loaded, or None unmeasured.

    With workers, their measured CPU per worker (each loads all the time when the
    loader sets the pace). Without, the main process's CPU over the share of the
    step it waits for data: an upper bound, since compute's own CPU is in it too.
    The main process's wait for a free core counts as CPU it wanted: a CPU-bound
    2-rank job on a busy 2-core machine ran at 0.3 of a core a rank and read as a
    loader waiting on I/O, and had more workers than cores suggested. The workers'
    own wait is not read: when the main process waited for a core, theirs is
    unknown, and their low CPU no sign of I/O (2 CPU-bound workers beside 2 hogs
    read as waiting on I/O, and 8 workers were suggested and tuned).
    """
    run = ctx.run
    if workers:
        waited = run_delay(run, run.first_step_t) if run.first_step_t is not None else None
        if waited is not None and waited >= CONTENDED_WAIT_CORES:
            return None
        cpu = ctx.loader_worker_cpu(ctx.loader())
        return cpu[1] / 100.0 / max(1, cpu[0]) if cpu is not None else None
    if run.first_step_t is None or not ctx.data_frac:
        return None
    # Samples while it trains: each reading covers the time since the one before,
    # so the first after the first step still holds the imports and the set-up.
    training = [s for s in run.samples if s.t > run.first_step_t][1:]
    cpus = [p.cpu / 100.0 + (s.cpu_wait or 0.0) for s in training for p in s.procs
            if p.role == "main" and p.cpu is not None]
    if len(cpus) < MIN_CPU_SAMPLES:
        return None
    return min(1.0, sum(cpus) / len(cpus) / ctx.data_frac)


def data_wait(ctx: Context) -> Finding | None:
    """The DataLoader cannot keep up: suggest workers, pinning, prefetching."""
    if ctx.n < MIN_STEPS or ctx.data_frac is None or ctx.data_frac <= DATA_WAIT_FRAC:
        return None
    assert ctx.wall_mean is not None and ctx.compute_mean is not None and ctx.wait_mean is not None
    wall, compute, wait = ctx.wall_mean, ctx.compute_mean, ctx.wait_mean  # means: the share is of sums
    evidence = [f"data wait: {fmt.share(wait, wall)} of the mean step, over {ctx.n} steps"]
    dl = ctx.loader()
    usable = ctx.usable_cpus()
    workers = dl.num_workers if dl is not None else None
    if dl is not None:
        evidence.append(
            f"{describe_loader(dl)}: pin_memory={dl.pin_memory}, "
            f"persistent_workers={dl.persistent_workers}, prefetch_factor={dl.prefetch_factor}"
        )
    else:
        evidence.append("no torch DataLoader seen: the wait is in another iterator")
    if usable is not None:
        evidence.append(f"{usable} usable CPU cores")
    s = ctx.run
    cpu = ctx.loader_worker_cpu(dl) if workers else None
    if cpu is not None:
        n, pct = cpu
        evidence.append(f"its {n} worker{'s' if n != 1 else ''} use {pct / 100:.2f} cores together")

    # A batch takes `load` seconds in one worker. With W workers the loader
    # hands over one batch per step when it is the bottleneck, so each worker
    # needs W * wall per batch; with no workers the main process loads it
    # during the wait. To keep up, W' workers need load / W' <= compute.
    floor = max(compute, 1e-4)
    load = wait if not workers else workers * wall
    # 1e-9: 0.03 - 0.02 is 0.00999..., and a ratio of 2.0000000000000004 is 2 workers.
    need = max(1, math.ceil(load / floor - 1e-9))
    cap = max(1, usable - 1) if usable is not None else None  # one core for the main process
    per_batch = loading_cores(ctx, workers or 0)
    io_bound = per_batch is not None and per_batch < IO_BOUND_CORES
    free = cap
    if cap is not None and per_batch is not None and io_bound:
        # A worker that waits on storage or the network holds a core for a fraction
        # of its batch: the free cores feed more workers than their count.
        cap = max(cap, int(cap / max(per_batch, IO_MIN_CORES)))
        evidence.append(f"loading keeps at most {per_batch:.2f} of a core busy per batch it waits for: the loader "
                        "waits on I/O, so workers beyond the cores still help")
    suggested = min(need, cap) if cap is not None else need
    current = workers or 0
    cpu_bound = suggested <= current  # no core left for another worker
    if cpu_bound:
        # Keep the workers there are, but never more than the free cores
        # (workers-oversubscribed explains why).
        suggested = min(current, cap) if cap is not None else current

    cuda = ctx.cuda
    args = ["dataset"]
    if dl is not None and dl.batch_size is not None:
        args.append(f"batch_size={dl.batch_size}")
    args.append(f"num_workers={suggested}")
    if cuda:
        args.append("pin_memory=True")
    args.append("persistent_workers=True")
    args.append(f"prefetch_factor={max(4, (dl.prefetch_factor or 2) if dl else 2)}")
    fix = loader_fix(dl, args)
    if cuda:
        fix += "\nx = x.to(device, non_blocking=True)  # overlaps the copy with compute"
    if cpu_bound:
        fix += (
            "\n# every usable core already has a worker: make each sample cheaper"
            "\n# (decode/resize once offline, lighter transforms, GPU augmentation)"
        )
        gain = (
            f"up to {fmt.speedup(wall, floor)} in the mean step if each batch gets cheaper to load (down to "
            f"its compute); more workers cannot help with {usable} usable core(s)"
        )
    else:
        new_wall = max(compute, load / suggested)
        gain = (f"up to {fmt.speedup(wall, new_wall)} in the mean step if the loader keeps up "
                f"(compute alone is {fmt.duration(compute)})")
        if cap is not None and need > cap:
            gain += f" (the loader would need ~{need} workers; {free} core(s) are free for them"
            gain += f", enough for {cap} that wait on I/O)" if cap != free else ")"
        busy = s.system_cpu_sum / s.system_cpu_n if s.system_cpu_n else None
        if busy is not None and busy >= CPU_SATURATED and not cuda and not io_bound:
            # The model computes on the same cores the workers would use: loading in
            # a worker moves the work, it does not add cores (measured on the demo on
            # 2 cores: workers=2 gave 1.03x in `pitstop tune`, not the 1.9x above).
            evidence.append(f"the machine's CPUs are {busy:.0f}% busy and training computes on them")
            gain += (
                "; but the CPUs are already saturated and the model computes on them too, so "
                "workers mostly move the work to other processes: expect much less, and let "
                "`pitstop tune` measure it"
            )
    cause = (
        "the training loop waits for the next batch: the DataLoader produces batches "
        "slower than the model consumes them"
        + (" (num_workers=0 loads every batch in the main process)" if workers == 0 else "")
    )
    return Finding(
        rule="data-wait",
        title="The DataLoader cannot keep up",
        severity="high" if ctx.data_frac >= DATA_WAIT_HIGH else "medium",
        evidence=evidence,
        cause=cause,
        fix=fix,
        gain=gain,
        knob="num_workers",
    )


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
    bigger = f"batch_size={batch * 2}" if batch else "a larger batch_size"
    fix = (
        f"DataLoader(dataset, {bigger}, ...)  # scale the learning rate with the batch\n"
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
            "DataLoader(dataset, ..., pin_memory=True)\n"
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
