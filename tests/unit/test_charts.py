"""Text charts (plotext) of a recorded run: the same picture at 80 columns, plain ASCII without colour."""

from __future__ import annotations

import time
from pathlib import Path

from pitstop.analysis import RunState
from pitstop.charts import MAX_POINTS, job_plot, run_charts
from tests.unit.test_replay import _events

GOLDEN = Path(__file__).parent / "golden" / "plot_80.txt"


def _run(n_steps: int, rank: int = 0, wall: float = 0.01) -> RunState:
    run = RunState()
    for event in _events(n_steps, rank=rank, wall=wall):
        run.add(event)
    return run


def test_the_plot_of_a_run_at_80_columns_is_the_golden_one() -> None:
    text = job_plot([_run(900)], width=80, color=False)
    assert text + "\n" == GOLDEN.read_text()
    assert all(len(row) <= 80 and row.isascii() for row in text.splitlines())
    assert "step time (ms)" in text and "data wait ms" in text and "samples/s" in text and "allocated GiB" in text


def test_a_job_plot_draws_the_slowest_rank_beside_the_median() -> None:
    runs = [_run(300, rank=r, wall=0.01) for r in range(3)] + [_run(300, rank=3, wall=0.03)]
    text = job_plot(runs, width=80, color=False)
    assert "rank 3 step ms" in text  # the straggler
    assert sum(f"rank {r} step ms" in text for r in range(3)) == 1  # and one median rank, not all four


def test_a_full_window_is_cut_to_buckets_before_drawing() -> None:
    run = _run(20_000)
    charts = run_charts([("rank 0", run)])
    assert all(len(line.xs) <= MAX_POINTS for chart in charts for line in chart.lines)
    began = time.process_time()
    job_plot([run], width=120, color=False)
    assert time.process_time() - began < 2.0  # ~0.1 s; 20,000 points drawn as they are took ~1 s
