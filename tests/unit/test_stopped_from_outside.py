"""A job its owner (or a scheduler) stops through pitstop reads as stopped, not as ranks that failed.

Ctrl-C to `pitstop run -- torchrun ...`: torchrun ends its ranks with SIGINT or SIGTERM, and each
rank read "[high] rank N is gone ... find the first rank that failed", where none had. The front
knows the stop came to it: it notes so in each record, and the job block says it.
"""

from __future__ import annotations

from pathlib import Path

from pitstop.analysis import job_findings, job_summary
from pitstop.analysis._ended import STOPPED_FROM_OUTSIDE
from pitstop.events import Note, Sample
from pitstop.headless import load_runs, summary_text
from pitstop.profiling.record import RecordWriter
from pitstop.runflow import record_outside_stop

from .test_job import end, hello, job_of, steps

STOP = Note(t=1500.0, level="info", source="front",
            message=f"{STOPPED_FROM_OUTSIDE}: SIGINT came to pitstop and reached the training")


def test_ranks_a_launcher_ended_after_the_stop_are_stopped_and_no_finding() -> None:
    interrupted = end(130, "interrupted")
    job = job_of({0: [*steps(30, 0.05), STOP, interrupted], 1: [*steps(30, 0.05), interrupted]})
    summary = job_summary(job)
    assert [r.status for r in summary.rows] == ["stopped", "stopped"]
    assert summary.gone == () and len(summary.stopped_ranks) == 2
    assert [f.rule for f in job_findings(job)] == []
    text = summary_text(list(job.runs.values()))
    assert "  stopped     from outside: SIGINT came to pitstop and reached the training" in text
    assert "(2 stopped)" in text and "rank 1 (pid 101): interrupted by SIGINT" in text
    assert "rank-gone" not in text and "find the first rank that failed" not in text
    # Without the front's note (a SIGTERM torchrun sent once a rank failed): gone, and a finding each.
    job = job_of({0: [*steps(30, 0.05), end(143, "terminated")], 1: [*steps(30, 0.05), end(1, "exit")]})
    assert [r.status for r in job_summary(job).rows] == ["gone", "gone"]
    assert [f.rule for f in job_findings(job)] == ["rank-gone", "rank-gone"]


def test_a_rank_that_exited_with_an_error_before_the_stop_is_still_gone() -> None:
    job = job_of({0: [*steps(30, 0.05), STOP, end(130, "interrupted")], 1: [*steps(10, 0.05), end(1, "exit")]})
    summary = job_summary(job)
    assert [r.status for r in summary.rows] == ["stopped", "gone"]
    assert [(f.rule, f.title) for f in job_findings(job)] == [("rank-gone", "rank 1 is gone")]


def test_a_rank_that_died_before_the_stop_is_still_gone() -> None:
    # An OOM kill (no End) at ~1001.5 left the job hanging; its owner stopped it at 1500: rank 1 is the
    # one to look at, not a rank stopped with the job.
    job = job_of({0: [*steps(30, 0.05), STOP, end(130, "interrupted")], 1: steps(10, 0.05)})
    summary = job_summary(job)
    assert [r.status for r in summary.rows] == ["stopped", "gone"]
    assert [(f.rule, f.title) for f in job_findings(job)] == [("rank-gone", "rank 1 is gone")]
    # The same rank read until the stop (its sampler's last reading 1 s before it) went with the job.
    job = job_of({0: [*steps(30, 0.05), STOP, end(130, "interrupted")], 1: [*steps(10, 0.05), Sample(t=1499.0)]})
    assert [r.status for r in job_summary(job).rows] == ["stopped", "stopped"]


def test_the_front_notes_the_stop_in_each_record_and_a_later_view_reads_it(tmp_path: Path) -> None:
    records = tmp_path / "job"
    records.mkdir()
    for rank in (0, 1):
        path = records / f"rank{rank}.jsonl"
        writer = RecordWriter(path)
        for event in [hello(rank), *steps(30, 0.05), end(143, "terminated")]:
            writer.write(event)
        writer.close()
    runs, _ = load_runs(records)
    for run in runs:  # (the hello of the test's job names no record: the front finds it from the hello)
        run.hello = type(run.hello)(**{**run.hello.__dict__, "record": str(records / f"rank{run.rank}.jsonl")})
    record_outside_stop(runs, [], [])  # no signal came: nothing written
    assert "front" not in (records / "rank0.jsonl").read_text()
    record_outside_stop(runs, [15], [1500.0])
    again, _ = load_runs(records)
    text = summary_text(again)
    assert "  stopped     from outside: SIGTERM came to pitstop and reached the training" in text
    assert "rank-gone" not in text
