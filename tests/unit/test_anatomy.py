"""The step anatomy figure (`analysis.phase_split`) and where it shows: headless summary, compare."""

from __future__ import annotations

import pytest

from pitstop.analysis import PhaseSplit, RunState, format_summary, phase_split, summarize
from pitstop.analysis._anatomy import phase_split_of, shares_text
from pitstop.compare._model import build
from pitstop.compare._text import comparison_text
from pitstop.events import Hello, Step

T0 = 1_700_000_000.0


def hello(session: str = "s") -> Hello:
    return Hello(schema=1, pitstop_version="0", session=session, pid=1, ppid=0, host="h", argv=["python", "t.py"],
                 cwd="/", started=T0, python="3.11", script="t.py")


def step(i: int, forward: float | None, backward: float = 0.020, optimizer: float = 0.002, wait: float = 0.010,
         other: float = 0.008, mark: str | None = None, clock: str = "host") -> Step:
    wall = wait + (forward or 0.0) + backward + optimizer + other
    if forward is None:
        return Step(t=T0 + i, step=i, wall=wall, data_wait=wait, mark=mark)
    return Step(t=T0 + i, step=i, wall=wall, data_wait=wait, mark=mark, forward_s=forward, backward_s=backward,
                optimizer_s=optimizer, other_s=other, phase_clock=clock)


def run_of(steps: list[Step], session: str = "s") -> RunState:
    run = RunState()
    run.add(hello(session))
    run.add_all(steps)  # type: ignore[arg-type]
    return run


def test_the_split_is_the_median_of_each_phase_over_measured_training_steps() -> None:
    steps = [step(i, forward=0.500) for i in range(3)]  # warm-up: left out
    steps += [step(i, forward=0.030 + 0.001 * (i % 5)) for i in range(3, 40)]
    steps += [step(40, forward=2.0, mark="eval"), step(41, forward=2.0, mark="profiled")]  # marked: left out
    steps += [step(42, forward=None)]  # a step without phases (no backward in it): left out
    split = phase_split(run_of(steps))
    assert split is not None
    assert split.steps == 37
    assert split.forward == pytest.approx(0.032)
    assert (split.backward, split.optimizer, split.other) == pytest.approx((0.020, 0.002, 0.008))
    assert split.clock == "host"
    shares = dict(split.shares())
    assert shares["forward"] == pytest.approx(0.032 / 0.062)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_no_step_with_phases_is_no_figure_and_mixed_clocks_say_so() -> None:
    assert phase_split(run_of([step(i, forward=None) for i in range(10)])) is None
    assert phase_split(RunState()) is None
    mixed = [step(i, forward=0.03, clock="cuda" if i > 5 else "host") for i in range(10)]
    split = phase_split(run_of(mixed))
    assert split is not None and split.clock == "host+cuda"


def test_shares_text_fits_the_overview_in_two_widths() -> None:
    split = PhaseSplit(steps=10, forward=0.040, backward=0.045, optimizer=0.005, other=0.010, clock="host")
    assert shares_text(split) == "fwd 40% · bwd 45% · opt 5%"
    assert shares_text(split, compact=True) == "fwd 40 bwd 45 opt 5%"
    assert shares_text(split, other=True).endswith("· other 10%")
    assert shares_text(PhaseSplit(1, 0.0, 0.0, 0.0, 0.0, "host")) == ""


def test_the_headless_summary_has_a_compute_line_only_with_phases() -> None:
    text = format_summary(summarize(run_of([step(i, forward=0.030) for i in range(20)])), [])
    line = next(x for x in text.splitlines() if x.strip().startswith("compute"))
    assert "forward 30.0 ms (50%)" in line and "backward 20.0 ms (33%)" in line and "host clock" in line
    bare = format_summary(summarize(run_of([step(i, forward=None) for i in range(20)])), [])
    assert not any(x.strip().startswith("compute") for x in bare.splitlines())


def test_compare_has_a_row_per_phase_when_both_runs_have_them() -> None:
    a = run_of([step(i, forward=0.060) for i in range(40)], session="a")
    b = run_of([step(i, forward=0.030, clock="cuda") for i in range(40)], session="b")
    c = build("a.jsonl", [a], "b.jsonl", [b])
    rows = {m.name: m for m in c.metrics}
    assert rows["forward p50"].a == pytest.approx(0.060) and rows["forward p50"].b == pytest.approx(0.030)
    assert rows["forward p50"].change == pytest.approx(-0.5)
    assert {"backward p50", "optimizer p50", "other p50"} <= set(rows)
    assert any("different clocks (A host, B cuda)" in n for n in c.notes)
    text = comparison_text(c)
    assert any(line.split()[:3] == ["forward", "p50", "60.0"] and "-50%" in line for line in text.splitlines())
    without = build("a.jsonl", [a], "c.jsonl", [run_of([step(i, forward=None) for i in range(40)], session="c")])
    assert not any(m.name.endswith(" p50") and m.name.split()[0] in ("forward", "backward") for m in without.metrics)


def test_a_loop_without_a_torch_optimizer_has_no_optimizer_phase() -> None:
    def step(i: int, source: str) -> Step:
        return Step(t=float(i), step=i, wall=0.1, data_wait=0.0, samples=8, source=source, forward_s=0.04,
                    backward_s=0.05, optimizer_s=0.0, other_s=0.01, phase_clock="host")

    manual = phase_split_of([step(i, "backward") for i in range(20)])
    assert manual is not None and [name for name, _ in manual.seconds()] == ["forward", "backward", "other"]
    assert abs(sum(f for _, f in manual.shares()) - 1.0) < 1e-9
    stepped = phase_split_of([step(i, "optimizer") for i in range(20)])
    assert stepped is not None and "optimizer" in dict(stepped.seconds())
