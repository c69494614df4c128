"""Tests of the viewer's pure pieces: replay timeline, inbox, log buffer and tail, formats, charts."""

from __future__ import annotations

import threading
from pathlib import Path

from conftest import FIXED, run_events

from pitstop.analysis import StreamBatch
from pitstop.analysis import format as fmt
from pitstop.tui.inbox import Inbox
from pitstop.tui.logtail import LogBuffer, clean, session_log, tail
from pitstop.tui.replay import Timeline
from pitstop.tui.screens.log import wrap
from pitstop.tui.widgets import BarSeries, Layer
from pitstop.tui.widgets._bars import bin_steps, nice_step, render_lines, scale_top, unit_of
from pitstop.tui.widgets._gauges import sparkline


def test_timeline_seeks_forward_incrementally_and_back_by_rebuilding() -> None:
    events = run_events(n_steps=50, profiles=1)
    tl = Timeline([StreamBatch("a", events), StreamBatch("b", run_events(n_steps=10, pid=7, rank=1))])
    job = tl.seek(tl.end)
    assert len(job.runs) == 2 and job.runs["a"].last_step == 49
    middle = tl.seek(FIXED + 3.0)
    assert middle is not job  # moving back rebuilt the state
    last = middle.runs["a"].last_step
    assert last is not None and 10 < last < 49
    later = tl.seek(FIXED + 4.0)
    assert later is middle and (later.runs["a"].last_step or 0) > last  # forward: same state, fed more
    assert tl.seek(-1.0).runs["a"].last_step is None  # clamped to the start: only the hello
    assert tl.next_profile(tl.start) == tl.profile_times[0]
    assert tl.previous_profile(tl.profile_times[0]) is None


def test_inbox_rings_once_per_drain() -> None:
    inbox: Inbox[int] = Inbox()
    assert inbox.put(1) is True
    assert inbox.put(2) is False
    assert inbox.drain() == [1, 2]
    assert inbox.put(3) is True


def test_log_buffer_keeps_the_last_lines_and_counts_all() -> None:
    buf = LogBuffer(None, maxlen=3)
    buf.extend(["a", "b"])
    seen = buf.total
    buf.extend(["c", "d", "e", "f"])
    assert list(buf.lines) == ["d", "e", "f"] and buf.total == 6
    assert buf.since(seen) == ["d", "e", "f"]  # more arrived than are kept: all kept ones
    assert buf.since(buf.total) == []


def test_tail_holds_back_a_partial_line_until_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_text("one\ntwo\npart")
    got: list[str] = []
    tail(path, got.extend, threading.Event(), follow=False)
    assert got == ["one", "two", "part"]  # not following: the partial line is the last


def test_unavailable_figures_say_why() -> None:
    assert fmt.size(None, "no CUDA") == "n/a (no CUDA)"
    assert fmt.pct(None) == "n/a"
    assert fmt.size(1536 * 2**20) == "1.5 GiB"
    assert fmt.size_of(5.5 * 2**30, 40 * 2**30) == "5.5/40 GiB"
    assert fmt.duration(0.0123) == "12.3 ms"


def test_units_and_grammar_read_as_a_person_writes_them() -> None:
    assert fmt.us(12.5) == "12.5 µs" and fmt.us(2500.0) == "2.50 ms" and fmt.us(950.0) == "950 µs"
    # GiB with three significant digits at most, no ".0" on a round number.
    assert [fmt.size(v * 2**30) for v in (40, 2.4375, 12.34, 0.5)] == ["40 GiB", "2.44 GiB", "12.3 GiB", "512 MiB"]
    assert fmt.count(1, "line") == "1 line" and fmt.count(2, "worker") == "2 workers"
    assert fmt.count(1, "process", "processes") == "1 process"


# -- charts (pitstop/tui/widgets/_bars.py) ------------------------------------------------------
def _bars(walls: list[float], marks: dict[int, str] | None = None) -> BarSeries:
    marks = marks or {}
    return BarSeries("step time", (Layer("data wait", "red"), Layer("compute", "green")),
                     tuple(range(len(walls))), tuple((0.25 * w, 0.75 * w) for w in walls),
                     tuple(marks.get(i) for i in range(len(walls))))


def _filled_rows(lines: list[str], column: int) -> int:
    """How many plot rows have ink in one column (the bar's height in rows)."""
    return sum(1 for line in lines if len(line) > column and line[column] in "▁▂▃▄▅▆▇█▲")


def test_one_100x_outlier_step_does_not_flatten_the_others() -> None:
    walls = [0.040 + 0.002 * (i % 3) for i in range(120)]
    walls[60] = 4.0  # one step 100x the others: a checkpoint, a GC pause
    lines = [line.plain for line in render_lines(_bars(walls), 78, 16)]
    plot = [line for line in lines if "┤" in line or "│" in line]
    assert len(plot) >= 10
    # A typical bar (step 100) reaches most of the plot's height, not one row at its foot.
    column = 6 + 100 - (120 - 72)  # the ylabel, then the latest 72 steps, one per column
    assert _filled_rows(plot, column) >= 0.6 * len(plot)
    # The outlier is clipped, marked and named, and the axis stays in ms with round ticks.
    assert "▲" in plot[0]
    assert "▲ 1 above the p95 scale (max 4.00 s)" in lines[0] + lines[1]
    assert "step time (ms)" in lines[0]
    ticks = [line.split("┤")[0].strip() for line in plot if "┤" in line]
    assert ticks[-1] == "0" and all(t.isdigit() and int(t) % 5 == 0 for t in ticks), ticks


def test_a_one_step_run_is_one_narrow_bar_and_says_so() -> None:
    lines = [line.plain for line in render_lines(_bars([0.05]), 78, 10)]
    assert "1 step so far" in lines[0]
    plot = [line for line in lines if "┤" in line or "│" in line]
    widest = max(len(line.rstrip()) for line in plot)
    assert widest <= 6 + 2  # the y labels and one bar of two cells, not a chart-wide block


def test_a_bar_says_how_many_steps_it_averages_and_marked_steps_keep_out_of_the_scale() -> None:
    walls = [0.1] * 300
    walls[0] = 5.0  # the first step (warm-up) is slow
    series = _bars(walls, {0: "warm-up", 1: "warm-up", 2: "warm-up", 150: "eval"})
    bins, per_bin = bin_steps(series, 72)
    assert per_bin == 4 and len(bins) == 72
    lines = [line.plain for line in render_lines(series, 78, 16)]
    assert "bar = mean of 4 steps" in lines[0] + lines[1]
    assert "■ eval" in lines[0] + lines[1]
    # The eval step shares a bar with training steps: the bar is their mean, an "e" under it says so.
    axis = next(line for line in lines if "└" in line)
    assert "e" in axis
    assert scale_top([0.1] * 99 + [10.0]) < 0.2  # p95-based: one huge bar does not set the top


def test_round_ticks_and_units() -> None:
    assert [nice_step(115, n) for n in (2, 3, 5)] == [100, 50, 25]
    assert unit_of(0.3) == ("ms", 1000.0) and unit_of(2.5) == ("s", 1.0)
    assert unit_of(3 * 2**30, "B")[0] == "GiB" and unit_of(300 * 2**20, "B")[0] == "MiB"


def test_sparklines_show_history_newest_at_the_right() -> None:
    assert sparkline([0, 50, 100], 3, top=100) == "▁▅█"
    assert sparkline([None, 1.0], 4) == " █  "  # unknown reads blank; a short history grows from the left
    assert len(sparkline(list(range(1000)), 10)) == 10
    assert sparkline(list(range(1000)), 10)[-1] == "█"


# -- the log (pitstop/tui/logtail.py, screens/log.py) ----------------------------------------------
def test_the_session_log_is_found_beside_a_record(tmp_path: Path) -> None:
    session = tmp_path / "s1"
    session.mkdir()
    assert session_log(session / "rank0.jsonl") is None
    (session / "output.log").write_text("hi\n")
    assert session_log(session / "rank1.jsonl") == session / "output.log"
    assert session_log(session / "rank0-4242.jsonl") == session / "output.log"
    (tmp_path / "run.output.log").write_text("hi\n")  # pitstop run --record run.jsonl
    assert session_log(tmp_path / "run.rank1.jsonl") == tmp_path / "run.output.log"
    assert session_log(tmp_path / "run.pid77.jsonl") == tmp_path / "run.output.log"


def test_log_lines_are_cleaned_and_wrapped_as_a_terminal_would_show_them() -> None:
    assert clean("\x1b[1;31mred\x1b[0m\tok") == "red     ok"
    assert clean(" 10%|#  \r 50%|##  \r100%|###") == "100%|###"
    assert wrap("a" * 25, 10) == ["a" * 10, "  " + "a" * 8, "  " + "a" * 7]
    assert wrap("short", 10) == ["short"]


def test_ops_grouped_by_the_phase_they_ran_in_keep_the_datasets_ops_apart() -> None:
    from pitstop.events import OpStat, ProfileWindow
    from pitstop.tui.opstable import op_rows

    ops = [OpStat("aten::avg_pool2d", 1615, 90_000.0, 95_000.0, None, "data"),
           OpStat("aten::addmm", 30, 20_000.0, 25_000.0, None, "forward"),
           OpStat("aten::add_", 10, 1_000.0, 1_000.0, None, "optimizer"),
           OpStat("aten::add_", 10, 500.0, 500.0, None, "forward")]
    window = ProfileWindow(t=FIXED, step_start=5, step_end=10, device="cpu", duration_s=0.5, ops=ops,
                           kernels=[], phases_ms={"data": 18.0, "forward": 5.0, "optimizer": 1.0})
    rows = op_rows(window, None, sort=3, grouped=True)
    titles = [(str(r.values[0]), r.group) for r in rows]
    assert titles[0] == ("data loading (main process)", True)
    assert titles[1] == ("aten::avg_pool2d", False)  # the blur is the dataset's, not the model's
    forward = titles.index(("forward and loss", True))
    optimizer = titles.index(("optimizer", True))
    assert ("aten::addmm", False) in titles[forward:optimizer]
    assert titles[optimizer + 1:] == [("aten::add_", False)]
    assert "forward/loss/dataset ops" not in [t for t, _ in titles]
