"""Provides the rules about resources: GPU memory headroom and pressure, CPU cores, /dev/shm."""

from __future__ import annotations

from pitstop.analysis import format as fmt
from pitstop.analysis._context import MIN_GPU_SAMPLES, MIN_STEPS, Context, Finding
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, Contention, contention, stall_bound
from pitstop.analysis._loaderfix import loader_fix
from pitstop.analysis._rules_loop import DATA_WAIT_FRAC
from pitstop.analysis._rules_share import OVERSUBSCRIBED_EXCESS, cpu_oversubscribed

# Under 40% of GPU memory used at peak, the batch could at least double and
# still leave the allocator room for fragmentation.
GPU_MEM_LOW_FRAC = 0.40
# Above 95% the caching allocator starts freeing and retrying (a cudaFree and a
# device sync each), and one larger batch away from an OOM.
GPU_MEM_HIGH_FRAC = 0.95
# When suggesting a larger batch, plan to fill at most 80% of the memory.
GPU_MEM_TARGET_FRAC = 0.80
# Each DataLoader worker hands batches to the main process through /dev/shm and
# prefetch_factor (2) batches per worker live there at once: 4 workers x 2 x a
# 64x3x224x224 float32 batch (37 MiB) is ~300 MiB. Docker's default of 64 MiB
# fails with "bus error"/"DataLoader worker killed"; 1 GiB fits typical image
# batches with a few workers. Under 256 MiB it is almost certain to fail.
SHM_MIN_BYTES = 1 << 30
SHM_TINY_BYTES = 256 << 20
# Other processes' load counts once it holds a quarter of a core (the tuner's busy-machine mark);
# steps "swing" when their p95 is 1.5x their p50 (a quiet CPU loop keeps it under ~1.2x).
CONTENDED_OTHER_CORES = 0.25
CONTENDED_SWING = 1.5
# Or, however steady the steps: its threads waited for a CPU (CONTENDED_WAIT_CORES, in _cpu).


def _gpu_mem(ctx: Context) -> tuple[int | None, int | None, int]:
    """(peak used, total, readings) over the run's samples."""
    peak = total = None
    n = 0
    for s in ctx.run.samples:
        for g in s.gpus:
            if g.mem_used is None or not g.mem_total:
                continue
            n += 1
            peak = g.mem_used if peak is None else max(peak, g.mem_used)
            total = g.mem_total if total is None else max(total, g.mem_total)
    return peak, total, n


def memory_headroom(ctx: Context) -> Finding | None:
    """Most of the GPU memory is unused: a larger batch would use the GPU better."""
    if not ctx.cuda:
        return None
    peak, total, n = _gpu_mem(ctx)
    if peak is None or total is None or n < MIN_GPU_SAMPLES:
        return None
    used = peak / total
    torch_peak = ctx.run.peak_mem_allocated
    if used >= GPU_MEM_LOW_FRAC or (torch_peak is not None and torch_peak / total >= GPU_MEM_LOW_FRAC):
        return None
    if ctx.data_frac is not None and ctx.data_frac > DATA_WAIT_FRAC:
        return None  # data-bound: a larger batch would only wait longer for data
    if memory_pressure(ctx) is not None:
        return None
    evidence = [f"GPU memory peaked at {fmt.size(peak)} of {fmt.size(total)} ({used:.0%}) over {n} readings"]
    if torch_peak is not None:
        evidence.append(f"torch peak allocated {fmt.size(torch_peak)}")
    util = ctx.gpu_util_mean()
    if util is not None:
        evidence.append(f"GPU busy {util:.0f}% on average")
    room = int(GPU_MEM_TARGET_FRAC * total / max(peak, torch_peak or 0, 1))
    factor = 1
    while factor * 2 <= room:
        factor *= 2
    dl = ctx.loader()
    batch = dl.batch_size if dl is not None else None
    if batch:
        fix = loader_fix(dl, ["dataset", f"batch_size={batch * factor}", "..."], note=f"was {batch}")
    else:
        fix = loader_fix(dl, ["dataset", f"batch_size={factor}x your batch", "..."])
    fix += "\n# scale the learning rate with the batch (linear rule, with a short warm-up)"
    if dl is not None and dl.batch_sampler:
        fix += "\n# this loader uses a batch_sampler: change the batch size there (pitstop cannot)"
    return Finding(
        rule="gpu-memory-headroom",
        title="Most of the GPU memory is unused",
        severity="low",
        evidence=evidence,
        cause="the batch is small for this GPU: kernels are small and per-step overhead is paid more often",
        fix=fix,
        gain=(
            f"room for ~{factor}x the batch (to ~{GPU_MEM_TARGET_FRAC:.0%} of memory); "
            "samples/s usually rise while the GPU is not saturated"
            + (f" (now {util:.0f}% busy)" if util is not None else "")
        ),
        knob="batch_size",
    )


def memory_pressure(ctx: Context) -> Finding | None:
    """The allocator retries, ran out of memory, or memory is near full."""
    if not ctx.cuda:
        return None
    run = ctx.run
    peak, total, _ = _gpu_mem(ctx)
    used = peak / total if peak is not None and total else None
    first, last = run.first_alloc_retries, run.last_alloc_retries
    retries = (last - first) if first is not None and last is not None else 0
    ooms = run.last_ooms or 0
    near = used is not None and used > GPU_MEM_HIGH_FRAC
    if retries <= 0 and ooms <= 0 and not near:
        return None
    evidence = []
    if retries > 0:
        evidence.append(f"the CUDA allocator retried {retries} times during the run ({last} since start)")
    if ooms > 0:
        evidence.append(f"{ooms} CUDA out-of-memory errors since start")
    if used is not None:
        evidence.append(f"GPU memory peaked at {fmt.size(peak)} of {fmt.size(total)} ({used:.0%})")
    dl = ctx.loader()
    batch = dl.batch_size if dl is not None else None
    smaller = f"batch_size={max(1, batch // 2)}" if batch and batch > 1 else "batch_size=half your batch"
    return Finding(
        rule="gpu-memory-pressure",
        title="GPU memory is at its limit",
        severity="high" if retries > 0 or ooms > 0 else "medium",
        evidence=evidence,
        cause=(
            "activations and cached blocks fill the GPU: the allocator frees its cache and "
            "retries (a device sync each), and a larger batch would fail"
        ),
        fix=(
            loader_fix(dl, ["dataset", smaller, "..."], note="and accumulate gradients over 2 steps") + "\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "y = checkpoint(block, x, use_reentrant=False)  # recompute activations in backward\n"
            "# bfloat16 autocast also halves activation memory"
        ),
        gain=(
            f"no allocator retries ({retries} so far, each a cudaFree and a sync)"
            if retries > 0
            else "headroom against an out-of-memory crash"
        ),
        knob="batch_size",
    )


def workers_oversubscribed(ctx: Context) -> Finding | None:
    """More DataLoader workers than the cores this process may use."""
    rt = ctx.run.runtime
    usable = rt.usable_cpus if rt is not None else None
    if not usable:
        return None
    loaders = [d for d in ctx.run.dataloaders.values() if d.num_workers > usable]
    if not loaders:
        return None
    dl = max(loaders, key=lambda d: d.num_workers)
    evidence = [
        f"DataLoader {dl.id} has num_workers={dl.num_workers} "
        f"but this process may use {usable} CPU cores"
    ]
    if rt is not None and rt.cpu_count and rt.cpu_count != usable:
        evidence.append(f"the machine has {rt.cpu_count} cores; CPU affinity or a cgroup limits this process")
    role = "eval" if ctx.run.loader_role(dl.id) == "eval" else "train"
    if dl.framework:  # a framework's setting takes a number, and its command-line flag a literal
        fix = loader_fix(dl, ["dataset", "...", f"num_workers={max(1, usable - 1)}"], role=role,
                         note=f"was {dl.num_workers}; one core left for the main process")
    else:
        fix = "import os\n" + loader_fix(
            dl, ["dataset", "...", f"num_workers=min({dl.num_workers}, len(os.sched_getaffinity(0)) - 1)"], role=role)
    return Finding(
        rule="workers-oversubscribed",
        title="More DataLoader workers than usable CPU cores",
        severity="medium",
        evidence=evidence,
        cause=(
            "workers beyond the usable cores time-share them: no more throughput, "
            "more memory and context switches"
        ),
        fix=fix,
        gain=(
            f"the same throughput with {dl.num_workers - max(1, usable - 1)} fewer worker "
            "processes (each holds its own copy of the dataset object)"
        ),
        knob="num_workers",
    )


def shm_small(ctx: Context) -> Finding | None:
    """/dev/shm too small for DataLoader workers to hand over batches."""
    rt = ctx.run.runtime
    workers = ctx.max_workers()
    if rt is None or rt.shm_bytes is None or workers <= 0 or rt.shm_bytes >= SHM_MIN_BYTES:
        return None
    return Finding(
        rule="shm-small",
        title="/dev/shm is too small for DataLoader workers",
        severity="high" if rt.shm_bytes < SHM_TINY_BYTES else "medium",
        evidence=[
            f"/dev/shm is {fmt.size(rt.shm_bytes)} with {workers} DataLoader workers "
            f"(pitstop expects at least {fmt.size(SHM_MIN_BYTES)})"
        ],
        cause=(
            "workers pass every batch to the main process through shared memory; when it "
            "fills, workers die with 'bus error' or 'DataLoader worker killed'"
        ),
        fix=(
            "docker run --shm-size=8g ...   # or --ipc=host\n"
            "# Kubernetes: mount an emptyDir {medium: Memory} at /dev/shm\n"
            '# last resort: torch.multiprocessing.set_sharing_strategy("file_system")'
        ),
        gain="avoids worker crashes and the stalls of a nearly full /dev/shm",
        knob=None,
    )


def cpu_contended(ctx: Context) -> Finding | None:
    """torch's threads, the workers and other processes want more cores than the machine has, and steps swing.

    Never beside cpu-oversubscribed, which fires when the script's own threads
    and workers alone exceed the cores: this one is about the machine it shares.
    """
    if ctx.n < MIN_STEPS or cpu_oversubscribed(ctx) is not None:
        return None
    dl = ctx.loader()
    cpu = ctx.loader_worker_cpu(dl) if dl is not None and dl.num_workers else None
    found = contention(ctx.run, ctx.steps, cpu[0] if cpu else 0, cpu[1] / 100.0 if cpu else 0.0)
    if found is None or found.other < CONTENDED_OTHER_CORES:
        return None
    waits = found.waiting is not None and found.waiting >= CONTENDED_WAIT_CORES
    if found.demand - found.cores < OVERSUBSCRIBED_EXCESS or not (
            found.swing >= CONTENDED_SWING or found.follows or waits):
        return None
    n = found.free_threads()
    if n >= found.threads:
        return None  # fewer threads would not leave a core free: nothing to change here
    workers = (f"the DataLoader workers {found.worker_cores:.2f} cores ({found.workers})" if found.workers
               else "no DataLoader workers")
    evidence = [
        f"torch runs {found.threads} intra-op threads, {workers}, and other processes kept "
        f"{found.other:.2f} cores busy: {found.demand:.1f} cores wanted, {found.cores} on the machine",
        f"step time p95 {fmt.duration(found.p95)} is {found.swing:.1f}x the p50 {fmt.duration(found.p50)}"
        + ("; steps were slower while the other processes were busier" if found.follows else ""),
    ]
    if found.waiting is not None:
        evidence.append(f"its threads waited for a free core {found.waiting:.2f} cores' worth of the time "
                        "(ready to run; Linux run delay, median of the readings)")
    return Finding(
        rule="cpu-contended",
        title="Training threads compete with other processes for the cores",
        severity="medium",
        evidence=evidence,
        cause=("a parallel op ends with its slowest thread: threads that wait for a core another process holds "
               "spin and stall the whole step (a 2-core machine with one core taken went from 34 ms to "
               "0.9-1.4 s per step with 2 threads)"),
        fix=(f"torch.set_num_threads({n})  # the cores the other processes and the workers leave\n"
             f"# or, before Python starts: OMP_NUM_THREADS={n}\n"
             f"# pitstop tune measures it: the threads knob ([compute] threads = {n} in pitstop.toml)"),
        gain=_contended_gain(ctx, found, n),
        knob="threads",
    )


def _contended_gain(ctx: Context, found: Contention, threads: int) -> str:
    """The gain of fewer threads, bounded by the share of the step its threads waited for a core.

    The share is the mean wait read while the steps ran plus two standard errors of it (see
    STALL_BOUND_READINGS): a bound from one lucky reading would not hold.
    """
    waiting, high, count = found.waiting_mean, found.waiting_high, found.waiting_readings
    bound = stall_bound(high)
    wall = ctx.wall_mean
    if bound is None or wall is None or waiting is None or high is None:
        if waiting is None:
            why = "its threads' wait for a core was not read"
        elif high is None:
            why = (f"its threads' wait for a core was read {count} time{'s' if count != 1 else ''} while the steps "
                   f"ran, too few to bound the gain")
        else:
            why = (f"its threads waited for a core {waiting:.2f} cores' worth of the time ({high:.2f} allowing for how "
                   "the readings swing), too near a whole core's worth for anything to bound it")
        return f"steadier, shorter steps while the machine is shared ({why}): `pitstop tune` measures the threads knob"
    return (f"at most {fmt.speedup(wall, wall / bound)} in the mean step with {threads} thread"
            f"{'s' if threads != 1 else ''}: its threads waited for a core {waiting:.2f} cores' worth of the time "
            f"(mean of {count} readings; {high:.2f} allowing for how they swing), so at most {high:.0%} of the step "
            "stalled on a thread without a core; a bound, not a prediction: `pitstop tune` measures the threads knob")
