"""A wheel carries the docs and the Grafana dashboard, and `pitstop docs` reaches them from the wheel alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_wheel_ships_the_docs_and_pitstop_docs_writes_the_dashboard_from_it(tmp_path: Path) -> None:
    # Built from a copy of the sources, so the checkout gets no build/ or egg-info
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "docs", src / "docs")
    shutil.copytree(ROOT / "pitstop", src / "pitstop", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "out"),
         str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("pitstop-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    shipped = {n.removeprefix("pitstop/_docs/") for n in names if n.startswith("pitstop/_docs/")}
    in_repo = {p.name for p in (ROOT / "docs").iterdir() if p.suffix in (".md", ".json")}
    assert in_repo and shipped == in_repo
    assert {"config.md", "prometheus.md", "grafana-dashboard.json"} <= shipped

    # The installed package alone (not this checkout): what a pip user has
    out = tmp_path / "dashboard.json"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    wrote = subprocess.run([sys.executable, "-m", "pitstop.cli", "docs", "grafana-dashboard", "-o", str(out)],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(out.read_text()) == json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    printed = subprocess.run([sys.executable, "-m", "pitstop.cli", "docs", "config"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert printed.returncode == 0 and printed.stdout == (ROOT / "docs" / "config.md").read_text()
    assert str(tmp_path / "site") in subprocess.run(
        [sys.executable, "-c", "import pitstop; print(pitstop.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60).stdout
