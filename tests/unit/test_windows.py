"""Tests the profiler-window tables on synthetic events, and the windows' schedule and marks with a fake profiler."""

from __future__ import annotations

import enum
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.events import ProfileWindow
from pitstop.profiling import _aggregate as agg
from pitstop.profiling import _kineto
from pitstop.profiling import windows as windows_mod
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


# ---------------------------------------------------------------- raw Kineto events


class DeviceType(enum.Enum):
    CPU = 0
    CUDA = 1


class RawEv:
    """Stands in for torch's _KinetoEvent: the accessors `_kineto.read` calls, times in ns."""

    def __init__(self, name: str, start: int, end: int, *, thread: int = 1, end_thread: int | None = None,
                 corr: int = 0, link: int = 0, device: bool = False, meta: dict[str, str] | None = None,
                 activity: str = "") -> None:
        self._v = (name, start, end, thread, thread if end_thread is None else end_thread, corr, link, device)
        self._meta = meta or {}
        self._activity = activity or ("kernel" if device else "cpu_op")

    def name(self) -> str: return self._v[0]
    def start_ns(self) -> int: return self._v[1]
    def end_ns(self) -> int: return self._v[2]
    def start_thread_id(self) -> int: return self._v[3]
    def end_thread_id(self) -> int: return self._v[4]
    def correlation_id(self) -> int: return self._v[5]
    def linked_correlation_id(self) -> int: return self._v[6]
    def device_type(self) -> DeviceType: return DeviceType.CUDA if self._v[7] else DeviceType.CPU
    def is_async(self) -> bool: return False
    def is_hidden_event(self) -> bool: return False
    def extra_meta(self) -> dict[str, str]: return self._meta
    def activity_type(self) -> str: return self._activity


def _by_name(evs: list[Ev]) -> dict[str, Ev]:
    return {e.name: e for e in evs}


def test_read_nests_per_thread_for_self_times_as_torch_does() -> None:
    raw = [
        RawEv("aten::linear", 0, 10_000, corr=1),
        RawEv("aten::addmm", 2_000, 8_000, corr=2),
        RawEv("aten::copy_", 3_000, 4_000, corr=3),
        RawEv("aten::mm", 1_000, 9_000, thread=2, corr=4),  # another thread: no parent here
        RawEv("aten::is_leaf", 2_500, 2_600, corr=5),  # torch drops it
        RawEv("stream wait", 1_000, 3_000, thread=1, end_thread=3, corr=6),  # ends elsewhere: async
    ]
    evs = _by_name(_kineto.read(raw, use_device=False))
    assert set(evs) == {"aten::linear", "aten::addmm", "aten::copy_", "aten::mm", "stream wait"}
    assert evs["aten::linear"].self_cpu_us == 4.0  # 10 us less addmm's 6
    assert evs["aten::addmm"].self_cpu_us == 5.0 and evs["aten::copy_"].self_cpu_us == 1.0
    assert evs["aten::mm"].self_cpu_us == 8.0
    assert evs["stream wait"].is_async and evs["stream wait"].self_cpu_us == 0.0


def test_read_links_device_work_to_the_op_that_launched_it() -> None:
    raw = [
        RawEv("aten::to", 0, 10_000, corr=1),
        RawEv("aten::_to_copy", 1_000, 9_000, corr=2),
        RawEv("aten::copy_", 2_000, 8_000, corr=3),
        RawEv("cudaMemcpyAsync", 3_000, 4_000, thread=99, corr=50, link=3),  # runtime call: op's thread
        RawEv("Memcpy DtoH (Device -> Pageable)", 5_000, 7_000, corr=51, link=3, device=True,
              meta={"bytes": "1024"}),
        RawEv("aten::addmm", 20_000, 30_000, corr=4),
        RawEv("ampere_sgemm", 25_000, 29_000, corr=52, link=4, device=True),
        RawEv("aten::to", 40_000, 50_000, corr=5),  # to the GPU: no DtoH below it
        RawEv("ProfilerStep#3", 0, 60_000, device=True, activity="gpu_user_annotation"),  # not a kernel
    ]
    evs = _kineto.read(raw, use_device=True)
    host = {(e.name, e.start_us): e for e in evs if not e.on_device}
    assert host[("cudaMemcpyAsync", 3.0)].thread == 1  # nests under copy_, as in torch's tree
    assert host[("aten::copy_", 2.0)].self_cpu_us == 5.0
    assert host[("aten::copy_", 2.0)].self_device_us == 2.0
    assert host[("aten::addmm", 20.0)].self_device_us == 4.0
    assert [host[("aten::to", 0.0)].to_host, host[("aten::_to_copy", 1.0)].to_host,
            host[("aten::to", 40.0)].to_host] == [True, False, False]  # the outermost .to() only
    assert [e.name for e in evs if e.on_device] == ["Memcpy DtoH (Device -> Pageable)", "ampere_sgemm"]
    memcpy = next(e for e in evs if e.name.startswith("Memcpy"))
    assert memcpy.on_device and memcpy.nbytes == 1024 and memcpy.link == 3
    tables = agg.aggregate(evs, steps=1, device="cuda")
    assert tables.syncs_per_step == {agg.TO_HOST: 1.0}
    assert tables.copies is not None and tables.copies.d2h_bytes == 1024 and tables.copies.d2h_pageable == 1


def test_within_steps_keeps_the_named_steps_and_what_they_launched() -> None:
    evs = [
        Ev("ProfilerStep#5", 0, 100, 1, corr=1),
        Ev("aten::mm", 10, 20, 1, corr=2),
        Ev("Optimizer.step#SGD.step", 90, 105, 1, corr=3),  # starts in step 5, ends just after: kept
        Ev("ProfilerStep#6", 100, 200, 1, corr=4),
        Ev("aten::mm", 150, 160, 2, corr=5),  # another thread, inside step 6
        Ev("ProfilerStep#7", 200, 300, 1, corr=6),  # the step still running at the end: not named
        Ev("aten::eval_op", 210, 250, 1, corr=7),
        Ev("gemm", 180, 215, on_device=True, link=5),  # launched in step 6, ran past it: kept
        Ev("gemm", 260, 270, on_device=True, link=7),  # launched by the dropped op
        Ev("ncclKernel", 150, 170, on_device=True),  # no link: by time
        Ev("ncclKernel", 220, 230, on_device=True),
        Ev("aten::late", 400, 410, 1, corr=8),  # after every marker
    ]
    kept = agg.within_steps(evs, 5, 7)
    assert [(e.name, e.start_us) for e in kept] == [
        ("ProfilerStep#5", 0), ("aten::mm", 10), ("Optimizer.step#SGD.step", 90), ("ProfilerStep#6", 100),
        ("aten::mm", 150), ("gemm", 180), ("ncclKernel", 150),
    ]
    assert agg.within_steps([Ev("aten::mm", 0, 1, 1)], 0, 3) == [Ev("aten::mm", 0, 1, 1)]  # no markers: whole


# ---------------------------------------------------------------- scheduling with a fake profiler


class Sim:
    """A fake clock and a fake torch.profiler behind it: what a test runs becomes raw events.

    As in torch, a range is recorded when it began while the profiler recorded
    with record functions on, and ended before the profiler stopped; a range
    open when record functions are switched off still ends and is recorded.
    """

    def __init__(self, fail_on: str = "") -> None:
        self.t = 0
        self.log: list[str] = []
        self.fail_on = fail_on
        self.recording: FakeProf | None = None
        self.rf_on = True

    def factory(self) -> FakeProf:
        return FakeProf(self)

    def begin(self, name: str) -> tuple[str, int, FakeProf | None]:
        self.t += 1_000
        return name, self.t, self.recording if self.rf_on else None

    def end(self, rng: tuple[str, int, FakeProf | None]) -> None:
        self.t += 1_000
        name, start, prof = rng
        if prof is not None and prof is self.recording:
            prof.raw.append(RawEv(name, start, self.t))

    def op(self, name: str) -> None:
        self.end(self.begin(name))

    def step(self, windows: ProfilerWindows, index: int, marks: list[str | None] | None = None,
             ops: tuple[str, ...] = ("aten::mm",)) -> None:
        """One training step as the agent sees it: ops, then the optimizer, whose post-hook
        (inside torch's "Optimizer.step#" range) reads the mark and calls on_step."""
        for name in ops:
            self.op(name)
        opt = self.begin("Optimizer.step#SGD.step")
        if marks is not None:
            marks.append(windows.mark)
        windows.on_step(index)
        self.end(opt)


class FakeProf:
    """Stands in for torch.profiler.profile over a Sim."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.raw: list[RawEv] = []
        self.profiler = SimpleNamespace(kineto_results=self)

    def start(self) -> None:
        self.sim.log.append("start")
        if self.sim.fail_on == "start":
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        self.sim.recording = self

    def stop(self) -> None:
        self.sim.log.append("stop")
        self.sim.recording = None

    def events(self) -> list[RawEv]:  # kineto_results.events()
        if self.sim.fail_on == "events":
            raise RuntimeError("corrupt trace")
        return self.raw

    def trace_start_ns(self) -> int:
        return 0

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
            assert self.cv.wait_for(lambda: len(self.events) + len(self.notes) >= n, timeout=60)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Sim:
    s = Sim()

    class Marker:
        def __init__(self, step: int) -> None:
            self.rng = s.begin(f"ProfilerStep#{step}")

        def __exit__(self, *exc: Any) -> None:
            s.end(self.rng)

    def record_functions(enabled: bool) -> bool:
        s.rf_on = enabled
        return True

    monkeypatch.setattr(windows_mod, "_marker", Marker)
    monkeypatch.setattr(windows_mod, "_record_functions", record_functions)
    return s


def _windows(c: Collector, sim: Sim, **kw: Any) -> ProfilerWindows:
    kw.setdefault("every", 10)
    kw.setdefault("active", 3)
    kw.setdefault("first", 5)
    return ProfilerWindows(trace_dir=kw.pop("trace_dir", None), device_type="cpu", emit=kw.pop("emit", c.emit),
                           note=c.note, profiler_factory=sim.factory, **kw)


def _ops(ev: ProfileWindow) -> dict[str, int]:
    return {o.name: o.calls for o in ev.ops}


def test_schedule_starts_after_first_then_every(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim)
    for step in range(5):
        sim.step(w, step)
    assert sim.log == []  # nothing before step `first` ended
    sim.step(w, 5)
    assert sim.log == ["start"]
    for step in (6, 7, 8):  # steps 6, 7, 8 recorded
        sim.step(w, step)
    assert sim.log == ["start"]  # the last step's optimizer range is still open
    sim.step(w, 9)
    assert sim.log == ["start", "stop"]
    c.wait(1)
    ev = c.events[0]
    assert (ev.step_start, ev.step_end, ev.trigger, ev.device) == (6, 9, "schedule", "cpu")
    # exactly the three steps: one optimizer step each (the last one ended after its
    # boundary), no op of step 9, which ran while the profiler was being stopped
    assert _ops(ev) == {"aten::mm": 3, "Optimizer.step#SGD.step": 3}
    for step in range(10, 16):
        sim.step(w, step)
    assert sim.log.count("start") == 2  # the second window opened after step 15
    w.close()
    assert sim.log.count("stop") == 2
    assert len(c.events) == 1 and w.discarded == 1  # closed before any step of the second window completed
    w.close()  # idempotent


def test_marks_over_a_sequence_of_steps(sim: Sim) -> None:
    c = Collector()
    gate = threading.Event()

    def slow_emit(ev: Any) -> None:  # the tables are "being built" until the gate opens
        gate.wait(10)
        c.emit(ev)

    w = _windows(c, sim, every=100, active=2, first=2, emit=slow_emit)
    marks: list[str | None] = []
    for step in range(8):
        sim.step(w, step, marks)
    gate.set()
    c.wait(1)
    for step in range(8, 8 + windows_mod.SETTLE_STEPS + 3):
        sim.step(w, step, marks)
    # 0-2 before; 3-4 profiled (the first one too); 5, whose end stops the profiler; 6-7 and
    # 8 (in which the tables came out) while they were built; then SETTLE_STEPS more
    after = ["after-profile"] * (4 + windows_mod.SETTLE_STEPS)
    assert marks == [None] * 3 + ["profiled"] * 2 + after + [None, None]
    assert (c.events[0].step_start, c.events[0].step_end) == (3, 5)
    w.close()


def test_on_demand_only_and_request_reply(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=2)
    for step in range(50):
        sim.step(w, step)
    assert sim.log == [] and w.mark is None
    assert w.request() == "profiling the next 2 steps"
    sim.step(w, 50)
    assert "already recording" in w.request()
    for step in (51, 52, 53):
        sim.step(w, step)
    c.wait(1)
    assert (c.events[0].trigger, c.events[0].step_start, c.events[0].step_end) == ("demand", 51, 53)
    w.close()


def test_an_evaluation_pass_ends_the_window_at_the_last_completed_step(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=5)
    w.request()
    for step in range(3):  # opens after step 0; steps 1 and 2 complete
        sim.step(w, step)
    sim.op("aten::mm")
    sim.op("aten::eval_forward")
    w.on_eval()  # step 3 turned out to hold an evaluation pass
    assert sim.log == ["start", "stop"] and w.mark == "after-profile"
    sim.op("aten::eval_forward")  # the rest of the pass: not recorded
    sim.step(w, 3)
    c.wait(1)
    ev = c.events[0]
    assert (ev.step_start, ev.step_end) == (1, 3)
    assert _ops(ev) == {"aten::mm": 2, "Optimizer.step#SGD.step": 2}
    w.close()


def test_an_evaluation_pass_in_the_closing_step_keeps_every_named_step(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=2)
    w.request()
    for step in range(3):  # steps 1 and 2 recorded; the profiler stops at the end of step 3
        sim.step(w, step)
    sim.op("aten::eval_forward")
    w.on_eval()
    assert sim.log == ["start", "stop"] and sim.rf_on
    c.wait(1)
    assert (c.events[0].step_start, c.events[0].step_end) == (1, 3)
    assert _ops(c.events[0]) == {"aten::mm": 2, "Optimizer.step#SGD.step": 2}
    w.close()


def test_an_evaluation_pass_before_any_step_completed_discards_the_window_and_starts_it_again(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=5)
    w.request()
    sim.step(w, 0)
    w.on_eval()  # never raises
    w.on_eval()  # nothing open any more: nothing to do
    assert sim.log == ["start", "stop"] and w.discarded == 1
    marks: list[str | None] = []
    for step in range(1, 4):
        sim.step(w, step, marks)
    # the step that paid the stop; then the window again, from the step after it
    assert marks == ["after-profile", "profiled", "profiled"] and sim.log == ["start", "stop", "start"]
    w.close()
    assert [(e.step_start, e.step_end) for e in c.events] == [(2, 4)]


def test_where_every_step_evaluates_windows_run_through_the_evaluations_after_two_discarded(sim: Sim) -> None:
    # pytorch/examples' GCN evaluates after every optimizer step: each window was discarded at the
    # next step's evaluation, and the run had no op table at all.
    c = Collector()
    w = _windows(c, sim, every=4, active=2, first=0)
    step = 0
    while w.discarded < windows_mod.EVAL_DISCARDS_MAX:
        sim.op("aten::eval_forward")
        w.on_eval()  # each step begins with the evaluation after the step before
        sim.step(w, step)
        step += 1
        assert step < 40, "no window opened"
    assert c.events == [] and c.notes == []
    for _ in range(12):
        sim.op("aten::eval_forward")
        w.on_eval()
        sim.step(w, step)
        step += 1
    with c.cv:
        assert c.cv.wait_for(lambda: c.events, timeout=60), c.notes
    ev = c.events[0]
    assert ev.step_end - ev.step_start == 2
    assert _ops(ev) == {"aten::mm": 2, "Optimizer.step#SGD.step": 2, "aten::eval_forward": 2}  # said in the note
    assert [level for level, message in c.notes if "every step evaluates" in message] == ["warn"]
    discarded = w.discarded
    for _ in range(12):  # the next windows run through at once: none discarded again
        sim.op("aten::eval_forward")
        w.on_eval()
        sim.step(w, step)
        step += 1
    with c.cv:
        assert c.cv.wait_for(lambda: len(c.events) >= 2, timeout=60), c.notes
    assert w.discarded == discarded and c.events[1].step_start > c.events[0].step_end
    w.close()


def test_close_reports_only_the_steps_completed_in_an_open_window(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=10)
    w.request()
    for step in range(3):  # starts after step 0, sees steps 1 and 2
        sim.step(w, step)
    for _ in range(4):  # training ended; an evaluation loop the agent did not flag
        sim.op("aten::eval_forward")
    w.close()
    c.wait(1)
    assert (c.events[0].step_start, c.events[0].step_end) == (1, 3)
    assert _ops(c.events[0]) == {"aten::mm": 2, "Optimizer.step#SGD.step": 2}


def test_close_while_the_last_step_settles_reports_the_window(sim: Sim) -> None:
    c = Collector()
    w = _windows(c, sim, every=None, active=2)
    w.request()
    for step in range(3):
        sim.step(w, step)
    sim.op("aten::eval_forward")  # record functions are off: nothing new is recorded
    w.close()
    assert sim.rf_on and sim.log == ["start", "stop"]
    c.wait(1)
    assert (c.events[0].step_start, c.events[0].step_end) == (1, 3)
    assert "aten::eval_forward" not in _ops(c.events[0])


def test_busy_processing_skips_a_scheduled_window_and_counts_it(sim: Sim) -> None:
    c = Collector()
    gate = threading.Event()

    def slow_emit(ev: Any) -> None:
        gate.wait(10)
        c.emit(ev)

    w = _windows(c, sim, every=3, active=1, first=0, emit=slow_emit)
    for step in range(4):  # window of step 1, stopped at 2, now being processed (blocked in emit)
        sim.step(w, step)
    assert w.skipped == 1 and sim.log == ["start", "stop"]  # the start due after step 3
    assert any("skipped" in m for _, m in c.notes)
    gate.set()
    c.wait(2)
    for step in range(4, 7):
        sim.step(w, step)
    assert sim.log.count("start") == 2
    w.close()


def test_start_failure_notes_once_and_switches_off(sim: Sim) -> None:
    c = Collector()
    sim.fail_on = "start"
    w = _windows(c, sim, first=0, every=1, active=1)
    for step in range(20):
        sim.step(w, step)  # never raises
    assert sim.log.count("start") == 1 and w.mark is None
    warns = [m for lvl, m in c.notes if lvl == "warn"]
    assert len(warns) == 1 and "CUPTI_ERROR_NOT_INITIALIZED" in warns[0]
    assert "off" in w.request()


def test_aggregation_failure_on_the_thread_switches_off(sim: Sim) -> None:
    c = Collector()
    sim.fail_on = "events"
    w = _windows(c, sim, first=0, every=3, active=1)
    for step in range(3):
        sim.step(w, step)
    c.wait(1)
    for step in range(3, 30):
        sim.step(w, step)
    assert sim.log.count("start") == 1 and c.events == [] and w.mark is None
    assert [lvl for lvl, _ in c.notes] == ["warn"] and "corrupt trace" in c.notes[0][1]
    w.close()


def test_trace_write_failure_keeps_the_tables(sim: Sim, tmp_path: Any) -> None:
    c = Collector()
    w = _windows(c, sim, first=0, every=2, active=1, trace_dir=tmp_path / "traces")
    for step in range(3):
        sim.step(w, step)
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
        # Torch taking far too long: collection comes back while still inside. Waited on, not slept
        # for a fixed 0.5 s (on a busy machine the guard's thread may run later: issue 13).
        deadline = time.monotonic() + 60
        while not gc.isenabled() and time.monotonic() < deadline:
            time.sleep(0.01)
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
            for step in range(4 * window, 4 * window + 4):  # opens, 2 steps, the profiler stops
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
