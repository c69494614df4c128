"""A Ctrl-C at any moment of `pitstop run`'s start ends the script as it would end without pitstop.

A SIGINT one second after `pitstop run --headless` started (torch still
importing) once came while the agent started: the bootstrap swallowed the
KeyboardInterrupt ("pitstop: bootstrap error: KeyboardInterrupt()"), the
script then trained its whole 60 s unmeasured and exited 0. Each test waits
for a line that says where the start is, then sends the SIGINT a `kill -INT`
of pitstop sends (no terminal: pitstop passes it on).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TEST_ID, tagged
from tests.integration.conftest import SCRIPTS, kill_group

SCRIPT = SCRIPTS / "sig_startup.py"
# The lines each moment is known by, in the order they come: pitstop's own before it starts the
# script, the bootstrap's as it starts the agent (PITSTOP_DEBUG_BOOTSTRAP), the script's own.
MOMENTS = {
    "pitstop starts the script": "pitstop: running ",
    "the agent starts": ": start (script sig_startup.py)",
    "the script imports torch": "sig_startup: importing torch",
    "the script trains": "sig_startup: stepping",
}


def _wait_line(proc: subprocess.Popen[bytes], marker: str, timeout: float = 120.0) -> bytes:
    """stderr up to and including the first line holding `marker` (the test's event to act on)."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while marker.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} on stderr in {timeout:.0f} s:\n{seen.decode(errors='replace')[-2000:]}"
        ready, _, _ = select.select([proc.stderr], [], [], left)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 65536)
            assert chunk, f"stderr ended before {marker!r}:\n{seen.decode(errors='replace')[-2000:]}"
            seen += chunk
    return seen


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_sigint_at_any_moment_of_the_start_ends_the_script_with_130(
        tmp_path: Path, env: dict[str, str], moment: str) -> None:
    e = dict(env, SIG_DIR=str(tmp_path), PITSTOP_DEBUG_BOOTSTRAP="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "pitstop.cli", "run", "--headless", str(SCRIPT)], env=e,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        seen = _wait_line(proc, MOMENTS[moment])
        os.kill(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == 130, err[-3000:]  # Python's exit on a Ctrl-C nothing catches (128 + SIGINT)
    assert not (tmp_path / "trained").exists(), err[-3000:]  # never trained on, measured or not
    assert "bootstrap error" not in err
    assert not tagged(os.environ[TEST_ID] + "\0")


def test_a_sigint_while_the_agent_starts_ends_the_process_before_the_script_runs(tmp_path: Path) -> None:
    """The bootstrap's own moment, made certain: an agent that starts until it is interrupted."""
    from pitstop.profiling.launch import BOOTSTRAP_DIR

    fake = tmp_path / "fake"  # found before the real pitstop: PYTHONPATH comes before site-packages
    (fake / "pitstop" / "profiling").mkdir(parents=True)
    (fake / "pitstop" / "__init__.py").write_text("")
    (fake / "pitstop" / "profiling" / "__init__.py").write_text("")
    (fake / "pitstop" / "profiling" / "agent.py").write_text(
        "import sys, time\nprint('agent starting', file=sys.stderr, flush=True)\ntime.sleep(120)\n")
    script = tmp_path / "train.py"
    script.write_text("print('the script ran', flush=True)\n")
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BOOTSTRAP_DIR), str(fake)]), PITSTOP_SESSION="{}")
    e.pop("PITSTOP_OWNER_PID", None)
    proc = subprocess.Popen([sys.executable, str(script)], env=e, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        seen = _wait_line(proc, "agent starting", timeout=60)
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == -signal.SIGINT, err  # died of the SIGINT, as Python does on an uncaught Ctrl-C
    assert b"the script ran" not in out
    assert "KeyboardInterrupt" in err and "bootstrap error" not in err
