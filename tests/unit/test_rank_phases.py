"""Tests which rank phase differences name a straggler: data wait needs a share of the step and a timeslice."""

from __future__ import annotations

from pitstop.analysis._rankphases import PhaseExcess, lagging_phases


def _named(mine_s: float, other_s: float, step_s: float) -> bool:
    excesses = [[PhaseExcess("data wait", mine_s, other_s)], [PhaseExcess("data wait", other_s, mine_s)]]
    return bool(lagging_phases(excesses, step_s, 0.0))


def test_a_data_wait_excess_under_a_scheduler_timeslice_names_no_straggler() -> None:
    # The balanced ddp_gloo job in a loaded suite: rank 0 2.5 ms against 1.3 ms of a 5.9 ms step (21%).
    assert not _named(0.0025, 0.0013, 0.0059)


def test_a_data_wait_excess_past_a_timeslice_and_a_fifth_of_the_step_names_the_rank() -> None:
    assert _named(0.0311, 0.0019, 0.0348)  # the SLOW_DATA_RANK job: 31.1 ms against 1.9 ms
    assert _named(0.0060, 0.0013, 0.0120)  # 4.7 ms of a 12 ms step
