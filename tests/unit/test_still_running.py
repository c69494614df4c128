"""A record's process that still runs is not called gone: a hogwild child left training after its parent ended."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from pitstop.analysis import RunState
from pitstop.events import End, Hello, Step
from pitstop.headless import still_running, summary_text


def run_of(pid: int, started: float, end: bool, parent: int | None = None, steps: int = 6) -> RunState:
    run = RunState()
    run.add_all([Hello(schema=2, pitstop_version="0.1.0", session="s", pid=pid, ppid=1, host=socket.gethostname(),
                       argv=["main.py"], cwd="/", started=started, python="3.11", script="main.py",
                       record=f"/r/{pid}.jsonl", parent_pid=parent),
                 *(Step(t=started + i, step=i, wall=0.01, data_wait=0.0, samples=8) for i in range(steps))])
    if end:
        run.add(End(t=started + steps, steps=steps, dropped=0, reason="exit", exit_code=0))
    return run


def test_a_process_that_still_runs_is_running_and_one_that_ended_or_a_reused_pid_is_not() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone_pid = int(done.stdout)
    here = run_of(os.getpid(), time.time(), end=False)
    gone = run_of(gone_pid, time.time(), end=False)
    reused = run_of(os.getpid(), 100.0, end=False)  # its Hello predates this process: another one had the pid
    ended = run_of(os.getpid(), time.time(), end=True)
    assert still_running([here, gone, reused, ended]) == {os.getpid()}


def test_the_job_summary_calls_a_child_still_training_running_not_gone() -> None:
    parent = run_of(1, time.time(), end=True, steps=0)
    child = run_of(os.getpid(), time.time(), end=False, parent=1)
    before = summary_text([parent, child])
    assert "1 gone" in before  # what it said of a child that was still training
    after = summary_text([parent, child], alive=still_running([parent, child]))
    assert "gone" not in after and "1 running" in after, after


def test_the_job_summary_names_the_signal_the_launcher_saw_end_a_process_without_its_end() -> None:
    parent = run_of(4242, time.time(), end=False, steps=0)  # SIGTERM: no End in its record
    child = run_of(os.getpid(), time.time(), end=True, parent=4242)
    text = summary_text([parent, child], pid=4242, exit_code=143)
    assert "killed before it could record its end (exit code 143 (SIGTERM))" in text.split("pitstop summary")[0]
    assert "SIGKILL or OOM" not in text, text


def test_runs_that_all_ended_are_summed_up_without_importing_psutil() -> None:
    # In a fresh interpreter: every `pitstop run` front asks this once at its end, and psutil's import
    # was ~25 ms of its CPU for an answer the records already give.
    code = ("import sys, time; sys.path.insert(0, %r); from test_still_running import run_of; "
            "from pitstop.headless import still_running; "
            "assert still_running([run_of(4242, time.time(), end=True)]) == set(); "
            "print('psutil' in sys.modules)") % os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
