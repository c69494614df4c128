"""The suite's own promise (issue 13): a test that times out leaves no process running, whatever it started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

CONFTEST = Path(__file__).parents[1] / "conftest.py"

# Starts a stand-in for a training process in a session of its own (out of reach of a kill of the
# test's process group, as `pitstop tune` starts its trials), then hangs until pytest-timeout fails it.
HANGS = """
import subprocess, sys, time
from pathlib import Path

def test_hangs(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    Path({pidfile!r}).write_text(str(child.pid))
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_timed_out_test_leaves_nothing_running_and_says_what_was_killed(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")
    (inner / "conftest.py").write_text(CONFTEST.read_text())
    pidfile = tmp_path / "child.pid"
    (inner / "test_inner.py").write_text(HANGS.format(pidfile=str(pidfile)))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--timeout", "3",
         "--timeout-method", "signal", "-W", "default", str(inner)],
        cwd=inner, env=env, capture_output=True, text=True, timeout=240,
    )
    child = int(pidfile.read_text())
    try:
        assert done.returncode == 1 and "Timeout" in done.stdout, done.stdout + done.stderr
        assert not _alive(child), "the test's child outlived it"
        assert f"test_inner.py::test_hangs left 1 process(es) running, killed: pid {child}:" in done.stdout
    finally:
        if _alive(child):
            os.kill(child, 9)
