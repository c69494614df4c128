"""Provides the aggregation of one profiler window's events into the tables of a ProfileWindow.

Three stages, so the arithmetic is testable without torch: the raw events
become flat `Ev` records (`_kineto.read` from Kineto's raw events; `extract`
here from torch's FunctionEvents, the fallback where a torch keeps no Kineto
results), `within_steps` keeps the events of the steps a window names, and
`aggregate(evs, ...)` is a pure function of what is left. All of it runs on the
windows' processing thread, never on the training thread.

Every time figure here is in microseconds unless the name says `_ms`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pitstop.events import Copies, KernelStat, OpStat

# Record-function names torch (and the windows) put around parts of a step.
STEP_MARKER = "ProfilerStep"  # our per-step annotation, "ProfilerStep#N" (FunctionEvent names say "*")
DATA_PREFIX = "enumerate(DataLoader)#"  # _SingleProcess/_MultiProcessingDataLoaderIter.__next__
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"

# Calls that make the host wait for the device. aten::item and
# aten::_local_scalar_dense are both listed: item() calls _local_scalar_dense,
# and a person recognises `.item()` first.
SYNC_NAMES = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "aten::item",
    "aten::_local_scalar_dense",
)
TO_HOST = "aten::to(cpu)"  # key for .to("cpu")/.cpu() calls seen copying device->host
_TO_NAMES = ("aten::to", "aten::_to_copy")

COLLECTIVE_WORDS = ("nccl", "gloo", "c10d")

CPU_ONLY = "CPU-only run: no CUDA kernels"
NO_KERNELS = "no CUDA kernel events recorded in this window (CUPTI gave none)"


class Ev(NamedTuple):
    """One profiler event, flattened: no references to other events.

    A NamedTuple, not a frozen dataclass: a window has thousands of events, and
    a frozen dataclass's __init__ (one object.__setattr__ per field) took 17 ms
    for 3,000 of them, a NamedTuple ~1 ms.
    """

    name: str
    start_us: float
    end_us: float
    thread: int = 0
    on_device: bool = False  # a kernel, memcpy or memset executed on the GPU
    self_cpu_us: float = 0.0
    self_device_us: float = 0.0  # device time of kernels this op launched itself
    is_async: bool = False
    nbytes: int | None = None  # memcpy size, where Kineto reports it
    to_host: bool = False  # an outermost aten::to/_to_copy whose subtree copied device->host
    corr: int = 0  # a host event's correlation id (what device events link to)
    link: int = 0  # the correlation id of the host op this event belongs to (kernels, runtime calls); 0: none

    @property
    def dur_us(self) -> float:
        return max(0.0, self.end_us - self.start_us)


@dataclass(frozen=True)
class Tables:
    """What `aggregate` computes: the ProfileWindow fields that come from events."""

    ops: list[OpStat] = field(default_factory=list)
    kernels: list[KernelStat] = field(default_factory=list)
    kernels_unavailable: str | None = None
    copies: Copies | None = None
    copy_bytes_known: bool = True  # False: copies seen but Kineto gave no byte counts
    syncs_per_step: dict[str, float] = field(default_factory=dict)
    phases_ms: dict[str, float] = field(default_factory=dict)
    collective_ms: float | None = None
    collective_overlap: float | None = None


# ---------------------------------------------------------------- extraction


def _is_cpu(fe: Any) -> bool:
    # DeviceType.CPU; compared by name so synthetic events in tests need no torch.
    return getattr(getattr(fe, "device_type", None), "name", "CPU") == "CPU"


def _copied_to_host(fe: Any, limit: int = 64) -> bool:
    """Whether a kernel named like a device->host memcpy hangs under this op (bounded walk)."""
    stack = [fe]
    seen = 0
    while stack and seen < limit:
        node = stack.pop()
        seen += 1
        for k in getattr(node, "kernels", ()) or ():
            if "DtoH" in getattr(k, "name", ""):
                return True
        stack.extend(getattr(node, "cpu_children", ()) or ())
    return False


def extract(function_events: Iterable[Any], use_device: bool) -> list[Ev]:
    """Flatten torch FunctionEvents (prof.events()) into `Ev` records."""
    out: list[Ev] = []
    for fe in function_events:
        name = str(fe.name)
        if name.startswith(STEP_MARKER):
            name = str(getattr(fe, "trace_name", None) or name)  # keep the step number
        start = float(fe.time_range.start)
        end = float(fe.time_range.end)
        corr = int(getattr(fe, "id", 0) or 0)
        link = int(getattr(fe, "linked_correlation_id", 0) or 0)
        if not _is_cpu(fe):
            meta = getattr(fe, "event_metadata", None)
            nbytes = getattr(meta, "bytes", None) if meta is not None else None
            out.append(
                Ev(name, start, end, int(fe.thread), on_device=True,
                   nbytes=int(nbytes) if nbytes is not None else None, link=link)
            )
            continue
        is_async = bool(fe.is_async)
        to_host = False
        if use_device and name in _TO_NAMES:
            parent = fe.cpu_parent
            if parent is None or parent.name not in _TO_NAMES:
                to_host = _copied_to_host(fe)
        out.append(
            Ev(
                name,
                start,
                end,
                int(fe.thread),
                self_cpu_us=0.0 if is_async else float(fe.self_cpu_time_total),
                self_device_us=float(fe.self_device_time_total) if use_device and not is_async else 0.0,
                is_async=is_async,
                to_host=to_host,
                corr=corr,
                link=link,
            )
        )
    return out


def release(function_events: Any) -> None:
    """Break the parent/child cycles of a FunctionEvent tree so refcounting frees it now.

    Without this the tree waits for the cyclic GC; pytorch#193348 measured RSS
    growing ~318 MiB over 1,000 short profiles until gc.collect() ran. A full
    gc.collect() here would instead stall the training thread on the GIL.
    """
    for fe in function_events or ():
        try:
            fe.cpu_children = []
            fe.cpu_parent = None
            fe.kernels = []
        except Exception:  # a read-only or foreign object: nothing to break
            pass


# ---------------------------------------------------------------- intervals


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge intervals into a sorted list of disjoint ones."""
    merged: list[tuple[float, float]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def length(merged: Sequence[tuple[float, float]]) -> float:
    return sum(e - s for s, e in merged)


def overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists (linear sweep)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---------------------------------------------------------------- the steps a window names


def step_number(name: str) -> int | None:
    """N of a "ProfilerStep#N" marker, else None."""
    if not name.startswith(STEP_MARKER + "#"):
        return None
    tail = name[len(STEP_MARKER) + 1:]
    return int(tail) if tail.isdigit() else None


def within_steps(evs: Sequence[Ev], first: int, end: int) -> list[Ev]:
    """The events of steps first..end-1: what a window's tables may count.

    A host event belongs to a step when it starts inside that step's
    "ProfilerStep#N" marker (a step's optimizer call started in the step is
    kept whole); a device event when the host op that launched it is kept
    (kernels run after their launch), or, with no link, when it starts
    between the first marker's start and the last one's end. Everything else
    is dropped: the step still running when the window ended (an evaluation
    pass, the end of training), and what the profiler saw after the last step
    while it was being stopped. A trace without any of these markers (none of
    ours has been seen without them) is taken whole.
    """
    spans = []
    for ev in evs:
        if not ev.on_device:
            n = step_number(ev.name)
            if n is not None and first <= n < end:
                spans.append((ev.start_us, ev.end_us))
    if not spans:
        return list(evs)
    merged = union(spans)
    starts = [s for s, _ in merged]
    lo, hi = merged[0][0], merged[-1][1]
    kept: list[Ev] = []
    corrs: set[int] = set()
    for ev in evs:
        if ev.on_device:
            continue
        i = bisect_right(starts, ev.start_us) - 1
        if i >= 0 and ev.start_us < merged[i][1]:
            kept.append(ev)
            if ev.corr and not ev.link:  # an op (runtime calls' ids are CUPTI's, another space)
                corrs.add(ev.corr)
    for ev in evs:
        if ev.on_device and (ev.link in corrs if ev.link else lo <= ev.start_us <= hi):
            kept.append(ev)
    return kept


# ---------------------------------------------------------------- aggregation


def _is_marker(name: str) -> bool:
    return name.startswith(STEP_MARKER)


def _is_collective(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in COLLECTIVE_WORDS)


def _is_copy(name: str) -> bool:
    return name.startswith("Memcpy") or name.startswith("Memset")


class _Ranges:
    """Per thread, the merged time ranges of one phase's markers, for containment tests."""

    def __init__(self) -> None:
        self.raw: dict[int, list[tuple[float, float]]] = {}
        self.merged: dict[int, tuple[list[float], list[float]]] = {}

    def add(self, thread: int, start: float, end: float) -> None:
        self.raw.setdefault(thread, []).append((start, end))

    def freeze(self) -> None:
        for thread, spans in self.raw.items():
            u = union(spans)
            self.merged[thread] = ([a for a, _ in u], [b for _, b in u])

    def holds(self, ev: Ev) -> bool:
        spans = self.merged.get(ev.thread)
        if spans is None:
            return False
        i = bisect_right(spans[0], ev.start_us) - 1
        return i >= 0 and ev.end_us <= spans[1][i]


def op_phases(evs: Sequence[Ev]) -> list[str | None]:
    """The phase each event ran in (None for device and async events, and off the training thread
    outside any marked range).

    An op inside the DataLoader's `__next__` on its own thread is data loading (with
    num_workers=0 the dataset's `__getitem__` and collate run there: the demo's blur, 1615
    calls, was the top op and read as the model's); inside an autograd `evaluate_function`,
    backward (on any thread: on CUDA the engine has its own); inside `Optimizer.step`/
    `zero_grad`, the optimizer; the rest of the training thread is forward (with the loss).
    """
    data, opt, bwd = _Ranges(), _Ranges(), _Ranges()
    for ev in evs:
        if ev.on_device or ev.is_async:
            continue
        name = ev.name
        if name.startswith(DATA_PREFIX):
            data.add(ev.thread, ev.start_us, ev.end_us)
        elif name.startswith(OPTIMIZER_PREFIXES):
            opt.add(ev.thread, ev.start_us, ev.end_us)
        elif name.startswith(BACKWARD_PREFIX):
            bwd.add(ev.thread, ev.start_us, ev.end_us)
    for r in (data, opt, bwd):
        r.freeze()
    tid = main_thread(evs)
    out: list[str | None] = []
    for ev in evs:
        if ev.on_device or ev.is_async:
            out.append(None)
        elif bwd.holds(ev):
            out.append("backward")
        elif opt.holds(ev):
            out.append("optimizer")
        elif data.holds(ev):
            out.append("data")
        else:
            out.append("forward" if ev.thread == tid else None)
    return out


def top_ops(evs: Sequence[Ev], device: str, top: int) -> list[OpStat]:
    """Host ops grouped by phase and name, sorted by self device time (CUDA) or self CPU time."""
    acc: dict[tuple[str | None, str], list[float]] = {}
    for ev, phase in zip(evs, op_phases(evs)):
        if ev.on_device or ev.is_async or _is_marker(ev.name):
            continue
        key = (phase, ev.name)
        row = acc.get(key)
        if row is None:
            row = acc[key] = [0, 0.0, 0.0, 0.0]
        row[0] += 1
        row[1] += ev.self_cpu_us
        row[2] += ev.end_us - ev.start_us
        row[3] += ev.self_device_us
    cuda = device == "cuda"
    stats = [
        OpStat(name, int(c), round(s, 3), round(t, 3), round(d, 3) if cuda else None, phase)
        for (phase, name), (c, s, t, d) in acc.items()
    ]
    if cuda:
        stats.sort(key=lambda o: (o.device_self_us or 0.0, o.self_us), reverse=True)
    else:
        stats.sort(key=lambda o: o.self_us, reverse=True)
    return stats[:top]


def top_kernels(evs: Sequence[Ev], top: int) -> list[KernelStat]:
    acc: dict[str, list[float]] = {}
    for ev in evs:
        if not ev.on_device or _is_copy(ev.name):
            continue
        row = acc.setdefault(ev.name, [0, 0.0])
        row[0] += 1
        row[1] += ev.dur_us
    stats = [KernelStat(n, int(c), round(t, 3), round(t / c, 3)) for n, (c, t) in acc.items()]
    stats.sort(key=lambda k: k.total_us, reverse=True)
    return stats[:top]


def copies(evs: Sequence[Ev]) -> tuple[Copies, bool]:
    """Host<->device copies from Kineto's memcpy events; (Copies, byte counts known)."""
    h2d = [0, 0.0, 0, 0]  # bytes, us, count, pageable
    d2h = [0, 0.0, 0, 0]
    known = True
    for ev in evs:
        if not ev.on_device or not ev.name.startswith("Memcpy"):
            continue
        # Kineto names them "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)".
        if "HtoD" in ev.name:
            row = h2d
        elif "DtoH" in ev.name:
            row = d2h
        else:
            continue
        if ev.nbytes is None:
            known = False
        else:
            row[0] += ev.nbytes
        row[1] += ev.dur_us
        row[2] += 1
        if "Pageable" in ev.name:
            row[3] += 1
    return (
        Copies(
            h2d_bytes=h2d[0], h2d_us=round(h2d[1], 3), h2d_count=h2d[2], h2d_pageable=h2d[3],
            d2h_bytes=d2h[0], d2h_us=round(d2h[1], 3), d2h_count=d2h[2], d2h_pageable=d2h[3],
        ),
        known,
    )


def syncs(evs: Sequence[Ev], steps: int) -> dict[str, float]:
    """Calls per step of the operations that block the host on the device (only those seen)."""
    counts: dict[str, int] = {}
    for ev in evs:
        if ev.on_device:
            continue
        if ev.name in SYNC_NAMES:
            counts[ev.name] = counts.get(ev.name, 0) + 1
        if ev.to_host:
            counts[TO_HOST] = counts.get(TO_HOST, 0) + 1
    return {k: round(v / steps, 3) for k, v in sorted(counts.items())}


def main_thread(evs: Sequence[Ev]) -> int | None:
    """The training thread: where our step markers are, else the busiest host thread."""
    busiest: dict[int, int] = {}
    for ev in evs:
        if ev.on_device:
            continue
        if _is_marker(ev.name):
            return ev.thread
        busiest[ev.thread] = busiest.get(ev.thread, 0) + 1
    return max(busiest, key=busiest.__getitem__) if busiest else None


def phases(evs: Sequence[Ev], steps: int) -> dict[str, float]:
    """Host-side milliseconds per step in data / forward / backward / optimizer (/ sync / other).

    data, optimizer and backward come from the record_function markers torch
    emits; forward is the time inside torch ops on the training thread outside
    those three (it includes the loss); sync is time blocked in the calls of
    SYNC_NAMES outside them; other is the rest of the marked step (Python
    between ops), only when our step markers are present.
    """
    tid = main_thread(evs)
    data: list[tuple[float, float]] = []
    opt: list[tuple[float, float]] = []
    bwd: list[tuple[float, float]] = []
    ops: list[tuple[float, float]] = []
    sync: list[tuple[float, float]] = []
    marks: list[tuple[float, float]] = []
    # name -> (its list, counted on any thread); names repeat, so each is classified once.
    # data, optimizer and backward count on any thread: on CUDA the autograd engine runs on its own.
    kinds: dict[str, tuple[list[tuple[float, float]], bool]] = {}
    for ev in evs:
        if ev.on_device or ev.is_async:
            continue
        name = ev.name
        kind = kinds.get(name)
        if kind is None:
            if name.startswith(DATA_PREFIX):
                kind = (data, True)
            elif name.startswith(OPTIMIZER_PREFIXES):
                kind = (opt, True)
            elif name.startswith(BACKWARD_PREFIX):
                kind = (bwd, True)
            elif _is_marker(name):
                kind = (marks, False)
            elif name in SYNC_NAMES:
                kind = (sync, False)
            else:
                kind = (ops, False)
            kinds[name] = kind
        if kind[1] or ev.thread == tid:
            kind[0].append((ev.start_us, ev.end_us))
    u_data, u_opt, u_bwd = union(data), union(opt), union(bwd)
    u_marked = union(data + opt + bwd)
    u_sync = union(sync)
    sync_only = length(u_sync) - overlap(u_sync, u_marked)
    u_ops = union(ops)
    forward = length(u_ops) - overlap(u_ops, union(data + opt + bwd + sync))
    out: dict[str, float] = {}
    if data:
        out["data"] = length(u_data)
    out["forward"] = forward
    if bwd:
        out["backward"] = length(u_bwd)
    if opt:
        out["optimizer"] = length(u_opt)
    if sync:
        out["sync"] = sync_only
    if marks:
        out["other"] = max(0.0, length(union(marks)) - length(u_marked) - sync_only - forward)
    return {k: round(v / steps / 1000.0, 4) for k, v in out.items()}


def collectives(evs: Sequence[Ev], steps: int) -> tuple[float | None, float | None]:
    """(ms per step in NCCL/gloo/c10d work, fraction of it overlapped with other device work).

    Device kernels are used when there are any (NCCL); otherwise host ops (gloo
    on CPU), whose overlap is not measured. (None, None) when no collective ran.
    """
    dev_coll: list[tuple[float, float]] = []
    dev_other: list[tuple[float, float]] = []
    host_coll: list[tuple[float, float]] = []
    collective: dict[str, bool] = {}  # names repeat: each is looked at once
    for ev in evs:
        name = ev.name
        is_coll = collective.get(name)
        if is_coll is None:
            is_coll = collective[name] = _is_collective(name)
        if ev.on_device:
            if is_coll:
                dev_coll.append((ev.start_us, ev.end_us))
            elif not _is_copy(name):
                dev_other.append((ev.start_us, ev.end_us))
        elif is_coll:
            host_coll.append((ev.start_us, ev.end_us))
    if dev_coll:
        u = union(dev_coll)
        total = length(u)
        frac = overlap(u, union(dev_other)) / total if total > 0 else None
        return round(total / steps / 1000.0, 4), (round(frac, 4) if frac is not None else None)
    if host_coll:
        return round(length(union(host_coll)) / steps / 1000.0, 4), None
    return None, None


def aggregate(evs: Sequence[Ev], *, steps: int, device: str, top: int = 25) -> Tables:
    """All the tables of one window. `device` is "cuda" or "cpu"; `steps` >= 1."""
    steps = max(1, steps)
    if device == "cuda":
        kernels = top_kernels(evs, top)
        any_device = any(ev.on_device for ev in evs)
        unavailable = None if any_device else NO_KERNELS
        cp, known = copies(evs)
    else:
        kernels, unavailable, cp, known = [], CPU_ONLY, None, True
    coll_ms, coll_overlap = collectives(evs, steps)
    return Tables(
        ops=top_ops(evs, device, top),
        kernels=kernels,
        kernels_unavailable=unavailable,
        copies=cp,
        copy_bytes_known=known,
        syncs_per_step=syncs(evs, steps),
        phases_ms=phases(evs, steps),
        collective_ms=coll_ms,
        collective_overlap=coll_overlap,
    )
