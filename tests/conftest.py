"""Provides the fixtures every kind of test shares, and the sweep that leaves no process behind.

Every test runs with PITSTOP_TEST_ID=<this pytest process>:<test number> in its
environment, which every process it starts inherits (pitstop passes its
environment on to the training script, torchrun to its ranks, tmux to its
windows). After the test, whatever the outcome, any process still carrying that
tag is killed: on a busy machine a timed-out `pitstop demo` left its training
process orphaned and burning a core for the rest of the suite (issue 13),
and a trial of `pitstop tune` runs in a session of its own, out of reach of a
kill of the test's process group. A pytest-timeout in "signal" mode (the
configured one) fails the test through its teardown, so the sweep runs then too.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

# torch's OpenMP threads spin while they wait for each other, and on a busy machine the spinning
# thread takes the core the other one needs. `pitstop demo --steps 20` on the 2-core box with 3 CPU
# hogs: 118 s (step p50 2.5 s) spinning, 27 s passive; under the neighbours' load alone 67 s once
# (p95 9 s) against 7 s passive; quiet 5 s (issue 13). Tests measure pitstop, not the spin.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# A suite started in the background by a shell without job control (`(./dev.sh test &)`, nohup in a
# script) inherits SIGINT ignored, and so would every `pitstop run` the tests start: the tests that
# stop a run with SIGINT (as Ctrl-C does) then waited 30 s for a process that never heard it (6
# failures in one such run). A handler here makes exec'd children start with SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TEST_ID = "PITSTOP_TEST_ID"
# Unique per pytest process: each pytest-xdist worker sweeps only what its own tests started.
SESSION = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
_numbers = itertools.count(1)
_runs_tests = False  # False in pytest-xdist's controller: it runs no test, and its workers are not leftovers


def pytest_configure(config: pytest.Config) -> None:
    global _runs_tests
    controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if controller:
        return
    _runs_tests = True
    # Processes started outside any test (module- and session-scoped fixtures) carry this tag.
    os.environ[TEST_ID] = f"{SESSION}:session"
    atexit.register(_sweep_session)


def tagged(prefix: str) -> dict[int, str]:
    """pid -> command line of every process (but this one) whose PITSTOP_TEST_ID starts with `prefix`.

    A prefix ending in NUL matches one tag exactly (test 1 is not test 12).
    """
    wanted = f"{TEST_ID}={prefix}".encode()
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()  # empty for a zombie: it is already dead
            if not any((entry + b"\0").startswith(wanted) for entry in environ.split(b"\0")):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                found[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def kill_tagged(prefix: str, deadline_s: float = 30.0) -> dict[int, str]:
    """SIGKILL every process tagged `prefix` until none is left (a dying parent may fork once more)."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        left = tagged(prefix)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed.update(left)
        time.sleep(0.05)  # a SIGKILLed process is in /proc, environ and all, until it has exited
    return killed


@pytest.fixture(autouse=True)
def no_process_left(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """Tag what the test starts; afterwards kill what is still running and say which test left it."""
    tag = f"{SESSION}:{next(_numbers)}"
    monkeypatch.setenv(TEST_ID, tag)
    yield
    exact = tag + "\0"
    # What the test has just killed may still be on its way out (a tmux server after kill-server,
    # a viewer after SIGHUP): a few seconds to go by itself before it counts as left running.
    deadline = time.monotonic() + 5.0
    while tagged(exact) and time.monotonic() < deadline:
        time.sleep(0.02)
    killed = kill_tagged(exact)
    if killed:
        listing = "; ".join(f"pid {pid}: {cmd[:120]}" for pid, cmd in sorted(killed.items()))
        warnings.warn(f"{request.node.nodeid} left {len(killed)} process(es) running, killed: {listing}",
                      stacklevel=1)


def _sweep_session() -> None:
    kill_tagged(f"{SESSION}:", deadline_s=10.0)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _runs_tests:
        _sweep_session()


@pytest.fixture
def rundir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A socket directory of the test's own (short: socket paths hold 107 bytes at most), removed after it."""
    path = Path(f"/tmp/pst-test-{os.getpid()}")
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)
