"""The Data screen's `s`: a real training loop's DataLoader sampled with py-spy, its slow line on screen."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXED, FakeSource, hello, run, run_events, screen_text, wait_for

from pitstop.tui.app import PitstopApp
from pitstop.tui.screens import DataScreen
from pitstop.tui.screens.stacks import StacksScreen

SCRIPT = Path(__file__).parents[1] / "integration" / "scripts" / "slow_getitem.py"


async def sample_on_the_data_screen(pilot: object, app: PitstopApp) -> None:
    """Once the run's 120 steps are in, go to the Data screen and press `s`."""
    await wait_for(pilot, lambda: (r := app.current_run()[1]) is not None and r.last_step == 119, timeout=60)
    await pilot.press("3")  # type: ignore[attr-defined]
    await wait_for(pilot, lambda: isinstance(app.screen, DataScreen), timeout=30)
    await pilot.press("s")  # type: ignore[attr-defined]


@pytest.mark.skipif(not Path(sys.executable).with_name("py-spy").exists(), reason="py-spy not installed")
def test_s_on_the_data_screen_shows_the_datasets_slow_line() -> None:
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "0"], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "training"
        events = run_events(cuda=False, workers=0)
        events[0] = dataclasses.replace(hello(pid=proc.pid), host=socket.gethostname())
        source = FakeSource()
        source.push(events)
        app = PitstopApp(source, clock=lambda: FIXED + 30)  # type: ignore[arg-type]

        async def scenario() -> None:
            async with app.run_test(size=(100, 30)) as pilot:
                await sample_on_the_data_screen(pilot, app)
                await wait_for(pilot, lambda: isinstance(app.screen, StacksScreen), timeout=90)
                # The modal is pushed, then composed and painted: wait for its text, not its arrival.
                await wait_for(pilot, lambda: "samples over" in screen_text(app), timeout=60)
                text = screen_text(app)
                assert "main process (num_workers=0)" in text
                assert "slow_getitem.py:18 in SlowDecode.decode" in text
                await pilot.press("escape")
                await wait_for(pilot, lambda: isinstance(app.screen, DataScreen), timeout=30)

        run(scenario())
        assert proc.poll() is None  # sampled, never stopped
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_s_on_a_run_on_another_host_says_where_to_sample() -> None:
    source = FakeSource()
    source.push(run_events(cuda=False))  # hello's host is "host", not this machine
    app = PitstopApp(source, clock=lambda: FIXED + 30)  # type: ignore[arg-type]

    async def scenario() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await sample_on_the_data_screen(pilot, app)
            await wait_for(pilot, lambda: any("the run is on host: run `pitstop profile --data 4242` there"
                                              in n.message for n in app._notifications), timeout=30)

    run(scenario())
