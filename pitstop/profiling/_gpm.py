"""Provides the GPM readings of NVML (Hopper and newer): SM activity, occupancy, tensor-pipe activity, DRAM bandwidth.

NVML's "utilisation" is the share of time any kernel ran, so a GPU at 100%
can have its math units 10% busy. GPM (GPU Performance Monitoring,
NVML 12 / driver R525+, Hopper GPUs and newer) reads the units themselves:
each metric is computed over the interval between two GPM samples. Two samples
per GPU are allocated once and reused in turn, one reading per sampler tick,
so each reading covers the sampler's last interval; `release` frees them.

Every NVML call goes through the choke point `nvml._call` (passed in as
`call`), which logs each failure once; a GPU or driver without GPM gets its
reason once, for good, and the rest of the reading goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("pitstop.nvml")

# (value, None) or (UNAVAILABLE, reason): nvml._call.
Call = Callable[..., tuple[Any, str | None]]

# Gpu field -> pynvml's metric id constant.
FIELDS = {
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",  # SMs busy, of all SMs
    "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",  # warps resident, of the SMs' maximum
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",  # tensor pipes active, any precision
    "dram_bw_util": "NVML_GPM_METRIC_DRAM_BW_UTIL",  # DRAM bandwidth used, of the peak
}
KEY = "gpm"  # the one key of Gpu.unavailable that says why all four are missing
# Two samples closer than this give noisy metrics: a second reader (the runtime's
# device names at start) right before the sampler's tick keeps the last figures.
MIN_INTERVAL_S = 0.1
# Consecutive failed samples before GPM is switched off for the GPU (a lost GPU, a
# revoked permission): a single failure is reported and the next tick tries again.
MAX_FAILURES = 3
FIRST = "first GPM interval not over yet"
HOPPER = "GPM needs Hopper or newer"
_clock = time.monotonic  # a fake one in tests
_NEEDED = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet",
           "nvmlGpmSampleFree", "c_nvmlGpmMetricsGet_t", "NVML_GPM_METRICS_GET_VERSION", *FIELDS.values())


@dataclass
class _Device:
    """The GPM state of one GPU: its two samples and the last figures."""

    samples: list[Any] = field(default_factory=list)
    off: str = ""  # why GPM is off for this GPU for good ("" while on)
    previous: int = -1  # index in `samples` of the previous reading, -1 before the first
    t: float = 0.0  # time.monotonic() of the previous reading
    last: dict[str, float] = field(default_factory=dict)
    reason: str | None = FIRST  # why `last` is empty or partial
    failures: int = 0


def _off_reason(what: str, err: str | None) -> str:
    text = err or "unknown error"
    if "FunctionNotFound" in text or "Function Not Found" in text:
        return f"GPM needs a newer NVIDIA driver (R525 or later): {what}: {text}"
    if "NotSupported" in text or "Not Supported" in text:
        return f"{HOPPER}: {what}: {text}"
    return f"GPM {what} failed: {text}"


class Gpm:
    """GPM readings of every GPU, two NVML samples each."""

    def __init__(self) -> None:
        self._devices: dict[int, _Device] = {}

    def read(self, mod: Any, call: Call, index: int, handle: Any) -> tuple[dict[str, float], str | None]:
        """The four figures of GPU `index` over the interval since its previous reading, or ({}, why)."""
        dev = self._devices.get(index)
        if dev is None:
            dev = self._devices[index] = self._open(mod, call, handle)
            if dev.off:
                log.info("NVML GPM off for GPU %d: %s", index, dev.off)
        if dev.off:
            return {}, dev.off
        now = _clock()
        if dev.previous >= 0 and now - dev.t < MIN_INTERVAL_S:
            return dict(dev.last), dev.reason
        current = 1 - dev.previous if dev.previous >= 0 else 0
        got, err = call("nvmlGpmSampleGet", handle, dev.samples[current])
        if err is not None:
            dev.failures += 1
            dev.previous = -1  # the next reading starts a fresh interval
            if dev.failures >= MAX_FAILURES:
                dev.off = _off_reason("sampling", err)
                log.info("NVML GPM off for GPU %d: %s", index, dev.off)
                return {}, dev.off
            return {}, f"GPM sample failed: {err}"
        dev.failures = 0
        if dev.previous < 0:
            dev.previous, dev.t = current, now
            dev.last, dev.reason = {}, FIRST
            return {}, FIRST
        dev.last, dev.reason = self._metrics(mod, call, dev.samples[dev.previous], dev.samples[current])
        dev.previous, dev.t = current, now
        return dict(dev.last), dev.reason

    @staticmethod
    def _open(mod: Any, call: Call, handle: Any) -> _Device:
        missing = [name for name in _NEEDED if not hasattr(mod, name)]
        if missing:
            return _Device(off=f"GPM needs nvidia-ml-py 12.535 or later (this one has no {missing[0]})")
        support, err = call("nvmlGpmQueryDeviceSupport", handle)
        if err is not None:
            return _Device(off=_off_reason("support query", err))
        if not getattr(support, "isSupportedDevice", 0):
            return _Device(off=f"{HOPPER}: NVML says this GPU does not support GPM")
        samples: list[Any] = []
        for _ in range(2):
            sample, err = call("nvmlGpmSampleAlloc")
            if err is not None:
                for done in samples:
                    call("nvmlGpmSampleFree", done)
                return _Device(off=_off_reason("sample allocation", err))
            samples.append(sample)
        return _Device(samples=samples)

    @staticmethod
    def _metrics(mod: Any, call: Call, first: Any, second: Any) -> tuple[dict[str, float], str | None]:
        try:
            request = mod.c_nvmlGpmMetricsGet_t()
            request.version = mod.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(FIELDS)
            request.sample1, request.sample2 = first, second
            for i, const in enumerate(FIELDS.values()):
                request.metrics[i].metricId = int(getattr(mod, const))
        except Exception as err:  # an odd pynvml: its struct is not what this code expects
            return {}, f"GPM request cannot be built: {type(err).__name__}: {err}"
        got, err = call("nvmlGpmMetricsGet", request)
        if err is not None:
            return {}, f"GPM metrics failed: {err}"
        values: dict[str, float] = {}
        refused: list[str] = []
        for i, name in enumerate(FIELDS):
            metric = got.metrics[i]
            if int(metric.nvmlReturn) == 0:  # NVML_SUCCESS
                values[name] = max(0.0, min(100.0, float(metric.value)))
            else:
                refused.append(f"{name} (NVML return {int(metric.nvmlReturn)})")
        return values, (f"GPM did not give {', '.join(refused)}" if refused else None)

    def release(self, call: Call) -> None:
        """Free every sample (the sampler stopped, NVML shuts down); the next reading allocates again."""
        devices, self._devices = self._devices, {}
        for dev in devices.values():
            for sample in dev.samples:
                call("nvmlGpmSampleFree", sample)

    def forget(self) -> None:
        """In a forked child: drop the parent's samples without touching NVML."""
        self._devices = {}
