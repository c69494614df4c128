"""A job of many ranks reads as one: each rank holds a share of the windows, the rank on screen its own."""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import pytest

from pitstop.analysis import JobState, RunState
from pitstop.events import Event, Step
from pitstop.headless import summary_text
from pitstop.recorded import _index, _windows, job_limits, load_runs
from pitstop.tui.replay import Timeline
from tests.unit.test_record_index import _decoded_lines
from tests.unit.test_replay import _events, _linear, _write

RANKS = 12  # past JOB_FULL_RANKS (8): a job whose ranks share the windows
STEPS = 200  # 6 times a rank's share of steps (30): 400 took twice the CPU (7.9 s against 4.1 s)
SLOW = 5  # the rank that waits for its data


@pytest.fixture
def shares(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    return use_shares(monkeypatch)


def use_shares(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Budgets a test-sized job divides: 30 steps, 5 samples, 8 loss steps and 2 profiler windows a rank."""
    monkeypatch.setattr(_index, "CHECKPOINT_EVENTS", 97)
    monkeypatch.setattr(_index, "STEP_STRIDE", 8)
    monkeypatch.setattr(_windows, "JOB_BUDGET", {"step": 30 * RANKS, "sample": 5 * RANKS, "loss": 8 * RANKS,
                                                 "profile": 2 * RANKS})
    monkeypatch.setattr(_windows, "RANK_FLOOR", {"step": 20, "sample": 2, "loss": 4, "profile": 1})
    limits = job_limits(RANKS)
    assert limits == {"step": 30, "sample": 5, "loss": 8, "profile": 2}
    return limits


def _rank(rank: int, path: Path) -> list[Event]:
    events = _events(STEPS, rank=rank)
    if rank == SLOW:  # 60% of its step waiting for data, where the others wait 10-20%
        events = [dataclasses.replace(e, data_wait=e.wall * 0.6) if isinstance(e, Step) else e for e in events]
    return [dataclasses.replace(e, world_size=RANKS, record=str(path)) if e.kind == "hello" else e for e in events]


def _job(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = [directory / f"rank{r}.jsonl" for r in range(RANKS)]
    for r, path in enumerate(files):
        _write(path, _rank(r, path))
    return files


def _held(run: RunState) -> dict[str, int]:
    return {"step": len(run.steps), "sample": len(run.samples), "loss": len(run.losses), "profile": len(run.profiles)}


def test_a_large_job_read_from_its_indexes_reads_each_rank_only_up_to_its_share(
        tmp_path: Path, shares: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    files = _job(tmp_path / "job")
    load_runs(tmp_path / "job")  # indexes every rank and saves its index, as the keeper would
    count = _decoded_lines(monkeypatch)
    load_runs(files[0])  # one rank alone: read back with its full windows
    one_rank = count[0]
    count[0] = 0
    runs, _ = load_runs(tmp_path / "job")
    by_rank = {run.rank: run for run in runs}
    assert _held(by_rank[0]) == _held(load_runs(files[0])[0][0])  # the rank a job is shown by: its own windows
    assert by_rank[0].total_steps == STEPS
    for rank in range(1, RANKS):
        held = _held(by_rank[rank])
        assert all(held[kind] <= shares[kind] for kind in held), (rank, held)
        assert held["step"] == shares["step"] and by_rank[rank].total_steps == STEPS  # the totals cover the run
    # What was decoded: rank 0 read twice (its share, then its own windows), the others their share
    # (steps from the stride before the window, the loss lines covering its steps, a note each).
    per_rank = sum(shares.values()) + _index.STEP_STRIDE + 4
    assert count[0] <= 2 * one_rank + (RANKS - 1) * per_rank, count[0]


def test_a_large_jobs_summary_reads_as_one_job_and_equals_a_pass_over_every_line(
        tmp_path: Path, shares: dict[str, int]) -> None:
    _job(tmp_path / "job")
    fresh = summary_text(*load_runs(tmp_path / "job"))  # no index yet: every line read
    again = summary_text(*load_runs(tmp_path / "job"))  # from the indexes the first pass saved
    assert again == fresh
    assert sorted(p.name for p in (tmp_path / "job").glob("*.index")) == sorted(
        f"rank{r}.jsonl.index" for r in range(RANKS))
    job_block, _, own = fresh.partition("pitstop summary:")
    assert f"ranks       {RANKS} seen of world size {RANKS}" in job_block
    assert f"straggler   rank {SLOW}: " in job_block and "data wait" in job_block
    assert all(f"\n  rank {r} " in job_block for r in range(RANKS))  # a row for every rank
    # One rank's own summary, not twelve; the way to another's is named.
    assert fresh.count("pitstop summary:") == 1 and own.startswith(" train.py rank 0 ")
    assert f"pitstop: {RANKS} ranks: the summary of train.py rank 0 (pid 100) follows" in fresh
    assert f"pitstop view {tmp_path / 'job' / 'rank1.jsonl'} --summary" in fresh


def test_a_small_job_keeps_every_ranks_own_windows_and_summary(tmp_path: Path, shares: dict[str, int]) -> None:
    directory = tmp_path / "job"
    directory.mkdir()
    for r in range(2):
        _write(directory / f"rank{r}.jsonl", _rank(r, directory / f"rank{r}.jsonl"))
    runs, notes = load_runs(directory)
    assert [len(run.steps) for run in runs] == [STEPS, STEPS]
    assert summary_text(runs, notes).count("pitstop summary:") == 2


def _cut(run: RunState, limits: dict[str, int] | None) -> dict[str, object]:
    """What a run holds (its `version` counts adds, not content), its series cut to `limits`."""
    copy = RunState.__new__(RunState)
    copy.__dict__.update({k: (type(v)(v) if k in ("steps", "samples", "profiles", "notes", "losses") else v)
                          for k, v in vars(run).items()})
    copy.steps, copy.samples = type(run.steps)(run.steps, run.steps.maxlen), type(run.samples)(run.samples,
                                                                                                 run.samples.maxlen)
    copy.profiles, copy.notes = type(run.profiles)(run.profiles, run.profiles.maxlen), type(run.notes)(
        run.notes, run.notes.maxlen)
    if limits is not None:
        copy.keep_last(limits)
    return {k: v for k, v in vars(copy).items() if k != "version"}


def test_the_viewer_of_a_large_job_seeks_each_rank_with_its_share_and_the_focused_one_whole(
        tmp_path: Path, shares: dict[str, int]) -> None:
    files = _job(tmp_path / "job")
    tl = Timeline.of_files(files)
    streams = {run.rank: name for name, run in tl.job.runs.items()}
    rng = random.Random(3)
    focus = [0, 0, 3, 3, 7, 0]
    cursors = [tl.end, (tl.start + tl.end) / 2, tl.start, rng.uniform(tl.start, tl.end), tl.end,
               rng.uniform(tl.start, tl.end)]
    for rank, cursor in zip(focus, cursors):
        job = tl.focus(streams[rank])
        job = tl.seek(cursor)
        linear = _linear(files, cursor)
        assert set(job.runs) == set(linear.runs)
        for name, run in job.runs.items():
            whole = name == streams[rank]
            # The focused rank as a replay from the start leaves it; every other with its windows cut.
            assert _cut(run, None) == _cut(linear.runs[name], None if whole else shares), (rank, cursor, name)
    assert isinstance(tl.job, JobState) and len(tl.job.runs) == RANKS


def test_a_job_record_copied_without_its_indexes_is_indexed_again(tmp_path: Path, shares: dict[str, int]) -> None:
    _job(tmp_path / "job")
    load_runs(tmp_path / "job")
    shutil.copytree(tmp_path / "job", tmp_path / "copy", ignore=shutil.ignore_patterns("*.index"))
    runs, _ = load_runs(tmp_path / "copy")
    assert sorted(len(run.steps) for run in runs) == [shares["step"]] * (RANKS - 1) + [STEPS]
