"""`pitstop doctor --json` on a real GPU (issue 15): H2D bandwidth pinned and pageable, matmul TFLOP/s in fp32,
TF32 and bf16, the driver's and CUDA's versions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu._kit import GPU, write

pytestmark = GPU


def test_doctor_measures_bandwidth_and_matmuls_and_names_the_versions(tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    proc = subprocess.run([sys.executable, "-m", "pitstop.doctor", "--json", "--quick"], capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    write(request, tmp_path, "doctor.json", proc.stdout + proc.stderr)
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    assert proc.returncode == 0, [r for r in rows if r["status"] == "fail"]
    by_name = {r["name"]: r for r in rows}
    bandwidth = re.search(r"pinned ([0-9.]+) GB/s, pageable ([0-9.]+) GB/s", by_name["H2D bandwidth"]["value"])
    assert bandwidth, by_name["H2D bandwidth"]
    pinned, pageable = float(bandwidth.group(1)), float(bandwidth.group(2))
    assert pinned > 1.0 and pageable > 0.1, (pinned, pageable)
    matmul = {m.group(2): float(m.group(1)) for r in rows if r["name"].startswith("matmul")
              if (m := re.match(r"([0-9.]+) TFLOP/s (\S+)", r["value"]))}
    assert {"fp32", "tf32", "bfloat16"} <= set(matmul), matmul
    assert matmul["tf32"] > matmul["fp32"] > 1.0 and matmul["bfloat16"] > matmul["fp32"], matmul
    driver = by_name["driver / CUDA"]
    assert driver["status"] == "pass", driver
    assert re.search(r"driver \d+\.\d+", driver["value"]) and re.search(r"\(CUDA \d+\.\d+\)", driver["value"])
    assert re.search(r"torch CUDA \d+\.\d+", driver["value"]), driver
