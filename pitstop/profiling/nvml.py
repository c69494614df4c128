"""Provides the one choke point for NVML: every call returns a value or UNAVAILABLE, never raises.

Like nvitop's `nvmlQuery`: `query("nvmlDeviceGetPowerUsage", handle)` returns the
value, or the falsy `UNAVAILABLE` sentinel when pynvml is missing, NVML cannot
start (no driver, a container without the NVIDIA runtime) or the call fails
(NVMLError_NotSupported on a GeForce for power, a lost GPU...). Each distinct
failure is logged once on the "pitstop.nvml" logger at INFO (INFO, not WARNING:
inside someone's training process an unconfigured logger would print WARNINGs
to stderr) and kept in `errors()` so a caller can show the reason.

Thread-safe (the sampler thread and the doctor use it); re-initialises in a
forked child, where the parent's NVML handles are not valid. GPM figures
(Hopper and newer, `_gpm`) come with each reading; `release_gpm` frees their
samples when the sampler stops.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from pitstop.events import Gpu
from pitstop.profiling._gpm import KEY as GPM_KEY
from pitstop.profiling._gpm import Gpm

log = logging.getLogger("pitstop.nvml")


class _Unavailable:
    """The sentinel returned instead of raising: falsy, a singleton."""

    _instance: _Unavailable | None = None

    def __new__(cls) -> _Unavailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE: Any = _Unavailable()

_lock = threading.RLock()
_module: Any = None  # the pynvml module in use (a fake one in tests)
_inject: Any = None
_state: tuple[bool, str] | None = None  # (available, reason) once NVML was tried
_handles: dict[int, Any] = {}
_errors: dict[str, str] = {}  # "fn" -> last error text, each logged once
_logged: set[tuple[str, str]] = set()
_gpm = Gpm()  # two GPM samples per GPU, allocated at its first reading


def reset(module: Any = None) -> None:
    """Forget NVML state; `module` replaces pynvml (tests pass a fake). Does not shut NVML down."""
    global _module, _inject, _state
    with _lock:
        if _module is not None:
            _gpm.release(_call)  # with the module that allocated them
        _gpm.forget()
        _inject = module
        _module = None
        _state = None
        _handles.clear()
        _errors.clear()
        _logged.clear()


def _after_fork() -> None:
    # A child must not use the parent's handles; keep an injected module.
    global _module, _state
    _module = None
    _state = None
    _handles.clear()
    _gpm.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _error_text(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    name = type(err).__name__
    return text if name in text else f"{name}: {text}"


def _record(fn_name: str, text: str) -> None:
    _errors[fn_name] = text
    key = (fn_name, text)
    if key not in _logged:
        _logged.add(key)
        log.info("NVML %s failed: %s", fn_name, text)


def nvml_available() -> tuple[bool, str]:
    """(True, "") once NVML is initialised, else (False, why). Initialises on first call."""
    global _module, _state
    state = _state
    if state is not None:
        return state
    with _lock:
        if _state is not None:
            return _state
        mod = _inject
        if mod is None:
            try:
                import pynvml as mod  # nvidia-ml-py
            except Exception as err:  # ImportError, or a broken install
                _state = (False, f"nvidia-ml-py (pynvml) cannot be imported: {_error_text(err)}")
                _record("import", _state[1])
                return _state
        try:
            mod.nvmlInit()
        except Exception as err:
            # NVMLError_LibraryNotFound: no driver here; NVMLError_DriverNotLoaded; ...
            _state = (False, f"NVML cannot start: {_error_text(err)}")
            _record("nvmlInit", _state[1])
            return _state
        _module = mod
        _state = (True, "")
        return _state


def _call(fn: str | Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """(value, None) or (UNAVAILABLE, reason)."""
    ok, reason = nvml_available()
    if not ok:
        return UNAVAILABLE, reason
    mod = _module
    if isinstance(fn, str):
        name = fn
        func = getattr(mod, fn, None)
        if func is None:
            text = f"this nvidia-ml-py has no {fn}"
            with _lock:
                _record(name, text)
            return UNAVAILABLE, text
    else:
        func = fn
        name = getattr(fn, "__name__", repr(fn))
    try:
        return func(*args), None
    except Exception as err:
        text = _error_text(err)
        with _lock:
            _record(name, text)
        return UNAVAILABLE, text


def query(fn: str | Callable[..., Any], *args: Any) -> Any:
    """Call a pynvml function (by name or itself); UNAVAILABLE instead of any error."""
    return _call(fn, *args)[0]


def errors() -> dict[str, str]:
    """The last failure of each NVML function that failed: {"nvmlDeviceGetPowerUsage": "..."}."""
    with _lock:
        return dict(_errors)


def device_count() -> int:
    """GPUs NVML sees; 0 when NVML is unavailable."""
    n = query("nvmlDeviceGetCount")
    return int(n) if n is not UNAVAILABLE else 0


def handle(i: int) -> Any:
    """The NVML handle of GPU `i` (cached), or UNAVAILABLE."""
    h = _handles.get(i)
    if h is None:
        h = query("nvmlDeviceGetHandleByIndex", i)
        if h is not UNAVAILABLE:
            _handles[i] = h
    return h


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _const(name: str, default: int) -> int:
    return int(getattr(_module, name, default))


def driver_version() -> Any:
    """The driver version string ("550.54.15"), or UNAVAILABLE."""
    v = query("nvmlSystemGetDriverVersion")
    return _text(v) if v is not UNAVAILABLE else UNAVAILABLE


def cuda_driver_version() -> Any:
    """The newest CUDA the driver supports as (major, minor), or UNAVAILABLE."""
    v = query("nvmlSystemGetCudaDriverVersion")
    if v is UNAVAILABLE:
        return UNAVAILABLE
    v = int(v)  # 12040 -> 12.4
    return (v // 1000, (v % 1000) // 10)


def read_gpus() -> tuple[list[Gpu], str | None]:
    """One reading of every GPU; ([], reason) when there is none to read.

    Fields a GPU does not report stay None with the reason in `Gpu.unavailable`
    (one reason under "gpm" for the four GPM figures). The two PCIe throughput
    calls each sample for ~20 ms inside the driver.
    """
    ok, reason = nvml_available()
    if not ok:
        return [], reason
    n, why = _call("nvmlDeviceGetCount")
    if n is UNAVAILABLE:
        return [], f"NVML cannot count GPUs: {why}"
    if int(n) == 0:
        return [], "NVML sees no GPU"
    gpus: list[Gpu] = []
    for i in range(int(n)):
        h, why = _call("nvmlDeviceGetHandleByIndex", i)
        if h is UNAVAILABLE:
            gpus.append(Gpu(index=i, name="?", unavailable={"all": str(why)}))
            continue
        _handles[i] = h
        missing: dict[str, str] = {}
        values: dict[str, Any] = {}

        def get(field: str, fn: str, *args: Any, convert: Callable[[Any], Any] = float) -> None:
            v, err = _call(fn, h, *args)
            if v is UNAVAILABLE:
                missing[field] = str(err)
            else:
                try:
                    values[field] = convert(v)
                except Exception as conv_err:  # an odd value from a fake or a new driver
                    missing[field] = f"unreadable {fn} value: {conv_err}"

        name, err = _call("nvmlDeviceGetName", h)
        get("util", "nvmlDeviceGetUtilizationRates", convert=lambda u: float(u.gpu))
        mem, merr = _call("nvmlDeviceGetMemoryInfo", h)
        if mem is UNAVAILABLE:
            missing["mem_used"] = missing["mem_total"] = str(merr)
        else:
            values["mem_used"], values["mem_total"] = int(mem.used), int(mem.total)
        get("power_w", "nvmlDeviceGetPowerUsage", convert=lambda mw: float(mw) / 1000.0)
        get("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", convert=lambda mw: float(mw) / 1000.0)
        get("temp_c", "nvmlDeviceGetTemperature", _const("NVML_TEMPERATURE_GPU", 0))
        get("sm_clock_mhz", "nvmlDeviceGetClockInfo", _const("NVML_CLOCK_SM", 1))
        get("pcie_tx_kbs", "nvmlDeviceGetPcieThroughput", _const("NVML_PCIE_UTIL_TX_BYTES", 0))
        get("pcie_rx_kbs", "nvmlDeviceGetPcieThroughput", _const("NVML_PCIE_UTIL_RX_BYTES", 1))
        with _lock:  # the sampler thread and a runtime reading on the training thread share the samples
            gpm, why = _gpm.read(_module, _call, i, h)
        values.update(gpm)
        if why:
            missing[GPM_KEY] = why
        gpus.append(Gpu(index=i, name=_text(name) if name is not UNAVAILABLE else "?", unavailable=missing,
                        **values))
    return gpus, None


def release_gpm() -> None:
    """Free the GPM samples (the sampler stopped); a later reading allocates them again."""
    with _lock:
        if _module is not None:
            _gpm.release(_call)


def shutdown() -> None:
    """Shut NVML down if this module started it."""
    global _module, _state
    with _lock:
        if _module is not None:
            _gpm.release(_call)
            try:
                _module.nvmlShutdown()
            except Exception:
                pass
        _module = None
        _state = None
        _handles.clear()
