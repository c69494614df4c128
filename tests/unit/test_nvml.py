"""Tests the NVML choke point with fake pynvml modules: sentinel instead of raising, each failure logged once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.profiling import nvml


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own naming
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class FakeNvml:
    """One GPU whose power readings are not supported (a GeForce), everything else works."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1

    def __init__(self) -> None:
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:  # noqa: N802
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:  # noqa: N802
        return b"NVIDIA GeForce RTX 4090"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:  # noqa: N802
        return SimpleNamespace(used=3 << 30, total=24 << 30)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:  # noqa: N802
        self.calls.append("power")
        raise NVMLError_NotSupported()

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:  # noqa: N802
        raise NVMLError_NotSupported()

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:  # noqa: N802
        return 64

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:  # noqa: N802
        return 2520

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:  # noqa: N802
        return 1000 if counter == 0 else 250_000

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass


class NoDriver(FakeNvml):
    def nvmlInit(self) -> None:  # noqa: N802
        raise NVMLError_LibraryNotFound()


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    nvml.reset()


def test_failing_call_returns_sentinel_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml()
    nvml.reset(fake)
    caplog.set_level(logging.INFO, logger="pitstop.nvml")
    results = [nvml.query("nvmlDeviceGetPowerUsage", "h0") for _ in range(5)]
    assert results == [nvml.UNAVAILABLE] * 5 and not results[0]
    assert fake.calls.count("power") == 5  # still asked each time (a reading may come back)
    logged = [r for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.getMessage()]
    assert len(logged) == 1 and "Not Supported" in logged[0].getMessage()
    assert "Not Supported" in nvml.errors()["nvmlDeviceGetPowerUsage"]


def test_callable_and_missing_function() -> None:
    fake = FakeNvml()
    nvml.reset(fake)
    assert nvml.query(fake.nvmlDeviceGetCount) == 1
    assert nvml.query("nvmlDeviceGetNoSuchThing") is nvml.UNAVAILABLE
    assert "no nvmlDeviceGetNoSuchThing" in nvml.errors()["nvmlDeviceGetNoSuchThing"]
    assert nvml.cuda_driver_version() == (12, 4)


def test_no_driver_means_unavailable_with_reason(caplog: pytest.LogCaptureFixture) -> None:
    nvml.reset(NoDriver())
    caplog.set_level(logging.INFO, logger="pitstop.nvml")
    ok, reason = nvml.nvml_available()
    assert not ok and "NVML Shared Library Not Found" in reason
    assert nvml.device_count() == 0
    assert nvml.handle(0) is nvml.UNAVAILABLE
    gpus, why = nvml.read_gpus()
    assert gpus == [] and why == reason
    assert len([r for r in caplog.records if "nvmlInit" in r.getMessage()]) == 1


def test_read_gpus_fills_what_it_can_and_says_why_for_the_rest() -> None:
    nvml.reset(FakeNvml())
    gpus, why = nvml.read_gpus()
    assert why is None and len(gpus) == 1
    g = gpus[0]
    assert (g.name, g.util, g.mem_used, g.mem_total, g.temp_c, g.sm_clock_mhz) == (
        "NVIDIA GeForce RTX 4090", 87.0, 3 << 30, 24 << 30, 64.0, 2520.0)
    assert (g.pcie_tx_kbs, g.pcie_rx_kbs) == (1000.0, 250_000.0)
    assert g.power_w is None and g.power_limit_w is None
    assert set(g.unavailable) == {"power_w", "power_limit_w", "gpm"}
    assert g.sm_active is None and "nvidia-ml-py 12.535" in g.unavailable["gpm"]
    assert "Not Supported" in g.unavailable["power_w"]


def test_real_pynvml_on_this_machine_never_raises() -> None:
    nvml.reset()
    ok, reason = nvml.nvml_available()
    gpus, why = nvml.read_gpus()
    assert ok or (reason and why == reason and gpus == [])
