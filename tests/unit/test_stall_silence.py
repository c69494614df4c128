"""A process whose agent went silent (a thread holds the GIL in native code), as the front decides and words it."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pitstop.analysis import JobState, RunState, advise, job_cause, stall_block
from pitstop.analysis._stall import describe, headline
from pitstop.events import End, Frame, Hello, Stall, Step, ThreadStack
from pitstop.profiling._silence import Due, SilenceDetector, SilenceWatch, read_silent
from pitstop.profiling._stallwatch import UPDATE_S, StallDetector, StallWatch
from pitstop.profiling.record import ReadResult, RecordWriter, append_end, append_events, iter_record
from pitstop.profiling.waits import parse_dump
from pitstop.streams import StreamBatch

HOST = "node1"
LIB = "/usr/lib/python3.11/site-packages/torch"


def _hello(pid: int = 4242, host: str = HOST, rank: int | None = None) -> Hello:
    return Hello(schema=2, pitstop_version="x", session="s", pid=pid, ppid=1, host=host, argv=[], cwd="/",
                 started=0.0, python="3.11", rank=rank, world_size=2 if rank is not None else None)


def _steps(first: int, n: int) -> list[Step]:
    return [Step(t=float(i), step=i, wall=0.2, data_wait=0.0, samples=8) for i in range(first, first + n)]


# py-spy 0.4's `dump --json --native` of `ctypes.PyDLL(None).sleep(3600)`, cut to its frames' fields.
NATIVE_DUMP = [
    {"thread_name": "pitstop-sampler", "os_thread_id": 4250, "owns_gil": False,
     "frames": [{"name": "Sampler._loop", "filename": "/site-packages/pitstop/profiling/sampler.py", "line": 164}]},
    {"thread_name": "MainThread", "os_thread_id": 4242, "owns_gil": True, "frames": [
        {"name": "clock_nanosleep", "filename": "/usr/lib/x86_64-linux-gnu/libc.so.6",
         "short_filename": "libc.so.6", "line": 0},
        {"name": "sleep", "filename": "/usr/lib/x86_64-linux-gnu/libc.so.6", "short_filename": "libc.so.6", "line": 0},
        {"name": "0x7faf50dd6f7a", "filename": "/usr/lib/libffi.so.8.1.2", "short_filename": "libffi.so.8.1.2",
         "line": 0},
        {"name": "_ctypes_callproc", "filename": "callproc.c", "short_filename": "callproc.c", "line": 1262},
        {"name": "main", "filename": "/job/train.py", "line": 27},
        {"name": "<module>", "filename": "/job/train.py", "line": 31}]},
]


def _native(pid: int) -> list[ThreadStack]:
    """NATIVE_DUMP as py-spy reads it from process `pid` (its main thread's id is the pid)."""
    threads = [{**t, "os_thread_id": pid} if t["thread_name"] == "MainThread" else t for t in NATIVE_DUMP]
    return parse_dump(threads, pid, "main", state="S")


def test_a_stream_silent_past_the_threshold_after_its_first_step_is_due_then_updated_then_ended() -> None:
    d = SilenceDetector(after_s=3.0)
    d.heard("s", [_hello()], 0.0, 1000.0)
    assert d.due(100.0, 1100.0, HOST) == []  # silent before its first step: a slow start is not this
    d.heard("s", _steps(0, 11), 100.0, 1100.0)
    assert d.due(102.9, 1102.9, HOST) == []
    (due,) = d.due(103.5, 1103.5, HOST)
    assert due == Due("s", "start", 4242, 10, 3.5, 3.0)
    assert d.due(104.0, 1104.0, HOST) == []  # said once
    (update,) = d.due(103.5 + UPDATE_S, 1103.5 + UPDATE_S, HOST)
    assert update.phase == "update"
    # Steps the agent's writer had queued before the hold, sent when it got the GIL back: not progress.
    queued = [Step(t=1100.5, step=11, wall=0.2, data_wait=0.0, samples=8)]
    assert d.heard("s", queued, 300.0, 1300.0) is None
    end = d.heard("s", [Step(t=1299.0, step=12, wall=0.2, data_wait=0.0, samples=8)], 300.0, 1300.0)
    # "after step 11": the last step that ended before the hold (sent late), not the one that resumed
    assert end is not None and end.phase == "end" and end.by == "front" and end.lasted_s == 200.0 and end.step == 11
    assert d.heard("s", [Step(t=1301.0, step=13, wall=0.2, data_wait=0.0, samples=8)], 301.0, 1301.0) is None


def test_no_read_where_the_agent_speaks_for_itself_or_the_process_is_elsewhere_or_ended() -> None:
    d = SilenceDetector(after_s=3.0)
    d.heard("own", [_hello(1), *_steps(0, 5)], 0.0, 0.0)
    d.heard("own", [Stall(t=1.0, phase="start", step=4, since_s=3.0, threshold_s=3.0)], 0.0, 0.0)
    d.heard("far", [_hello(2, host="node2"), *_steps(0, 5)], 0.0, 0.0)
    d.heard("done", [_hello(3), *_steps(0, 5), End(t=1.0, steps=5, dropped=0)], 0.0, 0.0)
    assert d.due(50.0, 50.0, HOST) == []
    d.heard("own", [Stall(t=2.0, phase="end", step=4, since_s=3.0, threshold_s=3.0, lasted_s=3.0)], 60.0, 60.0)
    assert [x.stream for x in d.due(70.0, 70.0, HOST)] == ["own"]  # its own stall ended, then it went silent


def test_the_fronts_own_event_is_not_heard_as_the_agent_speaking_and_a_close_while_stuck_is_an_exit() -> None:
    d = SilenceDetector(after_s=3.0)
    d.heard("s", [_hello(), *_steps(0, 3)], 0.0, 1000.0)
    assert len(d.due(5.0, 1005.0, HOST)) == 1
    own = Stall(t=1005.0, phase="start", step=2, since_s=5.0, threshold_s=3.0, by="front")
    assert d.heard("s", [own], 6.0, 1006.0) is None
    assert d.streams["s"].heard_at == 0.0
    ended = d.closed("s", 1020.0)
    assert ended is not None and ended.phase == "exit" and ended.lasted_s == 20.0


def test_the_threshold_is_the_agents_max_60_s_or_20x_the_p95_step_and_never_under_3_s() -> None:
    d = SilenceDetector()
    d.heard("s", [_hello(), *_steps(0, 20)], 0.0, 0.0)
    assert d.due(59.0, 59.0, HOST) == [] and len(d.due(61.0, 61.0, HOST)) == 1
    tiny = SilenceDetector(after_s=1.0)  # --stall-after 1: one late read of a sample a second is not silence
    tiny.heard("s", [_hello(), *_steps(0, 20)], 0.0, 0.0)
    assert tiny.due(2.5, 2.5, HOST) == [] and len(tiny.due(3.5, 3.5, HOST)) == 1


def test_a_native_dump_names_the_gil_holder_its_line_and_its_c_call() -> None:
    stacks = parse_dump(NATIVE_DUMP, 4242, "main", state="S")
    (main,) = stacks
    assert main.native and main.frames[-1].function == "clock_nanosleep" and main.frames[-1].library
    assert main.frames[-1].line is None
    wait = describe(stacks, silent=True)
    assert wait.kind == "native"
    assert wait.text == ("holds the GIL in native code: main (train.py:27), in clock_nanosleep (libc.so.6); "
                         "the agent's threads cannot run")


def test_without_py_spy_the_silence_is_still_named_and_the_fix_said() -> None:
    def missing(pid: int, role: str) -> list[ThreadStack]:
        return [ThreadStack(pid=pid, role=role, how="none", state="S",
                            note='py-spy is not installed: pip install "pitstop[stacks]" (or pip install py-spy)')]

    due = Due("s", "start", os.getpid(), 10, 4.0, 3.0)  # a live process: this one
    stall = read_silent(due, missing)
    assert stall is not None and stall.by == "front" and stall.step == 10
    assert stall.notes == ['the agent went silent; its stacks were not read from outside: py-spy is not installed: '
                           'pip install "pitstop[stacks]" (or pip install py-spy)']
    text = describe(stall.stacks, silent=True).text
    assert text.startswith("went silent while its process lives (state S): its training thread most likely holds "
                           "the GIL in native code")
    assert text.endswith('its stacks were not read: py-spy is not installed: pip install "pitstop[stacks]" '
                         "(or pip install py-spy)")


def test_a_process_gone_or_dead_when_read_gives_no_stall() -> None:
    assert read_silent(Due("s", "start", 2 ** 22 + 7, 1, 4.0, 3.0), lambda pid, role: []) is None


def _rank(rank: int, stall: Stall) -> RunState:
    run = RunState()
    run.add(_hello(100 + rank, rank=rank))
    run.add(stall)
    return run


def test_the_job_cause_names_the_rank_that_holds_the_gil_and_the_one_waiting_for_it() -> None:
    native = Stall(t=10.0, phase="start", step=19, since_s=4.0, threshold_s=3.0, by="front",
                   stacks=_native(100))
    backward = [ThreadStack(pid=101, role="main", state="S", frames=[
        Frame("main", "/job/train.py", 33, False, "loss.backward()"),
        Frame("Tensor.backward", f"{LIB}/_tensor.py", 626, True),
        Frame("_engine_run_backward", f"{LIB}/autograd/graph.py", 823, True)])]
    waiting = Stall(t=10.0, phase="start", step=19, since_s=4.0, threshold_s=3.0, stacks=backward)
    cause = job_cause([("rank 0", _rank(0, native)), ("rank 1", _rank(1, waiting))])
    assert cause == ("rank 0 holds the GIL in native code: main (train.py:27), in clock_nanosleep (libc.so.6); the "
                     "agent's threads cannot run; rank 1 waits in all_reduce (DDP backward) for rank 0")


def test_the_summary_shows_the_fronts_stall_with_its_c_frames_folded() -> None:
    run = RunState()
    run.add(_hello())
    for s in _steps(0, 11):
        run.add(s)
    run.add(Stall(t=20.0, phase="start", step=10, since_s=4.0, threshold_s=3.0, by="front",
                  stacks=parse_dump(NATIVE_DUMP, 4242, "main", state="S")))
    run.add(Stall(t=30.0, phase="exit", step=10, since_s=14.0, threshold_s=3.0, lasted_s=14.0, by="front"))
    (finding,) = [f for f in advise(run).findings if f.rule == "stall"]
    assert finding.severity == "high" and finding.title == "stuck for 14s after step 10"
    assert "ctypes.CDLL" in finding.fix
    block = "\n".join(stall_block(run))
    assert "read by py-spy, state S, holding the GIL (native code)" in block
    assert "[4 library frames: libc.so.6 clock_nanosleep ... callproc.c:1262 _ctypes_callproc]" in block
    assert "train.py:27 main" in block


def test_a_stall_appended_late_does_not_replace_a_later_one() -> None:
    run = RunState()
    later = Stall(t=50.0, phase="start", step=30, since_s=4.0, threshold_s=3.0,
                  stacks=[ThreadStack(pid=1, role="main", state="S")])
    run.add(later)
    run.add(Stall(t=20.0, phase="start", step=10, since_s=4.0, threshold_s=3.0, by="front",
                  stacks=[ThreadStack(pid=1, role="main", how="py-spy", native=True)]))
    run.add(Stall(t=25.0, phase="end", step=11, since_s=5.0, threshold_s=3.0, lasted_s=5.0, by="front"))
    assert run.stall is later and run.stall_stacks is later


def test_the_fronts_stalls_are_appended_to_a_record_and_the_end_after_them(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    writer.write_events([_hello(), *_steps(0, 5)])  # type: ignore[list-item]  # never closed: killed
    made = [Stall(t=20.0, phase="start", step=4, since_s=4.0, threshold_s=3.0, by="front",
                  stacks=parse_dump(NATIVE_DUMP, 4242, "main", state="S")),
            Stall(t=30.0, phase="exit", step=4, since_s=14.0, threshold_s=3.0, lasted_s=14.0, by="front")]
    assert append_events(path, made)
    end = End(t=31.0, steps=5, dropped=0, reason="signal", exit_code=130)
    assert append_end(path, end)
    assert list(iter_record(path))[-3:] == [*made, end]


@pytest.mark.parametrize("name", ["rank0.jsonl.gz", "train.jsonl"])
def test_the_fronts_stall_appended_between_two_writes_of_a_live_agent_leaves_its_record_whole(
        tmp_path: Path, name: str) -> None:
    # The front appends while the process lives (its agent silent); then the GIL is let go and its writer
    # goes on: its lines come after the front's, and nothing of the record is cut.
    path = tmp_path / name
    writer = RecordWriter(path)
    writer.write_events([_hello(), *_steps(0, 5)])  # type: ignore[list-item]
    made = Stall(t=20.0, phase="start", step=4, since_s=4.0, threshold_s=3.0, by="front",
                 stacks=parse_dump(NATIVE_DUMP, 4242, "main", state="S"))
    assert append_events(path, [made])
    writer.write_events(_steps(5, 3))  # type: ignore[arg-type]
    writer.close()
    read = ReadResult()
    events = list(iter_record(path, read))
    assert not read.torn
    assert [e.step for e in events if isinstance(e, Step)] == list(range(8))
    assert events.index(made) == 6  # after the steps written before it, before those after


def test_the_front_appends_nothing_while_the_agents_writer_holds_the_record(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    writer.write_events([_hello(), *_steps(0, 5)])  # type: ignore[list-item]
    before = path.read_bytes()
    with open(path, "rb") as held:  # the writer's lock, taken by a write the GIL's hold cut in two
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError):
            append_events(path, [Stall(t=20.0, phase="start", step=4, since_s=4.0, threshold_s=3.0, by="front")])
    assert path.read_bytes() == before


def test_the_watch_records_a_silent_processs_stall_when_it_reads_it(tmp_path: Path) -> None:
    # Written when taken, not when the run ends: a front killed while the job hangs leaves it recorded.
    path = tmp_path / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    me = os.getpid()
    hello = replace(_hello(me), record=str(path))
    writer.write_events([hello, *_steps(0, 3)])  # type: ignore[list-item]
    now = [0.0]
    watch = SilenceWatch(after_s=0.0, host=HOST, dump=lambda pid, role: _native(pid), clock=lambda: now[0])
    watch.heard(StreamBatch("s", [hello, *_steps(0, 3)]))
    now[0] = 3.5
    done = threading.Event()
    watch.check(lambda batch: done.set())
    assert done.wait(10.0)
    recorded = [e for e in iter_record(path) if isinstance(e, Stall)]
    assert [(s.phase, s.by) for s in recorded] == [("start", "front")] and recorded[0].stacks[0].native
    # Only what the record does not hold yet is left for the run's end: the stall's close.
    assert [s.phase for s in watch.events_of(me)] == ["exit"]


def test_starved_ticks_do_not_call_a_stall_for_a_time_the_agent_did_not_see() -> None:
    d = StallDetector(after_s=3.0)
    d.step(0, 0.1, True)
    d.check((1,), 0.0)
    d.starved(70.0)  # its thread ran again after 70 s: the GIL was held (the front read that one)
    assert d.check((1,), 70.0) is None and d.check((1,), 72.0) is None
    assert d.check((1,), 73.5) == "start"  # still no progress since it could look: a stall of its own


def test_a_tick_held_up_4_s_is_starved_and_calls_no_stall_of_its_own() -> None:
    # Beside two CPU hogs, a GIL held ~4 s and then a Ctrl-C: the watch's next tick came 4 s late, under the
    # old 5 s mark, and it called a stall of its own with the stacks of the exit then under way.
    events: list[object] = []
    clock = SimpleNamespace(index=5, batches=5, backwards=5, grads=5, closures=0)
    agent = SimpleNamespace(disabled=False, finished=False, worker_pids=[], clock=clock, stamps=[],
                            emit=events.append, note=lambda *a: None)
    watch = StallWatch(agent, after_s=2.0)
    watch.first.done = True
    for now in (100.0, 101.0, 102.0):  # progress read at 100 s, then none
        watch.tick(now)
    watch.tick(106.0)  # 4 s late: the GIL was held meanwhile (the front reads that)
    assert events == []
    watch.tick(107.0)
    watch.tick(108.5)  # 2.5 s without progress since it could look again: a stall of its own
    assert [e.phase for e in events] == ["start"]


def test_the_watch_reads_a_silent_process_on_a_thread_and_keeps_its_events_for_the_record() -> None:
    got: list[StreamBatch] = []
    done = threading.Event()
    now = [0.0]
    watch = SilenceWatch(after_s=0.0, host=HOST, dump=lambda pid, role: _native(pid), clock=lambda: now[0])
    me = os.getpid()
    assert watch.heard(StreamBatch("s", [_hello(me), *_steps(0, 3)])) is None
    now[0] = 3.5  # silent past the 3 s floor

    def emit(batch: StreamBatch) -> None:
        got.append(batch)
        done.set()

    watch.check(emit)
    assert done.wait(10.0)
    (stall,) = got[0].events
    assert isinstance(stall, Stall) and stall.phase == "start" and stall.stacks[0].native
    ended = watch.heard(StreamBatch("s", [], closed=True))
    assert ended is not None and ended.events[0].phase == "exit"  # type: ignore[union-attr]
    assert [s.phase for s in watch.events_of(me)] == ["start", "exit"]


def test_pitstop_stacks_of_a_pid_whose_agent_does_not_answer_reads_it_from_outside(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pitstop import stackscmd
    from pitstop.profiling import transport

    agent = SimpleNamespace(pid=4242, session="s1")
    monkeypatch.setattr(transport, "list_agents", lambda: [agent])
    monkeypatch.setattr(stackscmd, "read_live", lambda source: JobState())  # connected; not a word in 15 s
    monkeypatch.setattr("pitstop.profiling.waits.dump", lambda pid, role, native=False: _native(pid))
    assert stackscmd.cmd_stacks("4242") == 0
    out = capsys.readouterr().out
    assert "pid 4242: its pitstop agent did not answer within 15 s (a thread holds the GIL?)" in out
    assert "pid 4242 training thread (read by py-spy, state S, holding the GIL (native code))" in out
    assert "train.py:27 main" in out


def test_a_stall_still_open_when_the_process_is_gone_is_closed_for_the_record() -> None:
    now = [0.0]
    watch = SilenceWatch(after_s=0.0, host=HOST, dump=lambda pid, role: _native(pid), clock=lambda: now[0])
    me = os.getpid()
    watch.heard(StreamBatch("s", [_hello(me), *_steps(0, 3)]))
    now[0] = 3.5
    done = threading.Event()
    watch.check(lambda batch: done.set())
    assert done.wait(10.0)
    # The source stopped before the stream's close reached it: the record still gets the stall's end.
    assert [s.phase for s in watch.events_of(me)] == ["start", "exit"]
    assert [s.phase for s in watch.events_of(me)] == ["start", "exit"]


def test_a_stopped_process_is_said_stopped_not_holding_the_gil() -> None:
    stacks = [ThreadStack(pid=7, role="main", how="none", state="T",
                          note="the process is stopped (SIGSTOP, or a debugger holds it)")]
    wait = describe(stacks, silent=True)
    assert wait.kind == "stopped" and wait.text.startswith("is stopped (state T")


def test_c_frames_are_told_from_a_script_without_a_py_suffix() -> None:
    from pitstop.profiling.waits import is_native

    assert is_native(Frame("clock_nanosleep", "libc.so.6")) and is_native(Frame("at::mm", "libtorch_cpu.so"))
    assert is_native(Frame("_ctypes_callproc", "callproc.c", 1262))
    assert not is_native(Frame("main", "/job/train", 3)) and not is_native(Frame("main", "/job/train.py", 3))


def test_the_fronts_metrics_answer_for_a_silent_process_from_the_fronts_own_state() -> None:
    # pitstop run's own endpoint: the seconds since it heard from each process grow while the process is
    # silent, and a stall the front read from outside shows as stuck; an ended process has no series.
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from pitstop.profiling._frontmetrics import FrontCollector

    now = [100.0]
    watch = SilenceWatch(after_s=0.0, host=HOST, dump=lambda pid, role: _native(pid), clock=lambda: now[0])
    me = os.getpid()
    hello = replace(_hello(me, rank=1), local_rank=1)
    steps = [Step(t=time.time() - 2.0, step=i, wall=0.2, data_wait=0.0, samples=8) for i in range(3)]
    watch.heard(StreamBatch("r1", [hello, *steps]))
    watch.heard(StreamBatch("r0", [replace(_hello(me + 1, rank=0), local_rank=0)]))
    watch.heard(StreamBatch("r0", [], closed=True))  # rank 0 ended
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FrontCollector(watch))  # type: ignore[arg-type]

    def scraped() -> dict[str, list[tuple[dict[str, str], float]]]:
        text = generate_latest(registry).decode()
        return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}

    now[0] = 103.5  # silent past the 3 s floor: the front reads it
    done = threading.Event()
    watch.check(lambda batch: done.set())
    assert done.wait(10.0)
    m = scraped()
    ((labels, stalled),) = m["pitstop_front_stalled"]
    assert stalled == 1.0 and labels["rank"] == "1" and labels["local_rank"] == "1" and labels["host"] == HOST
    ((_, since_step),) = m["pitstop_front_seconds_since_last_step"]
    assert 2.0 <= since_step < 60.0
    assert m["pitstop_front_seconds_since_heard"] == [(labels, 3.5)]


def test_a_process_silent_before_its_first_step_is_read_after_the_first_step_wait_and_said_as_one() -> None:
    # A dataset's set-up in a C extension that keeps the GIL: no event at all, and no step yet.
    d = SilenceDetector(after_s=3.0)
    d.heard("s", [_hello(os.getpid())], 0.0, 1000.0)  # a live process: read_silent looks in /proc
    assert d.due(100.0, 1100.0, HOST) == []  # --stall-after 3 does not make a set-up stuck
    (due,) = d.due(301.0, 1301.0, HOST)  # the first-step wait's 5 minutes
    assert due.first and due.phase == "start" and due.step == 0 and due.threshold_s == 300.0
    stall = read_silent(due, dump=lambda pid, role: _native(pid))
    assert stall is not None and stall.first and stall.by == "front"
    run = RunState()
    run.add(_hello())
    run.add(stall)
    assert headline(run) == "no first step after 5m01s"  # a wait, not "stuck ... after step 0"
    first_step = Step(t=1400.0, step=0, wall=90.0, data_wait=0.0, samples=8)  # after the front found it
    ended = d.heard("s", [first_step], 310.0, 1400.0)
    assert ended is not None and ended.phase == "end" and ended.first


def test_pitstop_stacks_reads_a_stuck_process_until_its_history_ends_not_its_sampler() -> None:
    # A stuck process sends a sampler reading a second and nothing else: those are not news, so the read
    # ends QUIET_S after the history, not at READ_MAX_S (a read of a stuck process took 18 s).
    from pitstop.events import Sample
    from pitstop.stackscmd import read_live

    stop = threading.Event()
    stall = Stall(t=20.0, phase="start", step=4, since_s=4.0, threshold_s=3.0,
                  stacks=parse_dump(NATIVE_DUMP, 4242, "main", state="S"))

    class Source:
        def batches(self):  # type: ignore[no-untyped-def]
            yield StreamBatch("s", [_hello(), *_steps(0, 5), stall])
            t = 30.0
            while not stop.wait(0.05):  # the sampler, faster than QUIET_S apart
                t += 1.0
                yield StreamBatch("s", [Sample(t=t, gpus=[], procs=[])])

        def close(self) -> None:
            stop.set()

    started = time.monotonic()
    job = read_live(Source(), quiet_s=0.5, max_s=60.0)
    assert stop.is_set() and job.runs["s"].stall == stall
    # Ended by the quiet after the history (0.5 s), not by max_s: a 60x margin a busy machine cannot eat, while
    # a read the sampler's readings kept open would run the full 60 s.
    assert time.monotonic() - started < 30.0


def test_a_stall_the_record_refused_is_appended_at_the_next_turn_once_the_writer_let_go(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    me = os.getpid()
    hello = replace(_hello(me), record=str(path))
    writer.write_events([hello, *_steps(0, 3)])  # type: ignore[list-item]
    now = [0.0]
    watch = SilenceWatch(after_s=0.0, host=HOST, dump=lambda pid, role: _native(pid), clock=lambda: now[0])
    watch.heard(StreamBatch("s", [hello, *_steps(0, 3)]))
    now[0] = 3.5
    done = threading.Event()
    with open(path, "rb") as held:  # the agent's writer in the middle of a write
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        watch.check(lambda batch: done.set())
        assert done.wait(10.0)
        assert [e for e in iter_record(path) if isinstance(e, Stall)] == []
    watch.check(lambda batch: None)  # the next turn of the source's loop, the lock let go
    assert [(s.phase, s.by) for s in iter_record(path) if isinstance(s, Stall)] == [("start", "front")]
    assert [s.phase for s in watch.events_of(me)] == ["exit"]  # only the close is left for the end
