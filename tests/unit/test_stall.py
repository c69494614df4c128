"""The stall decision (no clock, no thread) and the cause in words, from hand-made stacks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pitstop.analysis import JobState, RunState, advise, job_cause, stall_block
from pitstop.analysis._stall import describe, span
from pitstop.events import Frame, Hello, Stall, Step, ThreadStack, decode, encode
from pitstop.profiling._stallwatch import STALL_MIN_S, FirstStepWait, StallDetector
from pitstop.profiling.waits import death_text, parse_dump

LIB = "/usr/lib/python3.11/site-packages/torch"


def _f(function: str, file: str, line: int, code: str = "") -> Frame:
    return Frame(function=function, file=file, line=line, library=file.startswith("/usr"), code=code)


def test_no_stall_before_the_first_step_nor_while_anything_moves() -> None:
    d = StallDetector(after_s=3.0)
    assert d.check(None, 0.0) is None and d.check(None, 100.0) is None  # a slow first step
    d.step(0, 0.01, True)
    assert d.check((1, 5), 100.0) is None
    for t in range(101, 110):  # an evaluation: batches keep coming
        assert d.check((1, 5 + t), float(t)) is None
    assert d.check((1, 114), 111.9) is None
    assert d.check((1, 114), 112.5) == "start"
    assert d.check((1, 114), 114.0) is None
    assert d.check((2, 115), 130.0) == "end"
    assert d.since == 109.0


def test_the_threshold_is_60_s_or_20x_the_p95_step() -> None:
    d = StallDetector()
    assert d.threshold() == STALL_MIN_S
    for i in range(100):
        d.step(i, 0.1, True)
    assert d.threshold() == STALL_MIN_S
    for i in range(100):
        d.step(i, 10.0, True)
    assert d.threshold() == 200.0
    d.step(200, 1000.0, False)  # a marked step (an evaluation) does not count
    assert d.threshold() == 200.0


def test_updates_come_every_few_minutes_while_it_lasts() -> None:
    d = StallDetector(after_s=1.0)
    d.check((1,), 0.0)
    assert d.check((1,), 2.0) == "start"
    assert d.check((1,), 100.0) is None
    assert d.check((1,), 183.0) == "update"


DATASET = [_f("<module>", "/job/hang.py", 40, "main()"), _f("main", "/job/hang.py", 30, "for x, y in loader:"),
           _f("_BaseDataLoaderIter.__next__", f"{LIB}/utils/data/dataloader.py", 631),
           _f("_MapDatasetFetcher.fetch", f"{LIB}/utils/data/_utils/fetch.py", 52),
           _f("D.__getitem__", "/job/hang.py", 11, "time.sleep(3600)")]
BACKWARD = [_f("main", "/job/hang.py", 33, "loss.backward()"), _f("Tensor.backward", f"{LIB}/_tensor.py", 626),
            _f("backward", f"{LIB}/autograd/__init__.py", 347),
            _f("_engine_run_backward", f"{LIB}/autograd/graph.py", 823)]


def _run(rank: int, frames: list[Frame], phase: str = "start", world: int = 2, state: str = "S") -> RunState:
    run = RunState()
    run.add(Hello(schema=2, pitstop_version="x", session="s", pid=100 + rank, ppid=1, host="h", argv=[], cwd="/",
                  started=0.0, python="3.11", rank=rank, world_size=world, script="hang.py"))
    run.add(Step(t=10.0, step=19, wall=0.01, data_wait=0.0))
    run.add(Stall(t=90.0, phase=phase, step=19, since_s=80.0, threshold_s=60.0,
                  stacks=[ThreadStack(pid=100 + rank, role="main", frames=frames, state=state, wchan="futex")]))
    return run


def test_one_rank_in_its_dataset_and_the_other_in_a_collective_is_said_job_wide() -> None:
    ranks = [("rank 0", _run(0, BACKWARD)), ("rank 1", _run(1, DATASET))]
    assert job_cause(ranks) == ("rank 1 is blocked in D.__getitem__ (hang.py:11: time.sleep(3600)) inside its "
                                "DataLoader's main-process fetch; rank 0 waits in all_reduce (DDP backward) for rank 1")
    finding = advise(ranks[1][1]).findings[0]
    assert (finding.rule, finding.severity, finding.title) == ("stall", "high", "stuck for 1m20s after step 19")


def test_every_rank_in_a_collective_is_a_dead_or_missing_peer() -> None:
    collective = [_f("main", "/job/t.py", 9, "dist.all_reduce(t)"),
                  _f("all_reduce", f"{LIB}/distributed/distributed_c10d.py", 2050)]
    text = job_cause([("rank 0", _run(0, collective)), ("rank 1", _run(1, collective))])
    assert text is not None and text.startswith("every rank waits in a collective (all_reduce): a peer is dead")


def test_a_read_in_uninterruptible_sleep_and_a_lock_are_named() -> None:
    read = [_f("main", "/job/t.py", 5, "data = f.read()")]
    stacks = [ThreadStack(pid=1, role="main", frames=read, state="D", wchan="nfs_wait_bit_killable")]
    assert describe(stacks).text.startswith("is in uninterruptible sleep (D) in the kernel's nfs_wait_bit_killable "
                                            "at main (t.py:5: data = f.read())")
    lock = [_f("main", "/job/t.py", 5, "with lock:")]
    assert describe([ThreadStack(pid=1, role="main", frames=lock)]).kind == "lock"


def test_a_queue_wait_names_the_dead_worker() -> None:
    frames = [_f("main", "/job/t.py", 5, "for x in loader:"),
              _f("_MultiProcessingDataLoaderIter._next_data", f"{LIB}/utils/data/dataloader.py", 1300),
              _f("_MultiProcessingDataLoaderIter._get_data", f"{LIB}/utils/data/dataloader.py", 1250)]
    stacks = [ThreadStack(pid=1, role="main", frames=frames),
              ThreadStack(pid=7, role="worker", how="none", state="Z",
                          note=f"the process is dead ({death_text(9)}), not yet reaped")]
    wait = describe(stacks)
    assert wait.kind == "data-queue" and "worker 7 is dead (killed by SIGKILL), not yet reaped" in wait.text


def test_a_stall_event_round_trips_and_the_summary_folds_library_frames() -> None:
    run = _run(1, DATASET)
    assert run.stall is not None and decode(encode(run.stall)) == run.stall
    lines = stall_block(run)
    assert lines[0] == "stall: stuck for 1m20s after step 19"
    assert "    hang.py:11 D.__getitem__   time.sleep(3600)" in lines
    assert any(line.startswith("    [2 library frames: fetch.py:52") or "2 library frames" in line for line in lines)
    ended = _run(1, DATASET)
    ended.add(Stall(t=100.0, phase="end", step=19, since_s=85.0, threshold_s=60.0, lasted_s=85.0))
    assert stall_block(ended)[0] == "stall: was stuck for 1m25s after step 19, then resumed"
    assert span(3725) == "1h02m"


def test_py_spy_dump_json_is_read_innermost_last() -> None:
    dump = [{"thread_id": 1, "os_thread_id": 42, "thread_name": "MainThread", "owns_gil": False,
             "frames": [{"name": "__getitem__", "filename": "/job/ds.py", "line": 9},
                        {"name": "_worker_loop", "filename": f"{LIB}/utils/data/_utils/worker.py", "line": 300}]},
            {"thread_id": 2, "os_thread_id": 43, "thread_name": "other", "frames": []}]
    (stack,) = parse_dump(dump, 42, "worker", state="S")
    assert [f.function for f in stack.frames] == ["_worker_loop", "__getitem__"]
    assert stack.how == "py-spy" and stack.role == "worker"


def test_a_job_without_a_stall_has_no_cause() -> None:
    job = JobState()
    assert job_cause(job.ranks()) is None


def test_an_evaluation_in_progress_gets_twenty_times_the_threshold() -> None:
    d = StallDetector(after_s=3.0)
    d.check((1,), 0.0)
    assert d.check((1,), 7.0, evaluating=True) is None  # one eval forward of 7 s (mnist's batch of 1,000)
    assert d.check((1,), 61.0, evaluating=True) == "start"  # a hung evaluation is still one


def test_a_slowdown_of_twenty_steps_captures_once_per_ten_minutes() -> None:
    from pitstop.profiling._slowwatch import COOLDOWN_S, SlowdownDetector

    d = SlowdownDetector()
    fired = []
    t = 0.0
    for i in range(300):
        d.step(0.010 if i < 100 or i >= 200 else 0.030)  # steps 100-199 take 3x
        if i % 5 == 4:
            t += 1.0
            if d.check(t):
                fired.append(i)
    # The recent median turns 3x after 11 slow steps (step 110); 20 steps later, one capture.
    assert len(fired) == 1 and 125 <= fired[0] <= 140, fired
    assert d.ratio is not None
    d2 = SlowdownDetector()
    for i in range(100):
        d2.step(0.010)
    assert not d2.check(1.0)
    for i in range(60):
        d2.step(0.030)
    assert d2.check(2.0)
    for i in range(300):
        d2.step(0.010)
    assert not d2.check(3.0)
    for i in range(60):
        d2.step(0.030)
    assert not d2.check(4.0)  # slow again, within the cooldown
    for i in range(60):
        d2.step(0.030)
    assert d2.check(4.0 + COOLDOWN_S)


def test_a_slowdown_capture_opens_a_window_and_notes_where_the_thread_is() -> None:
    import os
    from types import SimpleNamespace

    from pitstop.profiling._slowwatch import SlowdownDetector, capture

    asked: list[str] = []
    notes: list[str] = []
    windows = SimpleNamespace(request=lambda trigger: asked.append(trigger) or "profiling the next 5 steps")
    agent = SimpleNamespace(windows=windows, pid=os.getpid(),
                            note=lambda level, source, message, once=None: notes.append(message))
    d = SlowdownDetector()
    d.ratio = 3.0
    import threading

    said: list[str] = []
    # From another thread, as the stall watch's: this one is the "training thread" it reads.
    thread = threading.Thread(target=lambda: said.append(capture(agent, d, 199)))
    thread.start()
    thread.join()
    message = said[0]
    assert asked == ["slowdown"] and notes == [message]
    assert message.startswith("steps slowed down after step 199: the median of the last 20 is 3.0x the run's, "
                              "for 20+ steps: profiling the next 5 steps; the training thread was at test_stall.py:")


def _flight_dump(rank: int, seq_open: int | None) -> bytes:
    """A Flight Recorder dump as torch pickles it (the format torch.distributed.flight_recorder reads)."""
    import pickle

    def entry(seq: int, state: str) -> dict[str, object]:
        return {"record_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq,
                "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": 0,
                "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
                "output_dtypes": ["Float"], "state": state, "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None, "retired": state == "completed", "timeout_ms": 600000,
                "is_p2p": False, "duration_ms": None, "frames": []}

    entries = [entry(s, "completed") for s in range(38, 42)]
    if seq_open is not None:
        entries.append(entry(seq_open, "started"))
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                         "pg_status": {}, "entries": entries, "rank": rank})


def test_a_flight_recorder_dump_says_which_collective_each_rank_is_in() -> None:
    import pickle

    from pitstop.profiling import _flight

    in_it = _flight.summarize(pickle.loads(_flight_dump(0, 42)))
    assert in_it == ["flight recorder: in nccl:all_reduce (seq 42, started, group 0 (default_pg), input sizes "
                     "[[1024]])",
                     "flight recorder: last completed nccl:all_reduce (seq 41, completed, group 0 (default_pg), "
                     "input sizes [[1024]])"]
    assert _flight.summarize(pickle.loads(_flight_dump(1, None)))[0].startswith(
        "flight recorder: every recorded collective completed")
    assert not _flight.enabled({}) and _flight.enabled({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"})
    # Beside the stacks, job-wide: which collective each rank is in.
    r0, r1 = _run(0, BACKWARD), _run(1, DATASET)
    for run, dump in ((r0, _flight_dump(0, 42)), (r1, _flight_dump(1, None))):
        st = run.stall
        assert st is not None
        run.add(Stall(t=st.t, phase="update", step=19, since_s=80.0, threshold_s=60.0, stacks=st.stacks,
                      flight=_flight.summarize(pickle.loads(dump))))
    cause = job_cause([("rank 0", r0), ("rank 1", r1)]) or ""
    assert cause.endswith("; flight recorder: rank 0 in nccl:all_reduce (seq 42, started, group 0 (default_pg), "
                          "input sizes [[1024]])"), cause
    assert "flight recorder: last completed nccl:all_reduce (seq 41" in "\n".join(stall_block(r0))


def test_no_progress_before_the_first_step_is_a_wait_after_five_minutes_or_the_stall_threshold() -> None:
    assert FirstStepWait(0.0).threshold() == 300.0 and FirstStepWait(0.0, after_s=600.0).threshold() == 600.0
    assert FirstStepWait(0.0, after_s=2.0).threshold() == 300.0  # --stall-after 2 does not make a model build stuck
    w = FirstStepWait(0.0, after_s=None, first_s=3.0)
    assert w.check((0, 0), False, 1.0) is None  # the first read is the baseline, not progress
    assert w.check((1, 0), False, 2.5) is None  # a batch came: the clock starts again
    assert w.check((1, 0), False, 5.4) is None
    assert w.check((1, 0), False, 5.6) == "start"
    assert w.check((1, 0), False, 6.0) is None
    assert w.check((1, 0), False, 5.6 + 180.0) == "update"
    assert w.check((1, 0), True, 200.0) == "end"  # the first step
    assert w.check((1, 0), False, 900.0) is None  # and never again: after it, stalls are StallDetector's
    quiet = FirstStepWait(0.0, first_s=3.0)
    assert quiet.check((0,), False, 2.0) is None and quiet.check((0,), True, 2.5) is None  # a first step in time


def _first(frames: list[Frame], phase: str = "start", state: str = "S") -> RunState:
    run = RunState()
    run.add(Hello(schema=2, pitstop_version="x", session="s", pid=7, ppid=1, host="h", argv=[], cwd="/",
                  started=0.0, python="3.11"))
    run.add(Stall(t=310.0, phase=phase, step=0, since_s=305.0, threshold_s=300.0, first=True,
                  stacks=[ThreadStack(pid=7, role="main", how="in-process", state=state, frames=frames)]))
    return run


def test_a_process_with_no_first_step_says_where_it_waits_as_a_wait_unless_it_is_blocked() -> None:
    from pitstop.analysis import stall_title, stall_word

    hang = [_f("<module>", "/job/train.py", 40), _f("Mounted.__init__", "/job/train.py", 12),
            _f("read_index", "/job/train.py", 8, "time.sleep(3600)")]
    run = _first(hang)
    title = stall_title(run)
    assert title == "no first step after 5m05s; the training thread is in read_index (train.py:8: time.sleep(3600))"
    assert stall_word([run]) == "WAITING"
    (finding,) = [f for f in advise(run).findings if f.rule == "stall"]
    assert finding.severity == "medium" and "stuck" not in finding.title
    assert stall_block(run)[0] == f"stall: {title}"
    # Blocked: a read in uninterruptible sleep, a lock: stuck, [high].
    disk = _first(hang, state="D")
    assert stall_word([disk]) == "STUCK"
    assert [f.severity for f in advise(disk).findings if f.rule == "stall"] == ["high"]
    lock = _first([_f("<module>", "/job/train.py", 40), _f("setup", "/job/train.py", 9, "with lock:"),
                   _f("acquire", "/usr/lib/python3.11/threading.py", 1)])
    assert stall_word([lock]) == "STUCK"
    # It moved: a wait that ended, not a stall after step 0.
    moved = _first(hang, phase="end")
    moved.add(Stall(t=320.0, phase="end", step=0, since_s=315.0, threshold_s=300.0, lasted_s=315.0, first=True))
    assert stall_title(moved) == "no progress for 5m15s before its first step, then it moved"
    assert [f.severity for f in advise(moved).findings if f.rule == "stall"] == ["low"]


def test_a_wait_for_the_first_step_round_trips_and_an_old_stall_is_not_one() -> None:
    event = Stall(t=1.0, phase="start", step=0, since_s=301.0, threshold_s=300.0, first=True)
    assert decode(encode(event)) == event
    assert decode('{"kind":"stall","t":1.0,"phase":"start","step":0,"since_s":70.0,"threshold_s":60.0}').first is False


def test_the_agents_first_step_wait_starts_once_torch_is_hooked_and_not_for_a_parent_whose_children_train(
        tmp_path: Path) -> None:
    import pitstop.profiling._blind  # noqa: F401 - imported as the running agent has them: an import in a
    import pitstop.profiling.sampler  # noqa: F401 - tick would count as the script's progress (sys.modules)
    from pitstop.profiling._stallwatch import StallWatch
    from pitstop.profiling.record import RecordWriter

    clock = SimpleNamespace(index=0, batches=0, backwards=0, grads=0, closures=0)
    emitted: list[Stall] = []
    agent = SimpleNamespace(clock=clock, stamps=[], dormant=False, hooks=None, pid=4242, emit=emitted.append,
                            record_path=tmp_path / "rank0.jsonl.gz", worker_pids=[])
    watch = StallWatch(agent)
    watch._stacks = lambda: ([ThreadStack(pid=4242, role="main")], [])  # type: ignore[method-assign]
    watch.first = FirstStepWait(0.0, first_s=3.0)
    watch._first_tick(100.0)  # `import torch` still running: the clock has not started
    assert emitted == []
    agent.hooks = object()  # hooked: the clock runs from the last tick before (100.0)
    watch._first_tick(101.0)
    watch._first_tick(102.9)
    assert emitted == []
    watch._first_tick(103.5)
    assert [(s.phase, s.first, s.step) for s in emitted] == [("start", True, 0)]
    clock.index = 1  # the first step
    watch._first_tick(105.0)
    assert [(s.phase, s.first) for s in emitted][-1] == ("end", True)
    # A hogwild parent: its children record steps of their own, so its wait in join() is not said.
    child = RecordWriter(tmp_path / "rank0-4343.jsonl.gz")
    child.write(Hello(schema=2, pitstop_version="x", session="s", pid=4343, ppid=4242, host="h", argv=[], cwd="/",
                      started=0.0, python="3.11", parent_pid=4242))
    child.close()
    emitted.clear()
    clock.index = 0
    parent = StallWatch(agent)
    parent.first = FirstStepWait(0.0, first_s=3.0)
    for t in (101.0, 104.5, 300.0):
        parent._first_tick(t)
    assert emitted == []
