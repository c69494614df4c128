"""Provides the reading of a stopped profiler's raw Kineto events into flat `Ev` records.

torch's own reading, `prof.events()`, builds one Python `FunctionEvent` per
event (some 35 accessor calls each) and then a parent/child tree: 230-580 ms
for the 2,940 events of one 5-step window of benchmarks/_workload_10ms.py on
the 2-core VM, holding the GIL against the training thread in every slice.
Here the raw `KinetoEvent`s (`prof.profiler.kineto_results.events()`, built in
C++, ~3 ms) are read for the 6 fields the tables use on a CPU run (8 with
CUDA), and nested per thread as torch nests them: ~9 ms for the same window,
with the same tables as torch's path (tests/integration/test_windows_cpu.py).

What torch derives, derived the same way (torch/autograd/profiler.py,
`_parse_kineto_results`, and profiler_util.py, `_populate_cpu_children`):
- an event is async if Kineto says so or it ends on another thread;
- a host event with a linked correlation id (a CUDA runtime call such as
  cudaLaunchKernel) takes the thread of the op it is linked to, so it nests
  under that op;
- self CPU time is the event's time less its direct children's, children being
  the synchronous host events of the same thread that lie inside it;
- an op's self device time is the time of the device events linked to it;
- names torch drops (its own record_function plumbing) are dropped.
One difference: the GPU copies of record_function ranges are not device work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pitstop.profiling._aggregate import Ev

# torch.autograd.profiler_util._filter_name: utility ops torch leaves out of its tables.
DROPPED = frozenset((
    "[memory]",
    "[OutOfMemory]",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
))
_TO_NAMES = ("aten::to", "aten::_to_copy")
# Kineto draws each record_function range that launched GPU work again on the GPU
# timeline; torch's FunctionEvents count it as device time, so "ProfilerStep#N"
# would rank first among the kernels.
GPU_ANNOTATION = "gpu_user_annotation"


def raw_events(prof: Any) -> tuple[Sequence[Any], int] | None:
    """(KinetoEvents, trace start in ns) of a stopped torch.profiler.profile, or None where
    this torch keeps no Kineto results (the caller falls back to `prof.events()`)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None or not hasattr(results, "events"):
        return None
    start = results.trace_start_ns() if hasattr(results, "trace_start_ns") else 0
    return results.events(), int(start)


def _bytes(k: Any) -> int | None:
    """A memcpy's size: Kineto's "bytes" in extra_meta (newer torch) or in its metadata JSON."""
    meta = getattr(k, "extra_meta", None)
    if meta is not None:
        value = (meta() or {}).get("bytes")
        return int(value) if value is not None else None
    text = k.metadata_json() if hasattr(k, "metadata_json") else ""
    key = text.find('"bytes":')
    if key < 0:
        return None
    digits = text[key + 8:].lstrip().split(",", 1)[0].strip()
    return int(digits) if digits.isdigit() else None


def read(raw: Sequence[Any], use_device: bool, t0_ns: int = 0) -> list[Ev]:
    """Flatten KinetoEvents into `Ev` records (times in us from `t0_ns`).

    use_device False: the profiler recorded CPU activity only, so there are no
    device events and no links to read (two accessor calls fewer per event).
    """
    if not raw:
        return []
    hidden = hasattr(raw[0], "is_hidden_event")
    cpu = type(raw[0].device_type()).CPU if use_device else None
    # host rows: [name, start, end, thread, corr, link, async, child time, parent index, dtoh below]
    host: list[list[Any]] = []
    device: list[tuple[str, float, float, int, int | None]] = []  # name, start, end, link, bytes
    for k in raw:
        name = k.name()
        if name in DROPPED or (hidden and k.is_hidden_event()):
            continue
        start = (k.start_ns() - t0_ns) / 1000.0
        end = (k.end_ns() - t0_ns) / 1000.0
        if use_device:
            if k.device_type() != cpu:
                if k.activity_type() == GPU_ANNOTATION:
                    continue  # a record_function range's span on the GPU timeline, not a kernel
                nbytes = _bytes(k) if name.startswith("Memcpy") else None
                device.append((name, start, end, k.linked_correlation_id(), nbytes))
                continue
            corr, link = k.correlation_id(), k.linked_correlation_id()
        else:
            corr = link = 0
        thread = k.start_thread_id()
        host.append([name, start, end, thread, corr, link, k.is_async() or thread != k.end_thread_id(),
                     0.0, -1, False])

    if use_device:
        op_thread = {row[4]: row[3] for row in host if row[5] == 0}
        for row in host:
            if row[5] > 0 and row[5] in op_thread:
                row[3] = op_thread[row[5]]

    _nest(host)

    own_device: dict[int, float] = {}
    dtoh: set[int] = set()
    for name, start, end, link, _ in device:
        if link > 0:
            own_device[link] = own_device.get(link, 0.0) + max(0.0, end - start)
            if "DtoH" in name:
                dtoh.add(link)
    if dtoh:
        _mark_copies_to_host(host, dtoh)

    out: list[Ev] = []
    append = out.append
    for name, start, end, thread, corr, link, is_async, children, parent, below in host:
        to_host = False
        if below and name in _TO_NAMES:
            to_host = parent < 0 or host[parent][0] not in _TO_NAMES  # the outermost .to() only
        if is_async:
            append(Ev(name, start, end, thread, False, 0.0, 0.0, True, None, to_host, corr, link))
        else:
            self_device = own_device.get(corr, 0.0) if own_device and not link else 0.0
            append(Ev(name, start, end, thread, False, max(0.0, end - start - children), self_device, False,
                      None, to_host, corr, link))
    for name, start, end, link, nbytes in device:
        append(Ev(name, start, end, 0, True, 0.0, 0.0, False, nbytes, False, 0, link))
    return out


def _nest(host: list[list[Any]]) -> None:
    """Per thread, give every synchronous host row its parent and its parent the child's time."""
    order = sorted((i for i, row in enumerate(host) if not row[6]),
                   key=lambda i: (host[i][3], host[i][1], -host[i][2]))
    stack: list[int] = []
    thread = None
    for i in order:
        row = host[i]
        if row[3] != thread:
            thread, stack = row[3], []
        start, end = row[1], row[2]
        while stack:
            top = host[stack[-1]]
            if start >= top[2] or end > top[2]:
                stack.pop()  # cannot hold this one (torch keeps partial overlaps apart too)
            else:
                top[7] += end - start
                row[8] = stack[-1]
                break
        stack.append(i)


def _mark_copies_to_host(host: list[list[Any]], dtoh: set[int]) -> None:
    """Flag every row that has, in itself or below it, an op a device->host memcpy is linked to."""
    for row in host:
        if row[4] in dtoh and not row[5]:
            node = row
            while not node[9]:
                node[9] = True
                if node[8] < 0:
                    break
                node = host[node[8]]
