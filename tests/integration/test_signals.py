"""`pitstop run` as a launcher: the signals it gets reach the training's handlers, and nothing is left running."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SESSION, TEST_ID, tagged
from tests.integration.conftest import SCRIPTS, env_in, kill_group, wait_for

SCRIPT = SCRIPTS / "sig_handlers.py"


def _start(tmp_path: Path, env: dict[str, str], *options: str, **popen: object) -> subprocess.Popen[bytes]:
    """`pitstop run [options] sig_handlers.py` in a session of its own (no terminal: a batch job's view)."""
    e = dict(env, SIG_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "pitstop.cli", "run", *options, str(SCRIPT)]
    settings: dict[str, object] = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True)
    settings.update(popen)
    return subprocess.Popen(command, env=e, **settings)  # type: ignore[call-overload]


def _left_running() -> dict[int, str]:
    """The processes this test started that still run (pitstop waited for its child: there must be none)."""
    return tagged(os.environ[TEST_ID] + "\0")


def _ended(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> tuple[int, str]:
    """pitstop's exit code as a shell reports it (128+N for a death by signal N) and its stderr."""
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    code = proc.returncode
    assert code is not None
    return (128 - code if code < 0 else code), err.decode(errors="replace")


@pytest.mark.parametrize("after_s", [0.5, 1.0, 5.0])
def test_a_sigterm_reaches_the_trainings_handler_whenever_it_comes(
    tmp_path: Path, env: dict[str, str], after_s: float
) -> None:
    started = time.monotonic()
    proc = _start(tmp_path, env, "--headless")
    ready = tmp_path / "ready"
    if after_s >= 5.0:
        wait_for(ready.exists, what="the script's handlers")
    time.sleep(max(0.0, started + after_s - time.monotonic()))  # the moment, counted from the start
    handler_installed = ready.exists()
    proc.send_signal(signal.SIGTERM)
    code, err = _ended(proc)
    assert not _left_running()
    if handler_installed:
        assert code == 7, err[-2000:]  # the script's own exit code, from its handler
    assert code in (7, 128 + signal.SIGTERM), err[-2000:]
    assert (tmp_path / "checkpoint").exists() == (code == 7)


def test_a_script_killed_by_sigterm_has_its_end_recorded_by_pitstop(tmp_path: Path, env: dict[str, str]) -> None:
    from pitstop.events import End, Step
    from pitstop.profiling.record import iter_record

    records = tmp_path / "records"  # a session directory: compressed records, left with an open member
    proc = _start(tmp_path, dict(env, SIG_DEFAULT_TERM="1"), "--headless", "--record", str(records))
    try:
        def stepped() -> bool:
            files = list(records.glob("*.jsonl.gz"))
            return bool(files) and any(isinstance(e, Step) for e in iter_record(files[0]))

        wait_for(stepped, timeout=120, what="a recorded step")
        proc.send_signal(signal.SIGTERM)
        code, err = _ended(proc)
    finally:
        kill_group(proc)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert "was killed before it could record its end (143); pitstop recorded it" in err, err[-2000:]
    [record] = list(records.glob("*.jsonl.gz"))
    events = list(iter_record(record))
    end = events[-1]
    assert isinstance(end, End) and (end.reason, end.exit_code) == ("signal", 143), end
    assert end.steps == sum(isinstance(e, Step) for e in events) > 0
    view = subprocess.run([sys.executable, "-m", "pitstop.cli", "view", str(records), "--summary"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert "killed by a signal before it could record its end (exit code 143 (SIGTERM))" in view.stdout, view.stdout
    assert "still running" not in view.stdout
    assert not _left_running()


@dataclass
class Usr1ThenInt:
    """A run that got a SIGUSR1, then a SIGINT to pitstop's pid alone: what it left."""

    code: int
    err: str
    sig_dir: Path
    left_running: dict[int, str]


@pytest.fixture(scope="module")
def usr1_then_int(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Usr1ThenInt]:
    """One run of sig_handlers.py serves the SIGUSR1 and the SIGINT tests (each run imports torch, ~4 s of CPU):
    a SIGUSR1 to pitstop, and once the script trained on past it, a SIGINT to pitstop's pid alone."""
    root = tmp_path_factory.mktemp("usr1-int")
    env, runtime = env_in(root)
    tag = f"{SESSION}:usr1-int"  # its own tag: what this run left running, and nothing of another test's
    env[TEST_ID] = tag
    record = root / "r.jsonl"
    proc = _start(root, env, "--headless", "--record", str(record))
    try:
        wait_for((root / "ready").exists, what="the script's handlers")
        proc.send_signal(signal.SIGUSR1)
        wait_for((root / "usr1").exists, what="the script's SIGUSR1 handler")
        at = int((root / "usr1").read_text().split()[0])
        wait_for(lambda: _recorded_steps(record) > at + 5, what="steps after the SIGUSR1")  # training went on
        os.kill(proc.pid, signal.SIGINT)  # pitstop only: its child shares its group, nobody else signals it
        code, err = _ended(proc)
    finally:
        kill_group(proc)
    yield Usr1ThenInt(code, err, root, tagged(tag + "\0"))
    shutil.rmtree(runtime, ignore_errors=True)


def _recorded_steps(record: Path) -> int:
    from pitstop.events import Step
    from pitstop.profiling.record import iter_record

    try:
        return sum(isinstance(e, Step) for e in iter_record(record))
    except Exception:  # noqa: BLE001 - not written yet, or a torn last line
        return 0


@pytest.mark.xdist_group("signals-usr1-int")  # one pytest-xdist worker: the one run serves both tests
def test_sigusr1_reaches_the_script_and_training_goes_on(usr1_then_int: Usr1ThenInt) -> None:
    run = usr1_then_int
    assert run.code == 0, run.err[-2000:]
    at = int((run.sig_dir / "usr1").read_text().split()[0])
    interrupted = int((run.sig_dir / "int").read_text().split()[0])
    assert interrupted > at  # it trained on after the signal, up to the SIGINT
    assert int((run.sig_dir / "steps").read_text()) > interrupted
    assert not (run.sig_dir / "checkpoint").exists()
    assert not run.left_running


@pytest.mark.xdist_group("signals-usr1-int")
def test_sigint_to_pitstops_pid_alone_reaches_training_once(usr1_then_int: Usr1ThenInt) -> None:
    run = usr1_then_int
    assert run.code == 0, run.err[-2000:]
    assert len((run.sig_dir / "int").read_text().split()) == 1
    assert not run.left_running


def _on_a_terminal(tmp_path: Path, env: dict[str, str], *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """pitstop in the foreground of a terminal of its own (a pty it controls), as typed in a shell."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x50\x00\x00\x00\x00\x00")  # 24 rows, 80 columns

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after setsid: the pty is its terminal, its group the foreground

    e = dict(env, TERM="xterm-256color")
    proc = _start(tmp_path, e, *options, stdin=slave, stdout=slave, stderr=slave,
                  preexec_fn=controlling_terminal)
    os.close(slave)
    return proc, master


def _drain(master: int, proc: subprocess.Popen[bytes], until: float) -> bytes:
    """What the terminal shows until pitstop ends (or `until`); a pty whose reader stops would block the writer."""
    seen = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break  # the other side closed
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    return seen


def test_ctrl_c_in_the_terminal_reaches_training_once(tmp_path: Path, env: dict[str, str]) -> None:
    proc, master = _on_a_terminal(tmp_path, env, "--headless")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            _drain(master, proc, time.monotonic() + 0.2)
        assert (tmp_path / "ready").exists()
        os.write(master, b"\x03")  # Ctrl-C: the terminal signals its whole foreground group, the script too
        _drain(master, proc, time.monotonic() + 60)
        proc.wait(timeout=30)
    finally:
        os.close(master)
        kill_group(proc)
    assert proc.returncode == 0
    assert len((tmp_path / "int").read_text().split()) == 1  # not once from the terminal and again from pitstop
    assert not _left_running()


def test_a_sigterm_under_the_tui_reaches_training_and_restores_the_terminal(
    tmp_path: Path, env: dict[str, str]
) -> None:
    proc, master = _on_a_terminal(tmp_path, env)
    try:
        deadline = time.monotonic() + 60
        shown = b""
        while not ((tmp_path / "ready").exists() and b"\x1b[?1049h" in shown) and time.monotonic() < deadline:
            shown += _drain(master, proc, time.monotonic() + 0.2)
        assert b"\x1b[?1049h" in shown  # the viewer took the screen
        proc.send_signal(signal.SIGTERM)
        shown += _drain(master, proc, time.monotonic() + 60)
        proc.wait(timeout=30)
    finally:
        os.close(master)
        kill_group(proc)
    assert proc.returncode == 7, shown[-2000:]  # the script's own exit code
    assert (tmp_path / "checkpoint").exists()
    assert b"\x1b[?1049l" in shown.split(b"\x1b[?1049h")[-1]  # the screen given back after it was taken
    assert b"SIGTERM passed on" in shown
    assert not _left_running()
