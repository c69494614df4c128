"""The blind-spot watch: which children count as training pitstop cannot see, and when it is said."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pitstop.events import Proc
from pitstop.profiling._blind import BlindWatch, blind_message


def test_no_busy_child_means_nothing_to_say() -> None:
    assert blind_message(None, {}) is None


def test_busy_children_are_named_with_what_to_do() -> None:
    text = blind_message(31.0, {4243: 97.0, 4242: 88.0})
    assert text is not None
    assert "after 31 s" in text and "child processes 4242, 4243 were busy (up to 97% CPU)" in text
    assert "pitstop.step()" in text


def _agent(record: Path, steps: int = 0, grads: int = 0) -> SimpleNamespace:
    notes: list[str] = []
    return SimpleNamespace(dormant=False, disabled=False, step_index=steps, record_path=record, notes=notes,
                           clock=SimpleNamespace(grads=grads), pid=1,
                           note=lambda level, source, message, once=None: notes.append(message))


def test_only_busy_children_without_a_record_are_reported_once(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    (tmp_path / "r.pid300.jsonl").write_text('{"kind":"hello","pid":300}\n')  # child 300 woke: its own record
    (tmp_path / "r.rank1.jsonl").write_text('{"kind":"hello","pid":600}\n')  # a rank the script started itself
    watch = BlindWatch()
    watch.seen([Proc(pid=1, role="main", cpu=100.0, rss=1), Proc(pid=200, role="child", cpu=95.0, rss=1),
                Proc(pid=300, role="child", cpu=99.0, rss=1), Proc(pid=400, role="worker", cpu=99.0, rss=1),
                Proc(pid=500, role="child", cpu=0.0, rss=1), Proc(pid=600, role="child", cpu=90.0, rss=1)])
    agent = _agent(record)
    watch.check(agent)  # before BLIND_AFTER_S: nothing yet
    assert agent.notes == []
    watch.check(agent, final=True)
    watch.check(agent, final=True)
    assert len(agent.notes) == 1
    assert "child processes 200 were busy" in agent.notes[0]


def test_busy_grandchildren_of_ranks_this_process_spawned_are_not_a_blind_spot(tmp_path: Path) -> None:
    # mp.spawn's DDP ranks record (their hello names this process as parent); the busy pids beside
    # them were their DataLoader workers, and "started by subprocess" was false.
    record = tmp_path / "r.jsonl"
    (tmp_path / "r.pid300.jsonl").write_text('{"kind":"hello","pid":300,"parent_pid":1}\n')
    watch = BlindWatch()
    watch.seen([Proc(pid=300, role="child", cpu=99.0, rss=1), Proc(pid=301, role="child", cpu=60.0, rss=1)])
    agent = _agent(record)
    watch.check(agent, final=True)
    assert agent.notes == []


def test_a_process_that_stepped_is_not_blind(tmp_path: Path) -> None:
    watch = BlindWatch()
    watch.seen([Proc(pid=200, role="child", cpu=95.0, rss=1)])
    agent = _agent(tmp_path / "r.jsonl", steps=3)
    watch.check(agent, final=True)
    assert agent.notes == []


def test_gradients_taken_without_a_step_are_said_once_and_none_are_not(tmp_path: Path) -> None:
    watch = BlindWatch()
    quiet = _agent(tmp_path / "r.jsonl")
    watch.check(quiet, final=True)
    assert quiet.notes == []  # nothing suggests training: nothing said
    by_hand = _agent(tmp_path / "r.jsonl", grads=2000)
    watch.check(by_hand, final=True)
    watch.check(by_hand, final=True)
    assert len(by_hand.notes) == 1
    assert "torch.autograd.grad 2,000 times" in by_hand.notes[0] and "pitstop.step()" in by_hand.notes[0]


def test_a_compile_is_no_blind_spot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HF Trainer with torch_compile: its 89 s first step called torch.autograd.grad twice (the
    # tracer) while inductor's compile workers were busy, and both read as a blind spot.
    from pitstop.profiling import _blind

    watch = BlindWatch()
    watch.started -= 1000  # long past BLIND_AFTER_S
    watch.seen([Proc(pid=200, role="child", cpu=100.0, rss=1)])
    agent = _agent(tmp_path / "r.jsonl", grads=2)
    monkeypatch.setattr(_blind, "compiling", lambda: True)
    watch.check(agent)
    assert agent.notes == []  # still compiling: nothing said yet
    traced = _agent(tmp_path / "r.jsonl", grads=2)
    BlindWatch().check(traced, final=True)
    assert traced.notes == []  # two grad calls are a tracer's, not a loop's
    monkeypatch.setattr(_blind, "compiling", lambda: False)
    watch.check(agent)
    assert len(agent.notes) == 1 and "child processes 200" in agent.notes[0]  # compiled, and still no step


def _sleeper(seconds: float) -> None:
    import time

    time.sleep(seconds)


def test_busy_multiprocessing_children_are_given_their_start_and_a_subprocess_is_not(tmp_path: Path) -> None:
    # mp.spawn's DDP ranks busy importing torch for 40 s on a loaded machine read "not measured"; they carry
    # an agent that measures them from their first step. A child started by subprocess does not. (A fork
    # here: a spawn's command line names multiprocessing, and its resource tracker would outlive the test;
    # tests/integration/test_distributed.py runs mp.spawn's.)
    import multiprocessing
    import subprocess
    import sys

    spawned = multiprocessing.get_context("fork").Process(target=_sleeper, args=(60,))
    spawned.start()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert spawned.pid is not None
        for busy, said in (([spawned.pid], False), ([spawned.pid, other.pid], True)):
            watch = BlindWatch()
            watch.started -= 40.0  # past BLIND_AFTER_S
            watch.seen([Proc(pid=pid, role="child", cpu=90.0, rss=1) for pid in busy])
            agent = _agent(tmp_path / "r.jsonl")
            watch.check(agent)
            assert bool(agent.notes) is said, (busy, agent.notes)
        watch = BlindWatch()  # a spawned child that never recorded by the end: said then
        watch.seen([Proc(pid=spawned.pid, role="child", cpu=90.0, rss=1)])
        agent = _agent(tmp_path / "r.jsonl")
        watch.check(agent, final=True)
        assert len(agent.notes) == 1 and f"child processes {spawned.pid} were busy" in agent.notes[0]
    finally:
        spawned.kill()
        other.kill()
        spawned.join(30)
        other.wait(30)
