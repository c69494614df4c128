"""Pilot test of issue 14 §5: the overview's verdict line splits compute into forward, backward and optimizer."""

from __future__ import annotations

import dataclasses

from conftest import FIXED, FakeSource, run, run_events, screen_text, wait_for

from pitstop.events import Event, Step
from pitstop.tui.app import PitstopApp


def with_phases(events: list[Event]) -> list[Event]:
    """The demo stream's steps (100 ms, 10% data wait) with an anatomy: of 90 ms compute, 40/45/5/10%."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, Step):
            compute = e.wall - e.data_wait
            e = dataclasses.replace(e, forward_s=0.40 * compute, backward_s=0.45 * compute,
                                    optimizer_s=0.05 * compute, other_s=0.10 * compute, phase_clock="host")
        out.append(e)
    return out


def test_the_overview_line_shows_forward_backward_and_optimizer_shares_of_compute() -> None:
    async def scenario(size: tuple[int, int], expected: str) -> None:
        source = FakeSource()
        source.push(with_phases(run_events(cuda=False, wait_frac=0.1)))
        app = PitstopApp(source, clock=lambda: FIXED + 30)  # type: ignore[arg-type]
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: (r := app.current_run()[1]) is not None and r.last_step == 119)
            await wait_for(pilot, lambda: expected in screen_text(app))
            line = next(line for line in screen_text(app).splitlines() if "step p50" in line)
            assert "step p50 100.0 ms" in line and "(10%)" in line, line
            assert len(line.rstrip()) <= size[0]

    run(scenario((80, 24), "compute 90.0 ms (fwd 40 bwd 45 opt 5%)"))
    run(scenario((120, 40), "data wait 10.0 ms (10%) · compute 90.0 ms (fwd 40% · bwd 45% · opt 5%)"))
