"""Tests that a figure shown is the figure used: unstable trials' values, the machine's load, compare's changes."""

from __future__ import annotations

from pitstop.compare._model import Metric
from pitstop.compare._text import metric_table
from pitstop.tui.trialdata import TrialRow, ratio
from pitstop.tuning.report import format_report
from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.verdict import Contest, Outcome


def _outcome() -> Outcome:
    base = TrialResult(Candidate(), 30, "baseline", "ok", throughput=1038.0, spread=0.02, other_cpu=0.1)
    shaky = TrialResult(Candidate.of({"num_workers": 2}), 30, "workers", "unstable", throughput=1372.0,
                        reason="window throughputs spread ±31% (limit 25%)", other_cpu=1.9)
    contests = [Contest(Candidate.of({"num_workers": 2}), [shaky]), Contest(Candidate(), [base])]
    return Outcome(baseline=base, results=[base, shaky], winner=Candidate(), confirmed=True, rounds=1,
                   contests=contests, load=(0.1, 1.9), cpus=2, discarded=1,
                   message="nothing beat the script's own settings by more than the noise")


def test_an_unstable_trial_shows_the_figure_the_verdict_quotes() -> None:
    text = format_report(_outcome())
    row = next(line for line in text.splitlines() if line.startswith("2 "))
    assert "1,372 samples/s" in row and "x1.32" in row and "unstable" in row
    assert "workers=2 1,372" in text  # the verdict's contest line quotes the same figure


def test_the_verdict_says_how_busy_the_machine_was() -> None:
    text = format_report(_outcome())
    assert ("  machine: other processes kept 0.1-1.9 of 2 cores busy during the confirmation; 1 round(s) "
            "discarded and run again as that load moved within them") in text.splitlines()


def test_the_trials_table_ratio_covers_an_unstable_row_with_a_figure() -> None:
    base = TrialRow(1, "baseline", "baseline", 30, "ok", "", 1038.0, 0.02, "samples/s", None, "host")
    shaky = TrialRow(2, "workers=2", "workers", 30, "unstable", "spread", 1372.0, 0.31, "samples/s", None, "host")
    x = ratio(shaky, base)
    assert x is not None and round(x, 2) == 1.32


def test_compare_shows_no_change_between_figures_shown_alike() -> None:
    rows = metric_table([Metric("cpu of other processes", 0.0081, 0.0141, "cores", "lower"),
                         Metric("cpu of other processes", 0.10, 0.50, "cores", "lower")])
    assert rows[1].split()[-2:] == ["0.01", "cores"]  # no "+74%" after "0.01 cores 0.01 cores"
    assert rows[2].endswith("+400%")
