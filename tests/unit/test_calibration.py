"""Tests the pure parts of benchmarks/calibration.py: the gain it reads from a finding, the fix it applies, its verdicts."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibration as cal  # noqa: E402

from pitstop.analysis import Finding  # noqa: E402


def _finding(rule: str, gain: str, fix: str = "", knob: str | None = "num_workers") -> Finding:
    return Finding(rule=rule, title="", severity="medium", gain=gain, fix=fix, knob=knob)


def test_the_gain_read_is_a_prediction_a_range_a_bound_or_a_held_back_count() -> None:
    assert cal.predicted(_finding("data-wait", "~1.80x (27.2 ms to ~15.1 ms) in the mean step with 2 workers")) == (
        1.8, 1.8, False)
    assert cal.predicted(_finding("data-wait", "at most 1.97x (94.4 ms to ~47.8 ms) in the mean step")) == (
        None, 1.97, True)
    held = cal.predicted(_finding("data-wait", "at most 1.41x (318.1 ms to ~226.2 ms) ...; no worker fix: 1 worker "
                                               "would give 1.00x (318.1 ms to ~319.6 ms) by the measurement"))
    assert held == (1.0, 1.0, False)
    rng = cal.predicted(_finding("float64", "float32 arithmetic is typically 1.9-5x faster than float64 on a CPU: "
                                            "1.30x (9.2 ms to ~7.1 ms) to 1.80x (9.2 ms to ~5.1 ms) in the mean step"))
    assert rng == (1.3, 1.8, False)
    # cpu-contended's bound from the share its threads waited for a core
    contended = _finding("cpu-contended", "at most 2.50x (60.0 ms to ~24.0 ms) in the mean step with 1 thread: its "
                                          "threads waited ...; a bound, not a prediction", knob="threads")
    assert cal.predicted(contended) == (None, 2.5, True)
    low, high, _ = cal.predicted(_finding("eval-share", "evaluating half as often gives back ~25% of the training time"))
    assert low == high and abs(low - 4 / 3) < 1e-9  # type: ignore[operator]


def test_the_fix_applied_is_the_one_the_finding_names() -> None:
    s = next(x for x in cal.SCENARIOS if x.name == "frequent-eval")
    fix = "DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True, prefetch_factor=4)"
    assert cal.apply_fix(s, _finding("data-wait", "~1.8x", fix)) == ["--workers", "2", "--persistent",
                                                                       "--prefetch", "4"]
    # No worker count offered: the count it held back is measured, to check the claim.
    held = _finding("data-wait", "at most 1.4x ...; no worker fix: 3 workers would give 1.05x", "# cheaper", None)
    assert cal.apply_fix(s, held) == ["--workers", "3", "--persistent"]
    # A held-back count whose figure assumed fewer threads is measured with them.
    threads = _finding("data-wait", "at most 2.6x ...; no worker fix: 1 worker with torch.set_num_threads(1) would "
                                    "give 0.81x (273.7 ms to ~336.3 ms) by the measurement", "# cheaper", None)
    assert cal.apply_fix(s, threads) == ["--workers", "1", "--persistent", "--threads", "1"]
    assert cal.predicted(threads) == (0.81, 0.81, False)
    # No count at all: its other fix, each sample made once before training, measured against its bound.
    cheaper = _finding("data-wait", "at most 1.36x ...; no worker fix: more than the 0 worker(s) there are would "
                                    "not help", "# make each sample cheaper", None)
    assert cal.apply_fix(s, cheaper) == ["--preload"]
    assert cal.apply_fix(s, _finding("eval-share", "", "", None)) == ["--eval-every", "4"]
    assert cal.apply_fix(s, _finding("cpu-contended", "", "torch.set_num_threads(1)", "threads")) == ["--threads", "1"]


def test_verdicts_hold_each_row_to_its_goal() -> None:
    def row(**kw: object) -> cal.Row:
        r = cal.Row("x", ["data-wait"], ["data-wait"], [], fix="data-wait: --workers 2", spread=0.04)
        for k, v in kw.items():
            setattr(r, k, v)
        return r

    assert cal.judge(row(low=1.8, high=1.8, measured=1.96), healthy=False) == "ok"
    assert cal.judge(row(low=1.12, high=1.12, measured=1.96), healthy=False).startswith("OFF BY")
    assert cal.judge(row(low=1.12, high=1.12, measured=0.9), healthy=False) == "SLOWER"
    assert cal.judge(row(high=1.97, bound=True, measured=1.5), healthy=False).startswith("ok")
    assert cal.judge(row(high=1.2, bound=True, measured=1.6), healthy=False) == "ABOVE THE BOUND"
    assert cal.judge(row(low=1.0, high=1.0, held=True, measured=1.02), healthy=False).startswith("ok")
    assert cal.judge(row(low=1.0, high=1.0, held=True, measured=1.9), healthy=False) == "HELD BACK A GAIN"
    assert cal.judge(cal.Row("h", [], ["cpu-contended"], ["cpu-contended"]), healthy=True).startswith("FINDING")
    assert cal.judge(cal.Row("d", ["straggler"], [], []), healthy=False).startswith("MISSED")
