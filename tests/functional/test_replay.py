"""Pilot tests: `pitstop view RECORD` on a long record holds a bounded number of events."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from conftest import FIXED, hello, run, runtime, sample, steps, wait_for

from pitstop.analysis import _state
from pitstop.events import Event, Sample, Step, encode
from pitstop.profiling.record import RecordWriter
from pitstop.profiling.sources import RecordSource
from pitstop.tui.app import PitstopApp

WINDOW, SAMPLES = 500, 25  # the analysis windows, shrunk
# 15 times the window: the old viewer held every one of them (at 30,000 steps and a window of 2,000 the
# test took 5.5 s of CPU)
N_STEPS = 15 * WINDOW


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def last_step(app: PitstopApp) -> int | None:
    shown = app.current_run()[1]
    return shown.last_step if shown is not None else None


def _write_long_record(path: Path) -> None:
    writer = RecordWriter(path)
    events: list[Event] = [hello(), runtime()]
    for i, s in enumerate(steps(N_STEPS, wall=0.01)):
        events.append(s)
        if i % 20 == 19:
            events.append(sample(s.t + 0.001))
    writer.write_lines([encode(e) for e in events])
    writer.close()


def test_a_long_record_is_replayed_holding_only_the_analysis_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "MAX_STEPS", WINDOW)
    monkeypatch.setattr(_state, "MAX_SAMPLES", SAMPLES)
    path = tmp_path / "rank0.jsonl"
    _write_long_record(path)
    held: dict[str, int] = {}
    before = {Step: _live(Step), Sample: _live(Sample)}  # what other tests left in this process

    async def scenario() -> None:
        app = PitstopApp(RecordSource(path), clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None, timeout=60)
            end = app.current_run()[1]
            assert end is not None and end.last_step == N_STEPS - 1
            assert end.total_steps == N_STEPS  # the totals still cover the whole record
            del end  # the test must not keep the state the viewer left
            held["end"] = _live(Step) - before[Step]
            await pilot.press("left", "left", "left")  # back 30%: restored from a checkpoint
            await wait_for(pilot, lambda: last_step(app) != N_STEPS - 1)
            back = app.current_run()[1]
            assert back is not None and back.last_step is not None and len(back.steps) == WINDOW
            held["back"] = _live(Step) - before[Step]
            held["samples"] = _live(Sample) - before[Sample]

    run(scenario())
    # The shown window and the first steps kept for warm-up accounting, never the record's 15 windows.
    assert held["end"] <= WINDOW + _state.HEAD_STEPS, held
    assert held["back"] <= WINDOW + _state.HEAD_STEPS, held
    assert held["samples"] <= SAMPLES, held


def test_a_record_gone_while_viewed_makes_a_seek_say_so_and_the_viewer_stays(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    writer = RecordWriter(path)
    writer.write_lines([encode(e) for e in [hello(), runtime(), *steps(300, wall=0.01)]])
    writer.close()

    async def scenario() -> None:
        app = PitstopApp(RecordSource(path), clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None)
            path.rename(tmp_path / "moved.jsonl")  # a seek reads the file again
            await pilot.press("home")
            await wait_for(pilot, lambda: any("replay: cannot read record" in n.message
                                              for n in app._notifications))
            assert last_step(app) == 299  # the figures shown stay those of the last seek
            (tmp_path / "moved.jsonl").rename(path)
            await pilot.press("home")
            await wait_for(pilot, lambda: last_step(app) is None)
            await pilot.press("end")
            await wait_for(pilot, lambda: last_step(app) == 299)

    run(scenario())


def test_r_in_a_large_jobs_replay_shows_the_next_rank_with_its_own_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_job_windows import RANKS, STEPS, _job, use_shares

    limits = use_shares(monkeypatch)
    directory = tmp_path / "job"
    _job(directory)

    async def scenario() -> None:
        app = PitstopApp(RecordSource(directory), clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None, timeout=60)
            held = {run.rank: len(run.steps) for run in app.job.runs.values()}
            assert app.current_run()[0] == "rank 0" and held[0] == STEPS  # the rank shown: its own windows
            assert all(held[r] == limits["step"] for r in range(1, RANKS))  # the others: their share
            await pilot.press("r")
            label, shown = app.current_run()
            assert label == "rank 1" and shown is not None and len(shown.steps) == STEPS
            held = {run.rank: len(run.steps) for run in app.job.runs.values()}
            assert held[0] == limits["step"] and held[1] == STEPS

    run(scenario())
