"""Helpers for integration tests: run the real `pitstop` command on real scripts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pitstop.events import Event
from pitstop.profiling.record import iter_record

SCRIPTS = Path(__file__).parent / "scripts"


def env_in(root: Path) -> tuple[dict[str, str], Path]:
    """An environment with records and sockets under `root`, and its runtime directory (for the caller to remove)."""
    runtime = Path(f"/tmp/pst-{os.getpid()}-{root.name[-12:]}")  # short: socket paths max 107 bytes
    runtime.mkdir(mode=0o700, exist_ok=True)
    e = dict(os.environ)
    e.update(
        PITSTOP_RECORD_DIR=str(root / "records"),
        PITSTOP_RUNTIME_DIR=str(runtime),
        PITSTOP_STATUS_INTERVAL="1",
        PYTHONUNBUFFERED="1",
    )
    e.pop("PITSTOP_SESSION", None)
    e.pop("PITSTOP_OWNER_PID", None)
    return e, runtime


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment with records and sockets inside the test's own directory (sockets: removed after it)."""
    e, runtime = env_in(tmp_path)
    yield e
    shutil.rmtree(runtime, ignore_errors=True)


# The balanced job's tests share one pytest-xdist worker, so that its one run serves them all.
DDP_GROUP = pytest.mark.xdist_group("ddp")


@pytest.fixture(scope="session")
def balanced_ddp_job(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """One `pitstop run -- torchrun` of ddp_gloo.py, 2 ranks, 100 steps of 10 ms waits, no slow rank, dense
    profiler windows: (its result, its records' directory).

    Shared by the tests that read what a balanced job left (test_run: one stream a rank and no agent in the
    DataLoader workers; test_distributed: no straggler named): each torchrun job costs ~20 s of CPU, a
    launcher, 2 ranks and a spawned worker each importing torch.
    """
    root = tmp_path_factory.mktemp("ddp-balanced")
    e, runtime = env_in(root)
    e["STEP_SLEEP_MS"] = "10"  # why 10 ms: test_distributed's test of a job without a straggler
    records = root / "job"
    result = run_pitstop(
        ["run", "--headless", "--profile", "10:5:5", "--record", str(records), "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(SCRIPTS / "ddp_gloo.py"), "100"], e)
    yield result, records
    shutil.rmtree(runtime, ignore_errors=True)


def pitstop(args: list[str], env: dict[str, str], cwd: Path | None = None,
            timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    """`pitstop ARGS` to its end (see run_pitstop)."""
    return run_pitstop(args, env, cwd, timeout)


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
    args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    """`pitstop ARGS` to its end, in its own process group (see run_group)."""
    return run_group([sys.executable, "-m", "pitstop.cli", *args], env, cwd, timeout)


def run_group(
    command: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    """`command` in its own process group, killed whatever happens (DataLoader workers, ranks).

    subprocess.run killed only `pitstop` itself on a timeout: the training it ran
    went on, orphaned, for the rest of the suite (issue 13). Past `timeout` the
    group is killed and the test fails with the end of what the command printed.
    """
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"`{' '.join(command)}` still running after {timeout:.0f} s; "
                             f"its output ended:\n{out[-2000:]}\n{err[-3000:]}") from None
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group `proc` leads (started with start_new_session=True) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass  # the per-test sweep (tests/conftest.py) kills what is left
