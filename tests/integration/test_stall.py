"""A run that stops making progress is named while it hangs, with where each process waits and why.

Real `pitstop run --headless` on real scripts (a 2-rank gloo job under torchrun, a
deadlock on the script's own lock, a DataLoader worker killed with SIGKILL, a slow
first step and a long evaluation), with `--stall-after 3` so the tests are fast.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pitstop.events import Note, ProfileWindow, Stall

from .conftest import SCRIPTS, events_of, kill_group, pitstop, wait_for

AFTER = "3"


class Stderr:
    """pitstop started in a session of its own, its output (the script's and its own) read line by line on a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "pitstop.cli", *args], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def find(self, needle: str) -> str | None:
        return next((line for line in list(self.lines) if needle in line), None)

    def stop(self, timeout: float = 60.0) -> str:
        """SIGTERM to pitstop, as its owner stops a stuck job; its whole stderr once it ended."""
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
            self._thread.join(timeout=10)
        finally:
            kill_group(self.proc)
        return self.text()


def _stalls(records: Path) -> list[Stall]:
    files = [records] if records.is_file() else sorted(records.glob("rank*.jsonl.gz"))
    return [e for f in files for e in events_of(f) if isinstance(e, Stall)]


@pytest.mark.slow
def test_a_rank_stuck_in_its_dataset_is_named_and_the_other_waits_for_it(tmp_path: Path, env: dict[str, str]) -> None:
    records = tmp_path / "job"
    run = Stderr(["run", "--headless", "--stall-after", AFTER, "--record", str(records), "--",
                  sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                  str(SCRIPTS / "stall_getitem.py")], env)
    try:
        wait_for(lambda: run.find("rank 1 blocks in __getitem__") is not None, 180, "rank 1 to block", run.text)
        blocked = time.monotonic()
        # Named within the threshold + 30 s, with the cause in words, job-wide.
        # Each rank finds its own stall; the line is said again as the job's picture fills in.
        both = "pitstop | STUCK: rank 1 is blocked in"

        def full() -> str | None:
            return next((line for line in list(run.lines) if line.startswith(both) and "rank 0 waits" in line), None)

        wait_for(lambda: full() is not None, float(AFTER) + 30, "the stall's cause", run.text)
        named = time.monotonic() - blocked
        cause = full() or ""
        assert "rank 1 is blocked in D.__getitem__ (stall_getitem.py:25: time.sleep(3600)) inside its DataLoader's " \
               "main-process fetch" in cause, cause
        assert "rank 0 waits in all_reduce (DDP backward) for rank 1" in cause, cause
        status = next((line for line in run.lines if "r0 STUCK for" in line and "r1 STUCK for" in line), "")
        assert "after step 19" in status, run.text()
    finally:
        text = run.stop()
    assert named <= float(AFTER) + 30
    # Stopped by its owner: the summary says the stall, its cause and the stacks.
    job = text.split("pitstop job summary", 1)[1]
    assert "[high] job stuck for" in job and "after step 19 (stall)" in job, job
    assert "rank 0 waits in all_reduce (DDP backward) for rank 1" in job
    assert "stall_getitem.py:25 D.__getitem__   time.sleep(3600)" in text
    assert "stall_getitem.py:42 main   loss.backward()" in text
    starts = [s for s in _stalls(records) if s.phase == "start"]
    assert len(starts) == 2 and all(s.step == 19 and s.stacks and s.stacks[0].role == "main" for s in starts)


def test_a_deadlock_on_the_scripts_own_lock_is_named(tmp_path: Path, env: dict[str, str]) -> None:
    record = tmp_path / "lock.jsonl"
    token = tmp_path / "token"
    with socket.socket() as probe:  # a free port for the TCP viewers (`--listen`)
        probe.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{probe.getsockname()[1]}"
    run = Stderr(["run", "--headless", "--stall-after", AFTER, "--record", str(record), "--listen", listen,
                  "--token-file", str(token), str(SCRIPTS / "stall_lock.py")], env)
    try:
        wait_for(lambda: run.find("pitstop | STUCK:") is not None, 120, "the stall", run.text)
        cause = run.find("pitstop | STUCK:") or ""
        assert "waits on a lock at log_metrics (stall_lock.py:11: with lock:)" in cause, cause
        assert run.find("STUCK for") is not None and "after step 20" in (run.find("STUCK for") or "")
        # On demand, live: the stacks of the process, through its agent's socket, and over TCP.
        pid = cause.split("STUCK: pid ", 1)[1].split()[0]
        for target in ([pid], [listen, "--token-file", str(token)]):
            live = pitstop(["stacks", *target], env, timeout=60)
            assert live.returncode == 0, live.stderr
            assert f"== pid {pid} (stuck now): stuck for" in live.stdout, (target, live.stdout)
            assert "stall_lock.py:11 log_metrics   with lock:" in live.stdout
    finally:
        text = run.stop()
    # Stopped by SIGTERM (to pitstop, passed on): the summary names that signal, and claims no steps lost
    # (no step ended while it was stuck).
    end = next(line for line in text.split("pitstop summary", 1)[1].splitlines() if line.strip().startswith("end "))
    assert "(SIGTERM)" in end and "not written" not in end, end
    recorded = pitstop(["stacks", str(record)], env, timeout=60)
    assert recorded.returncode == 0 and "stall_lock.py:27 main   log_metrics(step)" in recorded.stdout, \
        recorded.stdout + recorded.stderr
    assert "[high] stuck for" in text and "after step 20 (stall)" in text, text[-3000:]
    assert "stall_lock.py:11 log_metrics   with lock:" in text
    assert "stall_lock.py:27 main   log_metrics(step)" in text
    starts = [s for s in _stalls(record) if s.phase == "start"]
    assert len(starts) == 1 and starts[0].step == 20 and starts[0].stacks[0].state == "S"


@pytest.mark.skipif(not Path(sys.executable).with_name("py-spy").exists(), reason="py-spy not installed")
def test_a_stuck_dataloader_worker_is_read_with_py_spy_and_named(tmp_path: Path, env: dict[str, str]) -> None:
    run = Stderr(["run", "--headless", "--stall-after", AFTER, "--record", str(tmp_path / "w.jsonl"),
                  str(SCRIPTS / "stall_worker_stuck.py")], env)
    try:
        wait_for(lambda: run.find("pitstop | STUCK:") is not None, 150, "the stall", run.text)
        cause = run.find("pitstop | STUCK:") or ""
        assert "waits for a batch from its DataLoader workers; worker " in cause, cause
        assert "is in Slow.__getitem__ (stall_worker_stuck.py:15: time.sleep(3600))" in cause, cause
    finally:
        text = run.stop()
    assert "DataLoader worker (read by py-spy" in text, text[-3000:]


def test_a_dataloader_worker_killed_is_named(tmp_path: Path, env: dict[str, str]) -> None:
    result = pitstop(["run", "--headless", "--stall-after", AFTER, "--record", str(tmp_path / "w.jsonl"),
                      str(SCRIPTS / "stall_worker_killed.py")], env, timeout=180)
    killed = next(line for line in result.stdout.splitlines() if line.startswith("killing worker"))
    pid = killed.split()[-1]
    # torch's own watchdog raises in the training thread (no stall): the finding names the dead worker.
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"[high] DataLoader worker {pid} died (killed by SIGKILL) (worker-died)" in result.stderr, \
        result.stderr[-3000:]


def test_a_long_evaluation_and_a_slow_first_step_are_not_stalls(tmp_path: Path, env: dict[str, str]) -> None:
    record = tmp_path / "eval.jsonl"
    # A first step of 5 s and two evaluation passes of 10 batches of 0.5 s (5 s) each, with a 3 s threshold.
    env.update(SLOW_FIRST_S="5", EVAL_BATCHES="10", EVAL_BATCH_S="0.5")
    result = pitstop(["run", "--headless", "--stall-after", AFTER, "--record", str(record),
                      str(SCRIPTS / "stall_eval_slow_first.py")], env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch 1 evaluated" in result.stdout
    assert "STUCK" not in result.stderr and "(stall)" not in result.stderr, result.stderr[-3000:]
    assert _stalls(record) == []


def test_a_thread_holding_the_gil_is_read_from_outside_and_ctrl_c_keeps_it(tmp_path: Path, env: dict[str, str]) -> None:
    # The training thread holds the GIL in a ctypes.PyDLL call: the agent's threads cannot run, so only
    # the front can tell. Then a Ctrl-C (SIGINT to pitstop alone, as a scheduler or `kill -INT` sends it).
    record = tmp_path / "gil.jsonl"
    spy = Path(sys.executable).with_name("py-spy").exists()  # the test extra has it
    env["STUCK_AT"] = "5"
    with socket.socket() as probe:  # a free port for pitstop run's own metrics
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = Stderr(["run", "--headless", "--stall-after", "2", "--record", str(record),
                  "--prometheus-front", str(port), str(SCRIPTS / "stall_native_gil.py")], env)
    try:
        wait_for(lambda: run.find("pitstop | STUCK:") is not None, 120, "the stall", run.text)
        # The front's endpoint answers while the training thread holds the GIL (the rank's own cannot).
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
            metrics = reply.read().decode()
        assert re.search(r'^pitstop_front_stalled\{.*script="stall_native_gil.py".*\} 1\.0$', metrics, re.M), metrics
        heard = re.search(r"^pitstop_front_seconds_since_heard\{[^}]*\} (\S+)$", metrics, re.M)
        assert heard is not None and float(heard.group(1)) >= 3.0, metrics  # silent past the front's 3 s floor
        cause = run.find("pitstop | STUCK:") or ""
        if spy:
            assert "holds the GIL in native code: main (stall_native_gil.py:27: libc.sleep(3600))" in cause, cause
            assert "the agent's threads cannot run" in cause
        else:  # said, with the fix
            assert "went silent while its process lives" in cause and "py-spy is not installed" in cause, cause
        # The last step the front heard of: the agent's writer may not have sent the last one or two.
        heard = re.search(r"STUCK for \d+s after step (\d+)", run.find("STUCK for") or "")
        assert heard is not None and int(heard.group(1)) <= 5, run.text()
        run.proc.send_signal(signal.SIGINT)
        code = run.proc.wait(timeout=60)
        run._thread.join(timeout=10)
    finally:
        kill_group(run.proc)
    text = run.text()
    # As without pitstop: one KeyboardInterrupt where the script was, exit code 130.
    assert code == 130, text[-3000:]
    assert text.count("KeyboardInterrupt") == 1 and "libc.sleep(3600)" in text, text[-3000:]
    summary = text.split("pitstop summary", 1)[1]
    assert "[high] stuck for" in summary and re.search(r"after step [45] \(stall\)", summary), summary
    # Recorded as the front's own event: the record's readers show it.
    front = [s for s in _stalls(record) if s.by == "front"]
    assert [s.phase for s in front] == ["start", "exit"], front
    recorded = pitstop(["stacks", str(record)], env, timeout=60)
    if not spy:
        assert "py-spy is not installed" in summary and "py-spy is not installed" in recorded.stdout
        return
    assert "the training thread holds the GIL in native code" in summary
    assert "stall_native_gil.py:27 main   libc.sleep(3600)" in summary
    assert front[0].stacks[0].native
    assert "holds the GIL in native code" in recorded.stdout, recorded.stdout + recorded.stderr
    assert "stall_native_gil.py:27 main   libc.sleep(3600)" in recorded.stdout


def test_the_fronts_stall_is_in_the_record_while_it_hangs_and_stays_when_pitstop_is_killed(
        tmp_path: Path, env: dict[str, str]) -> None:
    # The default compressed record, which the agent's writer holds open: the front appends its stall
    # while the process hangs; then pitstop itself dies (SIGKILL, as a lost SSH session's shell kills it).
    records = tmp_path / "rec"
    spy = Path(sys.executable).with_name("py-spy").exists()
    env["STUCK_AT"] = "3"
    run = Stderr(["run", "--headless", "--stall-after", "2", "--record", str(records),
                  str(SCRIPTS / "stall_native_gil.py")], env)
    record = records / "rank0.jsonl.gz"
    trainer: int | None = None
    try:
        wait_for(lambda: run.find("pitstop | STUCK:") is not None, 120, "the stall", run.text)
        wait_for(lambda: any(s.by == "front" for s in _stalls(record)), 30, "the front's stall in the record",
                 run.text)
        trainer = next(e.pid for e in events_of(record) if e.kind == "hello")  # type: ignore[attr-defined]
        live = pitstop(["stacks", str(records)], env, timeout=60)  # the record of a process that still hangs
        said = "holds the GIL in native code" if spy else "py-spy is not installed"
        assert said in live.stdout and "stuck when its record stops" in live.stdout, live.stdout + live.stderr
        os.kill(run.proc.pid, signal.SIGKILL)  # pitstop alone: nothing it still held in memory gets written
        run.proc.wait(timeout=30)
    finally:
        if trainer is not None:
            try:
                os.kill(trainer, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill_group(run.proc)
    front = [s for s in _stalls(record) if s.by == "front"]
    assert [s.phase for s in front][:1] == ["start"] and front[0].stacks, front
    replay = pitstop(["view", "--summary", str(records)], env, timeout=60)
    assert "[high] stuck for" in replay.stdout, replay.stdout[-3000:] + replay.stderr[-2000:]


def test_a_run_that_never_takes_its_first_step_says_where_it_waits_live_and_in_the_summary(
        tmp_path: Path, env: dict[str, str]) -> None:
    # 5 s for the first-step wait (5 minutes by default; `--stall-after 2` alone would not make it shorter):
    # from torch hooked to the hang, the script builds only its dataset.
    record = tmp_path / "first.jsonl"
    env["PITSTOP_FIRST_STEP_S"] = "5"
    run = Stderr(["run", "--headless", "--stall-after", "2", "--record", str(record),
                  str(SCRIPTS / "first_step_hang.py")], env)
    where = "the training thread is in read_index (first_step_hang.py:10: time.sleep(3600))"
    try:
        wait_for(lambda: run.find("WAITING: no first step after") is not None, 120, "the wait", run.text)
        line = run.find("WAITING: no first step after") or ""
        assert where in line and "STUCK" not in run.text(), run.text()
    finally:
        text = run.stop()
    summary = text.split("pitstop summary", 1)[1]
    assert re.search(r"\[medium\] no first step after \d+s; " + re.escape(where), summary), summary
    assert "first_step_hang.py:16 Mounted.__init__" in summary and "[high]" not in summary, summary
    (start, *_) = [s for s in _stalls(record) if s.first]
    assert start.phase == "start" and start.step == 0 and start.threshold_s == 5.0


def test_steps_that_get_6x_slower_capture_a_profiler_window_of_the_slow_stretch(tmp_path: Path,
                                                                               env: dict[str, str]) -> None:
    record = tmp_path / "slow.jsonl"
    # 1 s of 10 ms steps, then 4 s of 60 ms steps. The contrast is wide and the slow stretch shorter than the
    # fast one, so a busy machine (which stretches a 10 ms step to 20 ms or more) still sees the recent median
    # above twice the run's for 20+ steps: at 10 -> 30 ms and 45 fast steps, a load of 13-17 left the ratio
    # under 2 or let the slow steps become the run's median first, and no window was taken.
    env.update(SLOW_AT="100", STEPS="165", SLOW_MS="60")
    # Windows on demand only: no scheduled window marks steps of either stretch.
    result = pitstop(["run", "--headless", "--profile", "demand", "--record", str(record),
                      str(SCRIPTS / "slowdown.py")], env, timeout=180)
    assert result.returncode == 0 and "done 165 steps" in result.stdout, result.stderr[-3000:]
    events = events_of(record)
    windows = [e for e in events if isinstance(e, ProfileWindow) and e.trigger == "slowdown"]
    # One capture (at most one per 10 minutes), of steps inside the slow stretch.
    assert len(windows) == 1 and windows[0].step_start >= 100, [(w.trigger, w.step_start) for w in windows]
    (note,) = [e for e in events if isinstance(e, Note) and e.source == "slowdown"]
    after = int(note.message.split("steps slowed down after step ", 1)[1].split(":", 1)[0])
    assert after >= 100 and "the training thread was at slowdown.py:" in note.message, note.message
    assert "warning (slowdown): steps slowed down after step" in result.stderr
    assert "STUCK" not in result.stderr and "(stall)" not in result.stderr
