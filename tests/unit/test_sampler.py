"""The sampler's process tree: Linux's children files, and psutil's scan where they are missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pitstop.profiling.sampler import proc_children, run_delay

# A child that starts a grandchild, then both sleep: a tree two deep under this test.
TREE = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"


def test_children_files_find_the_whole_tree_as_psutil_does() -> None:
    child = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        me = psutil.Process()
        deadline = time.monotonic() + 60  # two interpreters starting, on a machine that may be busy
        while len(me.children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        expected = sorted(c.pid for c in me.children(recursive=True))
        assert len(expected) >= 2 and child.pid in expected
        found = proc_children(os.getpid())
        if found is None:  # a kernel without CONFIG_PROC_CHILDREN: the sampler falls back to psutil
            pytest.skip("this kernel has no /proc/PID/task/TID/children files")
        assert sorted(found) == expected
    finally:
        for proc in psutil.Process(child.pid).children(recursive=True):
            proc.kill()
        child.kill()
        child.wait()


def test_no_children_files_means_none_so_the_sampler_falls_back(tmp_path: Path) -> None:
    (tmp_path / "42" / "task" / "42").mkdir(parents=True)  # a /proc without `children` files
    assert proc_children(42, proc_root=str(tmp_path)) is None
    assert proc_children(43, proc_root=str(tmp_path)) is None  # no such process


def test_a_fake_tree_is_walked_through_every_thread(tmp_path: Path) -> None:
    def task(pid: int, tid: int, kids: str) -> None:
        d = tmp_path / str(pid) / "task" / str(tid)
        d.mkdir(parents=True)
        (d / "children").write_text(kids)

    task(1, 1, "10 ")
    task(1, 2, "11")  # forked from a second thread of the main process
    task(10, 10, "100")
    task(11, 11, "")
    task(100, 100, "")
    assert sorted(proc_children(1, proc_root=str(tmp_path)) or []) == [10, 11, 100]


def test_run_delay_sums_the_wait_of_every_thread(tmp_path: Path) -> None:
    # /proc/PID/task/TID/schedstat: time on the CPU, time waiting on a run queue, timeslices (ns).
    for tid, text in (("7", "500 1200 3\n"), ("8", "900 300 5\n"), ("9", "garbled\n")):
        (tmp_path / "7" / "task" / tid).mkdir(parents=True)
        (tmp_path / "7" / "task" / tid / "schedstat").write_text(text)
    assert run_delay(7, str(tmp_path)) == 1500  # the unreadable thread is left out
    assert run_delay(8, str(tmp_path)) is None  # no such process


def test_run_delay_reads_this_process_on_linux() -> None:
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        pytest.skip("no /proc")
    tids = os.listdir(f"/proc/{os.getpid()}/task")
    delay = run_delay(os.getpid())
    assert isinstance(delay, int) and delay >= 0 and len(tids) >= 1


def test_the_machines_cpu_is_none_when_read_within_a_tick_of_the_last_reading(tmp_path: Path) -> None:
    # A spawned rank's sampler read at once after its priming call: psutil said 0.0, and the
    # first line read "machine 0.00 of 2 cores" on a machine whose both cores were busy.
    from pitstop.profiling.agent import Agent
    from pitstop.profiling.launch import SessionSettings
    from pitstop.profiling.sampler import MIN_SYSTEM_S, Sampler

    sampler = Sampler(Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="t.py", profile=None)))
    # Within a tick of the priming call, whatever a busy machine made of the time since it (a 50 ms tick
    # passed between the two lines at load 5-7 once): the priming is dated ahead, so no gap can pass a tick.
    sampler._system_at = time.monotonic() + 60.0
    assert sampler.read().system_cpu is None
    sampler._system_at = time.monotonic() - MIN_SYSTEM_S  # as if the sampler's period had passed
    assert sampler.read().system_cpu is not None


def test_a_worker_seen_once_reads_its_cpu_since_it_started(tmp_path: Path) -> None:
    # DataLoader workers that live one epoch were sampled about once each, and a first sight read
    # None: pytorch-ignite's mnist_save_resume_engine summed up as "train workers n/a (8)".
    from pitstop.profiling.agent import Agent
    from pitstop.profiling.launch import SessionSettings
    from pitstop.profiling.sampler import Sampler

    busy = ("import time, sys\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
            "print('busy', flush=True)\ntime.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "busy"
        agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="t.py", profile=None))
        agent.worker_pids[child.pid] = 7  # as the DataLoader hook registers a loader's workers
        it = psutil.Process(child.pid)
        cpu_s = sum(it.cpu_times()[:2])  # its CPU, all spent before it printed: it sleeps now
        before = time.time() - it.create_time()
        procs = {p.pid: p for p in Sampler(agent).read_procs()}
        after = time.time() - it.create_time()
        seen = procs[child.pid]
        # Its CPU (0.4 s and its start) over its age at the reading, whatever a busy machine made of that age
        # (a fixed "above 10% of a core" failed once at load 4 beside the test suite); 5% for the clock's ticks.
        assert seen.role == "worker" and seen.cpu is not None
        assert 100 * cpu_s / after * 0.95 <= seen.cpu <= 100 * cpu_s / before * 1.05 + 1.0
        assert procs[os.getpid()].cpu is None  # this process: its first reading would count its own past
        # Another child's first reading waits for a second one: busy only while it imported, it is no
        # evidence of training for the blind-spot note.
        agent.worker_pids.clear()
        assert {p.pid: p for p in Sampler(agent).read_procs()}[child.pid].cpu is None
    finally:
        child.kill()
        child.wait()


def test_a_workers_wait_for_a_cpu_is_read_from_its_second_sample(tmp_path: Path) -> None:
    # A DataLoader worker starved of a core makes its rank wait for batches while the rank's own threads
    # wait for nothing: the straggler finding reads each worker's run delay from the samples.
    from pitstop.profiling.agent import Agent
    from pitstop.profiling.launch import SessionSettings
    from pitstop.profiling.sampler import Sampler

    child = subprocess.Popen([sys.executable, "-c", "print('up', flush=True)\nwhile True: pass"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "r"), script="t.py", profile=None))
        agent.worker_pids[child.pid] = 7
        sampler = Sampler(agent)
        first = {p.pid: p for p in sampler.read_procs()}
        assert first[child.pid].cpu_wait is None and first[os.getpid()].cpu_wait is None
        second = {p.pid: p for p in sampler.read_procs()}
        wait = second[child.pid].cpu_wait  # (0.0 where it never waited: the machine had a core for it)
        assert wait is not None and 0.0 <= wait <= (os.cpu_count() or 1)
        assert second[os.getpid()].cpu_wait is None  # the main process's is `Sample.cpu_wait`
    finally:
        child.kill()
        child.wait()
