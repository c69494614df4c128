"""The demo on a real GPU (issue 15): a complete record with torch's CUDA memory and NVML's readings, which agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.events import End, Event, Gpu, Hello, Runtime, Sample, Step
from tests.gpu._kit import GPU, gpu0_memory_used, keep
from tests.integration.conftest import events_of, run_pitstop

pytestmark = GPU

GIB = 1 << 30
# What NVML counts beyond torch's reserved memory: the process's CUDA context and the
# libraries' own state (~0.5-1 GiB on an H100 with CUDA 12-13).
CONTEXT_MAX = 2 * GIB


def demo(env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest, steps: int,
         name: str = "demo.jsonl") -> list[Event]:
    """`pitstop demo --headless` (on the GPU: the demo picks CUDA where there is one), sampled at 2 Hz; its record."""
    env["PITSTOP_SAMPLE_INTERVAL"] = "0.5"
    record = tmp_path / name
    proc = run_pitstop(["demo", "--headless", "--steps", str(steps), "--record", str(record)], env, tmp_path,
                       timeout=240)
    keep(request, record)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return events_of(record)


def test_the_demo_on_cuda_records_cuda_memory_and_nvml_figures_that_agree(
        env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    before = gpu0_memory_used()  # other processes' (and this one's) memory, left out of the comparison
    events = demo(env, tmp_path, request, 300)
    # Complete: who, on what, every step, a clean end.
    assert isinstance(events[0], Hello)
    runtime = next(e for e in events if isinstance(e, Runtime))
    assert runtime.device_type == "cuda" and runtime.cuda_version and runtime.device_names, runtime
    steps = [e for e in events if isinstance(e, Step)]
    assert [s.step for s in steps] == list(range(300))
    end = events[-1]
    assert isinstance(end, End) and end.reason == "exit" and end.steps == 300 and end.dropped == 0, end
    # torch's CUDA memory on the steps (reserved and peak as the writer thread last read them, every 0.5 s).
    measured = steps[len(steps) // 2:]
    assert all(s.mem_allocated and s.mem_reserved and s.mem_peak for s in measured), measured[0]
    assert all(s.mem_reserved >= s.mem_allocated for s in measured if s.mem_reserved and s.mem_allocated)
    # NVML's readings are numbers, not reasons.
    samples = [e for e in events if isinstance(e, Sample) and measured[0].t < e.t < steps[-1].t]
    assert len(samples) >= 2, f"{len(samples)} samples while the steps ran"
    for sample in samples:
        assert sample.gpus, sample.gpu_unavailable
        g: Gpu = sample.gpus[0]
        for name in ("util", "mem_used", "mem_total", "power_w"):
            assert isinstance(getattr(g, name), (int, float)), (name, g.unavailable)
        assert 0 <= g.util <= 100 and 0 < g.power_w < 2000 and 0 < g.mem_used <= g.mem_total  # type: ignore[operator]
    # NVML's memory used, less what was in use before, is torch's reserved plus the context.
    for sample in samples:
        reserved = next((s.mem_reserved for s in reversed(measured) if s.t <= sample.t and s.mem_reserved), None)
        assert reserved, f"no reserved memory on a step before the sample at {sample.t}"
        used = sample.gpus[0].mem_used - (before or 0)  # type: ignore[operator]
        assert 0.95 * reserved <= used <= reserved + CONTEXT_MAX, (
            f"NVML {used / GIB:.2f} GiB more in use than before the run, torch reserved {reserved / GIB:.2f} GiB")


def test_gpm_figures_on_hopper_or_a_reason_elsewhere(env: dict[str, str], tmp_path: Path,
                                                     request: pytest.FixtureRequest) -> None:
    """NVML says how busy the SMs, tensor pipes and DRAM were on an H100; an older GPU says why not."""
    from pitstop.profiling import nvml

    events = demo(env, tmp_path, request, 200, "demo-gpm.jsonl")
    gpus = [e.gpus[0] for e in events if isinstance(e, Sample) and e.gpus]
    assert len(gpus) >= 3
    capability = nvml.query("nvmlDeviceGetCudaComputeCapability", nvml.handle(0))
    later = gpus[1:]  # the first reading has no interval yet
    if capability and capability[0] >= 9:
        read = [g for g in later if g.sm_active is not None]
        assert read, f"no GPM figures on compute capability {capability}: {later[-1].unavailable.get('gpm')}"
        for g in read:
            for name in ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util"):
                value = getattr(g, name)
                assert value is not None and 0.0 <= value <= 100.0, (name, value, g.unavailable)
        assert max(g.sm_active for g in read) > 0.0  # type: ignore[type-var]  # the demo's kernels ran on the SMs
    else:
        assert all(g.sm_active is None and "GPM needs" in g.unavailable.get("gpm", "") for g in later), later[-1]
