"""Tests the doctor's CUDA matmul rows with a fake torch: bf16 against the peak, then fp32 without and with TF32."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from pitstop import _doctor_probes as probes


class Matrix:
    def __matmul__(self, other: Matrix) -> Matrix:
        return self


class FakeTorch:
    """One H100; records the matmul precision each fp32 matmul ran under."""

    bfloat16, float16, float32 = "torch.bfloat16", "torch.float16", "torch.float32"

    def __init__(self) -> None:
        self.precision = "highest"
        self.made: list[tuple[str, str]] = []  # (dtype, precision) of each matrix made
        self.cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1,
                                    get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
                                    is_bf16_supported=lambda: True, synchronize=lambda dev: None)

    def device(self, kind: str, index: int) -> tuple[str, int]:
        return (kind, index)

    def randn(self, *shape: int, device: Any = None, dtype: str = "") -> Matrix:
        self.made.append((dtype, self.precision))
        return Matrix()

    def get_float32_matmul_precision(self) -> str:
        return self.precision

    def set_float32_matmul_precision(self, precision: str) -> None:
        self.precision = precision


def test_cuda_matmul_rows_say_bf16_fp32_and_tf32_and_leave_the_precision_as_found() -> None:
    torch = FakeTorch()
    rows = probes.probe_matmul(torch, budget_s=0.03)
    assert [re.search(r"TFLOP/s (\S+)", r.value).group(1) for r in rows] == ["bfloat16", "fp32", "tf32"]  # type: ignore[union-attr]
    assert "of 989 peak" in rows[0].value  # bf16 judged against the datasheet; fp32 and tf32 shown
    assert [r.name for r in rows] == ["matmul NVIDIA H100 80GB HBM3"] * 3
    assert ("torch.float32", "highest") in torch.made and ("torch.float32", "high") in torch.made
    assert torch.precision == "highest"  # put back as found
