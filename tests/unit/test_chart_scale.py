"""Charts of a run are drawn to its measured steps: a warm-up step never flattens the rest, zeros say so, ticks never repeat.

A 904 ms first step over 15 ms steps set the scale of `--plot`'s step-time
chart, the report's sparklines (`█▁▁▁…  max 1.08 s` for 20 ms steps) and its
HTML chart (an axis to 1,250 ms); a series of zeros drew an axis from -1 to 1
(plotext) or to 1,000 ms (HTML), and a 2.5 s CPU chart's time axis read
"0 s, 1 s, 2 s, 2 s, 2 s".
"""

from __future__ import annotations

import re
from pathlib import Path

from pitstop.analysis import RunState
from pitstop.analysis import format as fmt
from pitstop.charts import render, run_charts
from pitstop.events import Step
from pitstop.report._markdown import time_spark
from pitstop.report._svg import Line, chart

WARM, STEP = 0.904, 0.015


def warm_run(n: int = 120) -> RunState:
    run = RunState()
    t = 1.0
    for i in range(n):
        wall = WARM if i == 0 else STEP + 0.002 * (i % 3)
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=32))
    return run


def test_the_plot_scales_to_the_measured_steps_and_says_what_it_cuts_and_what_is_zero() -> None:
    charts = run_charts([("r", warm_run())])
    steps = charts[0]
    assert steps.top is not None and steps.top < 30  # ms: the 15-19 ms steps fill the chart, not 904 ms
    assert max(y for line in steps.lines for y in line.ys) == steps.top  # the warm-up step drawn at the top
    assert steps.notes[0] == "▲ 1 above the p95 scale, drawn at its top (max 904 ms)"
    assert "data wait 0 ms at every step" in steps.notes
    assert [line.label for line in steps.lines] == ["step ms"]  # no line of zeros drawn
    text = render(charts, 80, color=False)
    said = " ".join(text.split())
    assert "^ 1 above the p95 scale, drawn at its top (max 904 ms); data wait 0 ms at every step" in said
    assert all(len(row) <= 80 and row.isascii() for row in text.splitlines())
    assert not re.search(r"^\s*-1\.0", text, re.M)  # no axis of nothing


def test_a_chart_of_zeros_is_one_line() -> None:
    runs = [(f"rank {r}", warm_run()) for r in range(2)]  # several runs: data wait gets a chart of its own
    text = render(run_charts(runs), 80, color=False)
    assert "data wait (ms) by step: rank 0 data wait 0 ms at every step; rank 1 data wait 0 ms at every step" in (
        " ".join(text.split()))


def test_the_sparkline_of_step_times_is_drawn_to_the_measured_scale() -> None:
    walls = [1.08] + [0.02] * 99
    line = time_spark("step time  ", walls)
    spark = line.split()[2]
    assert spark[0] == "▲" and set(spark[1:]) == {"▇"}, line  # was █▁▁▁...: every 20 ms step at the floor
    assert line.endswith(f"scale {fmt.duration(0.024)} (p95; ▲ above it, max {fmt.duration(1.08)})")
    assert time_spark("data wait  ", [0.0] * 50) == "data wait  0 at every step"
    assert time_spark("step time  ", [0.02, 0.021, 0.019]).endswith("max 21.0 ms")  # nothing cut: the max


def _ms(v: float) -> str:
    return f"{v * 1e3:.0f} ms"


def _labels(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_the_html_step_chart_runs_to_the_measured_scale_and_marks_the_cut() -> None:
    points = [(0.0, 1.08)] + [(float(i), 0.02) for i in range(1, 100)]
    svg = chart("Step time", [Line("step time", points, area=True)], "step", _ms, robust=True)
    y_ticks = [label for label in _labels(svg) if label.endswith(" ms")]
    assert 20 < int(y_ticks[-1].split()[0]) <= 30, y_ticks  # was 1250 ms
    assert "▲ 1 above the p95 scale, drawn at its top (max 1080 ms)" in _labels(svg)


def test_an_html_chart_of_zeros_says_so_and_draws_no_axis() -> None:
    svg = chart("Data wait", [Line("data wait", [(float(i), 0.0) for i in range(50)])], "step", _ms, robust=True)
    assert _labels(svg)[-1] == "0 ms throughout" and "1000 ms" not in svg and "<polyline" not in svg


def test_time_ticks_never_repeat() -> None:
    points = [(t / 10, 1.0) for t in range(26)]  # 0 to 2.5 s: ticks 0.5 s apart all read as whole seconds
    svg = chart("CPU", [Line("main", points)], "time since start", lambda v: f"{v:.1f}", x_format=fmt.span)
    x_ticks = [label for label in _labels(svg) if label.endswith(" s")]
    assert len(x_ticks) >= 2 and len(set(x_ticks)) == len(x_ticks), x_ticks
    y_ticks = [float(label) for label in _labels(svg) if re.fullmatch(r"\d\.\d", label)]
    gaps = {round(b - a, 6) for a, b in zip(y_ticks, y_ticks[1:])}
    assert len(gaps) == 1, y_ticks  # ticks 0.25 apart read "0.0, 0.2, 0.5, 0.8": labels as far apart as they are


def test_a_reports_step_time_row_and_chart_show_the_steps_after_a_slow_first_one(tmp_path: Path) -> None:
    from pitstop.events import End, Hello, encode
    from pitstop.report import write_report

    events: list[object] = [Hello(schema=1, pitstop_version="0", session="s", pid=7, ppid=1, host="h",
                                  argv=["python", "train.py"], cwd="/", started=1000.0, python="3.11",
                                  script="train.py")]
    t = 1000.0
    for i in range(100):
        wall = 1.08 if i == 0 else 0.02
        t += wall
        events.append(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=32))
    events.append(End(t=t, steps=100, dropped=0, reason="exit", exit_code=0))
    record = tmp_path / "r.jsonl"
    record.write_text("".join(encode(e) + "\n" for e in events))  # type: ignore[arg-type]
    md = write_report(record, tmp_path / "r.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("step time "))
    assert "▁▁▁▁▁" not in row and "scale 24.0 ms" in row, row  # was `█▁▁▁…  max 1.08 s`
    assert "data wait  0 at every step" in md
    html = write_report(record, tmp_path / "r.html").read_text()
    step_chart = html[html.index("<svg"):html.index("</svg>")]
    assert "1250 ms" not in step_chart and "▲ 1 above the p95 scale" in step_chart
