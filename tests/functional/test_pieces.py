"""Tests of the viewer's pure pieces: replay timeline, inbox, log buffer and tail, formats."""

from __future__ import annotations

import threading
from pathlib import Path

from conftest import FIXED, run_events

from pitstop.analysis import StreamBatch
from pitstop.tui import format as fmt
from pitstop.tui.inbox import Inbox
from pitstop.tui.logtail import LogBuffer, tail
from pitstop.tui.replay import Timeline


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
    assert fmt.size_of(5.5 * 2**30, 40 * 2**30) == "5.5/40.0 GiB"
    assert fmt.ms(0.0123) == "12.3 ms"
