"""Helpers for integration tests: run the real `pitstop` command on real scripts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pitstop.events import Event
from pitstop.profiling.record import iter_record

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with records and sockets inside the test's own directory."""
    runtime = Path(f"/tmp/pst-{os.getpid()}-{tmp_path.name[-12:]}")  # short: socket paths max 107 bytes
    runtime.mkdir(mode=0o700, exist_ok=True)
    e = dict(os.environ)
    e.update(
        PITSTOP_RECORD_DIR=str(tmp_path / "records"),
        PITSTOP_RUNTIME_DIR=str(runtime),
        PITSTOP_STATUS_INTERVAL="1",
        PYTHONUNBUFFERED="1",
    )
    e.pop("PITSTOP_SESSION", None)
    e.pop("PITSTOP_OWNER_PID", None)
    return e


def pitstop(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pitstop.cli", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def events_of(path: Path) -> list[Event]:
    return list(iter_record(path))


def wait_for(
    predicate: Callable[[], bool],
    timeout: float = 60.0,
    what: str = "condition",
    show: Callable[[], str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    shown = f"\n{show()}" if show is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{shown}")


def run_pitstop(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    """`pitstop ARGS` in its own process group, killed whatever happens (DataLoader workers, ranks)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.returncode is None:
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
