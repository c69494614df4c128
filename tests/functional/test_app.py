"""Pilot tests: the viewer driven by a fake event source, as a person would use it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from conftest import FIXED, FakeSource, replay_source, run, run_events, screen_text, steps, wait_for

from pitstop.errors import SchemaError
from pitstop.tui.app import PitstopApp
from pitstop.tui.screens import (
    ConfirmScreen,
    DataScreen,
    HelpScreen,
    KernelsScreen,
    LogScreen,
    MemoryScreen,
    OverviewScreen,
)


def last_step(app: PitstopApp) -> int | None:
    run_state = app.current_run()[1]
    return run_state.last_step if run_state is not None else None


def notices(app: PitstopApp) -> list[tuple[str, str]]:
    return [(n.message, n.severity) for n in app._notifications]


def test_number_keys_switch_screens_and_help_opens_and_closes() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events())
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: last_step(app) == 119)
            assert isinstance(app.screen, OverviewScreen)
            for key, screen in (("2", KernelsScreen), ("3", DataScreen), ("4", MemoryScreen),
                                ("5", LogScreen), ("1", OverviewScreen)):
                await pilot.press(key)
                await wait_for(pilot, lambda: isinstance(app.screen, screen))
            await pilot.press("2")
            await wait_for(pilot, lambda: "aten::addmm" in screen_text(app))
            await pilot.press("c")
            await wait_for(pilot, lambda: "ampere_sgemm_128x64_tn" in screen_text(app))
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            assert "stop training (asks first)" in screen_text(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, KernelsScreen))

    run(scenario())


def test_step_counter_rises_as_batches_arrive() -> None:
    async def scenario() -> None:
        source = FakeSource()
        events = run_events(n_steps=40)
        source.push(events[:12])
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: last_step(app) is not None)
            first = last_step(app)
            assert first is not None and first < 39
            await wait_for(pilot, lambda: f"step {first}" in screen_text(app))
            source.push(events[12:])
            await wait_for(pilot, lambda: "step 39" in screen_text(app))

    run(scenario())


def test_data_wait_finding_appears_when_the_wait_rises() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=40, wait_frac=0.02))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: last_step(app) == 39)
            await wait_for(pilot, lambda: "Findings" in screen_text(app))
            assert "cannot keep up" not in screen_text(app)
            # The loader falls behind: 70% of every step is spent waiting for data.
            later = steps(200, start=40, t0=FIXED + 10, wait_frac=0.7)
            source.push(later)
            await wait_for(pilot, lambda: "The DataLoader cannot keep up" in screen_text(app))
            assert "data wait: " in screen_text(app)  # the evidence is shown with the finding

    run(scenario())


def test_stop_asks_first_and_sends_stop_only_on_yes() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=20))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        said: list[str] = []  # every notice, also those already expired (they last 5 s)
        shown = app.notify

        def notify(message: str, *args: Any, **kwargs: Any) -> None:
            said.append(message)
            shown(message, *args, **kwargs)

        app.notify = notify  # type: ignore[method-assign]
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: last_step(app) == 19)
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            await wait_for(pilot, lambda: said.count("not stopped: training continues") == 1)
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("enter")  # the focused button is No: a reflex does not stop a run
            # The answer is in (a yes would have started the command's worker instead of this notice);
            # any command worker is let finish before looking: waiting on events, not a pause (issue 13).
            await wait_for(pilot, lambda: said.count("not stopped: training continues") == 2)
            commands = [w for w in app.workers if w.group == "command"]
            if commands:  # none is right; an empty list would wait for every worker (the reader too)
                await app.workers.wait_for_complete(commands)
            assert source.commands == []
            await pilot.press("k")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await wait_for(pilot, lambda: source.commands == ["stop"])
            await wait_for(pilot, lambda: any("ok: stop requested" in m for m, _ in notices(app)))

    run(scenario())


def test_profile_now_sends_the_command_live_and_refuses_in_replay() -> None:
    async def live() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=20))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("p")
            await wait_for(pilot, lambda: source.commands == ["profile"])
            await wait_for(pilot, lambda: any("profile: pid 4242: ok: profile requested" in m for m, _ in notices(app)))

    async def replay() -> None:
        source = replay_source(run_events(n_steps=20))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None)
            assert "PAUSED" in screen_text(app) or "REPLAY" in screen_text(app)
            # Nothing to profile in a record: the key is not offered (the footer has no room for it).
            assert "Profile" not in screen_text(app).splitlines()[-1]
            assert app.check_action("profile", ()) is False
            await pilot.press("p")
            assert source.commands == []

    run(live())
    run(replay())


def test_a_stream_from_a_newer_pitstop_shows_an_error_and_the_viewer_stays_up() -> None:
    async def scenario() -> None:
        error = SchemaError("written by a newer pitstop (event schema 2, this pitstop reads up to 1)")
        source = FakeSource(error=error)
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: any(sev == "error" for _, sev in notices(app)))
            message = next(m for m, sev in notices(app) if sev == "error")
            assert "newer pitstop" in message and "Traceback" not in message
            assert "\n" not in message
            await wait_for(pilot, lambda: "FAILED" in screen_text(app))
            await pilot.press("3")  # still usable
            await wait_for(pilot, lambda: isinstance(app.screen, DataScreen))
        assert app.return_code in (None, 0)

    run(scenario())


def test_without_a_gpu_figures_read_na_with_the_reason_never_zero() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(cuda=False))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: last_step(app) == 119)
            await wait_for(pilot, lambda: "NVML not available" in screen_text(app))
            text = screen_text(app)
            assert "GPU n/a (NVML not available: no NVIDIA driver)" in text
            assert "torch n/a (not on CUDA: device cpu)" in text
            assert "util 0%" not in text and "0 GiB" not in text
            await pilot.press("4")
            await wait_for(pilot, lambda: "GPU headroom" in screen_text(app))
            text = screen_text(app)
            assert "n/a (NVML not available" in text
            assert "torch memory" in text and "n/a (not on CUDA: device cpu)" in text

    run(scenario())


def test_replay_moves_through_time() -> None:
    async def scenario() -> None:
        source = replay_source(run_events(n_steps=100))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None)
            assert last_step(app) == 99  # a replay opens on the whole run
            await pilot.press("home")
            await wait_for(pilot, lambda: last_step(app) is None)
            await pilot.press("right", "right", "right", "right", "right")
            await wait_for(pilot, lambda: last_step(app) is not None)
            middle = last_step(app)
            assert middle is not None and 20 < middle < 80, middle
            await pilot.press("left")
            await wait_for(pilot, lambda: (last_step(app) or 0) < middle)
            await pilot.press("end")
            await wait_for(pilot, lambda: last_step(app) == 99)
            await pilot.press("2", "left_square_bracket")  # jump to the profiler window
            await wait_for(pilot, lambda: "window 1/1" in screen_text(app))
            assert (last_step(app) or 0) < 99
            await pilot.press("home", "plus", "plus", "space")  # play at x4
            start = last_step(app)
            await wait_for(pilot, lambda: (last_step(app) or -1) > (start or -1))

    run(scenario())


def test_log_screen_tails_the_file_and_searches_it(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"epoch 0 batch {i}\n" for i in range(50)) + "loss is nan at batch 50\n")

    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=10))
        app = PitstopApp(source, log_path=log, clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("5")
            await wait_for(pilot, lambda: app.log_buffer.total == 51)
            with log.open("a") as handle:
                handle.write("checkpoint saved\n")
            await wait_for(pilot, lambda: "checkpoint saved" in screen_text(app))
            await pilot.press("slash")
            await pilot.press(*"nan", "enter")
            await wait_for(pilot, lambda: "match 1/1" in screen_text(app))
            assert "loss is nan at batch 50" in screen_text(app)

    run(scenario())


def test_detach_leaves_the_hint_and_does_not_wait_for_a_blocked_source() -> None:
    async def scenario() -> PitstopApp:
        source = FakeSource()  # never finishes: batches() blocks like a live socket
        source.push(run_events(n_steps=5))
        app = PitstopApp(source, detach_hint="training continues (pid 4242); reattach with: pitstop attach 4242",
                         clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: last_step(app) == 4)
            await pilot.press("d")
        assert source.closed
        return app

    started = time.monotonic()
    result: list[PitstopApp] = []
    # Run in a thread so a hang fails the test instead of blocking the session.
    thread = threading.Thread(target=lambda: result.append(run_and_return(scenario())), daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the viewer did not exit while the source was blocked"
    app = result[0]
    assert app.return_value == "detach"
    assert app.goodbye() == "training continues (pid 4242); reattach with: pitstop attach 4242"
    assert time.monotonic() - started < 20


def run_and_return(coro: object) -> PitstopApp:
    import asyncio

    return asyncio.run(coro)  # type: ignore[arg-type]
