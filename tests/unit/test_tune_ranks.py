"""A launcher trial is one job: its ranks' measurements combine into the job's."""

from __future__ import annotations

from pitstop.tuning.measure import Measurement
from pitstop.tuning.runner import combine_ranks


def _rank(throughput: float | None, spread: float, nonfinite: list[int] | None = None,
          complete: bool = True) -> Measurement:
    return Measurement(steps_seen=30, measured_steps=25, throughput=throughput, spread=spread,
                       compute_throughput=throughput, step_time=0.01, nonfinite=nonfinite or [],
                       trial_complete=complete, agent_started=True)


def test_job_throughput_is_the_sum_and_spread_the_worst() -> None:
    job = combine_ranks([_rank(100.0, 0.02), _rank(90.0, 0.08)])
    assert job.throughput == 190.0
    assert job.spread == 0.08
    assert job.facts.local_ranks == 2


def test_a_nan_or_an_unfinished_rank_fails_the_job() -> None:
    assert combine_ranks([_rank(100.0, 0.0), _rank(100.0, 0.0, nonfinite=[7])]).nonfinite == [7]
    assert not combine_ranks([_rank(100.0, 0.0), _rank(100.0, 0.0, complete=False)]).trial_complete


def test_a_rank_without_a_measurement_leaves_the_job_unmeasured() -> None:
    assert combine_ranks([_rank(100.0, 0.0), _rank(None, 0.0)]).throughput is None
