"""Tests profiler windows on a real CPU training loop with the real torch.profiler."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pitstop.events import ProfileWindow, decode, encode  # noqa: E402
from pitstop.profiling.windows import ProfilerWindows  # noqa: E402


class Sink:
    def __init__(self) -> None:
        self.windows: list[ProfileWindow] = []
        self.notes: list[tuple[str, str]] = []
        self.cv = threading.Condition()

    def emit(self, ev: Any) -> None:
        with self.cv:
            self.windows.append(ev)
            self.cv.notify_all()

    def note(self, level: str, message: str) -> None:
        with self.cv:
            self.notes.append((level, message))
            self.cv.notify_all()

    def wait_windows(self, n: int) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.windows) >= n, timeout=120), self.notes


def _train(windows: ProfilerWindows, steps: int, on_step_hook: Any = None) -> None:
    """A small conv + MLP classifier with SGD and one .item() per step, like a real loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(32 * steps, 3, 16, 16), torch.randint(0, 10, (32 * steps,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        windows.on_step(step)
        if on_step_hook is not None:
            on_step_hook(step)


def test_scheduled_window_has_the_ops_a_user_expects(tmp_path: Path) -> None:
    sink = Sink()
    w = ProfilerWindows(every=100, active=4, first=3, trace_dir=tmp_path, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    _train(w, 12)
    w.close()
    sink.wait_windows(1)
    win = sink.windows[0]
    assert (win.step_start, win.step_end, win.trigger, win.device) == (4, 8, "schedule", "cpu")
    names = [o.name for o in win.ops]
    assert "aten::addmm" in names or "aten::convolution_backward" in names, names
    assert win.kernels == [] and win.kernels_unavailable == "CPU-only run: no CUDA kernels"
    assert win.syncs_per_step.get("aten::item") == pytest.approx(1.0)
    assert win.syncs_per_step.get("aten::_local_scalar_dense") == pytest.approx(1.0)
    for phase in ("data", "forward", "backward", "optimizer"):
        assert win.phases_ms[phase] > 0, win.phases_ms
    assert win.collective_ms is None
    assert 0 < win.duration_s < 30
    # The full trace went to a file a person can open in Perfetto, not into the stream.
    assert win.trace_path is not None and Path(win.trace_path).parent == tmp_path
    with open(win.trace_path) as f:
        trace = json.load(f)
    assert trace["traceEvents"]
    line = encode(win)
    assert "traceEvents" not in line and decode(line) == win
    assert [lvl for lvl, _ in sink.notes if lvl == "warn"] == []


def test_demand_window_on_a_running_loop() -> None:
    sink = Sink()
    w = ProfilerWindows(every=None, active=2, first=0, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    replies: list[str] = []

    def socket_thread_asks(step: int) -> None:
        if step == 5:  # a viewer sends "profile" from another thread mid-run
            t = threading.Thread(target=lambda: replies.append(w.request()))
            t.start()
            t.join()

    _train(w, 12, socket_thread_asks)
    w.close()
    sink.wait_windows(1)
    assert replies == ["profiling the next 2 steps"]
    assert len(sink.windows) == 1
    win = sink.windows[0]
    assert (win.trigger, win.step_start, win.step_end) == ("demand", 7, 9)
    assert any(o.name.startswith("aten::") for o in win.ops)


def test_profiler_failure_becomes_a_note_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.profiler as tp

    real_profile = tp.profile

    class Broken(real_profile):  # type: ignore[misc, valid-type]
        def stop(self) -> None:
            super().stop()
            raise RuntimeError("Kineto: activity buffer overflow")

    monkeypatch.setattr(tp, "profile", Broken)
    sink = Sink()
    w = ProfilerWindows(every=3, active=2, first=1, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    _train(w, 15)  # would raise out of the loop if a failure escaped
    w.close()
    warns = [m for lvl, m in sink.notes if lvl == "warn"]
    assert len(warns) == 1 and "activity buffer overflow" in warns[0]
    assert sink.windows == []
    assert not torch.autograd.profiler._is_profiler_enabled  # nothing left recording


def test_the_scripts_own_profiler_keeps_its_trace_and_pitstops_windows_wait_said_as_a_warning() -> None:
    # accelerate's examples/by_feature/profiler.py profiles every epoch itself.
    sink = Sink()
    w = ProfilerWindows(every=3, active=2, first=1, trace_dir=None, device_type="cpu", emit=sink.emit, note=sink.note)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as own:
        _train(w, 12)
    w.close()
    assert sink.windows == []  # pitstop's windows waited
    assert any(e.key == "aten::addmm" for e in own.key_averages())  # the script's own tables are whole
    warns = [m for lvl, m in sink.notes if lvl == "warn"]
    assert len(warns) == 1 and "another torch profiler is active" in warns[0], sink.notes


def _classifier() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(16 * 40, 32), torch.randint(0, 10, (16 * 40,)))
    return model, opt, torch.utils.data.DataLoader(data, batch_size=16)


def _evaluate(model: Any, batches: int = 6) -> None:
    """An evaluation pass with an op the training step never calls (gelu)."""
    with torch.no_grad():
        for _ in range(batches):
            torch.nn.functional.gelu(model(torch.randn(16, 32)))


def test_steps_seen_from_the_optimizer_hook_get_one_optimizer_step_each() -> None:
    # The agent's step boundary is the optimizer's post-hook, inside torch's
    # "Optimizer.step#" range: each window used to show one optimizer step fewer
    # than it had steps (PyTorch Lightning: 4 for 5).
    sink = Sink()
    w = ProfilerWindows(every=None, active=5, first=0, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    model, opt, loader = _classifier()
    steps = iter(range(10**6))
    opt.register_step_post_hook(lambda *args: w.on_step(next(steps)))
    w.request()
    for i, (x, y) in enumerate(loader):
        if i == 10:
            break
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    w.close()
    sink.wait_windows(1)
    win = sink.windows[0]
    assert (win.step_start, win.step_end) == (1, 6)
    calls = {o.name: o.calls for o in win.ops}
    assert calls["Optimizer.step#SGD.step"] == 5
    assert calls["aten::addmm"] == 10  # two linear layers a step, nothing from step 6
    assert calls["Optimizer.zero_grad#SGD.zero_grad"] == 5
    assert torch.autograd.profiler._is_profiler_enabled is False


def test_a_window_open_when_training_ends_leaves_out_the_evaluation_after_it() -> None:
    sink = Sink()
    w = ProfilerWindows(every=None, active=50, first=0, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    model, opt, loader = _classifier()
    w.request()
    for step, (x, y) in enumerate(loader):
        if step == 4:
            break
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        w.on_step(step)
    _evaluate(model)  # training is over; the window is still open
    w.close()
    sink.wait_windows(1)
    win = sink.windows[0]
    assert (win.step_start, win.step_end) == (1, 4)
    names = {o.name for o in win.ops}
    assert "aten::gelu" not in names and "aten::addmm" in names
    assert win.phases_ms["forward"] > 0


def test_an_evaluation_pass_inside_a_window_ends_it_at_the_last_step() -> None:
    sink = Sink()
    w = ProfilerWindows(every=None, active=5, first=0, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    model, opt, loader = _classifier()
    w.request()
    for step, (x, y) in enumerate(loader):
        if step == 12:
            break
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if step == 3:
            _evaluate(model, 1)
            w.on_eval()  # the agent saw the pass begin in step 3
            _evaluate(model, 3)
        opt.step()
        w.on_step(step)
    w.close()
    sink.wait_windows(1)
    assert len(sink.windows) == 1
    win = sink.windows[0]
    assert (win.step_start, win.step_end) == (1, 3)
    calls = {o.name: o.calls for o in win.ops}
    assert "aten::gelu" not in calls and calls["Optimizer.step#SGD.step"] == 2


def test_kinetos_raw_events_give_the_tables_torchs_own_event_list_gives() -> None:
    # The windows read Kineto's raw events (~15 ms a window) instead of torch's
    # FunctionEvent list (~90-580 ms): both must give the same tables.
    import torch.profiler as tp
    from torch.autograd.profiler import record_function

    from pitstop.profiling import _aggregate, _kineto

    model, opt, loader = _classifier()
    prof = tp.profile(activities=[tp.ProfilerActivity.CPU])
    prof.start()
    for step, (x, y) in enumerate(loader):
        if step == 6:
            break
        marker = record_function(f"ProfilerStep#{step}")
        marker.__enter__()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        marker.__exit__(None, None, None)
    prof.stop()
    raw = _kineto.raw_events(prof)
    assert raw is not None
    ours = _aggregate.within_steps(_kineto.read(raw[0], False, raw[1]), 1, 5)
    torchs = _aggregate.within_steps(_aggregate.extract(prof.events(), use_device=False), 1, 5)
    a = _aggregate.aggregate(ours, steps=4, device="cpu", top=1000)
    b = _aggregate.aggregate(torchs, steps=4, device="cpu", top=1000)
    # An op has one row per phase it ran in (aten::add in forward and in the optimizer).
    assert {(o.phase, o.name): o.calls for o in a.ops} == {(o.phase, o.name): o.calls for o in b.ops}
    by_key = {(o.phase, o.name): o for o in b.ops}
    for mine in a.ops:
        theirs = by_key[(mine.phase, mine.name)]
        assert mine.self_us == pytest.approx(theirs.self_us, abs=0.01)
        assert mine.total_us == pytest.approx(theirs.total_us, abs=0.01)
    assert a.phases_ms == b.phases_ms and a.syncs_per_step == b.syncs_per_step
    assert a.syncs_per_step["aten::item"] == 1.0


class _BlurSet(torch.utils.data.Dataset):  # type: ignore[misc]
    """A dataset whose __getitem__ runs torch ops of its own (avg_pool2d: a blur), as image pipelines do."""

    def __len__(self) -> int:
        return 32 * 12

    def __getitem__(self, i: int) -> tuple[Any, int]:
        x = torch.randn(1, 3, 18, 18)
        return torch.nn.functional.avg_pool2d(x, 3, stride=1)[0], i % 10


def test_the_datasets_own_ops_are_apart_from_the_models() -> None:
    """With num_workers=0 the dataset's ops run in the training thread: the Ops screen must not
    show them as the model's (issue 12: a blur in __getitem__ was the demo's top op)."""
    sink = Sink()
    w = ProfilerWindows(every=100, active=4, first=3, trace_dir=None, device_type="cpu",
                        emit=sink.emit, note=sink.note)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(torch.utils.data.DataLoader(_BlurSet(), batch_size=32)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        w.on_step(step)
    w.close()
    sink.wait_windows(1)
    phase = {(o.phase, o.name) for o in sink.windows[0].ops}
    assert ("data", "aten::avg_pool2d") in phase, sorted(phase, key=str)
    assert ("forward", "aten::addmm") in phase, sorted(phase, key=str)
    assert not any(name == "aten::avg_pool2d" and p != "data" for p, name in phase)
    assert any(p == "backward" for p, _ in phase) and any(p == "optimizer" for p, _ in phase)
