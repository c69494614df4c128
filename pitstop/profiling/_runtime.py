"""Provides the runtime facts the agent reads once at install: torch, CUDA, CPUs, memory, /dev/shm."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pitstop.events import Runtime


def host_mem_total(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes of memory this process may use: MemTotal, or the cgroup's limit when smaller."""
    total = None
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        total = None
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            text = Path(cgroup, name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
        break
    return total


def torch_threads(torch: Any) -> int | None:
    try:
        return int(torch.get_num_threads())
    except Exception:
        return None


def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """True when the CPU has native bf16 (AVX512_BF16 or AMX); None where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return None
    return None


def shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def read_runtime(torch: Any) -> Runtime:
    """The Runtime event of this process (`device_type` "cuda" only where torch can use a GPU)."""
    unavailable: dict[str, str] = {}
    cuda_version = getattr(torch.version, "cuda", None)
    device_type = "cpu"
    names: list[str] = []
    if cuda_version is None:
        unavailable["gpu"] = "CPU build of torch (no CUDA)"
    else:
        try:
            # Device names come from NVML, not torch.cuda: asking torch would
            # initialise CUDA in the script's process before the script does.
            from pitstop.profiling import nvml

            gpus, reason = nvml.read_gpus()
            names = [g.name for g in gpus]
            if torch.cuda.is_available():
                device_type = "cuda"
            else:
                unavailable["gpu"] = reason or "torch.cuda.is_available() is False"
        except Exception as err:
            unavailable["gpu"] = f"GPU query failed: {err}"
    cudnn = None
    try:
        cudnn = torch.backends.cudnn.version() if device_type == "cuda" else None
    except Exception:
        cudnn = None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return Runtime(
        t=time.time(),
        torch_version=str(torch.__version__),
        cuda_version=cuda_version,
        device_type=device_type,
        device_names=names,
        cudnn_version=cudnn,
        cpu_count=os.cpu_count(),
        usable_cpus=usable,
        shm_bytes=shm_bytes(),
        unavailable=unavailable,
        cpu_bf16=cpu_bf16(),
        torch_threads=torch_threads(torch),
        host_mem_total=host_mem_total(),
    )
