"""Provides the doctor's probes: pure row rules over plain inputs, and the measurements that feed them.

Rules (`rule_*`) take numbers and return a `Check`, so every verdict is
unit-testable with fake inputs; `probe_*` functions read the machine (torch,
NVML, /proc, the filesystem) and call the rules.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pitstop.profiling import nvml

GiB = 1 << 30
MiB = 1 << 20

# Dense (no sparsity) bf16/fp16 tensor-core peaks from NVIDIA datasheets, TFLOP/s.
# Matched on the NVML/torch device name, most specific first.
PEAK_TFLOPS: list[tuple[tuple[str, ...], float]] = [
    (("H200",), 989.0),
    (("H100", "NVL"), 835.0),
    (("H100", "PCIE"), 756.0),
    (("H100",), 989.0),  # SXM
    (("A100",), 312.0),
    (("L40S",), 362.0),
    (("L4",), 121.0),
    (("A10G",), 70.0),
    (("A10",), 125.0),
    (("V100",), 125.0),  # fp16: V100 has no bf16
    (("T4",), 65.0),  # fp16
]
# Below this share of the datasheet peak a big matmul points at throttling, a
# shared GPU or locked clocks: a healthy H100 reaches ~65-80% with 8192^2 bf16.
MATMUL_WARN_FRACTION = 0.40
# /dev/shm below this breaks DataLoader workers with "bus error" on real batches;
# docker's default is 64 MiB.
SHM_MIN_BYTES = 1 * GiB
# Pinned H2D below this is far from any x16 link (gen3 x16 ~12 GB/s, gen4 ~25).
PINNED_MIN_GBS = 6.0


@dataclass(frozen=True)
class Check:
    """One row of `pitstop doctor`."""

    name: str
    status: str  # "pass" | "warn" | "fail" | "skip"
    value: str
    detail: str = ""
    fix: str = ""


# ---------------------------------------------------------------- rules


def rule_shm(shm_bytes: int | None, workers: int) -> Check:
    if shm_bytes is None:
        return Check("/dev/shm", "skip", "none", "no /dev/shm on this system (not Linux?)")
    value = _size(shm_bytes)
    if shm_bytes < SHM_MIN_BYTES and workers > 0:
        return Check(
            "/dev/shm", "warn", value,
            f"DataLoader workers pass batches through /dev/shm; under {_size(SHM_MIN_BYTES)} "
            f"{workers} worker(s) can die with 'bus error' or 'No space left on device'",
            "docker run --shm-size=8g (or --ipc=host); Kubernetes: mount an emptyDir "
            "{medium: Memory} at /dev/shm",
        )
    return Check("/dev/shm", "pass", value, f"enough for {workers} DataLoader worker(s)")


def rule_cpus(usable: int, logical: int | None, workers: int) -> Check:
    value = f"{usable} usable" + (f" of {logical}" if logical else "") + f", {workers} workers planned"
    if workers > usable:
        return Check(
            "CPU cores", "warn", value,
            f"{workers} DataLoader workers on {usable} usable core(s) (plus the main process) "
            "time-slice each other: more workers cannot load faster",
            f"use num_workers <= {max(1, usable - 1)}, or give the job more cores "
            "(taskset/cgroup limits, docker --cpus)",
        )
    detail = "cores this process may run on (sched_getaffinity), not the machine's count"
    return Check("CPU cores", "pass", value, detail)


def rule_driver(nvml_ok: bool, reason: str, driver: str | None,
                driver_cuda: tuple[int, int] | None, torch_cuda: str | None) -> Check:
    if not nvml_ok:
        return Check("driver / CUDA", "skip", "n/a", reason)
    value = f"driver {driver or '?'} (CUDA {'.'.join(map(str, driver_cuda)) if driver_cuda else '?'}), " \
            f"torch CUDA {torch_cuda or 'none (CPU build)'}"
    if driver_cuda is None or torch_cuda is None:
        return Check("driver / CUDA", "pass", value, "nothing to compare")
    try:
        rt = tuple(int(p) for p in torch_cuda.split(".")[:2])
    except ValueError:
        return Check("driver / CUDA", "warn", value, f"cannot parse torch.version.cuda {torch_cuda!r}")
    if driver_cuda[0] < rt[0]:
        return Check("driver / CUDA", "fail", value,
                     f"the driver supports CUDA up to {driver_cuda[0]}.{driver_cuda[1]}, torch needs {torch_cuda}",
                     "update the NVIDIA driver, or install a torch built for an older CUDA")
    if driver_cuda < rt:
        return Check("driver / CUDA", "warn", value,
                     "same major version: minor-version compatibility works, but kernels JIT-compiled "
                     "from PTX for the newer minor version can fail",
                     "update the NVIDIA driver")
    return Check("driver / CUDA", "pass", value, "the driver supports torch's CUDA runtime")


def peak_tflops(name: str) -> float | None:
    up = name.upper()
    for words, peak in PEAK_TFLOPS:
        if all(w in up for w in words):
            return peak
    return None


def rule_matmul_cuda(name: str, dtype: str, tflops: float, how: str) -> Check:
    peak = peak_tflops(name)
    value = f"{tflops:.1f} TFLOP/s {dtype}"
    if peak is None:
        return Check(f"matmul {name}", "pass", value + " (peak unknown)", how)
    frac = tflops / peak
    value += f" = {frac:.0%} of {peak:.0f} peak"
    if frac < MATMUL_WARN_FRACTION:
        return Check(f"matmul {name}", "warn", value,
                     f"{how}; under {MATMUL_WARN_FRACTION:.0%} of the datasheet peak",
                     "check nvidia-smi for other processes, clocks (nvidia-smi -q -d CLOCK,PERFORMANCE) "
                     "and thermal/power throttling")
    return Check(f"matmul {name}", "pass", value, how)


def rule_bandwidth(pinned_gbs: float, pageable_gbs: float, how: str) -> Check:
    value = f"pinned {pinned_gbs:.1f} GB/s, pageable {pageable_gbs:.1f} GB/s"
    if pinned_gbs < PINNED_MIN_GBS:
        return Check("H2D bandwidth", "warn", value,
                     f"{how}; pinned copies under {PINNED_MIN_GBS:.0f} GB/s: a narrow or downgraded PCIe link",
                     "nvidia-smi -q | grep -A3 'Link Width' (x16 expected); move the GPU to a full slot")
    fix = "" if pinned_gbs <= 1.3 * pageable_gbs else "DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
    return Check("H2D bandwidth", "pass", value, how, fix)


# ---------------------------------------------------------------- probes


def _size(n: float) -> str:
    for unit, div in (("GiB", GiB), ("MiB", MiB)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(usable: int) -> int:
    return min(8, usable)


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def probe_torch(torch: Any, gpus_seen: int) -> Check:
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    build = f"CUDA {cuda} build" if cuda else (f"ROCm {hip} build" if hip else "CPU build")
    value = f"{torch.__version__} ({build})"
    if not cuda and not hip and gpus_seen:
        return Check("torch", "warn", value, f"a CPU build of torch on a machine with {gpus_seen} NVIDIA GPU(s)",
                     "pip install torch --index-url https://download.pytorch.org/whl/cu124 (pick your CUDA)")
    if cuda and not torch.cuda.is_available():
        return Check("torch", "warn", value, "a CUDA build, but torch.cuda.is_available() is False",
                     "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES")
    return Check("torch", "pass", value)


def probe_cuda_libs(torch: Any) -> list[Check]:
    if not torch.cuda.is_available():
        why = "no CUDA build of torch" if not torch.version.cuda else "no usable CUDA device"
        return [Check("cuDNN", "skip", "n/a", why), Check("NCCL", "skip", "n/a", why)]
    rows = []
    v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    rows.append(Check("cuDNN", "pass" if v else "warn", str(v) if v else "unavailable",
                      f"enabled={torch.backends.cudnn.enabled} benchmark={torch.backends.cudnn.benchmark}"))
    try:
        nv = torch.cuda.nccl.version()
        rows.append(Check("NCCL", "pass", ".".join(map(str, nv)) if isinstance(nv, tuple) else str(nv)))
    except Exception as err:
        rows.append(Check("NCCL", "skip", "unavailable", f"{type(err).__name__}: {err}"))
    return rows


def probe_gpus(torch: Any, nvml_ok: bool, reason: str) -> list[Check]:
    """One row per GPU: name, memory, compute capability; TF32 and bf16 rows."""
    if torch.cuda.is_available():
        rows = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            rows.append(Check(f"gpu{i}", "pass", p.name,
                              f"{_size(p.total_memory)}, compute capability {p.major}.{p.minor}, "
                              f"{p.multi_processor_count} SMs"))
        major, _ = torch.cuda.get_device_capability(0)
        prec = torch.get_float32_matmul_precision()
        if major >= 8:
            if prec == "highest":
                rows.append(Check("TF32", "warn", "supported, off for matmul",
                                  "fp32 matmuls run without tensor cores (float32_matmul_precision='highest')",
                                  "torch.set_float32_matmul_precision('high')"))
            else:
                rows.append(Check("TF32", "pass", f"supported, on (precision '{prec}')"))
        else:
            rows.append(Check("TF32", "skip", "unsupported", f"compute capability {major}.x < 8.0"))
        bf16 = torch.cuda.is_bf16_supported()
        rows.append(Check("bf16", "pass" if bf16 else "skip", "supported" if bf16 else "unsupported",
                          "" if bf16 else "use fp16 autocast with a GradScaler"))
        return rows
    why = "no CUDA build of torch" if not torch.version.cuda else "torch sees no CUDA device"
    rows = []
    if nvml_ok:
        for i in range(nvml.device_count()):
            name = nvml.query("nvmlDeviceGetName", nvml.handle(i))
            rows.append(Check(f"gpu{i}", "skip", str(name.decode() if isinstance(name, bytes) else name),
                              f"seen by NVML, not usable from torch: {why}"))
    else:
        rows.append(Check("GPUs", "skip", "none", f"{why}; {reason}"))
    rows.append(Check("TF32", "skip", "n/a", why))
    flags = _cpu_flags()
    native = bool(flags & {"avx512_bf16", "amx_bf16"})
    rows.append(Check("bf16", "skip", "CPU: native" if native else "CPU: emulated",
                      f"{why}; bf16 autocast on this CPU is {'native (avx512_bf16/amx)' if native else 'emulated, often slower than fp32'}"))
    return rows


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _timed(fn: Any, sync: Any, budget_s: float, min_reps: int = 3) -> tuple[float, int]:
    """Median-free simple timing: run fn until budget_s elapsed (>= min_reps); (seconds per call, calls)."""
    fn()
    sync()  # warm-up: allocations, cuBLAS handles, MKL threads
    reps = 0
    t0 = time.perf_counter()
    while True:
        fn()
        reps += 1
        if reps >= min_reps:
            sync()
            if time.perf_counter() - t0 >= budget_s:
                break
    return (time.perf_counter() - t0) / reps, reps


def _cuda_matmul(torch: Any, dev: Any, dtype: Any, budget_s: float) -> tuple[float, str]:
    """(TFLOP/s, how it was measured) of 8192x8192 matmuls of `dtype` on `dev`."""
    n = 8192  # big enough to reach the tensor-core plateau on an H100 (~1 ms a call)
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    per, reps = _timed(lambda: a @ b, lambda: torch.cuda.synchronize(dev), budget_s, min_reps=10)
    del a, b
    return 2 * n**3 / per / 1e12, f"{reps} matmuls {n}x{n} {str(dtype).replace('torch.', '')} in {per * reps:.2f} s"


def probe_matmul(torch: Any, budget_s: float = 1.0) -> list[Check]:
    if torch.cuda.is_available():
        rows = []
        for i in range(torch.cuda.device_count()):
            dev = torch.device("cuda", i)
            name = torch.cuda.get_device_name(i)
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            tflops, how = _cuda_matmul(torch, dev, dtype, budget_s / 3)
            rows.append(rule_matmul_cuda(name, str(dtype).replace("torch.", ""), tflops, how))
            # fp32 without and with TF32 tensor cores: what a script that never
            # sets float32_matmul_precision gets, and what one line of code gives it.
            # No datasheet table for these: the figures are shown, not judged.
            before = torch.get_float32_matmul_precision()
            try:
                for precision, label in (("highest", "fp32"), ("high", "tf32")):
                    torch.set_float32_matmul_precision(precision)
                    tflops, how = _cuda_matmul(torch, dev, torch.float32, budget_s / 3)
                    rows.append(Check(f"matmul {name}", "pass", f"{tflops:.1f} TFLOP/s {label}",
                                      f"{how}, float32_matmul_precision '{precision}'"))
            finally:
                torch.set_float32_matmul_precision(before)
        return rows
    n = 1024  # ~20-40 ms per call on one modern core: enough calls inside the budget
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    per, reps = _timed(lambda: a @ b, lambda: None, budget_s)
    gflops = 2 * n**3 / per / 1e9
    return [Check("matmul CPU", "pass", f"{gflops:.1f} GFLOP/s fp32",
                  f"{reps} matmuls {n}x{n} fp32 in {per * reps:.2f} s on {torch.get_num_threads()} "
                  "thread(s); no peak table for CPUs")]


def probe_bandwidth(torch: Any, nbytes: int = 256 * MiB, budget_s: float = 1.0) -> Check:
    if not torch.cuda.is_available():
        why = "no CUDA build of torch" if not torch.version.cuda else "torch sees no CUDA device"
        return Check("H2D bandwidth", "skip", "n/a", why)
    dev = torch.device("cuda", 0)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    per_pin, reps_pin = _timed(lambda: dst.copy_(pinned, non_blocking=True), sync, budget_s / 2)
    per_page, reps_page = _timed(lambda: dst.copy_(pageable), sync, budget_s / 2)
    how = (f"{_size(nbytes)} copies to GPU 0: {reps_pin} pinned in {per_pin * reps_pin:.2f} s, "
           f"{reps_page} pageable in {per_page * reps_page:.2f} s")
    link = ""
    h = nvml.handle(0)
    gen = nvml.query("nvmlDeviceGetCurrPcieLinkGeneration", h)
    width = nvml.query("nvmlDeviceGetCurrPcieLinkWidth", h)
    if gen is not nvml.UNAVAILABLE and width is not nvml.UNAVAILABLE:
        link = f"; PCIe gen{gen} x{width} now (idle links downshift)"
    return rule_bandwidth(nbytes / per_pin / 1e9, nbytes / per_page / 1e9, how + link)


def probe_data(path: str, max_bytes: int = 512 * MiB, max_files: int = 5000, budget_s: float = 5.0) -> Check:
    """Read files under `path` (bounded in bytes, files and seconds) and report the throughput."""
    root = Path(path)
    if not root.exists():
        return Check("data read", "fail", "missing", f"{path} does not exist", "pass an existing dataset directory")
    read = nfiles = 0
    errors = 0
    t0 = time.perf_counter()
    stop = False
    chunk = bytearray(4 * MiB)
    walker = [(str(root.parent), [], [root.name])] if root.is_file() else os.walk(root)
    for dirpath, _dirs, names in walker:
        for fname in sorted(names):
            if read >= max_bytes or nfiles >= max_files or time.perf_counter() - t0 >= budget_s:
                stop = True
                break
            try:
                with open(os.path.join(dirpath, fname), "rb", buffering=0) as f:
                    while read < max_bytes:
                        got = f.readinto(chunk)
                        if not got:
                            break
                        read += got
            except OSError:
                errors += 1
                continue
            nfiles += 1
        if stop:
            break
    dt = max(time.perf_counter() - t0, 1e-9)
    if nfiles == 0:
        return Check("data read", "warn", "no readable files", f"under {path} ({errors} unreadable)")
    bound = "a bound was hit: " if stop else "all of it: "
    detail = (f"{bound}{nfiles} files, {_size(read)} in {dt:.2f} s (limits {_size(max_bytes)}, {max_files} files, "
              f"{budget_s:.0f} s); files read recently come from the page cache and read faster than cold")
    if errors:
        detail += f"; {errors} unreadable"
    return Check("data read", "pass", f"{read / dt / 1e6:.1f} MB/s, {nfiles / dt:.0f} files/s", detail)
