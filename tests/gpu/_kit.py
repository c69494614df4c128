"""Provides what the GPU tests share: the marks that skip them without CUDA, the workload script, and keeping
records for benchmarks/gpu_acceptance.py."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

SCRIPTS = Path(__file__).parent / "scripts"
CONV = SCRIPTS / "conv_train.py"


def cuda_missing() -> str | None:
    """Why these tests cannot run here, or None where they can."""
    if getattr(torch.version, "cuda", None) is None:
        return f"no CUDA device: torch {torch.__version__} is a CPU build (the GPU tests run where there is one)"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False (the GPU tests run where there is one)"
    return None


# Every test module of tests/gpu: `pytestmark = GPU`.
GPU = [pytest.mark.gpu, pytest.mark.skipif(cuda_missing() is not None, reason=cuda_missing() or "")]


def keep(request: pytest.FixtureRequest, *paths: Path) -> None:
    """Copy what a test recorded into $PITSTOP_GPU_KEEP (set by benchmarks/gpu_acceptance.py), named by the test."""
    folder = os.environ.get("PITSTOP_GPU_KEEP")
    if not folder:
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    Path(folder).mkdir(parents=True, exist_ok=True)
    for path in paths:
        if path.is_file():
            shutil.copy(path, Path(folder) / f"{name}.{path.name}")


def write(request: pytest.FixtureRequest, tmp: Path, filename: str, text: str) -> None:
    """Keep a text (a command's output) beside the records."""
    path = tmp / filename
    path.write_text(text)
    keep(request, path)


def gpu0_memory_used() -> Any:
    """Bytes NVML says GPU 0 has in use by every process, or None where NVML cannot say."""
    from pitstop.profiling import nvml

    gpus, _ = nvml.read_gpus()
    return gpus[0].mem_used if gpus else None
