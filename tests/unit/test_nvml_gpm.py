"""Tests the GPM readings (Hopper and newer) with fake NVML modules: figures over the interval between two
samples, a reason where GPM is missing, each failure logged once, the samples freed at the end."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.profiling import _gpm, nvml
from tests.unit.test_nvml import FakeNvml, NVMLError


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801 - pynvml's own naming
    def __str__(self) -> str:
        return "Function Not Found"


class NVMLError_Unknown(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Unknown Error"


class MetricsGet:
    """pynvml's c_nvmlGpmMetricsGet_t, as plain attributes."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]


class HopperNvml(FakeNvml):
    """An H100: GPM supported. Each GPM sample holds a counter; a metric is its growth times a per-metric rate."""

    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    c_nvmlGpmMetricsGet_t = MetricsGet
    RATE = {2: 40.0, 3: 25.0, 5: 12.5, 10: 60.0}

    def __init__(self) -> None:
        super().__init__()
        self.counter = 0
        self.allocated: list[SimpleNamespace] = []
        self.freed: list[SimpleNamespace] = []
        self.refuse: set[int] = set()  # metric ids whose nvmlReturn is an error

    def nvmlDeviceGetName(self, h: str) -> bytes:  # noqa: N802
        return b"NVIDIA H100 80GB HBM3"

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:  # noqa: N802
        return SimpleNamespace(version=1, isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:  # noqa: N802
        sample = SimpleNamespace(at=None)
        self.allocated.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:  # noqa: N802
        self.freed.append(sample)

    def nvmlGpmSampleGet(self, h: str, sample: SimpleNamespace) -> SimpleNamespace:  # noqa: N802
        self.counter += 1
        sample.at = self.counter
        return sample

    def nvmlGpmMetricsGet(self, request: MetricsGet) -> MetricsGet:  # noqa: N802
        assert request.version == 1 and request.sample1 is not request.sample2
        steps = request.sample2.at - request.sample1.at
        for m in request.metrics[:request.numMetrics]:
            if m.metricId in self.refuse:
                m.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED
            else:
                m.value = min(100.0, self.RATE[m.metricId] * steps)
        return request


class AmpereNvml(HopperNvml):
    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:  # noqa: N802
        return SimpleNamespace(version=1, isSupportedDevice=0)


class OldDriverNvml(HopperNvml):
    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:  # noqa: N802
        raise NVMLError_FunctionNotFound()


class FlakyNvml(HopperNvml):
    """Sampling fails every time (a lost GPU)."""

    def nvmlGpmSampleGet(self, h: str, sample: SimpleNamespace) -> SimpleNamespace:  # noqa: N802
        raise NVMLError_Unknown()


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_gpm, "MIN_INTERVAL_S", 0.0)  # readings back to back here
    yield
    nvml.reset()


def gpu0() -> Any:
    gpus, why = nvml.read_gpus()
    assert why is None and len(gpus) == 1
    return gpus[0]


def test_hopper_reads_the_four_figures_over_each_interval() -> None:
    fake = HopperNvml()
    nvml.reset(fake)
    first = gpu0()
    # One sample so far: no interval to measure yet, and it says so (never a zero).
    assert first.sm_active is None and first.unavailable["gpm"] == _gpm.FIRST
    second = gpu0()
    assert (second.sm_active, second.sm_occupancy, second.tensor_active, second.dram_bw_util) == (
        40.0, 25.0, 12.5, 60.0)
    assert "gpm" not in second.unavailable and second.util == 87.0  # the rest of the reading is as before
    fake.counter += 1  # a longer interval: the figures cover the interval since the last reading only
    third = gpu0()
    assert (third.sm_active, third.dram_bw_util) == (80.0, 100.0)
    assert len(fake.allocated) == 2  # allocated once, then reused in turn


def test_a_refused_metric_is_missing_with_its_reason() -> None:
    fake = HopperNvml()
    fake.refuse = {5}
    nvml.reset(fake)
    gpu0()
    g = gpu0()
    assert g.tensor_active is None and g.sm_active == 40.0
    assert "tensor_active" in g.unavailable["gpm"]


def test_readings_too_close_together_keep_the_last_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = HopperNvml()
    nvml.reset(fake)
    gpu0()
    gpu0()
    monkeypatch.setattr(_gpm, "MIN_INTERVAL_S", 3600.0)
    taken = fake.counter
    g = gpu0()
    assert g.sm_active == 40.0 and fake.counter == taken  # no third sample, the last figures again


@pytest.mark.parametrize(("fake", "reason"), [
    (AmpereNvml(), "GPM needs Hopper or newer"),
    (OldDriverNvml(), "GPM needs a newer NVIDIA driver"),
    (FakeNvml(), "GPM needs nvidia-ml-py 12.535 or later"),
])
def test_no_gpm_says_why_once(fake: FakeNvml, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    nvml.reset(fake)
    caplog.set_level(logging.INFO, logger="pitstop.nvml")
    readings = [gpu0() for _ in range(3)]
    for g in readings:
        assert (g.sm_active, g.sm_occupancy, g.tensor_active, g.dram_bw_util) == (None, None, None, None)
        assert g.unavailable["gpm"].startswith(reason)
        assert g.util == 87.0
    said = [r for r in caplog.records if "GPM" in r.getMessage()]
    assert len(said) == 1 and reason in said[0].getMessage()


def test_failing_samples_are_logged_once_then_gpm_switches_off(caplog: pytest.LogCaptureFixture) -> None:
    nvml.reset(FlakyNvml())
    caplog.set_level(logging.INFO, logger="pitstop.nvml")
    reasons = [gpu0().unavailable["gpm"] for _ in range(5)]
    assert reasons[0] == "GPM sample failed: NVMLError_Unknown: Unknown Error"
    assert all(r.startswith("GPM sampling failed") for r in reasons[_gpm.MAX_FAILURES - 1:])
    assert len([r for r in caplog.records if "nvmlGpmSampleGet failed" in r.getMessage()]) == 1
    assert "Unknown Error" in nvml.errors()["nvmlGpmSampleGet"]


def test_samples_are_freed_when_the_sampler_stops_and_at_shutdown() -> None:
    fake = HopperNvml()
    nvml.reset(fake)
    gpu0()
    nvml.release_gpm()
    assert fake.freed == fake.allocated and len(fake.freed) == 2
    gpu0()  # a later reading allocates again
    assert len(fake.allocated) == 4
    nvml.shutdown()
    assert fake.freed == fake.allocated


def test_a_sampler_reading_waits_for_a_real_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reading right after another (the runtime's device names, then the sampler's tick) keeps the
    first interval open instead of measuring over microseconds."""
    now = [100.0]
    monkeypatch.setattr(_gpm, "_clock", lambda: now[0])
    monkeypatch.setattr(_gpm, "MIN_INTERVAL_S", 0.1)
    nvml.reset(HopperNvml())
    gpu0()
    now[0] += 0.01
    assert gpu0().unavailable["gpm"] == _gpm.FIRST  # too soon: still the first interval
    now[0] += 1.0
    assert gpu0().sm_active == 40.0


def test_the_request_fits_the_real_pynvml_structures() -> None:
    """The ctypes structures of the installed nvidia-ml-py take the request as built (no driver needed:
    the call itself is a fake that answers as NVML would)."""
    pynvml = pytest.importorskip("pynvml")
    if not hasattr(pynvml, "c_nvmlGpmMetricsGet_t"):
        pytest.skip("this nvidia-ml-py has no GPM")
    seen: dict[str, Any] = {}

    def call(fn: str, request: Any) -> tuple[Any, str | None]:
        assert fn == "nvmlGpmMetricsGet"
        seen["ids"] = [request.metrics[i].metricId for i in range(request.numMetrics)]
        seen["version"] = request.version
        for i in range(request.numMetrics):
            request.metrics[i].nvmlReturn = 0
            request.metrics[i].value = 10.0 * (i + 1)
        request.metrics[3].value = 250.0  # out of range from a confused driver: clamped
        return request, None

    first, second = pynvml.c_nvmlGpmSample_t(), pynvml.c_nvmlGpmSample_t()
    values, why = _gpm.Gpm._metrics(pynvml, call, first, second)
    assert why is None and seen["version"] == pynvml.NVML_GPM_METRICS_GET_VERSION
    assert seen["ids"] == [pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
                           pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL]
    assert values == {"sm_active": 10.0, "sm_occupancy": 20.0, "tensor_active": 30.0, "dram_bw_util": 100.0}
