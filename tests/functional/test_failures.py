"""Pilot tests: what failed is said on screen (issue 13), once, while the viewer goes on."""

from __future__ import annotations

import pytest
from conftest import FIXED, FakeSource, rank_stream, run, run_events, wait_for

from pitstop.analysis import StreamBatch
from pitstop.analysis import _job as job_module
from pitstop.events import Event, ProfileWindow
from pitstop.tui.app import PitstopApp


def notices(app: PitstopApp) -> list[str]:
    return [n.message for n in app._notifications]


def broken_window(t: float) -> ProfileWindow:
    """A window whose sync count is not a number: the host-sync rule raises on it (a TypeError)."""
    return ProfileWindow(t=t, step_start=20, step_end=25, device="cuda",
                         syncs_per_step={"aten::item": "often"})  # type: ignore[dict-item]


def events_with_broken_window() -> list[Event]:
    events = run_events(n_steps=40)
    return [*events, broken_window(FIXED + 100)]


def two_ranks() -> FakeSource:
    """A live source with two ranks of 30 steps each."""
    source = FakeSource()
    for rank in (0, 1):
        source.push(run_events(rank=rank, pid=4242 + rank, n_steps=30, profiles=0), stream=rank_stream(rank))
    return source


def test_a_rule_that_raises_is_said_once_and_the_other_findings_stay() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(events_with_broken_window())
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: any("advice rule host-sync failed" in n for n in notices(app)))
            said = [n for n in notices(app) if "advice rule host-sync failed" in n]
            assert said == ["advice rule host-sync failed: TypeError: must be real number, not str"]
            assert app._findings is not None and "host-sync" not in [f.rule for f in app._findings]
            # More events: the rules run again over them (a new findings key), and fail again.
            before = app._findings_key
            source.push([broken_window(FIXED + 101)])
            await wait_for(pilot, lambda: app._findings_key != before)
            assert len([n for n in notices(app) if "advice rule host-sync failed" in n]) == 1

    run(scenario())


def test_a_stream_that_broke_says_which_rank_and_why() -> None:
    async def scenario() -> None:
        source = two_ranks()
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(app.job.runs) == 2)
            source._queue.put(StreamBatch(rank_stream(1), [], closed=True,
                                          error="ConnectionResetError: [Errno 104] Connection reset by peer"))
            await wait_for(pilot, lambda: any("stream from rank 1 ended" in n for n in notices(app)))
            assert "stream from rank 1 ended: ConnectionResetError: [Errno 104] Connection reset by peer" in notices(app)

    run(scenario())


def test_job_findings_that_fail_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(job: object, warmup: int = 3, summary: object = None) -> list[object]:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(job_module, "job_findings", broken)

    async def scenario() -> None:
        source = two_ranks()
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: any("advice rule straggler failed" in n for n in notices(app)))
            assert "advice rule rank-gone failed: ZeroDivisionError: float division by zero" in notices(app)

    run(scenario())
