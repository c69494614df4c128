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
            assert self.cv.wait_for(lambda: len(self.windows) >= n, timeout=30), self.notes


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
