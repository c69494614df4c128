"""Replay of record files: indexed in one pass, a seek lands where a linear replay would."""

from __future__ import annotations

import copy as copy_module
import random
from pathlib import Path

import pytest

from pitstop.analysis import JobState, RunState, StreamBatch, findings, job_summary
from pitstop.analysis import _state
from pitstop.events import (
    SCHEMA_VERSION,
    DataLoaderInfo,
    End,
    Event,
    Gpu,
    Hello,
    Loss,
    Note,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
    encode,
)
from pitstop.profiling.record import ReadResult, RecordWriter, iter_record
from pitstop.profiling.sources import RecordSource
from pitstop.recorded import _index
from pitstop.tui.replay import Timeline, event_time

T0 = 1_700_000_000.0


def _events(n_steps: int, rank: int, wall: float = 0.01) -> list[Event]:
    """A run with every series kind: steps (some marked), samples, losses (a NaN), profiles, notes."""
    out: list[Event] = [
        Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="s", pid=100 + rank, ppid=1, host="h",
              argv=["python", "train.py"], cwd="/", started=T0 + rank * 0.003, python="3.11", rank=rank,
              world_size=2, script="train.py"),
        Runtime(t=T0 + 0.1, torch_version="2.4", cuda_version="12.1", device_type="cuda"),
        DataLoaderInfo(t=T0 + 0.2, id=0, num_workers=2, batch_size=32, pin_memory=True,
                       persistent_workers=False, prefetch_factor=2),
    ]
    t = T0 + 1.0 + rank * 0.0005
    for i in range(n_steps):
        w = wall * (1.0 + 0.3 * ((i * 7 + rank) % 5) / 4)
        t += w
        mark = "profiled" if i % 40 in (20, 21) else ("eval" if i % 97 == 50 else None)
        out.append(Step(t=t, step=i, wall=w, data_wait=w * (0.1 + 0.05 * (i % 3)), samples=32,
                        mem_allocated=(1 << 30) + i * 4096, mem_reserved=2 << 30, host_rss=(1 << 30) + i,
                        mark=mark, eval_s=w / 2 if mark == "eval" else 0.0, loader=0))
        if i % 3 == 2:
            out.append(Sample(t=t + 0.001, gpus=[Gpu(index=0, name="gpu", util=float(i % 100), mem_used=i,
                                                      mem_total=1 << 34, power_w=200.0 + i % 7)],
                              procs=[Proc(pid=100 + rank, role="main", cpu=90.0 + i % 9, rss=(1 << 30) + i),
                                     Proc(pid=200 + rank, role="worker", cpu=30.0, rss=1 << 28, loader=0)],
                              system_cpu=40.0 + i % 11, alloc_retries=i // 500, ooms=0))
        if i % 8 == 7:
            steps = list(range(i - 7, i + 1))
            values = [None if s == 333 else 2.0 / (1 + s) for s in steps]
            out.append(Loss(t=t + 0.002, steps=steps, values=values, nonfinite=[s for s in steps if s == 333]))
        if i % 40 == 22:
            out.append(ProfileWindow(t=t + 0.003, step_start=i - 2, step_end=i, device="cuda",
                                     phases_ms={"forward": 3.0 + i % 5, "backward": 5.0}))
        if i % 150 == 75:
            out.append(Note(t=t + 0.004, level="warn", source="sampler", message=f"note at {i}"))
    return out


def _write(path: Path, events: list[Event], end: bool = True) -> None:
    writer = RecordWriter(path)
    writer.write_lines([encode(e) for e in events])
    if end:
        writer.write(End(t=event_time(events[-1]) + 0.1, steps=0, dropped=0))  # type: ignore[operator]
    writer.close()


def _linear(files: list[Path], cursor: float) -> JobState:
    """What replaying the record from its start to `cursor` gives: events of all files in time order."""
    items: list[tuple[float, str, Event]] = []
    closes: dict[str, float] = {}
    for path in files:
        last = None
        for event in iter_record(path):
            t = event_time(event)
            t = t if t is not None and (last is None or t >= last) else last
            last = t
            items.append((t, str(path), event))  # type: ignore[arg-type]
        closes[str(path)] = last  # type: ignore[assignment]
    items.sort(key=lambda item: item[0])
    job = JobState()
    for t, stream, event in items:
        if t <= cursor:
            job.add(StreamBatch(stream, [event]))
    for stream, t in closes.items():
        if t <= cursor and stream in job.runs:
            job.close(stream)
    return job


def _state_of(job: JobState) -> dict[str, object]:
    """Everything a job holds (a run's `version` counts adds, not content), and what fronts show of it."""
    runs = {stream: {k: v for k, v in vars(run).items() if k != "version"} for stream, run in job.runs.items()}
    shown = repr(job_summary(job)) if job.runs else None
    found = {stream: [f.rule for f in findings(run)] for stream, run in job.runs.items() if run.last_step is not None}
    return {"runs": runs, "order": list(job.runs), "closed": sorted(job.closed), "summary": shown, "findings": found}


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows and checkpoints a few hundred events apart, so a test-sized record wraps them all."""
    monkeypatch.setattr(_index, "CHECKPOINT_EVENTS", 97)
    monkeypatch.setattr(_index, "STEP_STRIDE", 8)
    monkeypatch.setattr(_state, "MAX_STEPS", 60)
    monkeypatch.setattr(_state, "MAX_SAMPLES", 15)
    monkeypatch.setattr(_state, "MAX_LOSSES", 20)
    monkeypatch.setattr(_state, "MAX_PROFILES", 3)
    monkeypatch.setattr(_state, "MAX_NOTES", 2)


@pytest.mark.usefixtures("small_windows")
def test_a_seek_lands_on_the_state_a_linear_replay_reaches(tmp_path: Path) -> None:
    files = [tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"]
    _write(files[0], _events(900, rank=0))
    _write(files[1], _events(600, rank=1, wall=0.012), end=False)  # a rank that died: no End
    tl = Timeline.of_files(files)
    rng = random.Random(5)
    cursors = [tl.end, tl.start, (tl.start + tl.end) / 2, tl.end, tl.start - 1.0, tl.end + 1.0]
    cursors += [rng.uniform(tl.start, tl.end) for _ in range(12)]
    cursors += [tl.profile_times[4], tl.profile_times[4] + 0.004, tl.profile_times[4] - 0.5]
    for cursor in cursors:
        got = tl.seek(cursor)
        clamped = min(max(cursor, tl.start), tl.end)  # a cursor outside the record stops at its ends
        assert _state_of(got) == _state_of(_linear(files, clamped)), cursor
    assert min(len(ix.checkpoints) for ix in tl._indexes) > 10  # the seeks above went through restored checkpoints


@pytest.mark.usefixtures("small_windows")
def test_playing_forward_feeds_the_same_state_on(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    _write(path, _events(500, rank=0))
    tl = Timeline.of_files([path])
    job = tl.seek(tl.start)
    cursor = tl.start
    while cursor < tl.end:  # a replay playing: small steps forward, one JobState fed on
        cursor += 0.37
        assert tl.seek(cursor) is job
    assert _state_of(job) == _state_of(_linear([path], tl.end))


def test_the_end_of_a_replay_shows_the_figures_of_the_whole_record(tmp_path: Path) -> None:
    files = [tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"]
    _write(files[0], _events(700, rank=0))
    _write(files[1], _events(650, rank=1))
    before = JobState()  # how the viewer read a record until now: RecordSource's batches, all of them
    for batch in RecordSource(tmp_path).batches():
        before.add(batch)
    tl = Timeline.of_files(files)
    after = tl.seek(tl.end)
    assert repr(job_summary(after)) == repr(job_summary(before))
    for stream, run in before.runs.items():
        assert [f.rule for f in findings(after.runs[stream])] == [f.rule for f in findings(run)]
        assert after.runs[stream].total_steps == run.total_steps


@pytest.mark.usefixtures("small_windows")
def test_a_torn_last_line_is_left_out_and_seeks_still_work(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    _write(path, _events(400, rank=0), end=False)
    whole = path.read_bytes()
    with open(path, "ab") as handle:  # a run killed while writing
        handle.write(b'{"kind":"step","t":1700000099.0,"step":400,"wa')
    read = ReadResult()
    assert sum(isinstance(e, Step) for e in iter_record(path, read)) == 400 and read.torn
    tl = Timeline.of_files([path])
    assert tl.seek(tl.end).runs[str(path)].last_step == 399
    middle = tl.seek((tl.start + tl.end) / 2)
    assert _state_of(middle) == _state_of(_linear([path], (tl.start + tl.end) / 2))
    assert path.read_bytes().startswith(whole)


def test_a_checkpoint_copy_shares_nothing_the_run_goes_on_changing() -> None:
    run = RunState()
    for event in _events(200, rank=0):
        run.add(event)
    copy = run.without_series()
    for name, value in vars(run).items():
        if isinstance(value, (list, dict, set)) or hasattr(value, "maxlen"):
            assert getattr(copy, name) is not value, name
    assert not copy.steps and not copy.samples and not copy.losses and copy.total_steps == run.total_steps
    before = copy_module.deepcopy(vars(copy))
    for event in _events(300, rank=0)[3:]:
        run.add(event)
    assert vars(copy) == before
