"""`pitstop profile --data PID`: the dataset's slowest line, sampled with py-spy from a real training loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SCRIPTS, pitstop

pytest.importorskip("torch")
SPY = Path(sys.executable).with_name("py-spy")


@pytest.fixture
def training(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """slow_getitem.py with the worker count of the test's parameter, up and loading; killed with its group."""
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "slow_getitem.py"), str(request.param)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the loop has made 3 steps (or the script died)
        assert line.strip() == "training", line
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.skipif(not SPY.exists(), reason="py-spy is not installed next to this Python")
@pytest.mark.parametrize("training", [0, 2], indirect=True, ids=["main-process", "two-workers"])
def test_the_datasets_slow_line_is_named(training: subprocess.Popen[str], env: dict[str, str]) -> None:
    done = pitstop(["profile", "--data", str(training.pid), "--seconds", "2"], env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    where = lines[lines.index(next(x for x in lines if x.startswith("where the dataset"))) + 1]
    # The top line of the script's own code is the one the decode loop spends its time on.
    assert "slow_getitem.py:18 in SlowDecode.decode" in where, done.stdout
    role = "DataLoader workers" if training.args[-1] == "2" else "main process (num_workers=0)"
    assert role in lines[0], lines[0]
    assert training.poll() is None  # sampled, never stopped


def test_a_missing_py_spy_is_one_line_with_the_fix(env: dict[str, str], tmp_path: Path) -> None:
    # A Python without py-spy beside it and none on PATH.
    env = {**env, "PATH": str(tmp_path)}
    code = ("import sys; from pathlib import Path; sys.executable = str(Path(sys.argv[1]) / 'python'); "
            "from pitstop.cli import main; sys.exit(main(['profile', '--data', str(__import__('os').getpid())]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "py-spy is not installed" in done.stderr and "pitstop[stacks]" in done.stderr
