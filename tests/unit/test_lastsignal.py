"""A SIGTERM that ends the process leaves its stacks beside the record, and ends it as it would have."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.analysis import JobState, job_findings, job_summary
from pitstop.events import Hello, Step
from pitstop.headless import summary_text
from pitstop.profiling._lastsignal import read_trace, trace_path
from pitstop.profiling.record import RecordWriter
from pitstop.recorded import load_runs

# The child blocks in a C call that no Python handler would interrupt (a lock held by itself):
# a Python-level SIGTERM handler would never run there; faulthandler's C handler does.
CHILD = r"""
import os, signal, sys, threading
from pathlib import Path
from pitstop.profiling._lastsignal import SignalTrace
if sys.argv[2] == "own":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
trace = SignalTrace()
trace.install(Path(sys.argv[1]), print)
if sys.argv[2] == "fork":
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say: its SIGTERM is its own
        os.kill(os.getpid(), signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
    trace.uninstall()
    sys.exit(0)
def blocked_in_the_training_loop():
    lock = threading.Lock()
    lock.acquire()
    print("ready", flush=True)
    lock.acquire()
blocked_in_the_training_loop()
"""


def _run(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    record = tmp_path / "rank0.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(record), mode], stdout=subprocess.PIPE, text=True)
    return proc, record


def test_a_sigterm_leaves_every_thread_s_stack_and_ends_the_process_as_it_would_have(tmp_path: Path) -> None:
    proc, record = _run(tmp_path, "plain")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
    text = read_trace(record)
    assert text is not None and "blocked_in_the_training_loop" in text


def test_a_script_s_own_handler_is_left_alone_and_nothing_is_written(tmp_path: Path) -> None:
    proc, record = _run(tmp_path, "own")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert not trace_path(record).exists()
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_forked_child_s_sigterm_is_not_taken_for_its_parent_s(tmp_path: Path) -> None:
    proc, record = _run(tmp_path, "fork")
    out, _ = proc.communicate(timeout=30)
    assert f"child -{int(signal.SIGTERM)}" in out and proc.returncode == 0
    assert read_trace(record) is None and not trace_path(record).exists()  # empty: removed at stop


def _record(path: Path, rank: int, steps: int) -> None:
    writer = RecordWriter(path)
    writer.write(Hello(schema=1, pitstop_version="0.1.0", session="s1", pid=100 + rank, ppid=1, host="h",
                       argv=["train.py"], cwd="/", started=1000.0, python="3.12", rank=rank, world_size=2,
                       script="train.py", record=str(path)))
    for i in range(steps):
        writer.write(Step(t=1001.0 + i * 0.05, step=i, wall=0.05, data_wait=0.0, samples=8))
    writer.close()


@pytest.mark.parametrize("traced", [True, False])
def test_a_rank_ended_by_sigterm_is_gone_by_sigterm_and_no_oom_killer_is_guessed(tmp_path: Path,
                                                                                 traced: bool) -> None:
    for rank in range(2):
        _record(tmp_path / f"rank{rank}.jsonl", rank, 30)
    if traced:
        trace_path(tmp_path / "rank0.jsonl").write_text('Current thread 0x1 (most recent call first):\n'
                                                        '  File "train.py", line 9 in main\n')
    runs, notes = load_runs(tmp_path)
    row = job_summary(JobState.of_runs(runs)).rows[0]
    assert row.status == "gone"
    findings = job_findings(JobState.of_runs(runs))
    text = summary_text(runs, notes)
    assert "OOM" not in text and "OOM" not in findings[0].fix
    if traced:
        assert row.status_reason == "terminated by SIGTERM (exit code 143)"
        assert "rank 0 (pid 100): terminated by SIGTERM (exit code 143), last step 29" in text
        assert any(str(trace_path(tmp_path / "rank0.jsonl")) in n for n in notes)
        assert "torchrun sends it to every rank once one rank fails" in findings[0].fix
    else:
        assert "stream ended without an End event" in (row.status_reason or "")
