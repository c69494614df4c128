"""Tests `python -m pitstop.doctor` as a person or a script runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pitstop.doctor", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_json_rows_have_the_basics_with_a_measured_matmul(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"\0" * 200_000)
    proc = _doctor("--json", "--quick", "--workers", "1", "--data", str(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    rows = json.loads(proc.stdout)
    by_name = {r["name"]: r for r in rows}
    assert set(rows[0]) == {"name", "status", "value", "detail", "fix"}
    assert by_name["torch"]["status"] in ("pass", "warn")
    assert "1 workers planned" in by_name["CPU cores"]["value"]
    assert "/dev/shm" in by_name
    matmul = next(r for r in rows if r["name"].startswith("matmul"))
    figure = float(re.match(r"([0-9.]+) (G|T)FLOP/s", matmul["value"]).group(1))
    assert figure > 0
    assert by_name["data read"]["status"] == "pass" and "1 files" in by_name["data read"]["detail"]
    assert proc.returncode == (1 if any(r["status"] == "fail" for r in rows) else 0)


def test_table_output_and_failing_row_exit_code(tmp_path: Path) -> None:
    proc = _doctor("--quick", "--data", str(tmp_path / "missing"))
    assert proc.returncode == 1  # the missing dataset is a failing row
    assert re.search(r"^data read\s+FAIL\s+missing", proc.stdout, re.M), proc.stdout
    assert re.search(r"^CPU cores\s+(ok|WARN)\s+\d+ usable", proc.stdout, re.M)
