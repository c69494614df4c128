"""Provides the search space: which knobs apply to this script on this machine, their values, and why others are skipped."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pitstop.config import usable_cpus
from pitstop.errors import UsageError
from pitstop.tuning.results import ALIASES, KNOBS, Facts

# Below 1 GiB of /dev/shm (Docker's default is 64 MiB), more than 2 workers
# pass batches through a too-small shared memory and die with "bus error".
SHM_SMALL = 1 << 30
SHM_SMALL_WORKERS = 2
# Batch sizes are tried up to 64x the script's own (6 doublings): past that the
# learning-rate guidance no longer holds and the trials get long.
MAX_BATCH_FACTOR = 64
# Other processes' cores from which the machine counts as contended (the runner's busy-machine mark).
BUSY_CORES = 0.25


@dataclass(frozen=True)
class Space:
    """Values to try per knob, in stage order, plus the skipped knobs with reasons."""

    own: dict[str, Any] = field(default_factory=dict)  # the script's own values (no change)
    compute: dict[str, list[Any]] = field(default_factory=dict)  # amp, cudnn_benchmark, channels_last
    batch: list[int] = field(default_factory=list)  # ascending sizes above the script's own
    workers: list[int] = field(default_factory=list)  # ascending worker counts (own value included)
    data: dict[str, list[Any]] = field(default_factory=dict)  # pin_memory, persistent_workers, prefetch_factor
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    batch_tuned: bool = False

    def grid_size(self) -> int:
        """Trials a full grid of this space would run (for the report and the benchmark)."""
        size = max(1, len(self.workers))
        for values in [*self.compute.values(), *self.data.values()]:
            size *= 1 + len(values)
        return size * (1 + len(self.batch))


def parse_knobs(text: str | None) -> set[str] | None:
    """`--knobs workers,pin` -> canonical names; None means every knob."""
    if not text:
        return None
    chosen = set()
    for part in text.split(","):
        name = part.strip().lower().replace("-", "_")
        if not name:
            continue
        if name not in ALIASES:
            raise UsageError(f"unknown knob {part.strip()!r} in --knobs (known: {', '.join(sorted(set(ALIASES)))})")
        chosen.add(ALIASES[name])
    return chosen


def local_ranks() -> int:
    """Training processes sharing this machine's cores (torchrun sets LOCAL_WORLD_SIZE)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def worker_values(max_workers: int, own: int) -> list[int]:
    """0, 1, 2, 4, ... up to max_workers (and max_workers itself), plus the script's own count."""
    values = {0, own}
    n = 1
    while n <= max_workers:
        values.add(n)
        n *= 2
    values.add(max_workers)
    return sorted(v for v in values if v <= max(max_workers, own))


def thread_values(facts: Facts, load: float | None, evidence: dict[str, Any]) -> tuple[list[int], str]:
    """Thread counts to try below the script's own, and why (or why not) the knob applies.

    Tried only where the CPUs are contended: other processes' load, the script's threads plus
    its workers beyond the cores, or a finding that names the knob. On a quiet machine torch's
    default (one thread per core) is what a CPU loop wants, and the trials would be wasted.
    """
    threads, cores = facts.torch_threads, facts.cpu_count or facts.usable_cpus
    if not threads or not cores:
        return [], "the baseline did not report torch's thread count"
    workers = int(facts.loader.get("num_workers") or 0)
    why = ""
    if "threads" in evidence:
        why = "the run's findings name it"
    elif load is not None and load >= BUSY_CORES:
        why = f"other processes kept {load:.1f} cores busy during the baseline"
    elif threads + workers > cores:
        why = f"{threads} torch threads + {workers} DataLoader workers > {cores} cores"
    if not why:
        return [], "the CPUs were not contended during the baseline (no other load, threads + workers <= cores)"
    free = max(1, int(cores - (load or 0.0) - workers + 0.5))
    wanted = {v for v in (evidence.get("threads"), free, cores // 2, 1) if v}
    values = sorted((v for v in wanted if v < threads), reverse=True)
    if not values:
        return [], f"the script already runs {threads} thread(s)"
    return values, why


def build_space(facts: Facts, knobs: set[str] | None = None, tune_batch: bool = False,
                ranks: int | None = None, load: float | None = None,
                evidence: dict[str, Any] | None = None) -> Space:
    """The space for this script and machine; every knob left out gets a reason.

    `load`: cores other processes kept busy during the baseline; `evidence`: the knobs its findings name.
    """
    skipped: dict[str, str] = {}
    notes: list[str] = []
    own = dict(facts.loader)
    cuda = facts.device_type == "cuda"

    compute: dict[str, list[Any]] = {}
    if facts.script_autocast:
        skipped["amp"] = "the script enters autocast itself"
    else:
        amp: list[Any] = ["bf16"]  # exists on CPU too; whether it is faster is measured, never assumed
        if cuda and facts.grad_scaler:
            amp.append("fp16")
        elif cuda:
            notes.append("amp=fp16 not tried: the script builds no GradScaler (fp16 gradients underflow without one)")
        else:
            notes.append("amp=fp16 not tried: fp16 autocast needs a CUDA device and a GradScaler")
        compute["amp"] = amp
    if not cuda:
        skipped["cudnn_benchmark"] = f"no CUDA device ({facts.device_type}): cudnn.benchmark only affects cuDNN convolutions"
        skipped["channels_last"] = f"no CUDA device ({facts.device_type}): channels-last pays off on tensor-core convolutions"
    elif facts.conv2d == 0:
        skipped["cudnn_benchmark"] = "the model has no Conv2d layers"
        skipped["channels_last"] = "the model has no Conv2d layers"
    else:
        compute["cudnn_benchmark"] = [True]
        compute["channels_last"] = [True]

    threads, why = thread_values(facts, load, evidence or {})
    if threads:
        compute["threads"] = threads
        notes.append(f"threads tried ({', '.join(map(str, threads))}, from {facts.torch_threads}): {why}")
    else:
        skipped["threads"] = why

    batch: list[int] = []
    workers: list[int] = []
    data: dict[str, list[Any]] = {}
    if not facts.has_dataloader:
        reason = "the script builds no torch DataLoader"
        for knob in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size"):
            skipped[knob] = reason
    else:
        own_batch = own.get("batch_size")
        if not tune_batch:
            skipped["batch_size"] = "it changes training dynamics; turn it on with --batch-size"
        elif facts.batch_sampler:
            skipped["batch_size"] = "the DataLoader uses a custom batch_sampler: its batch size cannot be overridden"
        elif not own_batch:
            skipped["batch_size"] = "the DataLoader has no batch_size (batch_size=None)"
        else:
            batch = [own_batch * 2 ** i for i in range(1, MAX_BATCH_FACTOR.bit_length())]
        cpus = facts.usable_cpus or usable_cpus()
        per_rank = max(1, cpus // (ranks or facts.local_ranks or local_ranks()))
        max_workers = per_rank
        if facts.shm_bytes is None:
            notes.append("no /dev/shm: worker batches go through the file system")
        elif facts.shm_bytes < SHM_SMALL and max_workers > SHM_SMALL_WORKERS:
            max_workers = SHM_SMALL_WORKERS
            notes.append(f"workers capped at {SHM_SMALL_WORKERS}: /dev/shm is {facts.shm_bytes >> 20} MiB "
                         "(more workers risk 'bus error'; give the container a larger --shm-size)")
        own_workers = int(own.get("num_workers") or 0)
        named = int((evidence or {}).get("num_workers") or 0)
        if named > max_workers and not (facts.shm_bytes is not None and facts.shm_bytes < SHM_SMALL):
            # data-wait suggests workers beyond the cores only when loading waits on I/O.
            notes.append(f"workers up to {named}: the run's findings say its loading waits on I/O, so "
                         f"workers share the {cpus} usable CPUs")
            max_workers = named
        else:
            notes.append(f"workers up to {max_workers}: {cpus} usable CPUs / "
                         f"{ranks or facts.local_ranks or local_ranks()} local rank(s)")
        workers = worker_values(max_workers, own_workers)
        if not cuda:
            skipped["pin_memory"] = "no CUDA device: pinned host memory only speeds copies to a GPU"
        elif own.get("pin_memory"):
            skipped["pin_memory"] = "already on in the script"
        else:
            data["pin_memory"] = [True]
        if own.get("persistent_workers"):
            skipped["persistent_workers"] = "already on in the script"
        else:
            data["persistent_workers"] = [True]
        own_prefetch = own.get("prefetch_factor") or 2
        data["prefetch_factor"] = [own_prefetch * 2]

    space = Space(own=own, compute=compute, batch=batch, workers=workers, data=data,
                  skipped=skipped, notes=notes, batch_tuned=bool(batch))
    return restrict(space, knobs)


def restrict(space: Space, knobs: set[str] | None) -> Space:
    """Keep only the knobs a person asked for with --knobs."""
    if knobs is None:
        return space
    skipped = dict(space.skipped)
    for knob in KNOBS:
        if knob not in knobs and knob not in skipped:
            skipped[knob] = "not in --knobs"
    return Space(
        own=space.own,
        compute={k: v for k, v in space.compute.items() if k in knobs},
        batch=space.batch if "batch_size" in knobs else [],
        workers=space.workers if "num_workers" in knobs else [],
        data={k: v for k, v in space.data.items() if k in knobs},
        skipped=skipped, notes=space.notes,
        batch_tuned=space.batch_tuned and "batch_size" in knobs,
    )
