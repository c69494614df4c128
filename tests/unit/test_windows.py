"""Tests the profiler-window aggregation on synthetic events and the window scheduling with a fake profiler."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.events import ProfileWindow
from pitstop.profiling import _aggregate as agg
from pitstop.profiling._aggregate import Ev
from pitstop.profiling.windows import ProfilerWindows

# ---------------------------------------------------------------- intervals


def test_union_merges_overlaps_and_drops_empty() -> None:
    assert agg.union([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]


def test_overlap_of_merged_lists() -> None:
    a = agg.union([(0, 10), (20, 30)])
    b = agg.union([(5, 25)])
    assert agg.overlap(a, b) == 10  # 5..10 and 20..25
    assert agg.length(a) == 20


# ---------------------------------------------------------------- a synthetic CUDA window


def _cuda_window() -> list[Ev]:
    """Two steps of: data, forward (addmm launching a gemm), item() sync, backward, optimizer,
    an H2D pageable copy, a D2H copy, and an NCCL all-reduce half overlapped by a gemm."""
    evs: list[Ev] = []
    for k in range(2):
        o = k * 10_000.0
        evs += [
            Ev("ProfilerStep*", o, o + 10_000, thread=1, self_cpu_us=100),
            Ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", o, o + 1_000, 1, self_cpu_us=1_000),
            Ev("aten::addmm", o + 1_000, o + 3_000, 1, self_cpu_us=50, self_device_us=4_000),
            Ev("aten::item", o + 3_000, o + 4_000, 1, self_cpu_us=10),
            Ev("aten::_local_scalar_dense", o + 3_000, o + 4_000, 1, self_cpu_us=5),
            Ev("cudaStreamSynchronize", o + 3_100, o + 3_900, 1, self_cpu_us=800),
            Ev("autograd::engine::evaluate_function: AddmmBackward0", o + 4_000, o + 7_000, 2, self_cpu_us=30,
               self_device_us=6_000),
            Ev("Optimizer.step#SGD.step", o + 7_000, o + 8_000, 1, self_cpu_us=900),
            Ev("aten::to", o + 8_000, o + 8_500, 1, self_cpu_us=20, to_host=True),
            Ev("ampere_sgemm_128x64_tn", o + 1_500, o + 5_500, 7, on_device=True),
            Ev("ncclKernel_AllReduce_RING_LL_Sum_float", o + 5_000, o + 7_000, 9, on_device=True),
            Ev("Memcpy HtoD (Pageable -> Device)", o + 500, o + 600, 7, on_device=True, nbytes=4096),
            Ev("Memcpy DtoH (Device -> Pinned)", o + 8_100, o + 8_200, 7, on_device=True, nbytes=4),
            Ev("Memset (Device)", o + 8_300, o + 8_310, 7, on_device=True),
        ]
    return evs


def test_cuda_tables_rank_ops_by_device_time_and_count_kernels() -> None:
    t = agg.aggregate(_cuda_window(), steps=2, device="cuda")
    assert t.ops[0].name == "autograd::engine::evaluate_function: AddmmBackward0"
    assert t.ops[0].device_self_us == 12_000
    assert t.ops[1].name == "aten::addmm" and t.ops[1].calls == 2
    assert all(not o.name.startswith("ProfilerStep") for o in t.ops)
    names = [k.name for k in t.kernels]
    assert names == ["ampere_sgemm_128x64_tn", "ncclKernel_AllReduce_RING_LL_Sum_float"]  # no Memcpy/Memset
    assert t.kernels[0].calls == 2 and t.kernels[0].total_us == 8_000 and t.kernels[0].mean_us == 4_000
    assert t.kernels_unavailable is None


def test_cuda_copies_syncs_collectives() -> None:
    t = agg.aggregate(_cuda_window(), steps=2, device="cuda")
    c = t.copies
    assert c is not None
    assert (c.h2d_count, c.h2d_bytes, c.h2d_pageable, c.h2d_us) == (2, 8192, 2, 200)
    assert (c.d2h_count, c.d2h_bytes, c.d2h_pageable) == (2, 8, 0)
    assert t.copy_bytes_known
    assert t.syncs_per_step == {
        "aten::_local_scalar_dense": 1.0,
        "aten::item": 1.0,
        "aten::to(cpu)": 1.0,
        "cudaStreamSynchronize": 1.0,
    }
    assert t.collective_ms == 2.0  # 2 ms of NCCL kernel per step
    assert t.collective_overlap == 0.25  # 5.0-5.5 of 5.0-7.0 overlapped by the gemm


def test_phases_per_step_follow_the_markers() -> None:
    t = agg.aggregate(_cuda_window(), steps=2, device="cuda")
    p = t.phases_ms
    assert p["data"] == 1.0 and p["backward"] == 3.0 and p["optimizer"] == 1.0
    assert p["forward"] == 2.5  # addmm 2 ms + the aten::to 0.5 ms; item() goes to sync
    assert p["sync"] == 1.0
    assert p["other"] == pytest.approx(10.0 - 1 - 3 - 1 - 1 - 2.5)


def test_copy_bytes_unknown_is_flagged_not_invented() -> None:
    evs = [Ev("Memcpy HtoD (Pinned -> Device)", 0, 10, on_device=True)]
    t = agg.aggregate(evs, steps=1, device="cuda")
    assert t.copies is not None and t.copies.h2d_count == 1 and t.copies.h2d_bytes == 0
    assert not t.copy_bytes_known


def test_cpu_run_has_no_kernels_and_ranks_by_self_cpu() -> None:
    evs = [
        Ev("aten::addmm", 0, 100, 1, self_cpu_us=90),
        Ev("aten::convolution", 100, 400, 1, self_cpu_us=20),
        Ev("gloo:all_reduce", 400, 600, 1, self_cpu_us=200),
    ]
    t = agg.aggregate(evs, steps=2, device="cpu")
    assert t.kernels == [] and t.kernels_unavailable == agg.CPU_ONLY and t.copies is None
    assert [o.name for o in t.ops] == ["gloo:all_reduce", "aten::addmm", "aten::convolution"]
    assert t.ops[0].device_self_us is None
    assert t.collective_ms == 0.1 and t.collective_overlap is None


def test_no_collectives_is_none_not_zero() -> None:
    t = agg.aggregate([Ev("aten::mm", 0, 10, 1, self_cpu_us=10)], steps=1, device="cpu")
    assert t.collective_ms is None


def test_cuda_window_without_device_events_says_why() -> None:
    t = agg.aggregate([Ev("aten::mm", 0, 10, 1, self_cpu_us=10)], steps=1, device="cuda")
    assert t.kernels == [] and t.kernels_unavailable == agg.NO_KERNELS


def test_top_limits_rows() -> None:
    evs = [Ev(f"op{i}", 0, 1, 1, self_cpu_us=float(i)) for i in range(40)]
    t = agg.aggregate(evs, steps=1, device="cpu", top=25)
    assert len(t.ops) == 25 and t.ops[0].name == "op39"


# ---------------------------------------------------------------- extract from FunctionEvent-like objects


def _fe(name: str, start: float, end: float, *, device: str = "CPU", parent: Any = None,
        kernels: tuple[str, ...] = (), nbytes: int | None = None) -> SimpleNamespace:
    fe = SimpleNamespace(
        name=name, time_range=SimpleNamespace(start=start, end=end), thread=1,
        device_type=SimpleNamespace(name=device), is_async=False,
        self_cpu_time_total=end - start, self_device_time_total=0.0, cpu_parent=parent,
        cpu_children=[], kernels=[SimpleNamespace(name=k) for k in kernels],
        event_metadata=SimpleNamespace(bytes=nbytes) if nbytes is not None else None,
    )
    if parent is not None:
        parent.cpu_children.append(fe)
    return fe


def test_extract_flags_outermost_to_that_copies_to_host_and_reads_bytes() -> None:
    to = _fe("aten::to", 0, 10)
    to_copy = _fe("aten::_to_copy", 1, 9, parent=to)
    _fe("aten::copy_", 2, 8, parent=to_copy, kernels=("Memcpy DtoH (Device -> Pageable)",))
    to_gpu = _fe("aten::to", 20, 30)
    _fe("aten::copy_", 21, 29, parent=to_gpu, kernels=("Memcpy HtoD (Pageable -> Device)",))
    memcpy = _fe("Memcpy DtoH (Device -> Pageable)", 3, 4, device="CUDA", nbytes=1024)
    evs = agg.extract([to, to_copy, to_gpu, memcpy], use_device=True)
    assert [e.to_host for e in evs] == [True, False, False, False]  # inner _to_copy not double counted
    assert evs[3].on_device and evs[3].nbytes == 1024


def test_release_breaks_the_tree() -> None:
    parent = _fe("a", 0, 2)
    child = _fe("b", 0, 1, parent=parent)
    agg.release([parent, child])
    assert parent.cpu_children == [] and child.cpu_parent is None


# ---------------------------------------------------------------- scheduling with a fake profiler


class FakeProf:
    """Stands in for torch.profiler.profile: records calls, returns no events."""

    def __init__(self, log: list[str], fail_on: str = "") -> None:
        self.log = log
        self.fail_on = fail_on

    def start(self) -> None:
        self.log.append("start")
        if self.fail_on == "start":
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    def stop(self) -> None:
        self.log.append("stop")

    def events(self) -> list[Any]:
        if self.fail_on == "events":
            raise RuntimeError("corrupt trace")
        return [_fe("aten::mm", 0, 10)]

    def export_chrome_trace(self, path: str) -> None:
        raise OSError(28, "No space left on device")


class Collector:
    def __init__(self) -> None:
        self.events: list[ProfileWindow] = []
        self.notes: list[tuple[str, str]] = []
        self.cv = threading.Condition()

    def emit(self, ev: Any) -> None:
        with self.cv:
            self.events.append(ev)
            self.cv.notify_all()

    def note(self, level: str, message: str) -> None:
        with self.cv:
            self.notes.append((level, message))
            self.cv.notify_all()

    def wait(self, n: int) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.events) + len(self.notes) >= n, timeout=10)


def _windows(c: Collector, log: list[str], fail_on: str = "", **kw: Any) -> ProfilerWindows:
    kw.setdefault("every", 10)
    kw.setdefault("active", 3)
    kw.setdefault("first", 5)
    return ProfilerWindows(trace_dir=kw.pop("trace_dir", None), device_type="cpu", emit=c.emit, note=c.note,
                           profiler_factory=lambda: FakeProf(log, fail_on), **kw)


def test_schedule_starts_after_first_then_every() -> None:
    c, log = Collector(), []
    w = _windows(c, log)
    for step in range(5):
        w.on_step(step)
    assert log == []  # nothing before step `first` ended
    w.on_step(5)
    assert log == ["start"]
    w.on_step(6), w.on_step(7)
    assert log == ["start"]
    w.on_step(8)  # steps 6, 7, 8 recorded
    assert log == ["start", "stop"]
    c.wait(1)
    ev = c.events[0]
    assert (ev.step_start, ev.step_end, ev.trigger, ev.device) == (6, 9, "schedule", "cpu")
    assert ev.ops[0].name == "aten::mm"
    for step in range(9, 16):
        w.on_step(step)
    assert log.count("start") == 2  # the second window opened after step 15
    w.close()
    assert log.count("stop") == 2
    assert len(c.events) == 1  # closed before any step of the second window completed
    w.close()  # idempotent


def test_on_demand_only_and_request_reply() -> None:
    c, log = Collector(), []
    w = _windows(c, log, every=None, active=2)
    for step in range(50):
        w.on_step(step)
    assert log == []
    assert w.request() == "profiling the next 2 steps"
    w.on_step(50)
    assert "already recording" in w.request()
    w.on_step(51), w.on_step(52)
    c.wait(1)
    assert (c.events[0].trigger, c.events[0].step_start, c.events[0].step_end) == ("demand", 51, 53)
    w.close()


def test_close_reports_the_steps_seen_in_an_open_window() -> None:
    c, log = Collector(), []
    w = _windows(c, log, every=None, active=10)
    w.request()
    for step in range(3):  # starts after step 0, sees steps 1 and 2
        w.on_step(step)
    w.close()
    assert (c.events[0].step_start, c.events[0].step_end) == (1, 3)


def test_busy_processing_skips_a_scheduled_window_and_counts_it() -> None:
    c, log = Collector(), []
    gate = threading.Event()

    def slow_emit(ev: Any) -> None:
        gate.wait(10)
        c.emit(ev)

    w = ProfilerWindows(every=2, active=1, first=0, trace_dir=None, device_type="cpu", emit=slow_emit,
                        note=c.note, profiler_factory=lambda: FakeProf(log))
    w.on_step(0), w.on_step(1)  # window of step 1, now being processed (blocked in emit)
    w.on_step(2)  # next scheduled start: skipped
    assert w.skipped == 1 and log == ["start", "stop"]
    assert any("skipped" in m for _, m in c.notes)
    gate.set()
    c.wait(2)
    w.on_step(3), w.on_step(4)
    assert log.count("start") == 2
    w.close()


def test_start_failure_notes_once_and_switches_off() -> None:
    c, log = Collector(), []
    w = _windows(c, log, fail_on="start", first=0, every=1, active=1)
    for step in range(20):
        w.on_step(step)  # never raises
    assert log.count("start") == 1
    warns = [m for lvl, m in c.notes if lvl == "warn"]
    assert len(warns) == 1 and "CUPTI_ERROR_NOT_INITIALIZED" in warns[0]
    assert "off" in w.request()


def test_aggregation_failure_on_the_thread_switches_off() -> None:
    c, log = Collector(), []
    w = _windows(c, log, fail_on="events", first=0, every=3, active=1)
    w.on_step(0), w.on_step(1)
    c.wait(1)
    for step in range(2, 30):
        w.on_step(step)
    assert log.count("start") == 1 and c.events == []
    assert [lvl for lvl, _ in c.notes] == ["warn"] and "corrupt trace" in c.notes[0][1]
    w.close()


def test_trace_write_failure_keeps_the_tables(tmp_path: Any) -> None:
    c, log = Collector(), []
    w = _windows(c, log, first=0, every=2, active=1, trace_dir=tmp_path / "traces")
    w.on_step(0), w.on_step(1)
    c.wait(2)
    assert len(c.events) == 1 and c.events[0].trace_path is None
    assert any(lvl == "warn" and "No space left" in m for lvl, m in c.notes)
    w.close()


def test_aggregation_runs_gently_and_puts_the_process_settings_back() -> None:
    import gc
    import sys

    from pitstop.profiling.windows import _SWITCH_INTERVAL_S, _gentle

    before = sys.getswitchinterval()
    assert gc.isenabled()
    with _gentle():
        assert sys.getswitchinterval() == _SWITCH_INTERVAL_S and not gc.isenabled()
    assert sys.getswitchinterval() == before and gc.isenabled()
    gc.disable()  # the script's own choice stays
    try:
        with _gentle():
            sys.setswitchinterval(0.002)  # the script changes it meanwhile: kept
        assert not gc.isenabled() and sys.getswitchinterval() == 0.002
    finally:
        gc.enable()
        sys.setswitchinterval(before)


def test_a_stuck_aggregation_does_not_pause_collection_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import time

    from pitstop.profiling import windows

    monkeypatch.setattr(windows, "_GC_PAUSE_MAX_S", 0.1)
    with windows._gentle():
        assert not gc.isenabled()
        time.sleep(0.5)  # torch taking far too long
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_processed_window_frees_torchs_profiler_without_waiting_for_the_gc() -> None:
    # torch's profile objects sit in reference cycles; kept alive until a full
    # collection, a stopped profiler slowed the training steps by a few percent.
    import gc
    import weakref

    torch = pytest.importorskip("torch")
    from pitstop.profiling.windows import _default_factory

    made: list[weakref.ref[Any]] = []

    def factory() -> Any:
        prof = _default_factory("cpu")()
        made.append(weakref.ref(prof))
        return prof

    c = Collector()
    w = ProfilerWindows(every=None, active=2, first=0, trace_dir=None, device_type="cpu", emit=c.emit, note=c.note,
                        profiler_factory=factory)
    model = torch.nn.Linear(8, 8)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for window in range(2):
            w.request()
            for step in range(3 * window, 3 * window + 3):
                model(torch.randn(4, 8)).sum().backward()
                w.on_step(step)
            c.wait(window + 1)
        w.close()
        assert len(c.events) == 2 and all(ev.ops for ev in c.events)  # real windows, aggregated
        assert len(made) == 2
        # The first profiler of a process can be held a while longer by the frames of a
        # lazy `import` torch makes inside it: it is emptied (its results let go) even then.
        assert all(ref() is None or not vars(ref()) for ref in made)
        assert made[-1]() is None, "the profiler outlived its window"
    finally:
        if was_enabled:
            gc.enable()
