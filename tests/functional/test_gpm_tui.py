"""Pilot tests of issue 15: the GPM figures (SM, tensor-pipe and DRAM activity) on the overview's GPU line
and on the Memory screen's GPU panel, and their reason where a GPU has none."""

from __future__ import annotations

import dataclasses

from conftest import FIXED, FakeSource, run, run_events, screen_text, wait_for

from pitstop.events import Event, Gpu, Sample
from pitstop.tui.app import PitstopApp


def hopper(events: list[Event], **gpm: float) -> list[Event]:
    """The run's samples as an H100 with GPM figures gives them."""
    out: list[Event] = []
    for ev in events:
        if isinstance(ev, Sample) and ev.gpus:
            gpu: Gpu = dataclasses.replace(ev.gpus[0], name="NVIDIA H100 80GB HBM3", unavailable={}, **gpm)
            ev = dataclasses.replace(ev, gpus=[gpu])
        out.append(ev)
    return out


def app_of(events: list[Event]) -> PitstopApp:
    source = FakeSource()
    source.push(events)
    return PitstopApp(source, clock=lambda: FIXED + 30)  # type: ignore[arg-type]


def test_an_h100_shows_how_busy_its_sms_tensor_pipes_and_dram_are() -> None:
    async def scenario() -> None:
        app = app_of(hopper(run_events(), sm_active=91.0, sm_occupancy=38.0, tensor_active=7.0, dram_bw_util=44.0))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: "tensor 7%" in screen_text(app))
            gpu_line = next(line for line in screen_text(app).splitlines() if line.lstrip().startswith("GPU"))
            # util 62% says a kernel ran; the GPM figures say the tensor pipes were 7% busy.
            assert "SM 91% dram 44% tensor 7%" in gpu_line and "util " in gpu_line
            await pilot.press("4")
            await wait_for(pilot, lambda: "SM occupancy" in screen_text(app))
            text = screen_text(app)
            for label, value in (("SM active", "91%"), ("SM occupancy", "38%"), ("tensor active", "7%"),
                                 ("DRAM bandwidth", "44%")):
                row = next(line for line in text.splitlines() if label in line)
                assert value in row.split(label, 1)[1], row

    run(scenario())


def test_a_gpu_without_gpm_says_why_on_both() -> None:
    async def scenario() -> None:
        app = app_of(run_events())  # an A100: GPM needs Hopper or newer
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: "SM n/a" in screen_text(app))
            gpu_line = next(line for line in screen_text(app).splitlines() if line.lstrip().startswith("GPU"))
            assert "SM n/a (GPM needs Hopper or newer)" in gpu_line
            await pilot.press("4")
            await wait_for(pilot, lambda: "SM/tensor" in screen_text(app))
            row = next(line for line in screen_text(app).splitlines() if "SM/tensor" in line)
            assert "n/a (GPM needs Hopper or newer" in row

    run(scenario())
