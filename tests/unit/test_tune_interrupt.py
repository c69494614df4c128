"""A Ctrl-C to `pitstop tune` at any moment ends the tune: no trial is left running, unguarded or unmeasured.

Each test makes its moment certain instead of hoping a signal lands in it: a
guard whose start blocks until interrupted, a launch interrupted right after
the trial's process started.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pitstop.profiling.launch import BOOTSTRAP_DIR, Target
from pitstop.tuning import runner as runner_module
from pitstop.tuning.guard import GUARD_ENV, SITE_DIR, FileGuard
from pitstop.tuning.results import Candidate
from pitstop.tuning.runner import TrialRunner, TrialSpec


def _wait_for(proc: subprocess.Popen[bytes], marker: bytes, timeout: float = 60.0) -> bytes:
    """stderr up to the first line holding `marker` (the moment the test acts on)."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {timeout:.0f} s: {seen.decode(errors='replace')[-2000:]}"
        ready, _, _ = select.select([proc.stderr], [], [], left)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 65536)
            assert chunk, f"stderr ended before {marker!r}: {seen.decode(errors='replace')[-2000:]}"
            seen += chunk
    return seen


@pytest.mark.parametrize("chained_by_the_bootstrap", [True, False])
def test_a_ctrl_c_while_the_file_guard_starts_ends_the_trial_before_its_script_runs(
        tmp_path: Path, chained_by_the_bootstrap: bool) -> None:
    # The guard's start imports json: one that waits, found before the standard library's, holds the
    # process in the guard's start until the SIGINT comes.
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "json.py").write_text("import sys, time\nprint('guard starting', file=sys.stderr, flush=True)\n"
                                  "time.sleep(120)\n")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("open('ckpt.pt', 'w').write('trial')\nprint('the script ran', flush=True)\n")
    path = [str(SITE_DIR), str(fake)]
    if chained_by_the_bootstrap:
        path.insert(0, str(BOOTSTRAP_DIR))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env.update(PYTHONPATH=os.pathsep.join(path),
               **{GUARD_ENV: '{"root": "%s", "store": "%s"}' % (root, tmp_path / "store")})
    proc = subprocess.Popen([sys.executable, "train.py"], cwd=root, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        seen = _wait_for(proc, b"guard starting")
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == -signal.SIGINT, err  # died of the SIGINT, as Python does on a Ctrl-C nothing catches
    assert b"the script ran" not in out and not (root / "ckpt.pt").exists(), err
    assert "file guard not started" not in err


def test_a_ctrl_c_as_a_trial_is_launched_still_ends_that_trial(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(120)\n")
    started: list[subprocess.Popen[bytes]] = []
    launch = runner_module.launch

    def launch_then_ctrl_c(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = launch(*args, **kwargs)
        started.append(proc)
        signal.raise_signal(signal.SIGINT)  # the Ctrl-C lands after the trial started, before its handle is kept
        return proc

    monkeypatch.setattr(runner_module, "launch", launch_then_ctrl_c)
    spec = TrialSpec(Target(script=str(script)), cwd=tmp_path, records=tmp_path / "trials", warmup=0)
    spec.records.mkdir()
    runner = TrialRunner(spec, timeout=60)
    try:
        with pytest.raises(KeyboardInterrupt):
            runner(Candidate(), 10, "baseline")
        assert len(started) == 1
        proc = started[0]
        assert proc.poll() is not None, "the trial kept running after the tune was interrupted"
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)  # nothing of its process group is left either
    finally:
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def test_a_ctrl_c_while_a_trials_files_are_put_back_is_taken_once_they_are_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "ckpt.pt").write_text("the user's weights")
    (root / "train.py").write_text("open('ckpt.pt', 'w').write('trial')\nopen('new.txt', 'w').write('x')\n")
    guard = FileGuard(root, tmp_path / "store")
    restore = guard.restore

    def interrupted_restore(*args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # the Ctrl-C lands as the trial's files begin to be put back
        return restore(*args, **kwargs)

    monkeypatch.setattr(guard, "restore", interrupted_restore)
    spec = TrialSpec(Target(script="train.py"), cwd=root, records=tmp_path / "trials", warmup=0, guard=guard)
    spec.records.mkdir()
    with pytest.raises(KeyboardInterrupt):
        TrialRunner(spec, timeout=60)(Candidate(), 10, "baseline")
    assert (root / "ckpt.pt").read_text() == "the user's weights"
    assert not (root / "new.txt").exists()
