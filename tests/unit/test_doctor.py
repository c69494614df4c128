"""Tests the doctor's row rules with fake inputs, and its table/exit-code logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop import _doctor_probes as probes
from pitstop import doctor
from pitstop._doctor_probes import Check
from pitstop.profiling import nvml

MiB = 1 << 20


def test_docker_default_shm_warns_with_the_docker_fix() -> None:
    row = probes.rule_shm(64 * MiB, workers=4)
    assert row.status == "warn" and row.value == "64.0 MiB"
    assert "--shm-size" in row.fix


def test_big_shm_passes_and_no_shm_skips() -> None:
    assert probes.rule_shm(16 << 30, workers=8).status == "pass"
    assert probes.rule_shm(64 * MiB, workers=0).status == "pass"  # no workers, no shm traffic
    assert probes.rule_shm(None, workers=4).status == "skip"


def test_more_workers_than_cores_warns() -> None:
    row = probes.rule_cpus(usable=4, logical=64, workers=8)
    assert row.status == "warn" and "4 usable of 64" in row.value and "num_workers <= 3" in row.fix
    assert probes.rule_cpus(usable=8, logical=8, workers=8).status == "pass"


@pytest.mark.parametrize(
    ("driver_cuda", "torch_cuda", "status"),
    [((12, 4), "12.1", "pass"), ((12, 1), "12.4", "warn"), ((11, 8), "12.1", "fail"), ((12, 4), None, "pass")],
)
def test_driver_against_runtime(driver_cuda: tuple[int, int], torch_cuda: str | None, status: str) -> None:
    assert probes.rule_driver(True, "", "550.54", driver_cuda, torch_cuda).status == status


def test_nvml_unavailable_skips_with_the_reason() -> None:
    row = probes.rule_driver(False, "NVML cannot start: NVMLError_LibraryNotFound", None, None, "12.4")
    assert row.status == "skip" and "LibraryNotFound" in row.detail


def test_collect_without_nvml_skips_gpu_rows_with_reason() -> None:
    class NoDriver:
        def nvmlInit(self) -> None:  # noqa: N802
            raise RuntimeError("NVML Shared Library Not Found")

    nvml.reset(NoDriver())
    try:
        rows = {r.name: r for r in doctor.collect(workers=1, budget_s=0.05)}
    finally:
        nvml.reset()
    assert rows["NVML"].status == "skip" and "Shared Library Not Found" in rows["NVML"].detail
    assert rows["driver / CUDA"].status == "skip"
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert rows["H2D bandwidth"].status == "skip" and rows["H2D bandwidth"].detail


def test_matmul_rule_against_peak_table() -> None:
    assert probes.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert probes.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert probes.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert probes.peak_tflops("NVIDIA GeForce GTX 1080") is None
    assert probes.rule_matmul_cuda("NVIDIA H100 80GB HBM3", "bfloat16", 700.0, "x").status == "pass"
    slow = probes.rule_matmul_cuda("NVIDIA H100 80GB HBM3", "bfloat16", 200.0, "x")
    assert slow.status == "warn" and "20% of 989" in slow.value
    assert "peak unknown" in probes.rule_matmul_cuda("NVIDIA GeForce GTX 1080", "float16", 20.0, "x").value


def test_bandwidth_rule() -> None:
    assert probes.rule_bandwidth(2.0, 1.5, "x").status == "warn"
    ok = probes.rule_bandwidth(24.0, 9.0, "x")
    assert ok.status == "pass" and "pin_memory=True" in ok.fix


def test_data_read_is_bounded_and_missing_path_fails(tmp_path: Path) -> None:
    for i in range(10):
        (tmp_path / f"s{i}.bin").write_bytes(b"x" * 100_000)
    row = probes.probe_data(str(tmp_path), max_files=4)
    assert row.status == "pass" and "4 files" in row.detail and "a bound was hit" in row.detail
    assert "MB/s" in row.value and "files/s" in row.value
    assert probes.probe_data(str(tmp_path / "nope")).status == "fail"


def test_table_and_exit_code() -> None:
    rows = [Check("torch", "pass", "2.13"), Check("/dev/shm", "warn", "64.0 MiB", "small", "docker --shm-size=8g")]
    text = doctor.format_table(rows)
    assert "WARN" in text and "fix: docker --shm-size=8g" in text and "1 pass, 1 warn" in text
    assert doctor.exit_code(rows) == 0
    assert doctor.exit_code(rows + [Check("driver / CUDA", "fail", "x")]) == 1
