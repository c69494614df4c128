"""Tests the pure parts of benchmarks/gpu_acceptance.py (issue 15): its table and verdicts, the pytest results it
reads, the alternation of re-measured runs and their ratios, its time budget, the grid, and its answer where
there is no CUDA device."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _gpu_table as table  # noqa: E402
from overhead import ab_figures  # noqa: E402

from pitstop.tuning.results import Candidate, Facts  # noqa: E402
from pitstop.tuning.space import build_space  # noqa: E402


def test_verdicts_hold_each_figure_to_its_target() -> None:
    assert table.judged("agent", "x1.004", 1.004, table.Target("<=", 1.01)).verdict == table.OK
    assert table.judged("agent", "x1.02", 1.02, table.Target("<=", 1.01)).verdict == table.MISS
    assert table.judged("speedup", "x2.4", 2.4, table.Target(">=", 2.5)).verdict == table.MISS
    assert table.judged("speedup", "x3.1", 3.1, table.Target(">=", 2.5)).verdict == table.OK
    assert table.judged("speedup", "none", None, table.Target(">=", 2.5)).verdict == table.FAIL


def test_the_table_is_aligned_says_every_verdict_and_the_exit_code_follows() -> None:
    rows = [table.judged("agent, ~10 ms GPU steps", "x1.0031 (90% x0.998..x1.008)", 1.0031, table.Target("<=", 1.01)),
            table.Row("pitstop tune (every knob)", "workers=16 amp=bf16: x6.20 by its own rounds, confirmed",
                      detail="skipped: none"),
            table.skipped("tuner's pick / grid best", "out of time", ">= 0.95")]
    text = table.format_table(["title line"], rows)
    lines = text.splitlines()
    assert lines[0] == "title line" and lines[2].split() == ["part", "figure", "target", "verdict"]
    body = [line for line in lines if line.startswith(("agent", "pitstop", "tuner"))]
    # Every row's target column starts at the same place.
    assert len({line.index("<= 1.01") for line in body if "<= 1.01" in line} |
               {line.index(">= 0.95") for line in body if ">= 0.95" in line}) == 1
    assert body[0].rstrip().endswith("ok") and body[2].rstrip().endswith("skip")
    assert "    skipped: none" in text and lines[-1] == "1 ok, 0 MISS, 0 FAIL, 1 skip"
    assert table.exit_code(rows) == 1  # a part not measured is not a pass
    assert table.exit_code(rows[:2]) == 0


def test_a_figure_too_long_for_its_column_is_cut_and_given_whole_below() -> None:
    long = "x" * 300
    text = table.format_table(["t"], [table.Row("part", long, "", table.OK)], width=100)
    assert any(line.rstrip().endswith("…  ok") or "…" in line for line in text.splitlines())
    assert any(line.strip() == long for line in text.splitlines())


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="1" tests="3" time="12.3"><testcase classname="tests.gpu.test_demo_cuda" name="test_demo" time="8.25" />
<testcase classname="tests.gpu.test_no_sync" name="test_no_sync" time="3.5"><failure message="AssertionError:
[('loss', 'loss reading off: synchronizing')]">long traceback</failure></testcase>
<testcase classname="tests.gpu.test_doctor_cuda" name="test_doctor" time="0.01"><skipped type="pytest.skip"
message="no CUDA device: torch.cuda.is_available() is False">skip</skipped></testcase></testsuite></testsuites>"""


def test_pytest_results_become_a_summary_and_a_row_per_test() -> None:
    outcomes = table.junit_outcomes(JUNIT)
    assert [(o.name, o.outcome) for o in outcomes] == [
        ("test_demo_cuda::test_demo", "passed"), ("test_no_sync::test_no_sync", "failed"),
        ("test_doctor_cuda::test_doctor", "skipped")]
    rows = table.rows_of_tests(outcomes)
    assert rows[0].part == "tests/gpu (3 tests)" and rows[0].figure == "1 passed, 1 failed, 1 skipped"
    assert rows[0].verdict == table.FAIL
    assert rows[0].detail == "no CUDA device: torch.cuda.is_available() is False"  # the skip reason, once
    assert [r.verdict for r in rows[1:]] == [table.OK, table.FAIL, table.SKIP]
    assert rows[1].part == "  test_demo_cuda" and rows[1].figure == "passed in 8.2 s: test_demo"
    assert rows[2].detail == "AssertionError: [('loss', 'loss reading off: synchronizing')]"
    assert rows[3].detail == ""
    all_passed = table.rows_of_tests([o for o in outcomes if o.outcome == "passed"])
    assert all_passed[0].verdict == table.OK
    assert table.rows_of_tests([])[0].verdict == table.FAIL  # no test ran: not a pass


def test_runs_alternate_abba_and_ratios_pair_each_round() -> None:
    assert table.alternation(3) == [(0, "plain"), (0, "config"), (1, "config"), (1, "plain"),
                                    (2, "plain"), (2, "config")]
    figures = {"plain": [100.0, 110.0, 90.0], "config": [300.0, 330.0, None]}
    seen: list[tuple[int, str]] = []

    def measure(i: int, arm: str) -> float | None:
        seen.append((i, arm))
        return figures[arm][i]

    runs = table.measure_alternating(3, measure)
    assert seen == table.alternation(3)
    assert table.paired_ratios(runs) == [3.0, 3.0]  # round 2's config run failed: that round is left out
    ratio = table.summarize(table.paired_ratios(runs))
    assert ratio is not None and ratio.text() == "x3.00 (2 rounds, x3.00..x3.00)"
    assert table.summarize([]) is None


def test_a_round_starts_only_while_both_its_runs_fit() -> None:
    rounds_allowed = iter([True, True, False])
    runs = table.measure_alternating(5, lambda i, arm: 1.0, lambda: next(rounds_allowed))
    assert sorted(runs) == [(0, "config"), (0, "plain"), (1, "config"), (1, "plain")]


def test_the_deadline_keeps_time_for_the_parts_to_come() -> None:
    now = [0.0]
    deadline = table.Deadline(540.0, clock=lambda: now[0])
    assert deadline.grant(170, reserve=185) == 170
    now[0] = 400.0
    assert deadline.grant(140, reserve=60) == 80  # 140 left, 60 kept for the later parts
    now[0] = 530.0
    assert deadline.grant(55, least=15) == 0.0  # 10 s left: under the least a part needs


def test_the_overhead_figures_of_one_ab_run() -> None:
    """Agent steps 1% slower; each window adds 0.5 s to periods of 500 x 10 ms = 5 s: windows x1.01 x 1.1."""
    blocks = {"plain": [[0.010] * 25 for _ in range(4)], "agent": [[0.0101] * 25 for _ in range(4)]}
    period = [0.010] * 100
    period[0] += 0.5
    data = {"blocks": blocks, "windowed": period * 3, "every": 100, "active": 5, "windows": 3, "skipped": 0,
            "first_step": 0}
    f = ab_figures(data)
    assert f.median_ratio == pytest.approx(1.01) and f.low == pytest.approx(1.01)
    assert f.added_s == pytest.approx([0.5] * 3) and f.period_s == pytest.approx(5.0)
    assert f.windows_ratio == pytest.approx(1.01 * 1.1)
    # 0.1 ms more a step, in microseconds: on the typical step and on the mean
    assert f.median_us == pytest.approx(100.0) and f.added_us == pytest.approx(100.0)


def test_a_preempted_step_moves_the_mean_cost_but_not_the_typical_steps() -> None:
    """The agent adds 8 us a step; one step of the on-blocks was preempted for 5 ms."""
    blocks = {"plain": [[0.001 + i * 1e-6 for i in range(25)] for _ in range(4)],
              "agent": [[0.001008 + i * 1e-6 for i in range(25)] for _ in range(4)]}
    blocks["agent"][2][7] += 0.005
    data = {"blocks": blocks, "windowed": [], "every": 100, "active": 5, "windows": 0, "skipped": 0,
            "first_step": 0}
    f = ab_figures(data)
    assert f.median_us == pytest.approx(8.0)
    assert f.added_us == pytest.approx(8.0 + 5000 / 100)


def test_the_grid_holds_the_pick_against_every_compute_mode_at_its_data_settings() -> None:
    facts = Facts(device_type="cuda", conv2d=20, grad_scaler=True, has_dataloader=True, usable_cpus=16,
                  shm_bytes=64 << 30, loader={"num_workers": 0, "batch_size": 64, "pin_memory": False})
    space = build_space(facts, None, tune_batch=True)
    pick = Candidate.of({"num_workers": 8, "pin_memory": True, "persistent_workers": True, "batch_size": 256,
                         "amp": "bf16", "channels_last": True})
    grid = table.grid_candidates(space, pick, quick=False)
    assert len(grid) == 3 * 3 * 2 * 2 and len(set(grid)) == len(grid)
    assert {c.get("num_workers") for c in grid} == {None, 8, 16}  # own (0), half the most, the most
    assert {c.get("amp") for c in grid} == {None, "bf16", "fp16"}
    assert all(c.get("batch_size") == 256 and c.get("pin_memory") is True for c in grid)
    # persistent_workers needs workers: left out where a configuration has none.
    assert all(c.get("persistent_workers") == (True if c.get("num_workers") else None) for c in grid)
    assert grid == table.grid_candidates(space, pick, quick=False)  # the same order every time
    assert len(table.grid_candidates(space, pick, quick=True)) == 2 * 2 * 2 * 2


def test_without_cuda_it_says_there_is_nothing_to_measure(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the acceptance would measure")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.startswith("no CUDA device: nothing to measure") and len(proc.stdout.splitlines()) == 1
    assert not (tmp_path / "out").exists()
