"""`pitstop tune` runs a script where the user runs it, and leaves the user's files as they were."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from pitstop.config import load_config
from tests.conftest import TEST_ID, tagged
from tests.integration.conftest import kill_group

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tune")]  # one tuner at a time (see test_tune.py)


def project(root: Path) -> dict[str, tuple[bytes, int]]:
    """A project folder as a user has it: the script, its module, a config, data, and an earlier run's outputs."""
    shutil.copy(SCRIPTS / "tune_relative.py", root / "train.py")
    shutil.copy(SCRIPTS / "tune_relhelper.py", root / "tune_relhelper.py")
    (root / "config").mkdir()
    (root / "config" / "train.json").write_text(json.dumps({"io_ms": 3, "batch": 8, "save_every": 5}))
    (root / "data").mkdir()
    torch.save(torch.randn(4096, 32), root / "data" / "samples.pt")
    (root / "out").mkdir()
    (root / "out" / "ckpt.pt").write_bytes(os.urandom(1 << 15))  # the weights of a week of training
    (root / "out" / "log.txt").write_text("step 100000 loss 0.0100\n")
    (root / "out" / "last.json").write_text('{"step": 100000}')
    os.utime(root / "out" / "ckpt.pt", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    return snapshot(root)


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and ".pitstop-tune" not in p.parts
            and "__pycache__" not in p.parts and p.name != "pitstop.toml"}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("PITSTOP_SESSION", None)
    e.pop("PITSTOP_OWNER_PID", None)
    e["PYTHONUNBUFFERED"] = "1"
    return e


def tune(root: Path, *options: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pitstop.tuning", "--json", "--knobs", "workers", "--steps", "20", "--warmup", "3",
           "--min-time", "0.8", *options, "train.py"]
    return subprocess.run(cmd, cwd=root, env=env(), capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)


def test_a_script_with_relative_paths_is_tuned_and_the_users_files_are_untouched(tmp_path: Path) -> None:
    before = project(tmp_path)
    proc = tune(tmp_path, "--budget", "3")  # the baseline, the workers its finding names, one more
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["trials"][0]["status"] == "ok", proc.stderr  # config/, data/ and its own module were found
    # The trials did write: the guard put the originals back after each.
    assert "put back" in proc.stderr and "out/ckpt.pt" in proc.stderr
    assert snapshot(tmp_path) == before  # byte-identical, same modification times, nothing left behind
    assert not (tmp_path / "data" / "extra.pt").exists()  # its "download" is gone with the tune...
    records = next((tmp_path / ".pitstop-tune").glob("*.records"))
    logs = "".join(p.read_text() for p in records.glob("*.log"))
    assert logs.count("downloading") == 1  # ... after serving every trial, not fetched again each time
    # Its loader sleeps (reads): the tuner picks workers. Whether the confirmation's rounds stood
    # depends on the neighbours' load (tests/unit/test_tune_plan.py covers that).
    assert data["winner"].get("num_workers", 0) > 0, proc.stderr
    assert load_config(tmp_path / "pitstop.toml").dataloader.num_workers == data["winner"]["num_workers"]


def test_a_baseline_that_cannot_find_its_files_says_where_trials_ran_and_the_fix(tmp_path: Path) -> None:
    project(tmp_path)
    proc = tune(tmp_path, "--budget", "2", "--scratch")
    assert proc.returncode == 1
    assert "FileNotFoundError" in proc.stderr and "config/train.json" in proc.stderr
    assert "scratch directory (--scratch)" in proc.stderr and "drop --scratch" in proc.stderr
    assert not (tmp_path / "pitstop.toml").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_to_the_tuner_ends_its_trial_and_puts_the_users_files_back(tmp_path: Path, sig: int) -> None:
    # SIGUSR1 is Slurm's warning before a job's time limit: left at its default it ended the tuner
    # alone, its trial ran on in a session of its own and the trial's writes stayed.
    before = project(tmp_path)
    cmd = [sys.executable, "-m", "pitstop.tuning", "--knobs", "workers", "--steps", "2000", "--warmup", "3",
           "--budget", "4", "train.py"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while snapshot(tmp_path)["out/log.txt"] == before["out/log.txt"] and time.monotonic() < deadline:
            time.sleep(0.1)  # until the first trial has trained and written its log
        assert snapshot(tmp_path)["out/log.txt"] != before["out/log.txt"], "no trial wrote out/log.txt"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, err[-2000:]
    assert "--resume" in err
    assert snapshot(tmp_path) == before  # the running trial's writes undone
    assert not tagged(os.environ[TEST_ID] + "\0")  # the trial's process group ended with it
